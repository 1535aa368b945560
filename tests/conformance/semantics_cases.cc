// Error cases and randomised cases of the store semantics, checked against a float64 reference.
#include <catch2/catch.hpp>
#include <map>
#include <vector>

#include "tests/conformance/store_under_test.h"
#include "tests/test_util.h"

namespace kvstore::testing {
namespace {

bool Mentions(const absl::Status& status, absl::string_view text) {
  return status.message().find(text) != absl::string_view::npos;
}

TEST_CASE("Semantics: errors name the key and leave the store unchanged", "[errors]") {
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  const Tensor init3 = rng.RandomTensor(DType::kFloat32, {2, 3});
  const Tensor init4 = rng.RandomTensor(DType::kFloat32, {4});
  REQUIRE(kv->Init({3, 4}, {init3, init4}).ok());

  SECTION("a second init of a key is AlreadyExists") {
    const auto status = kv->Init(3, rng.RandomTensor(DType::kFloat32, {2, 3}));
    REQUIRE(absl::IsAlreadyExists(status));
    REQUIRE(Mentions(status, "key 3"));
    REQUIRE(absl::IsAlreadyExists(kv->Init({8, 8}, {init4, init4})));
    REQUIRE(absl::IsNotFound(kv->Push(8, init4)));  // Nothing of the failed init was stored.
  }
  SECTION("push or pull of a key never initialised is NotFound") {
    const auto push = kv->Push(42, init3);
    REQUIRE(absl::IsNotFound(push));
    REQUIRE(Mentions(push, "key 42"));
    Tensor out = Tensor::Zeros(DType::kFloat32, {2, 3});
    REQUIRE(absl::IsNotFound(kv->Pull(42, &out)));
    REQUIRE(absl::IsNotFound(kv->Push({3, 42}, {init3, init3})));
  }
  SECTION("a shape mismatch is InvalidArgument naming the key and both shapes") {
    const auto status = kv->Push(3, Tensor::Full(DType::kFloat32, {3, 2}, 1.5));
    REQUIRE(absl::IsInvalidArgument(status));
    REQUIRE(Mentions(status, "key 3"));
    REQUIRE(Mentions(status, "(3, 2)"));
    REQUIRE(Mentions(status, "(2, 3)"));
    Tensor out = Tensor::Zeros(DType::kFloat32, {6});
    const auto pull = kv->Pull(3, &out);
    REQUIRE(absl::IsInvalidArgument(pull));
    REQUIRE(Mentions(pull, "(6,)"));
  }
  SECTION("a dtype mismatch is InvalidArgument naming both dtypes") {
    const auto status = kv->Push(4, Tensor::Full(DType::kFloat64, {4}, 1.5));
    REQUIRE(absl::IsInvalidArgument(status));
    REQUIRE(Mentions(status, "float64"));
    REQUIRE(Mentions(status, "float32"));
  }
  SECTION("values pushed together for one key must agree") {
    REQUIRE(
        absl::IsInvalidArgument(kv->Push(4, {init4, Tensor::Full(DType::kFloat32, {2, 2}, 1)})));
  }
  SECTION("a good key beside a bad one in one push is not applied") {
    REQUIRE(absl::IsInvalidArgument(kv->Push({3, 4}, {rng.RandomTensor(DType::kFloat32, {2, 3}),
                                                      Tensor::Full(DType::kFloat32, {5}, 1)})));
  }
  SECTION("int and string keys cannot be mixed") {
    const auto status = kv->Init("weight", init4);
    REQUIRE(absl::IsInvalidArgument(status));
    REQUIRE(Mentions(status, "\"weight\""));
    REQUIRE(absl::IsInvalidArgument(kv->Push("weight", init4)));
  }
  SECTION("the wrong number of values or outputs is InvalidArgument") {
    Tensor out = Tensor::Zeros(DType::kFloat32, {2, 3});
    const Key keys[] = {3, 4};
    Tensor* one_out[] = {&out};
    REQUIRE(absl::IsInvalidArgument(kv->Pull(keys, one_out)));
    REQUIRE(absl::IsInvalidArgument(kv->Push(keys, {init3})));
    REQUIRE(absl::IsInvalidArgument(kv->Init({5, 6}, {init3})));
    REQUIRE(absl::IsInvalidArgument(kv->PushPull(keys, {init3, init4}, one_out)));
    Tensor* null_out[] = {nullptr};
    REQUIRE(absl::IsInvalidArgument(kv->Pull(absl::MakeConstSpan(keys, 1), null_out)));
    REQUIRE(absl::IsInvalidArgument(kv->Push(3, Tensor())));
  }
  REQUIRE(kv->WaitAll().ok());
  Tensor out3 = Tensor::Zeros(DType::kFloat32, {2, 3});
  Tensor out4 = Tensor::Zeros(DType::kFloat32, {4});
  REQUIRE(kv->Pull({3, 4}, {&out3, &out4}).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(ToDoubles(out3) == ToDoubles(init3));
  REQUIRE(ToDoubles(out4) == ToDoubles(init4));
}

TEST_CASE("Semantics: CUDA tensors are refused with FailedPrecondition on a CPU store",
          "[errors]") {
  auto kv = NewStore();
  float memory[4] = {1, 2, 3, 4};
  const Tensor on_gpu = Tensor::Borrow(memory, DType::kFloat32, {4}, Device::CUDA(0));
  const auto status = kv->Init(1, on_gpu);
  REQUIRE(absl::IsFailedPrecondition(status));
  REQUIRE(Mentions(status, "cuda:0"));
}

TEST_CASE("Semantics: random pushes and pulls match a float64 reference", "[random]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 8; ++trial) {
    auto kv = NewStore();
    const bool string_keys = rng.Int(0, 1) == 1;
    const int num_keys = static_cast<int>(rng.Int(1, 6));
    std::vector<Key> keys;
    std::map<size_t, DType> dtypes;
    std::map<size_t, Shape> shapes;
    std::vector<std::vector<double>> reference(num_keys);
    std::vector<Tensor> initial;
    for (int k = 0; k < num_keys; ++k) {
      keys.push_back(
          string_keys ? Key("param" + std::to_string(rng.Int(0, 1 << 20)) + "_" + std::to_string(k))
                      : Key(rng.Int(-1000000, 1000000) * 16 + k));
      dtypes[k] = rng.AnyDType();
      shapes[k] = rng.AnyShape();
      initial.push_back(rng.RandomTensor(dtypes[k], shapes[k]));
      reference[k] = ToDoubles(initial.back());
    }
    REQUIRE(kv->Init(keys, initial).ok());

    // With the function updater (where supported) pushes accumulate; otherwise ASSIGN.
    const bool accumulate = GetStoreUnderTest().function_updater && rng.Int(0, 1) == 1;
    if (accumulate) {
      REQUIRE(kv->SetUpdater([](const Key&, const Tensor& received, Tensor* stored) {
                  for (int64_t i = 0; i < stored->num_elements(); ++i) {
                    stored->SetFromDouble(i, stored->GetAsDouble(i) + received.GetAsDouble(i));
                  }
                }).ok());
    }
    std::vector<int> pushes_seen(num_keys, 0);
    for (int round = 0; round < 4; ++round) {
      // A random list of keys, each possibly repeated (several devices).
      std::vector<Key> push_keys;
      std::vector<Tensor> values;
      std::vector<std::vector<double>> sums(num_keys);
      const int entries = static_cast<int>(rng.Int(1, 3 * num_keys));
      for (int e = 0; e < entries; ++e) {
        const size_t k = static_cast<size_t>(rng.Int(0, num_keys - 1));
        push_keys.push_back(keys[k]);
        values.push_back(rng.RandomTensor(dtypes[k], shapes[k]));
        const auto v = ToDoubles(values.back());
        if (sums[k].empty()) sums[k].assign(v.size(), 0.0);
        for (size_t i = 0; i < v.size(); ++i) sums[k][i] += v[i];
      }
      REQUIRE(kv->Push(push_keys, values, static_cast<int>(rng.Int(-2, 2))).ok());
      for (int k = 0; k < num_keys; ++k) {
        if (sums[k].empty()) continue;
        pushes_seen[k] += entries;
        for (size_t i = 0; i < sums[k].size(); ++i) {
          reference[k][i] = accumulate ? reference[k][i] + sums[k][i] : sums[k][i];
        }
      }
      // Pull every key into two outputs each (two devices).
      std::vector<Key> pull_keys;
      std::vector<Tensor> outs;
      for (int k = 0; k < num_keys; ++k) {
        for (int d = 0; d < 2; ++d) {
          pull_keys.push_back(keys[k]);
          outs.push_back(Tensor::Full(dtypes[k], shapes[k], -77));
        }
      }
      std::vector<Tensor*> out_ptrs;
      for (Tensor& t : outs) out_ptrs.push_back(&t);
      REQUIRE(kv->Pull(pull_keys, out_ptrs).ok());
      REQUIRE(kv->WaitAll().ok());
      for (int k = 0; k < num_keys; ++k) {
        INFO("trial " << trial << " round " << round << " key " << keys[k].Quoted() << " "
                      << DTypeName(dtypes[k]) << ShapeToString(shapes[k]));
        // Each rounding to the dtype loses at most half an ulp of values bounded by the sum of
        // every pushed magnitude (4 per value) plus the initial value.
        const double magnitude = 4.0 * (pushes_seen[k] + 1);
        const double tolerance = Tolerance(dtypes[k], pushes_seen[k] + 4, magnitude);
        REQUIRE(MaxAbsDiff(ToDoubles(outs[2 * k]), reference[k]) <= tolerance);
        REQUIRE(ToDoubles(outs[2 * k + 1]) == ToDoubles(outs[2 * k]));
      }
    }
  }
}

TEST_CASE("Semantics: PushPull returns the updated value, also into the pushed tensor",
          "[random]") {
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  const DType dtype = rng.AnyDType();
  const Shape shape = rng.AnyShape();
  INFO(DTypeName(dtype) << ShapeToString(shape));
  REQUIRE(kv->Init(11, rng.RandomTensor(dtype, shape)).ok());
  Tensor a = rng.RandomTensor(dtype, shape);
  Tensor b = rng.RandomTensor(dtype, shape);
  std::vector<double> sum = ToDoubles(a);
  const auto bv = ToDoubles(b);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += bv[i];
  // In place, as in `kv.pushpull(key, grads, out=grads)`.
  REQUIRE(kv->PushPull({11, 11}, {a, b}, {&a, &b}).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(MaxAbsDiff(ToDoubles(a), sum) <= Tolerance(dtype, 2, 8));
  REQUIRE(ToDoubles(b) == ToDoubles(a));
}

TEST_CASE("Semantics: operations on one key keep their order", "[order]") {
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  REQUIRE(kv->Init(1, Tensor::Zeros(DType::kInt64, {3})).ok());
  // Outputs must stay put until the pulls complete (asynchronous stores write them later).
  std::vector<Tensor> outs;
  outs.reserve(20);
  std::vector<int64_t> expected;
  for (int i = 0; i < 20; ++i) {
    const int64_t v = rng.Int(-1000000, 1000000);
    expected.push_back(v);
    REQUIRE(kv->Push(1, Tensor::Full(DType::kInt64, {3}, static_cast<double>(v)),
                     static_cast<int>(rng.Int(-5, 5)))
                .ok());
    outs.push_back(Tensor::Zeros(DType::kInt64, {3}));
    REQUIRE(kv->Pull(1, &outs.back(), static_cast<int>(rng.Int(-5, 5))).ok());
  }
  REQUIRE(kv->Wait({1}).ok());
  for (size_t i = 0; i < outs.size(); ++i) {
    INFO("pull " << i);
    REQUIRE(outs[i].GetAsDouble(2) == static_cast<double>(expected[i]));
  }
}

}  // namespace
}  // namespace kvstore::testing
