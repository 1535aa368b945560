// Helpers shared by the tests: a seeded random source whose seed is printed on failure, random
// tensors, and float64 reference arithmetic.
//
// Every test that draws random numbers creates a TestRng and states `INFO(rng.Describe())` so a
// failure shows the seed; `KVSTORE_TEST_SEED=<n>` replays a run.
#ifndef KVSTORE_TESTS_TEST_UTIL_H_
#define KVSTORE_TESTS_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/tensor.h"

namespace kvstore::testing {

class TestRng {
 public:
  // Seeds from KVSTORE_TEST_SEED when set, otherwise from std::random_device.
  TestRng();
  explicit TestRng(uint64_t seed) : seed_(seed), engine_(seed) {}

  uint64_t seed() const { return seed_; }
  // Describe returns "seed=<n> (replay with KVSTORE_TEST_SEED=<n>)".
  std::string Describe() const;

  double Uniform(double lo, double hi);
  int64_t Int(int64_t lo, int64_t hi);  // Inclusive bounds.
  DType AnyDType();
  DType AnyFloatDType();
  // AnyShape returns 1 to `max_rank` dimensions of extent 1 to `max_dim`.
  Shape AnyShape(int max_rank = 3, int64_t max_dim = 9);

  // RandomTensor returns a CPU tensor of random values exactly representable in `dtype`:
  // floats in [-4, 4) (never all zeros or ones), integers in [-1000, 1000].
  Tensor RandomTensor(DType dtype, const Shape& shape);

  std::mt19937_64& engine() { return engine_; }

 private:
  uint64_t seed_;
  std::mt19937_64 engine_;
};

// ToDoubles returns the tensor's elements converted to double.
std::vector<double> ToDoubles(const Tensor& tensor);

// Tolerance returns the absolute error allowed when comparing a `dtype` result built from
// `terms` additions of values bounded by `magnitude` against a float64 reference.
double Tolerance(DType dtype, int terms, double magnitude);

// MaxAbsDiff returns max |a[i] - b[i]| (infinity when the sizes differ).
double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_TEST_UTIL_H_
