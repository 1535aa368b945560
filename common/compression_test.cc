#include "common/compression.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

CompressionParams Params(absl::string_view type, double threshold) {
  absl::StatusOr<CompressionParams> params = MakeCompressionParams(type, threshold);
  REQUIRE(params.ok());
  return *params;
}

// Reference: the rules of common/compression.h written element by element, one value per
// scalar step, with the bit positions computed from the documented layout.
struct Reference {
  CompressionParams params;
  std::vector<float> residual;

  // Returns the decoded values and fills `words` with the encoded bytes.
  std::vector<float> Push(const std::vector<float>& grad, std::vector<uint8_t>* words) {
    const int per_word = ValuesPerWord(params.type);
    words->assign(CompressedBytes(params.type, static_cast<int64_t>(grad.size())), 0);
    std::vector<float> decoded(grad.size());
    const float t = params.threshold;
    for (size_t i = 0; i < grad.size(); ++i) {
      float& r = residual[i];
      r = r + grad[i];
      const size_t word = i / per_word;
      const size_t in_word = i % per_word;
      if (params.type == CompressionType::k2Bit) {
        const size_t byte = word * 4 + in_word / 4;
        const int shift = 6 - 2 * static_cast<int>(in_word % 4);
        if (r >= t) {
          (*words)[byte] |= 3 << shift;
          r = r - t;
          decoded[i] = t;
        } else if (r <= -t) {
          (*words)[byte] |= 2 << shift;
          r = r + t;
          decoded[i] = -t;
        } else {
          decoded[i] = 0;
        }
      } else {
        const size_t byte = word * 4 + in_word / 8;
        const int shift = 7 - static_cast<int>(in_word % 8);
        if (r > t) {
          (*words)[byte] |= 1 << shift;
          r = r - 1;
          decoded[i] = 1;
        } else {
          r = r + 1;
          decoded[i] = -1;
        }
      }
    }
    return decoded;
  }
};

TEST_CASE("Compression: 2bit golden bit layout", "[compression]") {
  const CompressionParams params = Params("2bit", 0.5);
  // Codes in order: + - 0 + | - 0 0 0 | + + + + | 0 0 - -  then one value in a padded word.
  const std::vector<float> grad = {1.0f, -1.0f, 0.25f, 0.75f, -0.5f, 0.0f,  0.49f, -0.49f, 0.5f,
                                   2.0f, 0.6f,  9.0f,  0.0f,  0.1f,  -0.6f, -3.0f, -0.5f};
  std::vector<float> residual(grad.size(), 0.0f);
  std::vector<uint8_t> out(CompressedBytes(params.type, 17), 0xAB);
  REQUIRE(out.size() == 8);
  Quantize(params, grad.data(), residual.data(), 17, out.data());
  // 11 10 00 11 = 0xE3, 10 00 00 00 = 0x80, 11 11 11 11 = 0xFF, 00 00 10 10 = 0x0A,
  // then 10 and zero padding = 0x80 0x00 0x00 0x00.
  const std::vector<uint8_t> expected = {0xE3, 0x80, 0xFF, 0x0A, 0x80, 0x00, 0x00, 0x00};
  CHECK(out == expected);
  const std::vector<float> expected_residual = {
      0.5f, -0.5f,       0.25f, 0.25f, 0.0f, 0.0f,         0.49f, -0.49f, 0.0f,
      1.5f, 0.6f - 0.5f, 8.5f,  0.0f,  0.1f, -0.6f + 0.5f, -2.5f, 0.0f};
  CHECK(residual == expected_residual);
  std::vector<float> decoded(17, 99.0f);
  Dequantize(params, out.data(), 17, decoded.data());
  const std::vector<float> expected_decoded = {
      0.5f, -0.5f, 0, 0.5f, -0.5f, 0, 0, 0, 0.5f, 0.5f, 0.5f, 0.5f, 0, 0, -0.5f, -0.5f, -0.5f};
  CHECK(decoded == expected_decoded);
}

TEST_CASE("Compression: 1bit golden bit layout", "[compression]") {
  const CompressionParams params = Params("1bit", 0.0);
  std::vector<float> grad(33, -0.25f);
  for (int i : {0, 2, 7, 8, 15, 31, 32}) grad[i] = 0.75f;
  std::vector<float> residual(grad.size(), 0.0f);
  std::vector<uint8_t> out(CompressedBytes(params.type, 33), 0xAB);
  REQUIRE(out.size() == 8);
  Quantize(params, grad.data(), residual.data(), 33, out.data());
  // Bits (first value most significant): 10100001 10000001 00000000 00000001, then 1 + padding.
  const std::vector<uint8_t> expected = {0xA1, 0x81, 0x00, 0x01, 0x80, 0x00, 0x00, 0x00};
  CHECK(out == expected);
  for (size_t i = 0; i < grad.size(); ++i) {
    CHECK(residual[i] == (grad[i] > 0 ? -0.25f : 0.75f));
  }
  std::vector<float> decoded(33, 99.0f);
  Dequantize(params, out.data(), 33, decoded.data());
  for (size_t i = 0; i < grad.size(); ++i) CHECK(decoded[i] == (grad[i] > 0 ? 1.0f : -1.0f));
}

