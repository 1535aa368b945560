// metrics_worker: a worker of tests/integration/observability_test. It joins a dist_sync job
// from the launch environment and, for `rounds` rounds, pushes each of `keys` small keys once
// (waiting for each push, so that every Push is exactly one request to one server) and pulls
// it back, checking the pulled value against a float64 reference: the sum of every worker's
// push of that round, recomputed from the shared seed. It pushes 6 rows to a table "t" (5 of
// its own, one all workers push). Then it prints "PUSHES N" (its Push
// requests), enters a barrier, prints "DONE" and waits until the file `release` exists (at most
// 60 s), so that the test can scrape the job while it is alive; then it leaves the job.
//
//   metrics_worker SEED KEYS ROUNDS RELEASE_FILE
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/kvstore.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

constexpr int64_t kElements = 8;

// Value is worker `rank`'s push of `key` in `round`: deterministic from the seed, so that any
// worker can recompute the others'.
std::vector<double> Value(uint64_t seed, int rank, int round, int key) {
  std::mt19937_64 engine(seed ^ (static_cast<uint64_t>(rank) << 48) ^
                         (static_cast<uint64_t>(round) << 24) ^ static_cast<uint64_t>(key));
  std::uniform_int_distribution<int> quarter(-16, 16);
  std::vector<double> out(kElements);
  for (double& v : out) v = quarter(engine) / 4.0;  // Exact in float32.
  return out;
}

absl::Status Run(int argc, char** argv) {
  uint64_t seed;
  int keys, rounds;
  if (argc != 5 || !absl::SimpleAtoi(argv[1], &seed) || !absl::SimpleAtoi(argv[2], &keys) ||
      !absl::SimpleAtoi(argv[3], &rounds)) {
    return absl::InvalidArgumentError("usage: metrics_worker SEED KEYS ROUNDS RELEASE_FILE");
  }
  const std::string release = argv[4];
  ASSIGN_OR_RETURN(DistOptions options, DistOptions::FromEnvironment());
  options.register_timeout = absl::Seconds(30);
  options.barrier_timeout = absl::Seconds(60);
  ASSIGN_OR_RETURN(std::unique_ptr<KVStore> kv, KVStore::Create("dist_sync", options));
  const int workers = kv->num_workers();
  for (int key = 0; key < keys; ++key) {
    RETURN_IF_ERROR(kv->Init(key, Tensor::Zeros(DType::kFloat32, {kElements})));
  }
  RETURN_IF_ERROR(kv->WaitAll());
  RETURN_IF_ERROR(kv->Barrier());
  int64_t pushes = 0;
  for (int round = 0; round < rounds; ++round) {
    for (int key = 0; key < keys; ++key) {
      const std::vector<double> mine = Value(seed, kv->rank(), round, key);
      ASSIGN_OR_RETURN(Tensor push, Tensor::FromValues(DType::kFloat32, {kElements}, mine));
      RETURN_IF_ERROR(kv->Push(key, push));
      RETURN_IF_ERROR(kv->Wait({Key(key)}));
      ++pushes;
      Tensor out = Tensor::Zeros(DType::kFloat32, {kElements});
      RETURN_IF_ERROR(kv->Pull(key, &out));
      RETURN_IF_ERROR(kv->Wait({Key(key)}));
      // The assign updater stores the round's sum over every worker.
      std::vector<double> want(kElements, 0.0);
      for (int w = 0; w < workers; ++w) {
        const std::vector<double> theirs = Value(seed, w, round, key);
        for (int64_t i = 0; i < kElements; ++i) want[i] += theirs[i];
      }
      const float* got = out.data_as<float>();
      for (int64_t i = 0; i < kElements; ++i) {
        if (std::fabs(got[i] - want[i]) > 1e-6) {
          return absl::InternalError(absl::StrCat("key ", key, " round ", round, " element ", i,
                                                  ": pulled ", got[i], ", want ", want[i]));
        }
      }
    }
  }
  // A table: each worker pushes 5 ids of its own and one both push, so the servers hold
  // 5 * workers + 1 rows of it.
  TableConfig table;
  table.dim = 4;
  RETURN_IF_ERROR(kv->InitTable("t", table));
  std::vector<int64_t> ids = {100};
  for (int64_t i = 0; i < 5; ++i) ids.push_back(kv->rank() * 10 + i);
  RETURN_IF_ERROR(kv->PushRows("t", ids, Tensor::Full(DType::kFloat32, {6, 4}, 1)));
  std::printf("PUSHES %lld\n", static_cast<long long>(pushes));
  std::fflush(stdout);
  RETURN_IF_ERROR(kv->Barrier());
  std::printf("DONE\n");
  std::fflush(stdout);
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (!std::filesystem::exists(release) && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvstore

int main(int argc, char** argv) {
  const absl::Status status = kvstore::Run(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "metrics_worker: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
