#include "common/tensor.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/half.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

TEST_CASE("Half: every binary16 pattern survives float and back", "[half]") {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float f = HalfToFloat(h);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(HalfToFloat(FloatToHalf(f))));
    } else {
      REQUIRE(FloatToHalf(f) == h);
    }
  }
}

#ifdef __FLT16_MAX__
TEST_CASE("Half: float to binary16 rounds like the compiler's _Float16", "[half]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int i = 0; i < 200000; ++i) {
    // Cover normals, subnormals, overflow and exact ties.
    const double scale = std::ldexp(1.0, static_cast<int>(rng.Int(-28, 17)));
    const float f = static_cast<float>(rng.Uniform(-1, 1) * scale);
    const _Float16 reference = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &reference, sizeof(expected));
    INFO("f=" << f);
    REQUIRE(FloatToHalf(f) == expected);
  }
}
#endif

TEST_CASE("BFloat16: conversion picks the nearest representable value", "[half]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int i = 0; i < 100000; ++i) {
    const float f = static_cast<float>(rng.Uniform(-1, 1) *
                                       std::ldexp(1.0, static_cast<int>(rng.Int(-60, 60))));
    const uint16_t b = FloatToBFloat16(f);
    const double error = std::fabs(static_cast<double>(BFloat16ToFloat(b)) - f);
    INFO("f=" << f);
    REQUIRE(error <= std::fabs(static_cast<double>(BFloat16ToFloat(b + 1)) - f));
    REQUIRE(error <= std::fabs(static_cast<double>(BFloat16ToFloat(b - 1)) - f));
    REQUIRE(FloatToBFloat16(BFloat16ToFloat(b)) == b);
  }
}

TEST_CASE("Tensor: prints like numpy", "[tensor]") {
  REQUIRE(Tensor::Full(DType::kFloat32, {2, 3}, 2).ToString() == "[[2. 2. 2.]\n [2. 2. 2.]]");
  REQUIRE(Tensor::Full(DType::kInt32, {3}, -7).ToString() == "[-7 -7 -7]");
  REQUIRE(Tensor::Full(DType::kFloat64, {1, 2}, 0.5).ToString() == "[[0.5 0.5]]");
  REQUIRE(ShapeToString({2, 3}) == "(2, 3)");
  REQUIRE(ShapeToString({5}) == "(5,)");
  REQUIRE(ShapeToString({}) == "()");
}

TEST_CASE("Tensor: copies share the buffer, Clone does not", "[tensor]") {
  TestRng rng;
  INFO(rng.Describe());
  for (DType dtype : kAllDTypes) {
    Tensor a = rng.RandomTensor(dtype, rng.AnyShape());
    Tensor shared = a;
    Tensor deep = a.Clone();
    REQUIRE(shared.data() == a.data());
    REQUIRE(deep.data() != a.data());
    REQUIRE(testing::ToDoubles(deep) == testing::ToDoubles(a));
    a.SetFromDouble(0, 3);
    REQUIRE(shared.GetAsDouble(0) == 3);
    REQUIRE(deep.GetAsDouble(0) != 3);
  }
}

