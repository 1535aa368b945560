// sum_worker: the worker of the reliability tests. It joins the job described by the launch
// environment (dist_sync; the kvservers run the `sum` updater) and trains as
// tests/reliability/sum_reference.h describes, checking every pull against the float64
// reference; exits 0 after the last round, 1 with a one-line reason otherwise.
//
//   sum_worker SEED FIRST LAST [PAUSE_MS [MAX_RETRIES]] [elastic=VICTIM:FILE] [barrier]
//              [linger=MS] [crash=RANK:ROUND] [barrier_every=N]
//
// Rounds FIRST..LAST (FIRST > 1: the servers were restored from a checkpoint cut at round
// FIRST - 1, and Init keeps their values). After each round "round R ok (T ms)" is printed, T
// the time from its first push to its checked pull; at the end "longest round: T ms". PAUSE_MS
// (default 0) is slept between rounds, so that tests can act during training. MAX_RETRIES
// (default 3) is DistOptions::max_retries.
//
// elastic=VICTIM:FILE: an elastic job in which worker VICTIM may leave at any time (it is
// killed). Every pull must then hold the other workers' pushes of every round so far and the
// victim's of rounds 1..K, for some K the same in every round - K >= the round while it lives
// (tests/reliability/elastic_reference.h). The rounds K that every element admits are written to
// FILE at the end ("-": nowhere), for the test to check against the round the victim was
// killed in. crash=RANK:ROUND: the worker of rank RANK kills itself (SIGKILL) after round
// ROUND, for jobs whose workers all run one command line (deploy/launch.py).
// barrier: a barrier over the workers after the last round ("barrier passed" once through).
// linger=MS: MS milliseconds of sleep after that, before leaving the job.
// barrier_every=N: a barrier over the workers after every N-th round too ("barrier after round
// R passed"), and the time spent in it counted in the round's.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/kvstore.h"
#include "common/status_macros.h"
#include "tests/reliability/elastic_reference.h"
#include "tests/reliability/sum_reference.h"

