#include "tests/test_util.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvstore::testing {
namespace {

uint64_t ChooseSeed() {
  if (const char* env = std::getenv("KVSTORE_TEST_SEED")) {
    uint64_t seed;
    if (absl::SimpleAtoi(env, &seed)) return seed;
  }
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

TestRng::TestRng() : TestRng(ChooseSeed()) {}

std::string TestRng::Describe() const {
  return absl::StrCat("seed=", seed_, " (replay with KVSTORE_TEST_SEED=", seed_, ")");
}

double TestRng::Uniform(double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(engine_);
}

int64_t TestRng::Int(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
}

DType TestRng::AnyDType() { return kAllDTypes[Int(0, std::size(kAllDTypes) - 1)]; }

DType TestRng::AnyFloatDType() {
  static constexpr DType kFloats[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                      DType::kFloat64};
  return kFloats[Int(0, 3)];
}

Shape TestRng::AnyShape(int max_rank, int64_t max_dim) {
  Shape shape(Int(1, max_rank));
  for (int64_t& d : shape) d = Int(1, max_dim);
  return shape;
}

Tensor TestRng::RandomTensor(DType dtype, const Shape& shape) {
  Tensor t = Tensor::Zeros(dtype, shape);
  const int64_t n = t.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    if (IsFloatingPoint(dtype)) {
      // Set through the dtype, so the stored value is exactly what the reference reads back.
      t.SetFromDouble(i, Uniform(-4, 4));
    } else {
      t.SetFromDouble(i, static_cast<double>(Int(-1000, 1000)));
    }
  }
  return t;
}

std::vector<double> ToDoubles(const Tensor& tensor) {
  std::vector<double> out(tensor.num_elements());
  for (size_t i = 0; i < out.size(); ++i) out[i] = tensor.GetAsDouble(static_cast<int64_t>(i));
  return out;
}

double Tolerance(DType dtype, int terms, double magnitude) {
  double epsilon = 0;
  switch (dtype) {
    case DType::kFloat32:
      epsilon = 0x1p-23;
      break;
    case DType::kFloat16:
      epsilon = 0x1p-10;
      break;
    case DType::kBFloat16:
      epsilon = 0x1p-7;
      break;
    case DType::kFloat64:
      epsilon = 0x1p-52;
      break;
    case DType::kInt32:
    case DType::kInt64:
      return 0;
  }
  return epsilon * (terms + 1) * magnitude;
}

double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::fmax(worst, std::fabs(a[i] - b[i]));
  return worst;
}

}  // namespace kvstore::testing