TEST_CASE("Tensor: a handle is 32 bytes; copies, moves and assignments keep what they share",
          "[tensor]") {
  STATIC_REQUIRE(sizeof(Tensor) == 32);
  TestRng rng;
  INFO(rng.Describe());
  for (int round = 0; round < 20; ++round) {
    const Shape shape = round % 5 == 0 ? Shape{} : rng.AnyShape();  // Scalars too.
    INFO("shape " << ShapeToString(shape));
    int releases = 0;
    std::vector<double> storage(static_cast<size_t>(NumElements(shape)) + 1);
    for (double& x : storage) x = rng.Uniform(-9, 9);
    const Device device = rng.Int(0, 1) == 0 ? Device::CPU() : Device::CUDA(rng.Int(0, 7));
    Tensor copy;
    {
      Tensor a = Tensor::Adopt(storage.data(), DType::kFloat64, shape, device,
                               [&releases] { ++releases; });
      REQUIRE_FALSE(a.shared());
      copy = a;
      REQUIRE(a.shared());
      Tensor moved = std::move(a);
      REQUIRE_FALSE(a.defined());  // NOLINT: a moved-from handle is undefined.
      REQUIRE(a.shape().empty());  // NOLINT
      REQUIRE(moved.shape() == shape);
      REQUIRE(moved.device() == device);
      moved = moved;  // Self-assignment changes nothing.
      REQUIRE(moved.data() == storage.data());
      REQUIRE(moved.shared());
    }
    // The copy outlived every other handle: its shape, buffer and device are intact.
    REQUIRE(releases == 0);
    REQUIRE_FALSE(copy.shared());
    REQUIRE(copy.shape() == shape);
    REQUIRE(copy.shape_code() == ShapeCode(shape));
    REQUIRE(copy.device() == device);
    REQUIRE(copy.dtype() == DType::kFloat64);
    if (device.is_cpu()) {
      for (int64_t i = 0; i < copy.num_elements(); ++i) {
        REQUIRE(copy.GetAsDouble(i) == storage[i]);
      }
    }
    // Assigning over the last handle releases the buffer, once.
    copy = Tensor::Zeros(DType::kInt32, {rng.Int(1, 5)});
    REQUIRE(releases == 1);
    REQUIRE(copy.dtype() == DType::kInt32);
    REQUIRE(copy.owns_data());
  }
  // signature: equal exactly when dtype, device and (small) shape are, whether the handle owns
  // its buffer or not; never an undefined handle's.
  std::vector<Tensor> kinds;
  std::vector<float> memory(64);
  for (int i = 0; i < 40; ++i) {
    const DType dtype = rng.Int(0, 1) == 0 ? DType::kFloat32 : DType::kInt32;
    const Shape shape = rng.Int(0, 3) == 0 ? Shape{} : rng.AnyShape(2, 2);
    const Device device = rng.Int(0, 2) == 0 ? Device::CUDA(rng.Int(0, 1)) : Device::CPU();
    kinds.push_back(rng.Int(0, 1) == 0 ? Tensor::Borrow(memory.data(), dtype, shape, device)
                                       : Tensor::Adopt(memory.data(), dtype, shape, device, {}));
    REQUIRE(kinds.back().signature() == Tensor::Signature(dtype, ShapeCode(shape), device));
  }
  for (const Tensor& a : kinds) {
    REQUIRE(a.signature() != Tensor().signature());
    for (const Tensor& b : kinds) {
      INFO(a.Description() << " and " << b.Description());
      REQUIRE((a.signature() == b.signature()) ==
              (a.dtype() == b.dtype() && a.device() == b.device() && a.shape() == b.shape()));
    }
  }
  // The highest device id a handle can keep, and zero-element tensors with buffers of their own.
  REQUIRE(Tensor::Borrow(nullptr, DType::kFloat32, {0}, Device::CUDA(Device::kMaxId)).device() ==
          Device::CUDA(Device::kMaxId));
  const Tensor empty1 = Tensor::Zeros(DType::kFloat32, {0});
  const Tensor empty2 = Tensor::Zeros(DType::kFloat32, {0, 3});
  REQUIRE(empty1.data() != empty2.data());
  REQUIRE_FALSE(empty1.SameBuffer(empty2));
}

TEST_CASE("Tensor: set and get round trip through every dtype", "[tensor]") {
  TestRng rng;
  INFO(rng.Describe());
  for (DType dtype : kAllDTypes) {
    INFO(DTypeName(dtype));
    REQUIRE(ParseDType(DTypeName(dtype)).value() == dtype);
    REQUIRE(DTypeFromInt(static_cast<int>(dtype)).value() == dtype);
    Tensor t = rng.RandomTensor(dtype, {4, 5});
    REQUIRE(t.byte_size() == 20 * DTypeSize(dtype));
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      const double v = t.GetAsDouble(i);
      t.SetFromDouble(i, v);
      REQUIRE(t.GetAsDouble(i) == v);
    }
  }
  REQUIRE(absl::IsInvalidArgument(ParseDType("float8").status()));
  REQUIRE(absl::IsInvalidArgument(DTypeFromInt(0).status()));
}

