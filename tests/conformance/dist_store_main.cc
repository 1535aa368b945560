// Runs the conformance cases against "dist_sync" over gRPC: every store gets a fresh job - a
// scheduler and two kvservers listening on 127.0.0.1 with OS-chosen ports, in this process -
// and joins it as its only worker. The big-value bound is lowered to 8 elements so that most
// random values are split over both servers.
#include <cstdlib>
#include <memory>

#include "server/grpc/kvserver_daemon.h"
#include "server/scheduler/grpc/scheduler_daemon.h"
#include "tests/conformance/store_under_test.h"

namespace kvstore::testing {
namespace {

// The same suite runs as "dist_sync_device" (CPU values; its GPU path needs a GPU) when built
// with KVSTORE_DIST_DEVICE.
#ifdef KVSTORE_DIST_DEVICE
constexpr char kType[] = "dist_sync_device";
#else
constexpr char kType[] = "dist_sync";
#endif
// And as "dist_store_one_server_test" with one server (KVSTORE_ONE_SERVER), where every call's
// keys go to one server, as in kvbench's 1-worker 1-server cases.
#ifdef KVSTORE_ONE_SERVER
constexpr int kServers = 1;
#else
constexpr int kServers = 2;
#endif
// And as "dist_store_local_test" (KVSTORE_LOCAL_PATH), where server 0 serves the worker through
// shared memory (client/local_server_transport.h) and server 1 over TCP, in one job.
#ifdef KVSTORE_LOCAL_PATH
constexpr bool kLocalPath = true;
#else
constexpr bool kLocalPath = false;
#endif

struct Cluster {
  std::unique_ptr<SchedulerDaemon> scheduler;
  std::vector<std::unique_ptr<KVServerDaemon>> servers;
};

// The last job's daemons are stopped at exit by a handler registered once they have logged, so
// that it runs before the loggers' registry (made by the first log line) is destroyed: their
// threads log until they stop.
std::unique_ptr<Cluster>* const last_cluster = new std::unique_ptr<Cluster>();

absl::StatusOr<std::unique_ptr<KVStore>> NewJob() {
  // The previous job ended when its store was destroyed (the worker finished); release it.
  std::unique_ptr<Cluster>& cluster = *last_cluster;
  cluster.reset();
  cluster = std::make_unique<Cluster>();
  SchedulerDaemonOptions scheduler;
  scheduler.job.num_servers = kServers;
  scheduler.job.num_workers = 1;
  scheduler.job.big_value_bound = 8;
  scheduler.job.chunk_bytes = 12;  // Parts above 12 bytes move in chunks: 3 float32, 1 float64.
  scheduler.job.register_timeout = absl::Seconds(30);
  scheduler.job.heartbeat_interval = absl::Milliseconds(50);
  auto started = SchedulerDaemon::Start(scheduler);
  if (!started.ok()) return started.status();
  cluster->scheduler = *std::move(started);
  for (int i = 0; i < kServers; ++i) {
    KVServerOptions server;
    server.scheduler_address = cluster->scheduler->address();
    server.requested_rank = i;
    server.serving_threads = i + 1;  // One serving thread, and two (calls spread over queues).
    // The first sleeps between calls, the second polls for the next small call.
    server.serving_poll = i == 0 ? absl::ZeroDuration() : absl::Milliseconds(1);
    // Checkpoints go below the test's scratch directory (optimizer_cases.cc).
    const char* tmp = std::getenv("TEST_TMPDIR");
    server.checkpoint_root = tmp != nullptr ? tmp : "/tmp";
    // A Unix socket's path is at most 107 bytes, less than the sandbox's scratch paths take.
    if (kLocalPath && i == 0) server.local_socket_dir = "/tmp";
    auto daemon = KVServerDaemon::Start(std::move(server));
    if (!daemon.ok()) return daemon.status();
    cluster->servers.push_back(*std::move(daemon));
  }
  DistOptions options;
  options.scheduler_port = cluster->scheduler->port();
  options.register_timeout = absl::Seconds(30);
  options.rpc_timeout = absl::Seconds(30);
  options.barrier_timeout = absl::Seconds(30);
  static const bool stop_at_exit = std::atexit([] { last_cluster->reset(); }) == 0;
  (void)stop_at_exit;
  absl::StatusOr<std::unique_ptr<KVStore>> store = KVStore::Create(kType, options);
  if (kLocalPath && store.ok() && cluster->servers[0]->local_connections() == 0) {
    return absl::InternalError("the worker did not take server 0's shared-memory path");
  }
  return store;
}

}  // namespace

const StoreUnderTest& GetStoreUnderTest() {
  static const StoreUnderTest* store =
      new StoreUnderTest{kType, /*function_updater=*/false, NewJob, kServers};
  return *store;
}

}  // namespace kvstore::testing
