// The training the reliability tests run and its float64 reference.
//
// Every worker of a dist_sync job (kvservers started with --updater=sum) pushes, in each round
// r = 1, 2, ..., a gradient to every key of SumKeys(); the gradient's elements are small
// integers drawn from (seed, key, worker rank, round, element), so every sum is exact in
// float32 and the value after round R is known to any process: Expected(seed, workers, key, R).
// A checkpoint cut at round R holds exactly Expected(..., R) for every element of every key.
#ifndef KVSTORE_TESTS_RELIABILITY_SUM_REFERENCE_H_
#define KVSTORE_TESTS_RELIABILITY_SUM_REFERENCE_H_

#include <cstdint>
#include <vector>

namespace kvstore::testing {

struct SumKey {
  int64_t key;
  int64_t elements;
};

// SumKeys: 70 small keys (whole on one server each) and one of 6000 elements (over the job's
// big-value bound of 1000 in these tests: split over every server, in chunks of 1 KiB). With
// more than 64 keys a push or pull of all of them travels as a key group (docs/distributed.md),
// so checkpoints cut group pushes too.
inline std::vector<SumKey> SumKeys() {
  std::vector<SumKey> keys;
  for (int64_t k = 1; k <= 70; ++k) keys.push_back({k, 1 + (k * 7) % 40});
  keys.push_back({100, 6000});
  return keys;
}

// Mix is a small integer hash of its inputs.
inline uint64_t Mix(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull;
  for (uint64_t v : {a, b, c, d}) {
    x ^= v + 0x9E3779B97F4A7C15ull + (x << 6) + (x >> 2);
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
  }
  return x;
}

// InitialValue is element `i` of `key` as Init stores it.
inline double InitialValue(uint64_t seed, int64_t key, int64_t i) {
  return static_cast<double>(static_cast<int64_t>(Mix(seed, key, i, 0, 0) % 201) - 100);
}

// Gradient is element `i` of what worker `rank` pushes to `key` in round `round` (>= 1).
inline double Gradient(uint64_t seed, int64_t key, int rank, int64_t round, int64_t i) {
  return static_cast<double>(static_cast<int64_t>(Mix(seed, key, rank + 1, round, i) % 15) - 7);
}

// Expected is element `i` of `key` after `rounds` rounds of `workers` workers, in float64.
inline double Expected(uint64_t seed, int workers, int64_t key, int64_t rounds, int64_t i) {
  double value = InitialValue(seed, key, i);
  for (int64_t r = 1; r <= rounds; ++r) {
    for (int w = 0; w < workers; ++w) value += Gradient(seed, key, w, r, i);
  }
  return value;
}

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_RELIABILITY_SUM_REFERENCE_H_