TEST_CASE("Tensor: FromValues checks the count, ValidateShape rejects bad shapes", "[tensor]") {
  auto bad = Tensor::FromValues(DType::kFloat32, {2, 2}, {1.0, 2.0, 3.0});
  REQUIRE(absl::IsInvalidArgument(bad.status()));
  REQUIRE(bad.status().message().find("(2, 2)") != absl::string_view::npos);
  REQUIRE(absl::IsInvalidArgument(ValidateShape({3, -1})));
  REQUIRE(absl::IsInvalidArgument(ValidateShape({1LL << 40, 1LL << 40})));
  REQUIRE(ValidateShape({0, 7}).ok());
}

TEST_CASE("Tensor: Adopt releases once after the last handle", "[tensor]") {
  int releases = 0;
  float storage[6] = {1, 2, 3, 4, 5, 6};
  {
    Tensor a =
        Tensor::Adopt(storage, DType::kFloat32, {2, 3}, Device::CPU(), [&releases] { ++releases; });
    Tensor b = a;
    REQUIRE(b.owns_data());
    REQUIRE(b.GetAsDouble(5) == 6);
  }
  REQUIRE(releases == 1);
  Tensor borrowed = Tensor::Borrow(storage, DType::kFloat32, {6});
  REQUIRE_FALSE(borrowed.owns_data());
  REQUIRE(borrowed.Description() == "float32(6,)@cpu");
  REQUIRE(Tensor::Borrow(storage, DType::kFloat32, {6}, Device::CUDA(1)).Description() ==
          "float32(6,)@cuda:1");
}

TEST_CASE("Tensor: ShapeCode names exactly the small shapes, and handles keep it", "[tensor]") {
  TestRng rng;
  INFO(rng.Describe());
  // Dimensions at and around the limits (2^15 for a matrix, 2^30 for a vector), small ones,
  // and large ones.
  auto dim = [&]() -> int64_t {
    switch (rng.Int(0, 5)) {
      case 0:
        return rng.Int(0, 3);
      case 1:
        return (int64_t{1} << 15) - rng.Int(0, 1);
      case 2:
        return (int64_t{1} << 15) + rng.Int(0, 1);
      case 3:
        return (int64_t{1} << 30) - rng.Int(0, 1);
      case 4:
        return rng.Int(0, int64_t{1} << 40);
      default:
        return rng.Int(0, (int64_t{1} << 15) - 1);
    }
  };
  auto small = [](const Shape& s) {  // The definition, written out.
    if (s.size() == 0) return true;
    if (s.size() == 1) return s[0] < (int64_t{1} << 30);
    if (s.size() == 2) return s[0] < (int64_t{1} << 15) && s[1] < (int64_t{1} << 15);
    return false;
  };
  std::vector<Shape> shapes;
  for (int i = 0; i < 300; ++i) {
    Shape s(static_cast<size_t>(rng.Int(0, 3)));
    for (int64_t& d : s) d = dim();
    shapes.push_back(s);
    // A vector whose length reads like a matrix's two dimensions, and a copy.
    if (s.size() == 2) shapes.push_back({s[0] << 15 | s[1]});
    shapes.push_back(s);
  }
  shapes.push_back({-1});
  shapes.push_back({2, -1});
  for (const Shape& a : shapes) {
    INFO("shape " << ShapeToString(a));
    REQUIRE((ShapeCode(a) != 0) ==
            (small(a) && std::all_of(a.begin(), a.end(), [](int64_t d) { return d >= 0; })));
    for (const Shape& b : shapes) {
      if (ShapeCode(a) == 0 || ShapeCode(b) == 0) continue;
      INFO("and " << ShapeToString(b));
      REQUIRE((ShapeCode(a) == ShapeCode(b)) == (a == b));
    }
  }
  // Every way of making a handle keeps its shape's code.
  const Shape matrix = {rng.Int(2, 5), rng.Int(2, 5)};  // Room for the view below.
  const Tensor zeros = Tensor::Zeros(DType::kFloat32, matrix);
  REQUIRE(zeros.shape_code() == ShapeCode(matrix));
  REQUIRE(Tensor().shape_code() == ShapeCode(Shape{}));
  REQUIRE(zeros.Clone().shape_code() == ShapeCode(matrix));
  const Shape vector = {rng.Int(1, 4)};
  REQUIRE(zeros.View(0, DType::kFloat32, vector)->shape_code() == ShapeCode(vector));
  REQUIRE(zeros.View(0, DType::kFloat32, vector)->shape_code() != zeros.shape_code());
  std::vector<float> storage(8);
  REQUIRE(Tensor::Borrow(storage.data(), DType::kFloat32, {2, 2, 2}).shape_code() == 0);
  REQUIRE(Tensor::Borrow(storage.data(), DType::kFloat32, {8}).shape_code() == ShapeCode(Shape{8}));
}

