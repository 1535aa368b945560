// Membership: a worker's place in its job - joining, heartbeats, barriers, controller commands,
// dead-node counts and leaving - over a SchedulerLink.
//
// Join registers and blocks until the job has assembled (bounded by register_timeout), then
// sends a heartbeat every interval the scheduler published, on a thread of its own
// ("kv-heartbeat"). When a heartbeat's answer says the job is over (kvctl shutdown, or every
// worker finished), JobOver turns into Cancelled and the worker's later operations fail with
// it. Leave tells the scheduler this worker has finished (unless the job is already over) and
// stops the heartbeats; the destructor leaves if that has not happened. Every error names the
// scheduler.
//
// Threading: thread-safe.
#ifndef KVSTORE_CLIENT_MEMBERSHIP_H_
#define KVSTORE_CLIENT_MEMBERSHIP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/scheduler_link.h"

namespace kvstore {

struct MembershipOptions {
  int requested_rank = -1;
  absl::Duration register_timeout = absl::Seconds(120);
  absl::Duration barrier_timeout = absl::Seconds(660);
  // Deadline of a controller command (every server runs it).
  absl::Duration command_timeout = absl::Seconds(120);
};

class Membership {
 public:
  // Join registers through `link` as a worker of `mode` ("dist_sync" or "dist_async").
  // DeadlineExceeded / Unavailable naming the scheduler when it cannot be reached or the job
  // does not assemble in time; Internal when the job has no servers.
  static absl::StatusOr<std::unique_ptr<Membership>> Join(std::unique_ptr<SchedulerLink> link,
                                                          const std::string& mode,
                                                          const MembershipOptions& options);
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  const JobView& view() const { return view_; }
  // JobOver returns Cancelled naming the scheduler once it has said the job is over (Aborted
  // naming why, when the job failed: a worker died or failed); DataLoss naming the server and
  // the rounds lost once a server has been restarted into the job; OK before.
  absl::Status JobOver() const;
  // Noted returns `status` after noting it: the last status a Wait or WaitAll returned decides
  // whether this worker finishes as failed (Leave). A failed status is returned with the cause
  // the worker knows of added: the job failed (naming the worker), or the scheduler has not
  // answered heartbeats for a while (lost).
  absl::Status Noted(absl::Status status);
  bool job_over() const { return job_over_; }

  // Barrier blocks until every worker has entered it (bounded by barrier_timeout).
  absl::Status Barrier();
  // Command runs a controller command on every server and returns their replies.
  absl::StatusOr<std::vector<std::string>> Command(int head, const std::string& body);
  // NumDeadNodes counts the nodes of `group` silent for longer than `timeout`.
  absl::StatusOr<int> NumDeadNodes(int group, absl::Duration timeout);
  // ServerUnreachable asks the scheduler whether server `rank`, which a call could not reach
  // (`error`), is dead (a job with replicas); the answer within kServerCheckTimeout.
  absl::StatusOr<bool> ServerUnreachable(int rank, const absl::Status& error);
  static constexpr absl::Duration kServerCheckTimeout = absl::Seconds(5);
  // set_on_routing makes every heartbeat's answer in a job with replicas - its view epoch,
  // servers and dead servers - reported to `on_routing` (from the thread that sent the
  // heartbeat). Call once, before the servers are used.
  using OnRouting = std::function<void(const JobState& state)>;
  void set_on_routing(OnRouting on_routing);
  // RefreshRouting sends a heartbeat now and reports its answer as the heartbeat thread does
  // (a server refused a request routed by an old view); the link's error otherwise.
  absl::Status RefreshRouting();
  // Leave tells the scheduler this worker finished and stops the heartbeats. Once only.
  void Leave();

 private:
  Membership(std::unique_ptr<SchedulerLink> link, MembershipOptions options)
      : link_(std::move(link)), options_(options) {}
  void HeartbeatLoop();
  // Beat sends one heartbeat and takes in its answer; true once the job is over.
  absl::StatusOr<bool> Beat();
  // Named prefixes `status`'s message with what was done and the scheduler's name.
  absl::Status Named(const absl::Status& status, const std::string& what) const;

  const std::unique_ptr<SchedulerLink> link_;
  const MembershipOptions options_;
  JobView view_;
  std::atomic<bool> job_over_{false};
  mutable absl::Mutex mu_;
  std::string job_failure_ ABSL_GUARDED_BY(mu_);    // Why the job failed, from a heartbeat.
  std::string data_loss_ ABSL_GUARDED_BY(mu_);      // Servers restarted, updates lost.
  OnRouting on_routing_ ABSL_GUARDED_BY(mu_);
  absl::Status last_wait_ ABSL_GUARDED_BY(mu_);     // The last Wait's status (Noted).
  absl::Time last_answer_ ABSL_GUARDED_BY(mu_) = absl::Now();  // The last heartbeat answered.
  absl::Notification stop_heartbeat_;
  std::thread heartbeat_;
  bool left_ = false;
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_MEMBERSHIP_H_
