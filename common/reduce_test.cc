#include "common/reduce.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

TEST_CASE("Reduce: SumInto matches a float64 reference for every dtype", "[reduce]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 60; ++trial) {
    const DType dtype = kAllDTypes[trial % std::size(kAllDTypes)];
    // Sizes around the block size exercise the tail.
    const Shape shape = {rng.Int(1, 3), rng.Int(1, 5000)};
    const int k = static_cast<int>(rng.Int(1, 8));
    INFO(DTypeName(dtype) << ShapeToString(shape) << " k=" << k);
    std::vector<Tensor> inputs;
    std::vector<double> reference(NumElements(shape), 0.0);
    for (int j = 0; j < k; ++j) {
      inputs.push_back(rng.RandomTensor(dtype, shape));
      const auto values = testing::ToDoubles(inputs.back());
      for (size_t i = 0; i < values.size(); ++i) reference[i] += values[i];
    }
    Tensor out = Tensor::Full(dtype, shape, 99);  // Poisoned: every element must be written.
    REQUIRE(SumInto(inputs, &out).ok());
    REQUIRE(testing::MaxAbsDiff(testing::ToDoubles(out), reference) <=
            testing::Tolerance(dtype, k, 4.0 * k));
  }
}

TEST_CASE("Reduce: the output may alias an input", "[reduce]") {
  TestRng rng;
  INFO(rng.Describe());
  Tensor a = rng.RandomTensor(DType::kFloat64, {10000});
  Tensor b = rng.RandomTensor(DType::kFloat64, {10000});
  auto expected = testing::ToDoubles(a);
  const auto bv = testing::ToDoubles(b);
  // Same order of additions as the kernel, so float64 results agree bit for bit.
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = (expected[i] + bv[i]) + expected[i];
  const Tensor inputs[] = {a, b, a};
  REQUIRE(SumInto(inputs, &a).ok());
  REQUIRE(testing::ToDoubles(a) == expected);
}

TEST_CASE("Reduce: AddRaw adds a span into another, or into itself, for every dtype", "[reduce]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 36; ++trial) {
    const DType dtype = kAllDTypes[trial % std::size(kAllDTypes)];
    const bool itself = trial % 2 == 1;
    const Shape shape = {rng.Int(1, 9000)};
    INFO(DTypeName(dtype) << ShapeToString(shape) << (itself ? " into itself" : ""));
    const Tensor src = rng.RandomTensor(dtype, shape);
    Tensor dst = itself ? src.Clone() : rng.RandomTensor(dtype, shape);
    const auto a = testing::ToDoubles(dst), b = testing::ToDoubles(itself ? dst : src);
    std::vector<double> reference(a.size());
    for (size_t i = 0; i < a.size(); ++i) reference[i] = a[i] + b[i];
    AddRaw(dtype, itself ? dst.data() : src.data(), dst.data(), dst.num_elements());
    REQUIRE(testing::MaxAbsDiff(testing::ToDoubles(dst), reference) <=
            testing::Tolerance(dtype, 2, 8.0));
  }
}