namespace kvstore::testing {
namespace {

// Finish enters the barrier after the last round when asked to, then lingers.
absl::Status Finish(KVStore* kv, bool barrier, int64_t linger_ms) {
  if (barrier) {
    std::printf("entering the barrier\n");
    std::fflush(stdout);
    RETURN_IF_ERROR(kv->Barrier());
    std::printf("barrier passed\n");
    std::fflush(stdout);
  }
  if (linger_ms > 0) absl::SleepFor(absl::Milliseconds(linger_ms));
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  uint64_t seed = 0;
  int64_t first = 0, last = 0, pause_ms = 0;
  int max_retries = 3;
  int victim = -1;
  std::string masks_file;
  bool barrier = false;
  int64_t linger_ms = 0;
  int crash_rank = -1;
  int64_t crash_round = 0;
  int64_t barrier_every = 0;
  std::vector<std::string> numbers;
  for (int i = 4; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "barrier") {
      barrier = true;
    } else if (absl::StartsWith(arg, "linger=")) {
      if (!absl::SimpleAtoi(arg.substr(7), &linger_ms)) {
        return absl::InvalidArgumentError(absl::StrCat("bad argument ", arg));
      }
    } else if (absl::StartsWith(arg, "barrier_every=")) {
      if (!absl::SimpleAtoi(arg.substr(14), &barrier_every) || barrier_every < 1) {
        return absl::InvalidArgumentError(absl::StrCat("bad argument ", arg));
      }
    } else if (absl::StartsWith(arg, "crash=")) {
      const std::vector<std::string> parts = absl::StrSplit(arg.substr(6), ':');
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &crash_rank) ||
          !absl::SimpleAtoi(parts[1], &crash_round)) {
        return absl::InvalidArgumentError(absl::StrCat("bad argument ", arg));
      }
    } else if (absl::StartsWith(arg, "elastic=")) {
      const std::vector<std::string> parts = absl::StrSplit(arg.substr(8), absl::MaxSplits(':', 1));
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &victim) || parts[1].empty()) {
        return absl::InvalidArgumentError(absl::StrCat("bad argument ", arg));
      }
      masks_file = parts[1];
    } else {
      numbers.push_back(arg);
    }
  }
  if (argc < 4 || !absl::SimpleAtoi(argv[1], &seed) || !absl::SimpleAtoi(argv[2], &first) ||
      !absl::SimpleAtoi(argv[3], &last) || first < 1 || numbers.size() > 2 ||
      (numbers.size() > 0 && !absl::SimpleAtoi(numbers[0], &pause_ms)) ||
      (numbers.size() > 1 && !absl::SimpleAtoi(numbers[1], &max_retries))) {
    return absl::InvalidArgumentError(
        "usage: sum_worker SEED FIRST LAST [PAUSE_MS [MAX_RETRIES]] [elastic=VICTIM:FILE] "
        "[barrier] [linger=MS] [crash=RANK:ROUND] [barrier_every=N]");
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
  if (victim >= 0) {
    if (first != 1 || victim >= workers) {
      return absl::InvalidArgumentError("elastic=VICTIM:FILE needs FIRST 1 and a worker's rank");
    }
    ASSIGN_OR_RETURN(ElasticReference reference,
                     ElasticReference::Create(seed, workers, victim, last));
    for (int64_t round = 1; round <= last; ++round) {
      for (size_t k = 0; k < sum_keys.size(); ++k) {
        for (int64_t i = 0; i < sum_keys[k].elements; ++i) {
          values[k].SetFromDouble(i, Gradient(seed, sum_keys[k].key, rank, round, i));
        }
      }
      RETURN_IF_ERROR(kv->Push(keys, values));
      RETURN_IF_ERROR(kv->Pull(keys, out_ptrs));
      RETURN_IF_ERROR(kv->WaitAll());
      RETURN_IF_ERROR(
          reference.Check(round, [&](size_t k, int64_t i) { return outs[k].GetAsDouble(i); }));
      std::printf("round %lld ok\n", static_cast<long long>(round));
      std::fflush(stdout);
      if (rank == crash_rank && round == crash_round) std::raise(SIGKILL);
      if (pause_ms > 0) absl::SleepFor(absl::Milliseconds(pause_ms));
    }
    if (masks_file != "-") RETURN_IF_ERROR(reference.Write(masks_file));
    std::printf("worker %d: rounds 1..%lld checked (elastic, victim %d)\n", rank,
                static_cast<long long>(last), victim);
    return Finish(kv.get(), barrier, linger_ms);
  }
  absl::Duration longest;
  for (int64_t round = first; round <= last; ++round) {
    const absl::Time started = absl::Now();
    for (size_t k = 0; k < sum_keys.size(); ++k) {
      for (int64_t i = 0; i < sum_keys[k].elements; ++i) {
        values[k].SetFromDouble(i, Gradient(seed, sum_keys[k].key, rank, round, i));
        for (int w = 0; w < workers; ++w)
          want[k][i] += Gradient(seed, sum_keys[k].key, w, round, i);
      }
    }
    RETURN_IF_ERROR(kv->Push(keys, values));
    RETURN_IF_ERROR(kv->Pull(keys, out_ptrs));
    RETURN_IF_ERROR(kv->WaitAll());
    for (size_t k = 0; k < sum_keys.size(); ++k) {
      for (int64_t i = 0; i < sum_keys[k].elements; ++i) {
        if (outs[k].GetAsDouble(i) != want[k][i]) {
          return absl::DataLossError(
              absl::StrCat("round ", round, " key ", sum_keys[k].key, " element ", i, ": pulled ",
                           outs[k].GetAsDouble(i), ", the float64 reference is ", want[k][i]));
        }
      }
    }
    if (barrier_every > 0 && round % barrier_every == 0) {
      RETURN_IF_ERROR(kv->Barrier());
      std::printf("barrier after round %lld passed\n", static_cast<long long>(round));
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
  return Finish(kv.get(), barrier, linger_ms);
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
