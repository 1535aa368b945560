// WorkerLiveness: which workers of a job are dead, lost or have left it (a part of
// SchedulerCore, scheduler_core.h). A worker silent for heartbeat_timeout is dead: the job
// fails naming it (DeadWorkers), or, in an elastic job, it leaves and the job goes on with the
// others (DropDeadWorkers; a worker that finishes as failed leaves too, Leave). When every
// unfinished worker has been silent for workers_lost_timeout the job is abandoned
// (WorkersLost).
//
// Threading: thread-safe. Its state is guarded by the core's lock, which it takes itself; the
// core calls its hooks (Leave, Remaining, left, departed) with that lock held.
#ifndef KVSTORE_SERVER_SCHEDULER_CORE_WORKER_LIVENESS_H_
#define KVSTORE_SERVER_SCHEDULER_CORE_WORKER_LIVENESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/scheduler/core/node_table.h"
#include "server/scheduler/core/scheduler_core.h"

namespace kvstore {

class WorkerLiveness {
 public:
  using BarrierDone = SchedulerCore::BarrierDone;

  explicit WorkerLiveness(SchedulerCore* core) : core_(*core) {}

  // DeadWorkers returns Aborted naming every unfinished worker (rank, node, host, how long
  // silent) that has sent no heartbeat for heartbeat_timeout, while the job runs; OK otherwise.
  // Workers that have left an elastic job are not named.
  absl::Status DeadWorkers(absl::Time now) const;
  // DropDeadWorkers, in an elastic job that runs, makes every unfinished worker silent for
  // heartbeat_timeout leave the job and returns one line per worker, naming it (rank, node,
  // host, how long silent) and the workers that go on. Barriers that now have every living
  // node pass. When that would leave no worker that could finish the job (every one has died
  // or failed), none leaves: DeadWorkers names them (and how many left before) and the job
  // fails as in the default mode. Nothing outside an elastic job (scheduler_core_elastic.cc).
  std::vector<std::string> DropDeadWorkers(absl::Time now);
  // left_worker_ids returns the node ids of the workers that have left the job, in rank
  // order (heartbeats tell the servers, which stop waiting for them).
  std::vector<uint64_t> left_worker_ids() const;
  // left_reason returns why node `node_id` left the job ("worker 2 (node 7 on HOST) has left
  // the job (died: no heartbeat for 1.1s); the job goes on without it (elastic)"), or "" when
  // it has not: a worker declared dead that is still running hears it in its heartbeat
  // answers (as a failure of the job) and stops.
  std::string left_reason(uint64_t node_id) const;
  // NumDeadNodes counts the registered nodes of `group` whose last heartbeat is older than
  // `timeout` (finished workers are not dead, workers that left an elastic job are; nodes
  // waiting for the job to complete are alive).
  // Nodes still expected but never registered count as dead once registration has been waiting
  // longer than `timeout`.
  int NumDeadNodes(int group, absl::Duration timeout, absl::Time now) const;
  // WorkersLost returns DeadlineExceeded, naming them, when the job is under way, not over, and
  // every worker that has not finished has sent no heartbeat for workers_lost_timeout: the
  // processes that would finish the job are gone, and the scheduler ends it rather than keep
  // its servers forever. OK otherwise.
  absl::Status WorkersLost(absl::Time now) const;

  // Hooks, called with the core's lock held (each asserts it). Leave makes worker `node` leave
  // the job for `why` and moves the done callbacks of the barriers that now pass into
  // `*released`; Remaining counts the workers that have not left (running, or finished as
  // succeeded); left counts the workers that left, departed those that left before finishing.
  void Leave(NodeInfo* node, const std::string& why, std::vector<BarrierDone>* released);
  int Remaining() const;
  int left() const;
  int departed() const;

 private:
  SchedulerCore& core_;
  // Workers that left an elastic job before finishing (died), and all that left.
  int departed_workers_ ABSL_GUARDED_BY(core_.mu_) = 0;
  int left_workers_ ABSL_GUARDED_BY(core_.mu_) = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_CORE_WORKER_LIVENESS_H_
