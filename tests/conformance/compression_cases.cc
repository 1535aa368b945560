// Gradient compression (SetGradientCompression) through the SDK: MXNet's residual sequences,
// random multi-device pushes against a reference built from the rules, and refused parameters.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "tests/conformance/store_under_test.h"
#include "tests/test_util.h"

namespace kvstore::testing {
namespace {

bool IsDist(const KVStore& kv) { return kv.type().rfind("dist", 0) == 0; }

// Pushes `value` (on `devices` devices) into `key` and returns the pulled value's first element,
// checking that every element equals it.
double PushAndPull(KVStore& kv, const Key& key, const Shape& shape, float value, int devices) {
  std::vector<Tensor> values(devices, Tensor::Full(DType::kFloat32, shape, value));
  REQUIRE(kv.Push(key, values).ok());
  Tensor out = Tensor::Full(DType::kFloat32, shape, -99);
  REQUIRE(kv.Pull(key, &out).ok());
  REQUIRE(kv.WaitAll().ok());
  const double first = out.GetAsDouble(0);
  for (int64_t i = 1; i < out.num_elements(); ++i) REQUIRE(out.GetAsDouble(i) == first);
  return first;
}

TEST_CASE("Compression: 2bit residual sequence of MXNet's tests (threshold 0.5)", "[compression]") {
  auto kv = NewStore();
  const Shape shape = {5, 7};  // Split over servers and chunks in the dist test binary.
  REQUIRE(kv->Init(21, Tensor::Full(DType::kFloat32, shape, 1)).ok());
  REQUIRE(kv->SetGradientCompression({"2bit", 0.5}).ok());
  // Init is never compressed.
  Tensor out = Tensor::Zeros(DType::kFloat32, shape);
  REQUIRE(kv->Pull(21, &out).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(out.GetAsDouble(0) == 1.0);
  // 0.4 stays in the residual; + 0.1 just meets the threshold; 0.2 does not; + 0.3 meets it
  // again and leaves the residual at 0 (the ASSIGN updater stores each push's decoded sum).
  CHECK(PushAndPull(*kv, 21, shape, 0.4f, 1) == 0.0);
  CHECK(PushAndPull(*kv, 21, shape, 0.1f, 1) == 0.5);
  CHECK(PushAndPull(*kv, 21, shape, 0.2f, 1) == 0.0);
  CHECK(PushAndPull(*kv, 21, shape, 0.3f, 1) == 0.5);
  for (int i = 0; i < 3; ++i) CHECK(PushAndPull(*kv, 21, shape, -0.5f, 1) == -0.5);
  CHECK(PushAndPull(*kv, 21, shape, 0.2f, 1) == 0.0);
  CHECK(PushAndPull(*kv, 21, shape, -0.2f, 1) == 0.0);  // The residual is back to 0.
  CHECK(PushAndPull(*kv, 21, shape, 0.49f, 1) == 0.0);
}

TEST_CASE("Compression: MXNet's 4-device sequence: 0.4, 0.2, 0.2, 0.2 then -0.5 ten times",
          "[compression]") {
  // MXNet's nightly device test: 4 devices, threshold 0.5, the `test` optimizer with rate 2
  // (stored += 2 * merged): the pulled values are 0, 4, 4, 8, then 4 less per -0.5 push.
  auto kv = NewStore();
  if (!GetStoreUnderTest().function_updater) {
    SUCCEED("needs an in-process updater; the dist store is covered by the cluster test");
    return;
  }
  const Shape shape = {4, 4};
  REQUIRE(kv->Init(3, Tensor::Zeros(DType::kFloat32, shape)).ok());
  REQUIRE(kv->SetUpdater([](const Key&, const Tensor& merged, Tensor* stored) {
              for (int64_t i = 0; i < stored->num_elements(); ++i) {
                stored->SetFromDouble(i, stored->GetAsDouble(i) + 2 * merged.GetAsDouble(i));
              }
            }).ok());
  REQUIRE(kv->SetGradientCompression({"2bit", 0.5}).ok());
  CHECK(PushAndPull(*kv, 3, shape, 0.4f, 4) == 0.0);
  CHECK(PushAndPull(*kv, 3, shape, 0.2f, 4) == 4.0);
  CHECK(PushAndPull(*kv, 3, shape, 0.2f, 4) == 4.0);
  CHECK(PushAndPull(*kv, 3, shape, 0.2f, 4) == 8.0);
  for (int i = 1; i <= 10; ++i) CHECK(PushAndPull(*kv, 3, shape, -0.5f, 4) == 8.0 - 4.0 * i);
}

TEST_CASE("Compression: 1bit sequence of MXNet's tests", "[compression]") {
  for (const double threshold : {0.0, 0.5, -0.5}) {
    INFO("threshold " << threshold);
    auto kv = NewStore();
    const Shape shape = {33};
    REQUIRE(kv->Init(5, Tensor::Zeros(DType::kFloat32, shape)).ok());
    REQUIRE(kv->SetGradientCompression({"1bit", threshold}).ok());
    // Push 2: sends +1 (residual 1); push 0: 0 + 1 > t sends +1 (residual 0); push -2: sends -1.
    CHECK(PushAndPull(*kv, 5, shape, 2.0f, 1) == 1.0);
    CHECK(PushAndPull(*kv, 5, shape, 0.0f, 1) == 1.0);
    CHECK(PushAndPull(*kv, 5, shape, -2.0f, 1) == -1.0);
    // The residual is now -1: 0.6 - 1 = -0.4 sends +1 only when it exceeds the threshold.
    CHECK(PushAndPull(*kv, 5, shape, 0.6f, 1) == (-0.4 > threshold ? 1.0 : -1.0));
  }
}

// Reference: one compressor state (residual) per device (in-process stores) or per worker
// (dist stores, which sum the devices' values first), applying the documented rules.
struct CompressorReference {
  CompressionParams params;
  std::vector<float> residual;

  std::vector<double> Send(const std::vector<float>& grad) {
    if (residual.empty()) residual.assign(grad.size(), 0.0f);
    std::vector<double> sent(grad.size());
    const float t = params.threshold;
    for (size_t i = 0; i < grad.size(); ++i) {
      float& r = residual[i];
      r += grad[i];
      if (params.type == CompressionType::k2Bit) {
        if (r >= t) {
          r -= t;
          sent[i] = t;
        } else if (r <= -t) {
          r += t;
          sent[i] = -t;
        } else {
          sent[i] = 0;
        }
      } else if (r > t) {
        r -= 1;
        sent[i] = 1;
      } else {
        r += 1;
        sent[i] = -1;
      }
    }
    return sent;
  }
};

std::vector<float> Floats(const Tensor& t) {
  return std::vector<float>(t.data_as<const float>(), t.data_as<const float>() + t.num_elements());
}

TEST_CASE("Compression: random multi-device pushes match the reference", "[compression]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 4; ++trial) {
    auto kv = NewStore();
    const bool two_bit = trial % 2 == 0;
    const double threshold = two_bit ? rng.Uniform(0.1, 1.5) : rng.Uniform(-0.5, 0.5);
    const CompressionParams params = *MakeCompressionParams(two_bit ? "2bit" : "1bit", threshold);
    INFO("trial " << trial << " " << params.ToString() << " " << kv->type());
    const std::vector<Key> keys = {7, 8};
    const std::vector<Shape> shapes = {rng.AnyShape(2, 40), {static_cast<int64_t>(rng.Int(1, 70))}};
    REQUIRE(kv->Init(keys, {rng.RandomTensor(DType::kFloat32, shapes[0]),
                            rng.RandomTensor(DType::kFloat32, shapes[1])})
                .ok());
    // A float64 key travels uncompressed next to the compressed ones.
    const Key plain = 9;
    REQUIRE(kv->Init(plain, rng.RandomTensor(DType::kFloat64, {6})).ok());
    REQUIRE(kv->SetGradientCompression({two_bit ? "2bit" : "1bit", threshold}).ok());
    const int devices = static_cast<int>(rng.Int(1, 3));
    std::vector<std::vector<CompressorReference>> refs(keys.size());
    for (auto& per_key : refs) per_key.assign(IsDist(*kv) ? 1 : devices, {params, {}});
    for (int round = 0; round < 5; ++round) {
      std::vector<Key> push_keys;
      std::vector<Tensor> values;
      std::vector<std::vector<double>> expected(keys.size());
      for (size_t k = 0; k < keys.size(); ++k) {
        std::vector<float> device_sum;
        for (int d = 0; d < devices; ++d) {
          push_keys.push_back(keys[k]);
          values.push_back(rng.RandomTensor(DType::kFloat32, shapes[k]));
          const std::vector<float> grad = Floats(values.back());
          if (IsDist(*kv)) {
            if (device_sum.empty()) device_sum.assign(grad.size(), 0.0f);
            for (size_t i = 0; i < grad.size(); ++i) device_sum[i] += grad[i];
            continue;
          }
          const std::vector<double> sent = refs[k][d].Send(grad);
          if (expected[k].empty()) expected[k].assign(sent.size(), 0.0);
          for (size_t i = 0; i < sent.size(); ++i) expected[k][i] += sent[i];
        }
        if (IsDist(*kv)) expected[k] = refs[k][0].Send(device_sum);
      }
      const Tensor plain_value = rng.RandomTensor(DType::kFloat64, {6});
      push_keys.push_back(plain);
      values.push_back(plain_value);
      REQUIRE(kv->Push(push_keys, values).ok());
      std::vector<Tensor> outs = {Tensor::Full(DType::kFloat32, shapes[0], -99),
                                  Tensor::Full(DType::kFloat32, shapes[1], -99),
                                  Tensor::Full(DType::kFloat64, {6}, -99)};
      REQUIRE(kv->Pull({keys[0], keys[1], plain}, {&outs[0], &outs[1], &outs[2]}).ok());
      REQUIRE(kv->WaitAll().ok());
      INFO("round " << round << " devices " << devices);
      for (size_t k = 0; k < keys.size(); ++k) {
        // Up to 3 decoded values (+-t, 0 or +-1) are summed in float32.
        REQUIRE(MaxAbsDiff(ToDoubles(outs[k]), expected[k]) <=
                Tolerance(DType::kFloat32, devices, 3.0 * std::max(1.0, threshold)));
      }
      REQUIRE(ToDoubles(outs[2]) == ToDoubles(plain_value));
    }
  }
}

TEST_CASE("Compression: bad parameters are refused and change nothing", "[compression]") {
  auto kv = NewStore();
  REQUIRE(kv->Init(4, Tensor::Zeros(DType::kFloat32, {3})).ok());
  for (const GradientCompression& bad : std::vector<GradientCompression>{
           {"3bit", 0.5}, {"2bit", 0.0}, {"2bit", -1.0}, {"1bit", NAN}, {"", std::nullopt}}) {
    INFO(bad.type);
    const absl::Status status = kv->SetGradientCompression(bad);
    REQUIRE(absl::IsInvalidArgument(status));
  }
  // Compression is still off: a push is stored exactly.
  CHECK(PushAndPull(*kv, 4, {3}, 0.3f, 1) == static_cast<double>(0.3f));
  // Turning it on and off again.
  REQUIRE(kv->SetGradientCompression({"2bit", std::nullopt}).ok());
  CHECK(PushAndPull(*kv, 4, {3}, 0.3f, 1) == 0.0);
  CHECK(PushAndPull(*kv, 4, {3}, 0.3f, 1) == 0.5);
  REQUIRE(kv->SetGradientCompression({"none", std::nullopt}).ok());
  CHECK(PushAndPull(*kv, 4, {3}, 0.3f, 1) == static_cast<double>(0.3f));
}

TEST_CASE("Compression: PushPull pushes the codes and returns the decoded update",
          "[compression]") {
  auto kv = NewStore();
  REQUIRE(kv->Init(6, Tensor::Zeros(DType::kFloat32, {40})).ok());
  REQUIRE(kv->SetGradientCompression({"2bit", 0.25}).ok());
  // The residual carries 0.15 after the first push, so the second one crosses the threshold.
  for (const auto& [push, expected] :
       std::vector<std::pair<float, double>>{{0.15f, 0.0}, {0.15f, 0.25}, {-0.3f, -0.25}}) {
    Tensor value = Tensor::Full(DType::kFloat32, {40}, push);
    // The output is the pushed tensor itself, as MXNet's pushpull allows.
    REQUIRE(kv->PushPull(6, value, &value).ok());
    REQUIRE(kv->WaitAll().ok());
    for (int64_t i = 0; i < 40; ++i) REQUIRE(value.GetAsDouble(i) == expected);
  }
}

}  // namespace
}  // namespace kvstore::testing
