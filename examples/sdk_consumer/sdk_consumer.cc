// sdk_consumer: a worker built outside Bazel against the installed SDK (find_package(KVStore)
// or pkg-config kvstore), run by deploy/sdk/sdk_install_test.sh in a job of real daemons.
//
//   DMLC_PS_ROOT_URI=... DMLC_PS_ROOT_PORT=... DMLC_NUM_WORKER=W KV_SECRET_FILE=... \
//     sdk_consumer SEED [ROUNDS]
//
// Joins the job as a dist_sync worker, initialises a big key (split over the servers), 100
// small keys (one key group) and a float64 key, then for ROUNDS rounds pushes values every
// worker can regenerate from SEED and pulls them back. With the servers' default updater
// (assign) a pulled value is the sum of every worker's push of that round: it is checked
// against that sum computed here in float64. Prints the largest error and exits 0 when every
// value is within tolerance, 1 otherwise (naming the key, round and element).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "client/kvstore.h"

namespace {

using kvstore::DType;
using kvstore::Key;
using kvstore::Tensor;

constexpr int64_t kBigElements = 1200000;  // above the scheduler's default big_value_bound
constexpr int kSmallKeys = 100;
constexpr int64_t kSmallElements = 64;
constexpr int64_t kDoubleElements = 1000;

struct KeySpec {
  Key key;
  DType dtype;
  int64_t elements;
};

std::vector<KeySpec> Keys() {
  std::vector<KeySpec> keys;
  keys.push_back({Key(0), DType::kFloat32, kBigElements});
  for (int k = 1; k <= kSmallKeys; ++k) keys.push_back({Key(k), DType::kFloat32, kSmallElements});
  keys.push_back({Key(1000), DType::kFloat64, kDoubleElements});
  return keys;
}

// The value worker `worker` pushes to key `index` in round `round` (round -1: the initial
// value), uniform in [-1, 1), as doubles; stored in the key's dtype.
std::vector<double> Values(uint64_t seed, int worker, int round, size_t index, int64_t n) {
  std::seed_seq seq{seed, static_cast<uint64_t>(worker), static_cast<uint64_t>(round + 1),
                    static_cast<uint64_t>(index)};
  std::mt19937_64 rng(seq);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> values(n);
  for (auto& v : values) v = uniform(rng);
  return values;
}

Tensor ToTensor(const std::vector<double>& values, DType dtype) {
  Tensor t = Tensor::Zeros(dtype, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.SetFromDouble(i, values[i]);
  return t;
}

// Returns false (and prints why) when `got` differs from `want` (float64) beyond the rounding of
// its dtype; *max_error is raised to the largest absolute error seen.
bool Check(const Tensor& got, const std::vector<double>& want, const std::string& what,
           double* max_error) {
  const double eps = got.dtype() == DType::kFloat64 ? 1e-12 : 1e-6;
  for (size_t i = 0; i < want.size(); ++i) {
    const double error = std::fabs(got.GetAsDouble(i) - want[i]);
    if (error > *max_error) *max_error = error;
    if (!(error <= eps * (1.0 + std::fabs(want[i])) * 4)) {
      std::fprintf(stderr, "sdk_consumer: %s element %zu is %.9g, want %.9g\n", what.c_str(), i,
                   got.GetAsDouble(i), want[i]);
      return false;
    }
  }
  return true;
}

int Fail(const char* step, const absl::Status& status) {
  std::fprintf(stderr, "sdk_consumer: %s: %s\n", step, status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: sdk_consumer SEED [ROUNDS]\n");
    return 2;
  }
  const uint64_t seed = std::strtoull(argv[1], nullptr, 10);
  const int rounds = argc == 3 ? std::atoi(argv[2]) : 3;

  auto created = kvstore::KVStore::Create("dist_sync");
  if (!created.ok()) return Fail("Create(dist_sync)", created.status());
  std::unique_ptr<kvstore::KVStore> kv = *std::move(created);
  const int rank = kv->rank(), workers = kv->num_workers();
  std::printf("sdk_consumer: rank %d of %d, seed %llu, %d rounds\n", rank, workers,
              static_cast<unsigned long long>(seed), rounds);

  const std::vector<KeySpec> specs = Keys();
  std::vector<Key> keys;
  std::vector<Tensor> init;
  for (size_t k = 0; k < specs.size(); ++k) {
    keys.push_back(specs[k].key);
    init.push_back(ToTensor(Values(seed, rank, -1, k, specs[k].elements), specs[k].dtype));
  }
  if (absl::Status s = kv->Init(keys, init); !s.ok()) return Fail("Init", s);

  std::vector<Tensor> outs;
  std::vector<Tensor*> out_ptrs;
  for (const KeySpec& spec : specs) outs.push_back(Tensor::Zeros(spec.dtype, {spec.elements}));
  for (Tensor& t : outs) out_ptrs.push_back(&t);

  double max_error = 0;
  // After Init every key holds rank 0's value.
  if (absl::Status s = kv->Pull(keys, out_ptrs); !s.ok()) return Fail("Pull", s);
  if (absl::Status s = kv->WaitAll(); !s.ok()) return Fail("Pull after Init", s);
  for (size_t k = 0; k < specs.size(); ++k) {
    std::vector<double> want = Values(seed, 0, -1, k, specs[k].elements);
    if (specs[k].dtype == DType::kFloat32) {
      for (double& v : want) v = static_cast<float>(v);
    }
    if (!Check(outs[k], want, "initial value of key " + specs[k].key.ToString(), &max_error)) {
      return 1;
    }
  }

  for (int round = 0; round < rounds; ++round) {
    std::vector<Tensor> pushed;
    for (size_t k = 0; k < specs.size(); ++k) {
      pushed.push_back(ToTensor(Values(seed, rank, round, k, specs[k].elements), specs[k].dtype));
    }
    if (absl::Status s = kv->Push(keys, pushed); !s.ok()) return Fail("Push", s);
    if (absl::Status s = kv->Pull(keys, out_ptrs); !s.ok()) return Fail("Pull", s);
    if (absl::Status s = kv->WaitAll(); !s.ok()) return Fail("WaitAll", s);
    for (size_t k = 0; k < specs.size(); ++k) {
      // The reference: every worker's pushed value as stored (rounded to the dtype), summed in
      // float64.
      std::vector<double> want(specs[k].elements, 0.0);
      for (int w = 0; w < workers; ++w) {
        const std::vector<double> v = Values(seed, w, round, k, specs[k].elements);
        for (int64_t i = 0; i < specs[k].elements; ++i) {
          want[i] += specs[k].dtype == DType::kFloat32 ? static_cast<float>(v[i]) : v[i];
        }
      }
      const std::string what = "round " + std::to_string(round) + " key " + specs[k].key.ToString();
      if (!Check(outs[k], want, what, &max_error)) return 1;
    }
  }
  if (absl::Status s = kv->Barrier(); !s.ok()) return Fail("Barrier", s);
  std::printf(
      "sdk_consumer: rank %d: %zu keys, %d rounds match the float64 sums (max error %.3g)\n", rank,
      specs.size(), rounds, max_error);
  return 0;
}
