// CheckpointCoordinator: the scheduler's side of checkpoint sets (server/core/checkpoint_set.h):
// every checkpoint of the job is one cut - every key of every server at the same dist_sync
// round - written as a set of server files and a manifest, or not at all.
//
// A checkpoint runs these steps, one server command each (server/core/controller.h, 7-12):
//   1. begin:   every server freezes (no push opens a new round) and reports the highest
//               round it has started; the cut's round R is the highest of all;
//   2. limit:   every server lets its keys go on up to round R and holds later pushes;
//   3. write:   each server, once every key it holds has completed round R, snapshots, lets
//               the held pushes go on, and writes its file under a pending name (polled until
//               all have written, bounded by `cut_timeout`, naming the key still behind);
//   4. commit:  every server removes the old manifest and renames its pending file;
//   5. publish: every server writes the manifest (job id, checkpoint id, R, each file's size
//               and CRC-32) last, atomically.
// Any error aborts the checkpoint on every server: held pushes go on, pending files are removed
// (and, after a commit began, the set's files), so a refused or failed checkpoint leaves
// nothing; the error names the server and the reason.
//
// Checkpoints run one at a time on the coordinator's own thread: explicit ones (controller
// command 4 from a worker or kvctl, Request) in arrival order, and periodic ones (every N
// rounds or every T, into PREFIX/ckpt-NNNNNN, keeping the last K).
//
// Threading: Request may be called from any thread (a gRPC reaction: it never blocks); `call`
// runs on the coordinator's thread only.
#ifndef KVSTORE_SERVER_SCHEDULER_CORE_CHECKPOINT_COORDINATOR_H_
#define KVSTORE_SERVER_SCHEDULER_CORE_CHECKPOINT_COORDINATOR_H_

#include <atomic>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/kvstore.pb.h"
#include "server/scheduler/core/scheduler_core.h"

namespace kvstore {

struct CheckpointCoordinatorOptions {
  // How long the servers may take to bring every key to the cut's round.
  absl::Duration cut_timeout = absl::Seconds(60);
  // Periodic checkpoints: every `every_rounds` rounds (0: not by rounds) and/or every
  // `every_time` (zero: not by time), into `prefix`/ckpt-NNNNNN, keeping the last `keep`
  // (0: all).
  int64_t every_rounds = 0;
  absl::Duration every_time = absl::ZeroDuration();
  std::string prefix = "checkpoints";
  int keep = 0;
};

class CheckpointCoordinator {
 public:
  // ServerCall sends controller command `head` with `body` to the server of `rank` and
  // returns its reply; it blocks (with a deadline) and names the server in its errors.
  using ServerCall =
      std::function<absl::StatusOr<std::string>(int rank, int head, const std::string& body)>;
  // View returns the job's cluster view (FailedPrecondition until it has assembled).
  using View = std::function<absl::StatusOr<ClusterView>()>;
  // Ready is true while the job is assembled and not over (periodic checkpoints run then).
  using Ready = std::function<bool()>;
  using Done = std::function<void(absl::StatusOr<std::vector<std::string>>)>;

  CheckpointCoordinator(CheckpointCoordinatorOptions options, ServerCall call, View view,
                        Ready ready);
  ~CheckpointCoordinator();
  CheckpointCoordinator(const CheckpointCoordinator&) = delete;
  CheckpointCoordinator& operator=(const CheckpointCoordinator&) = delete;

  // Request queues a checkpoint into `dir` (relative to every server's checkpoint root);
  // `done` runs on the coordinator's thread with each server's file path, in rank order, or
  // the error.
  void Request(std::string dir, Done done);

  // RunExclusive queues `task` to run on the coordinator's thread, between checkpoints (a
  // replacement server's join, server_joiner.h, which cuts servers too).
  void RunExclusive(std::function<void()> task);

  // SetResumed gives the coordinator `resumed`, which it asks before each checkpoint (explicit
  // or periodic) for the sets a re-formed job had published (SchedulerCore::
  // TakeResumedCheckpoints): it then goes on from them - checkpoint ids after the highest, the
  // periodic sets numbered after the highest, kept and removed with the earlier ones, rounds
  // counted from the last. Call it before serving.
  using Resumed = std::function<std::optional<std::vector<PublishedCheckpoint>>()>;
  void SetResumed(Resumed resumed) { resumed_ = std::move(resumed); }

  // busy is true while the coordinator's thread runs a checkpoint (explicit or periodic) or an
  // exclusive task, from before it checks whether a periodic one is due; it never blocks
  // (SchedulerCore::SetServersBusy calls it under the core's lock).
  bool busy() const { return busy_.load(); }

  // Checkpoint runs one checkpoint now, on the calling thread (the coordinator's, or a test's).
  absl::StatusOr<std::vector<std::string>> Checkpoint(const std::string& dir);

 private:
  struct Pending {
    std::string dir;
    Done done;
    std::function<void()> task;  // RunExclusive's, instead of a checkpoint.
  };
  void Loop();
  // MaxRound returns the highest round any server has started (command 13), or an error.
  absl::StatusOr<int64_t> MaxRound(int num_servers);
  // Abort ends the cut `id` on every server and removes what it wrote in `dir`.
  void Abort(int num_servers, const std::string& id, const std::string& dir, bool committed);
  // HighestRound sends (head, body) to every server and returns the highest of the rounds they
  // reply: with kCommandCutBegin, it freezes the cut `body` and returns the cut's round.
  absl::StatusOr<int64_t> HighestRound(int num_servers, int head, const std::string& body);
  // WriteFile asks server `rank` to write its file of the cut into `dir` once its keys have
  // reached `round`, retrying until `deadline`, and adds the file to `manifest`.
  absl::Status WriteFile(int rank, const std::string& id, int64_t round, const std::string& dir,
                         absl::Time deadline, proto::CheckpointManifest* manifest);
  void Periodic();
  // Resume takes in the sets `resumed_` returns, if any (see SetResumed).
  void Resume();

  const CheckpointCoordinatorOptions options_;
  const ServerCall call_;
  const View view_;
  const Ready ready_;
  Resumed resumed_;       // Optional; set before serving.
  int64_t sequence_ = 0;  // Used on the coordinator's thread (and by Checkpoint's caller).
  int64_t last_round_ = 0;
  absl::Time last_time_ = absl::Now();
  int64_t periodic_count_ = 0;
  std::deque<std::string> kept_;
  std::atomic<bool> busy_{false};
  absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_CORE_CHECKPOINT_COORDINATOR_H_