TEST_CASE("Compression: 2bit residual sequence with threshold 0.5", "[compression]") {
  // Push 0.4, then 0.2 six times, into one value: the residual carries what was not sent.
  const CompressionParams params = Params("2bit", 0.5);
  const std::vector<float> pushes = {0.4f, 0.2f, 0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
  const std::vector<float> sent = {0, 0.5f, 0, 0.5f, 0, 0, 0.5f};
  const std::vector<float> residuals = {
      0.4f, 0.10000002384185791f, 0.30000001192092896f, 0.0f, 0.2f, 0.4f, 0.10000002384185791f};
  std::vector<float> residual(20, 0.0f);
  for (size_t step = 0; step < pushes.size(); ++step) {
    INFO("step " << step);
    std::vector<float> grad(20, pushes[step]);
    std::vector<uint8_t> out(CompressedBytes(params.type, 20));
    Quantize(params, grad.data(), residual.data(), 20, out.data());
    std::vector<float> decoded(20);
    Dequantize(params, out.data(), 20, decoded.data());
    for (int i = 0; i < 20; ++i) {
      REQUIRE(decoded[i] == sent[step]);
      REQUIRE(residual[i] == residuals[step]);
    }
  }
}

TEST_CASE("Compression: 1bit residual sequence with threshold 0", "[compression]") {
  const CompressionParams params = Params("1bit", 0.0);
  const std::vector<float> pushes = {0.4f, 0.2f, -0.7f, 0.2f, 0.2f, 0.2f};
  const std::vector<float> sent = {1, -1, -1, 1, 1, -1};
  const std::vector<float> residuals = {-0.6000000238418579f, 0.5999999642372131f,
                                        0.8999999761581421f,  0.10000002384185791f,
                                        -0.699999988079071f,  0.5f};
  std::vector<float> residual(40, 0.0f);
  for (size_t step = 0; step < pushes.size(); ++step) {
    INFO("step " << step);
    std::vector<float> grad(40, pushes[step]);
    std::vector<uint8_t> out(CompressedBytes(params.type, 40));
    Quantize(params, grad.data(), residual.data(), 40, out.data());
    std::vector<float> decoded(40);
    Dequantize(params, out.data(), 40, decoded.data());
    for (int i = 0; i < 40; ++i) {
      REQUIRE(decoded[i] == sent[step]);
      REQUIRE(residual[i] == residuals[step]);
    }
  }
}

TEST_CASE("Compression: random gradients match the element-wise reference", "[compression]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 40; ++trial) {
    const bool two_bit = trial % 2 == 0;
    const double threshold = two_bit ? rng.Uniform(0.05, 2.0) : rng.Uniform(-1.0, 1.0);
    const CompressionParams params = Params(two_bit ? "2bit" : "1bit", threshold);
    const int64_t n = rng.Int(1, 3000);
    INFO(params.ToString() << " n=" << n);
    Reference reference{params, std::vector<float>(n, 0.0f)};
    std::vector<float> residual(n, 0.0f);
    std::vector<float> sum(n, 0.0f), reference_sum(n, 0.0f);
    for (int step = 0; step < 4; ++step) {
      std::vector<float> grad(n);
      for (float& g : grad) g = static_cast<float>(rng.Uniform(-3.0, 3.0));
      std::vector<uint8_t> expected_words;
      const std::vector<float> expected = reference.Push(grad, &expected_words);
      std::vector<uint8_t> words(CompressedBytes(params.type, n), 0x5A);
      Quantize(params, grad.data(), residual.data(), n, words.data());
      REQUIRE(words == expected_words);
      REQUIRE(residual == reference.residual);
      std::vector<float> decoded(n, 99.0f);
      Dequantize(params, words.data(), n, decoded.data());
      REQUIRE(decoded == expected);
      DequantizeAdd(params, words.data(), n, sum.data());
      for (int64_t i = 0; i < n; ++i) reference_sum[i] += expected[i];
      REQUIRE(sum == reference_sum);
    }
  }
}

TEST_CASE("Compression: compressed sizes are 1/16 and 1/32 of float32", "[compression]") {
  CHECK(CompressedBytes(CompressionType::k2Bit, 1600) * 16 == 1600 * sizeof(float));
  CHECK(CompressedBytes(CompressionType::k1Bit, 3200) * 32 == 3200 * sizeof(float));
  CHECK(CompressedBytes(CompressionType::k2Bit, 17) == 8);
  CHECK(CompressedBytes(CompressionType::k1Bit, 33) == 8);
  CHECK(CompressedBytes(CompressionType::k2Bit, 0) == 0);
  CHECK(CompressedBytes(CompressionType::kNone, 5) == 20);
}

TEST_CASE("Compression: bad parameters are refused", "[compression]") {
  auto refused = [](absl::string_view type, std::optional<double> threshold,
                    absl::string_view fragment) {
    absl::StatusOr<CompressionParams> params = MakeCompressionParams(type, threshold);
    INFO(type << " " << params.status().ToString());
    REQUIRE(params.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(params.status().message().find(fragment) != absl::string_view::npos);
  };
  refused("3bit", std::nullopt, "3bit");
  refused("2bit", 0.0, "positive");
  refused("2bit", -0.5, "positive");
  refused("2bit", std::nan(""), "finite");
  refused("1bit", INFINITY, "finite");
  CHECK(MakeCompressionParams("2bit", std::nullopt)->threshold == 0.5f);
  CHECK(MakeCompressionParams("1bit", std::nullopt)->threshold == 0.5f);
  CHECK(!MakeCompressionParams("none", std::nullopt)->enabled());
  CHECK(MakeCompressionParams("1bit", -0.25)->threshold == -0.25f);
}

}  // namespace
}  // namespace kvstore