TEST_CASE("Tensor: views share the buffer, keep it alive and must fit", "[tensor]") {
  TestRng rng;
  INFO(rng.Describe());
  int releases = 0;
  std::vector<float> storage(24);
  for (float& x : storage) x = static_cast<float>(rng.Uniform(-5, 5));
  std::vector<float> expected = storage;
  Tensor view;
  {
    Tensor bucket = Tensor::Adopt(storage.data(), DType::kFloat32, {24}, Device::CPU(),
                                  [&releases] { ++releases; });
    const int64_t first = rng.Int(0, 20);
    auto made = bucket.View(static_cast<size_t>(first) * 4, DType::kFloat32, {2, 2});
    REQUIRE(made.ok());
    view = *made;
    REQUIRE(view.owns_data());
    REQUIRE(bucket.shared());
    for (int64_t i = 0; i < 4; ++i) REQUIRE(view.GetAsDouble(i) == expected[first + i]);
    const double value = rng.Uniform(10, 20);
    view.SetFromDouble(3, value);
    REQUIRE(bucket.GetAsDouble(first + 3) == static_cast<float>(value));
    // Out of bounds, at the edge and past it.
    REQUIRE(bucket.View(96, DType::kFloat32, {0}).ok());
    auto past = bucket.View(88, DType::kFloat32, {3});
    REQUIRE(absl::IsInvalidArgument(past.status()));
    REQUIRE(past.status().message().find("float32(24,)") != absl::string_view::npos);
    REQUIRE(absl::IsInvalidArgument(bucket.View(97, DType::kInt32, {0}).status()));
    REQUIRE(absl::IsInvalidArgument(bucket.View(0, DType::kFloat32, {-1}).status()));
  }
  REQUIRE(releases == 0);  // The view still holds the bucket.
  view = Tensor();
  REQUIRE(releases == 1);
  Tensor borrowed = Tensor::Borrow(storage.data(), DType::kFloat32, {24});
  // SameBuffer: views of one owned buffer, or borrowed memory; never two owned buffers.
  const Tensor owned = Tensor::Zeros(DType::kFloat32, {8});
  const Tensor first = *owned.View(0, DType::kFloat32, {4});
  const Tensor second = *owned.View(16, DType::kFloat32, {4});
  REQUIRE(first.SameBuffer(second));
  REQUIRE(first.SameBuffer(owned));
  REQUIRE_FALSE(first.SameBuffer(Tensor::Zeros(DType::kFloat32, {8})));
  REQUIRE_FALSE(first.SameBuffer(borrowed));
  REQUIRE(borrowed.SameBuffer(Tensor::Borrow(storage.data() + 4, DType::kFloat32, {2})));
  auto half = borrowed.View(2, DType::kFloat16, {3});
  REQUIRE(half.ok());
  REQUIRE_FALSE(half->owns_data());
  REQUIRE(half->data() == reinterpret_cast<uint8_t*>(storage.data()) + 2);
}

}  // namespace
}  // namespace kvstore
