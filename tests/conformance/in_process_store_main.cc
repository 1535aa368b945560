// Runs the conformance cases against "dist_sync" over the in-process transport: every store
// gets a fresh InProcessJob - the scheduler's core and two servers' engines in this process -
// and joins it as its only worker. The store is the same DistStore as over gRPC; only its links
// to the scheduler and the servers differ. As in dist_store_main.cc, the big-value bound is 8
// elements and the chunk size 12 bytes, so that most random values are split over both servers
// and cut in chunks.
#include <cstdlib>
#include <memory>

#include "tests/conformance/store_under_test.h"
#include "tests/in_process/in_process_job.h"

namespace kvstore::testing {
namespace {

constexpr int kServers = 2;

absl::StatusOr<std::unique_ptr<KVStore>> NewJob() {
  // The previous job's worker has been destroyed; release the job.
  static std::unique_ptr<InProcessJob> job;
  job.reset();
  InProcessJobOptions options;
  options.num_servers = kServers;
  options.num_workers = 1;
  options.big_value_bound = 8;
  options.chunk_bytes = 12;
  options.register_timeout = absl::Seconds(30);
  options.heartbeat_interval = absl::Milliseconds(50);
  // Checkpoints go below the test's scratch directory (optimizer_cases.cc).
  const char* tmp = std::getenv("TEST_TMPDIR");
  options.checkpoint_root = tmp != nullptr ? tmp : "/tmp";
  auto started = InProcessJob::Start(options);
  if (!started.ok()) return started.status();
  job = *std::move(started);
  DistOptions worker;
  worker.register_timeout = absl::Seconds(30);
  worker.rpc_timeout = absl::Seconds(30);
  worker.barrier_timeout = absl::Seconds(30);
  return job->NewWorker("dist_sync", worker);
}

}  // namespace

const StoreUnderTest& GetStoreUnderTest() {
  static const StoreUnderTest* store =
      new StoreUnderTest{"dist_sync", /*function_updater=*/false, NewJob, kServers};
  return *store;
}

}  // namespace kvstore::testing