TEST_CASE("Reduce: SumRaw gives the bits of a copy and repeated AddRaw calls, in one pass",
          "[reduce]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 72; ++trial) {
    const DType dtype = kAllDTypes[trial % std::size(kAllDTypes)];
    const size_t k = static_cast<size_t>(rng.Int(1, 6));
    const bool accumulate = rng.Int(0, 1) == 1;
    const Shape shape = {rng.Int(1, 9000)};  // Across the accumulator's blocks of 4,096.
    INFO(DTypeName(dtype) << ShapeToString(shape) << ", " << k << " inputs"
                          << (accumulate ? ", accumulated" : ""));
    std::vector<Tensor> inputs;
    std::vector<const void*> srcs;
    for (size_t j = 0; j < k; ++j) {
      inputs.push_back(rng.RandomTensor(dtype, shape));
      srcs.push_back(inputs.back().data());
    }
    const Tensor start = rng.RandomTensor(dtype, shape);
    // The reference: the inputs summed into a buffer by AddRaw, then added to (or copied into)
    // the output; and the same sum in float64.
    Tensor sum = inputs[0].Clone();
    for (size_t j = 1; j < k; ++j) AddRaw(dtype, inputs[j].data(), sum.data(), sum.num_elements());
    Tensor want = start.Clone();
    if (accumulate) {
      AddRaw(dtype, sum.data(), want.data(), want.num_elements());
    } else {
      std::memcpy(want.data(), sum.data(), sum.byte_size());
    }
    std::vector<double> exact =
        accumulate ? testing::ToDoubles(start) : std::vector<double>(shape[0], 0.0);
    for (const Tensor& input : inputs) {
      const std::vector<double> v = testing::ToDoubles(input);
      for (size_t i = 0; i < v.size(); ++i) exact[i] += v[i];
    }
    Tensor got = start.Clone();
    SumRaw(dtype, srcs.data(), k, got.data(), got.num_elements(), accumulate);
    REQUIRE(std::memcmp(got.data(), want.data(), got.byte_size()) == 0);
    REQUIRE(testing::MaxAbsDiff(testing::ToDoubles(got), exact) <=
            testing::Tolerance(dtype, static_cast<int>(k) + 1, 8.0));
    if (!accumulate) {
      // The output may be the first input.
      Tensor first = inputs[0].Clone();
      srcs[0] = first.data();
      SumRaw(dtype, srcs.data(), k, first.data(), first.num_elements(), false);
      REQUIRE(std::memcmp(first.data(), want.data(), first.byte_size()) == 0);
    }
  }
}

TEST_CASE("Reduce: integer sums wrap instead of failing", "[reduce]") {
  Tensor a = Tensor::Full(DType::kInt32, {3}, 2147483647);
  REQUIRE(AddInto(Tensor::Full(DType::kInt32, {3}, 1), &a).ok());
  REQUIRE(a.GetAsDouble(2) == -2147483648.0);
}

TEST_CASE("Reduce: mismatched tensors are rejected before writing", "[reduce]") {
  Tensor out = Tensor::Full(DType::kFloat32, {2, 3}, 5);
  const Tensor wrong_dtype[] = {Tensor::Full(DType::kFloat64, {2, 3}, 1)};
  auto status = SumInto(wrong_dtype, &out);
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE(status.message().find("float64(2, 3)") != absl::string_view::npos);
  REQUIRE(absl::IsInvalidArgument(CopyInto(Tensor::Full(DType::kFloat32, {7}, 1), &out)));
  REQUIRE(absl::IsInvalidArgument(SumInto({}, &out)));
  float device_memory[6];
  const Tensor on_gpu[] = {Tensor::Borrow(device_memory, DType::kFloat32, {2, 3}, Device::CUDA(0))};
  REQUIRE(absl::IsFailedPrecondition(SumInto(on_gpu, &out)));
  REQUIRE(out.GetAsDouble(5) == 5);
}

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

TEST_CASE("Reduce: values of 8 MiB and more are summed by every core, exactly as by one",
          "[reduce]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kInt64}) {
    // Odd sizes just above the threading threshold, so ranges end inside a block.
    const int64_t n = (8 << 20) / static_cast<int64_t>(DTypeSize(dtype)) + rng.Int(1, 9999);
    const int k = static_cast<int>(rng.Int(2, 4));
    INFO(DTypeName(dtype) << " n=" << n << " k=" << k);
    std::vector<Tensor> inputs;
    std::vector<double> reference(n, 0.0);
    for (int j = 0; j < k; ++j) {
      inputs.push_back(rng.RandomTensor(dtype, {n}));
      const auto values = testing::ToDoubles(inputs.back());
      for (int64_t i = 0; i < n; ++i) reference[i] += values[i];
    }
    Tensor out = Tensor::Full(dtype, {n}, 99);
    REQUIRE(SumInto(inputs, &out).ok());
    REQUIRE(testing::MaxAbsDiff(testing::ToDoubles(out), reference) <=
            testing::Tolerance(dtype, k, 4.0 * k));
    // In place: the output aliases the first input.
    Tensor first = inputs[0].Clone();
    std::vector<Tensor> aliased = {first};
    for (int j = 1; j < k; ++j) aliased.push_back(inputs[j]);
    REQUIRE(SumInto(aliased, &first).ok());
    REQUIRE(std::memcmp(first.data(), out.data(), out.byte_size()) == 0);
  }
}

}  // namespace
}  // namespace kvstore
