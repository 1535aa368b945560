// SchedulerLink: how a worker reaches its job's scheduler - the calls of proto/kvstore.proto's
// Scheduler service, as plain C++.
//
// Membership (membership.h) decides when to call what and names the scheduler in its errors;
// a link only carries the calls. Two implementations: GrpcSchedulerLink
// (grpc_scheduler_link.h) and the in-process job's (in_process_job.h), which calls the
// scheduler's core directly.
//
// Threading: every call may be made from any thread, concurrently; each blocks until its answer
// or its deadline (DeadlineExceeded then).
#ifndef KVSTORE_CLIENT_SCHEDULER_LINK_H_
#define KVSTORE_CLIENT_SCHEDULER_LINK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/server_caller.h"
#include "common/lost_updates.h"

namespace kvstore {

// JobView: what a worker learns when it joins: its identity and the job's shape.
struct JobView {
  uint64_t node_id = 0;
  int rank = 0;
  int num_workers = 1;
  std::string mode;  // "dist_sync" or "dist_async".
  absl::Duration heartbeat_interval = absl::Seconds(1);
  std::vector<ServerAddress> servers;  // In rank order.
  int64_t big_value_bound = 0;
  int64_t chunk_bytes = 0;  // 0: the default.
  // With a job secret: this node's token, which every call to the servers carries.
  std::string node_token;
  // Copies of each shard (ServerCaller's replicas).
  int replicas = 1;
  // Request signatures cover payloads too (common/request_signature.h).
  bool signed_payloads = false;
};

// JobState: what a heartbeat's answer says of the job.
struct JobState {
  bool over = false;    // The job is over: stop.
  std::string failure;  // When over because it failed: why (naming the worker).
  // Servers restarted into the job without replicas, and what they restored.
  std::vector<LostUpdates> data_loss;
  // In a job with replicas: the ranks of the servers declared dead, and the view epoch
  // (common/view_epoch.h) with, once above 0, every server's address (replacements joined).
  std::vector<int> dead_servers;
  uint64_t view_epoch = 0;
  std::vector<ServerAddress> servers;
};

class SchedulerLink {
 public:
  virtual ~SchedulerLink() = default;

  // name says which scheduler this is, for messages ("the scheduler at HOST:PORT").
  virtual std::string name() const = 0;

  // Register joins the job as a worker of `mode` with `requested_rank` (-1: any) and blocks
  // until every node of the job has registered; waits for a scheduler still starting.
  virtual absl::StatusOr<JobView> Register(const std::string& mode, int requested_rank,
                                           absl::Time deadline) = 0;
  // Heartbeat reports that the worker is alive, and how many barriers it has got through;
  // returns whether the job is over (and failed).
  virtual absl::StatusOr<JobState> Heartbeat(uint64_t node_id, uint64_t barriers_passed,
                                             absl::Time deadline) = 0;
  // Barrier blocks until every worker of the job has entered the barrier; `sequence` is the
  // worker's count of its barriers, this one included (a retry after the scheduler restarted
  // passes once; server/scheduler/core/barriers.h).
  virtual absl::Status Barrier(uint64_t node_id, uint64_t sequence, absl::Time deadline) = 0;
  // Finish records that the worker is done; `failure` (empty: it succeeded) says why it failed.
  virtual absl::Status Finish(uint64_t node_id, absl::Time deadline,
                              const std::string& failure) = 0;
  // Command runs a controller command on every server; returns their replies in rank order.
  virtual absl::StatusOr<std::vector<std::string>> Command(uint64_t node_id, int head,
                                                           const std::string& body,
                                                           absl::Time deadline) = 0;
  // NumDeadNodes counts the nodes of `group` (bits: servers 2, workers 4) silent for longer
  // than `timeout` (whole seconds, at least one).
  virtual absl::StatusOr<int> NumDeadNodes(uint64_t node_id, int group, int timeout_s,
                                           absl::Time deadline) = 0;
  // ServerUnreachable tells the scheduler that server `rank` could not be reached (`error`)
  // and returns whether it is dead (declared now or before); `reason` says why, or what the
  // scheduler's check got. Jobs with replicas only: FailedPrecondition by default.
  virtual absl::StatusOr<bool> ServerUnreachable(uint64_t /*node_id*/, int /*rank*/,
                                                 const std::string& /*error*/,
                                                 absl::Time /*deadline*/, std::string* /*reason*/) {
    return absl::FailedPreconditionError("this job has no replicas");
  }
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_SCHEDULER_LINK_H_
