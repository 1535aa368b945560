// InProcessJob: a whole distributed job in one process - the scheduler's core and the servers'
// engines - whose workers are DistStores on threads of the caller's.
//
// The workers are the real "dist_sync" / "dist_async" stores, with every part a worker over
// gRPC has (membership, key table, queue, transfers, retries); only their two links differ:
// the scheduler's calls go straight to SchedulerCore, and requests to the servers through
// InProcessServerTransport to the same request handler a kvserver runs. A job of sixteen
// workers therefore runs the distributed semantics - rounds, request ids, key groups, chunks,
// commands, checkpoints - in milliseconds, with no socket (tests, and programs that want many
// workers as threads).
//
// Start registers the servers; the job assembles when the last of num_workers workers joins
// (NewWorker blocks until then, bounded by register_timeout), and every server then builds its
// engine from the cluster view as a kvserver does. A thread of the job's own sends the servers'
// heartbeats and expires the scheduler's deadlines.
//
// Threading: NewWorker may be called from several threads at once (it must be, for a job of
// several workers). The job must outlive its workers.
#ifndef KVSTORE_TESTS_IN_PROCESS_IN_PROCESS_JOB_H_
#define KVSTORE_TESTS_IN_PROCESS_IN_PROCESS_JOB_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/kvstore.h"
#include "common/partitioner.h"
#include "common/store/updater.h"
#include "tests/in_process/in_process_transport.h"

namespace kvstore {

class CheckpointRoot;
class SchedulerCore;

struct InProcessJobOptions {
  int num_servers = 1;
  int num_workers = 1;
  // Values with more elements than this are split over all servers.
  int64_t big_value_bound = 1000000;
  // A server's part of a value above this many bytes moves and is updated in chunks.
  int64_t chunk_bytes = kDefaultChunkBytes;
  // The servers' updater until a worker sets another (by name in the registry, which holds
  // assign, sum, sgd and every optimizer). Empty: none chosen - ASSIGN in dist_sync, pushes
  // refused in dist_async until a worker sets one (server/core/server_backend.h).
  std::string updater;
  std::string updater_config;
  // The servers write checkpoints (KVStore::Checkpoint(dir)) under this directory only, `dir`
  // relative to it (server/core/checkpoint_root.h); empty: the working directory at Start.
  std::string checkpoint_root;
  absl::Duration register_timeout = absl::Seconds(60);
  absl::Duration barrier_timeout = absl::Seconds(300);
  absl::Duration heartbeat_interval = absl::Milliseconds(100);
};

class InProcessJob {
 public:
  // Start creates the scheduler's core and registers the servers. InvalidArgument for bad
  // options (no server or worker, a bad bound, chunk size or timeout, an unknown updater); a
  // checkpoint root that cannot be made or opened is an error naming it.
  static absl::StatusOr<std::unique_ptr<InProcessJob>> Start(InProcessJobOptions options);
  // Every worker must have been destroyed first.
  ~InProcessJob();
  InProcessJob(const InProcessJob&) = delete;
  InProcessJob& operator=(const InProcessJob&) = delete;

  // NewWorker joins the job as a worker of `type` (as KVStore::Create's distributed types),
  // with `options`' rank, timeouts, retries, queue and group settings (its scheduler address is
  // not used), and returns once the job has assembled and every server serves.
  absl::StatusOr<std::unique_ptr<KVStore>> NewWorker(const std::string& type,
                                                     DistOptions options = DistOptions());

 private:
  class Link;
  InProcessJob() = default;
  void Maintain();

  InProcessJobOptions options_;
  UpdaterRegistry registry_ = UpdaterRegistry::WithBuiltins();
  std::shared_ptr<const CheckpointRoot> checkpoint_root_;
  std::unique_ptr<SchedulerCore> core_;
  std::vector<std::unique_ptr<InProcessServer>> servers_;
  absl::Mutex mu_;
  std::vector<uint64_t> server_node_ids_ ABSL_GUARDED_BY(mu_);  // Set when the job assembles.
  absl::Status setup_error_ ABSL_GUARDED_BY(mu_);  // A server that failed to set itself up.
  absl::Notification stop_;
  std::thread maintainer_;
};

}  // namespace kvstore

#endif  // KVSTORE_TESTS_IN_PROCESS_IN_PROCESS_JOB_H_
