// sum_worker: the worker of the reliability tests. It joins the job described by the launch
// environment (dist_sync; the kvservers run the `sum` updater) and trains as
// tests/reliability/sum_reference.h describes, checking every pull against the float64
// reference; exits 0 after the last round, 1 with a one-line reason otherwise.
//
//   sum_worker SEED FIRST LAST [PAUSE_MS [MAX_RETRIES]]
//
// Rounds FIRST..LAST (FIRST > 1: the servers were restored from a checkpoint cut at round
// FIRST - 1, and Init keeps their values). After each round "round R ok (T ms)" is printed, T
// the time from its first push to its checked pull; at the end "longest round: T ms". PAUSE_MS
// (default 0) is slept between rounds, so that tests can act during training. MAX_RETRIES
// (default 3) is DistOptions::max_retries.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/kvstore.h"
#include "common/status_macros.h"
#include "tests/reliability/sum_reference.h"

namespace kvstore::testing {
namespace {

absl::Status Run(int argc, char** argv) {
  uint64_t seed = 0;
  int64_t first = 0, last = 0, pause_ms = 0;
  int max_retries = 3;
  if (argc < 4 || !absl::SimpleAtoi(argv[1], &seed) || !absl::SimpleAtoi(argv[2], &first) ||
      !absl::SimpleAtoi(argv[3], &last) || first < 1 ||
      (argc > 4 && !absl::SimpleAtoi(argv[4], &pause_ms)) ||
      (argc > 5 && !absl::SimpleAtoi(argv[5], &max_retries))) {
    return absl::InvalidArgumentError("usage: sum_worker SEED FIRST LAST [PAUSE_MS [MAX_RETRIES]]");
  }
  ASSIGN_OR_RETURN(DistOptions options, DistOptions::FromEnvironment());
  options.rpc_timeout = absl::Seconds(30);
  options.barrier_timeout = absl::Seconds(60);
  options.register_timeout = absl::Seconds(30);
  options.max_retries = max_retries;
  ASSIGN_OR_RETURN(std::unique_ptr<KVStore> kv, KVStore::Create("dist_sync", options));
  const int rank = kv->rank(), workers = kv->num_workers();
  const std::vector<SumKey> sum_keys = SumKeys();
  std::vector<Key> keys;
  std::vector<Tensor> values, outs;
  for (const SumKey& k : sum_keys) {
    keys.push_back(k.key);
    Tensor init = Tensor::Zeros(DType::kFloat32, {k.elements});
    for (int64_t i = 0; i < k.elements; ++i) init.SetFromDouble(i, InitialValue(seed, k.key, i));
    values.push_back(std::move(init));
    outs.push_back(Tensor::Zeros(DType::kFloat32, {k.elements}));
  }
  RETURN_IF_ERROR(kv->Init(keys, values));
  std::vector<Tensor*> out_ptrs;
  for (Tensor& t : outs) out_ptrs.push_back(&t);
  // The running float64 reference of every element.
  std::vector<std::vector<double>> want;
  for (const SumKey& k : sum_keys) {
    std::vector<double> v(k.elements);
    for (int64_t i = 0; i < k.elements; ++i) v[i] = Expected(seed, workers, k.key, first - 1, i);
    want.push_back(std::move(v));
  }
  absl::Duration longest;
  for (int64_t round = first; round <= last; ++round) {
    const absl::Time started = absl::Now();
    for (size_t k = 0; k < sum_keys.size(); ++k) {
      for (int64_t i = 0; i < sum_keys[k].elements; ++i) {
        values[k].SetFromDouble(i, Gradient(seed, sum_keys[k].key, rank, round, i));
        for (int w = 0; w < workers; ++w) want[k][i] += Gradient(seed, sum_keys[k].key, w, round, i);
      }
    }
    RETURN_IF_ERROR(kv->Push(keys, values));
    RETURN_IF_ERROR(kv->Pull(keys, out_ptrs));
    RETURN_IF_ERROR(kv->WaitAll());
    for (size_t k = 0; k < sum_keys.size(); ++k) {
      for (int64_t i = 0; i < sum_keys[k].elements; ++i) {
        if (outs[k].GetAsDouble(i) != want[k][i]) {
          return absl::DataLossError(absl::StrCat(
              "round ", round, " key ", sum_keys[k].key, " element ", i, ": pulled ",
              outs[k].GetAsDouble(i), ", the float64 reference is ", want[k][i]));
        }
      }
    }
    const absl::Duration took = absl::Now() - started;
    longest = std::max(longest, took);
    std::printf("round %lld ok (%lld ms)\n", static_cast<long long>(round),
                static_cast<long long>(absl::ToInt64Milliseconds(took)));
    std::fflush(stdout);
    if (pause_ms > 0) absl::SleepFor(absl::Milliseconds(pause_ms));
  }
  std::printf("worker %d: rounds %lld..%lld checked\nlongest round: %lld ms\n", rank,
              static_cast<long long>(first), static_cast<long long>(last),
              static_cast<long long>(absl::ToInt64Milliseconds(longest)));
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvstore::testing

int main(int argc, char** argv) {
  const absl::Status status = kvstore::testing::Run(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "sum_worker: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
