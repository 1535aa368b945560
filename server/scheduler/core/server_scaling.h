// ServerScaling: servers added to and drained from a running job (a part of SchedulerCore,
// scheduler_core.h; docs/state.md, "Adding and draining servers while a job runs").
//
// A rescale changes the job's servers from S to S' = S + 1 (a kvserver registering with
// `join`: it takes rank S) or S - 1 (Drain(rank): the servers above it move down one rank). It
// is planned here (RescalePlan: the servers before and after, by rank, and the view epoch it
// publishes), carried out by ServerRescaler (server_rescaler.h), which moves the shards, and
// then published (Complete: the view at the plan's epoch, with S' servers) or failed (Fail:
// the view moves to the plan's epoch unchanged, so that the writes the old servers refused
// are sent again to them). One rescale at a time; only in a dist_sync job, and with replicas
// only while every server is alive (each shard keeps its two copies throughout) and at least
// as many servers as copies remain.
//
// A joining server is not one of the job's nodes until it is published: its heartbeats are
// answered here (HeartbeatLocked), as are those of a drained server, which is told a few
// heartbeats later that the job is over for it (it exits 0).
//
// Threading: thread-safe. Its state is guarded by the core's lock, which it takes itself; the
// core calls its hooks (TakeJoin, HeartbeatLocked) with that lock held.
#ifndef KVSTORE_SERVER_SCHEDULER_CORE_SERVER_SCALING_H_
#define KVSTORE_SERVER_SCHEDULER_CORE_SERVER_SCALING_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/scheduler/core/node_table.h"
#include "server/scheduler/core/scheduler_core.h"

namespace kvstore {

// RescalePlan: one change of the job's servers.
struct RescalePlan {
  uint64_t epoch = 0;               // The view epoch it publishes.
  std::vector<ServerEntry> before;  // The servers now, by rank.
  std::vector<ServerEntry> after;   // The servers after, by their new rank.
  uint64_t joining = 0;             // The node joining (0: none).
  uint64_t draining = 0;            // The node drained (0: none).
  int replicas = 1;                 // Copies of each shard, the job's.
  // "server at HOST:PORT (node 9) joins as rank 2: 2 -> 3 servers".
  std::string what;
};

class ServerScaling {
 public:
  explicit ServerScaling(SchedulerCore* core) : core_(*core) {}

  // Drain plans server `rank`'s departure. InvalidArgument for a rank out of range;
  // FailedPrecondition when the job has one server, has not assembled or is over, has
  // a dead server or one being replaced, holds embedding tables, runs dist_async, would keep
  // fewer servers than copies of each shard, or a rescale is under way.
  absl::StatusOr<RescalePlan> Drain(int rank) ABSL_LOCKS_EXCLUDED(core_.mu_);
  // active returns the rescale under way, if any.
  std::optional<RescalePlan> active() const ABSL_LOCKS_EXCLUDED(core_.mu_);
  // Complete publishes `plan` (see the top). FailedPrecondition when it is not the rescale under
  // way, or the job is over.
  absl::Status Complete(const RescalePlan& plan, absl::Time now) ABSL_LOCKS_EXCLUDED(core_.mu_);
  // Fail ends `plan` unpublished, saying `reason` to a joining server (it exits non-zero).
  void Fail(const RescalePlan& plan, std::string reason) ABSL_LOCKS_EXCLUDED(core_.mu_);
  // join_failure returns why node `node_id`'s join failed, or "".
  std::string join_failure(uint64_t node_id) const ABSL_LOCKS_EXCLUDED(core_.mu_);

  // Hooks, called with the core's lock held (not analysed across the classes: each asserts the
  // lock). TakeJoin answers a server registering with `join` (see the top): its Registration
  // (rank S, the view with it as server S, the plan's epoch as join_epoch, `scaling` set), or
  // the error refusing it. HeartbeatLocked answers the heartbeat of a node this part knows (a
  // server joining: not over; one drained or whose join failed: over); nothing for others.
  absl::StatusOr<Registration> TakeJoin(const std::string& address, const std::string& hostname,
                                        absl::Time now);
  std::optional<bool> HeartbeatLocked(uint64_t node_id, absl::Time now);

 private:
  // RefusedLocked says why no rescale may start now ("" when one may).
  std::string RefusedLocked() const;

  SchedulerCore& core_;
  std::optional<RescalePlan> active_ ABSL_GUARDED_BY(core_.mu_);
  // The joining server, until it is published.
  std::optional<NodeInfo> joiner_ ABSL_GUARDED_BY(core_.mu_);
  std::map<uint64_t, std::string> failed_ ABSL_GUARDED_BY(core_.mu_);
  // Drained servers, and when: each is told that the job is over for it kLinger heartbeat
  // intervals later, so that the workers have learnt the new view before it goes.
  static constexpr int kLinger = 5;
  std::map<uint64_t, absl::Time> drained_ ABSL_GUARDED_BY(core_.mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_CORE_SERVER_SCALING_H_
