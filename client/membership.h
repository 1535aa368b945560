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
  // How long a call waits for a scheduler that cannot be reached or does not know this worker
  // yet (restarted in place, re-forming the job) before it fails.
  absl::Duration scheduler_lost_timeout = absl::Seconds(30);
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
  // the rounds lost once a server has been restarted into the job; OK before. An Aborted or
  // DataLoss answer is noted as this worker's failure (Noted).
  absl::Status JobOver();
  // Noted returns `status` after noting it: the first error of any call of the worker's store
  // that is not one of the caller's own mistakes (FailsWorker) makes this worker finish as
  // failed (Leave), and the job then fails. A failed status is returned with the cause the
  // worker knows of added: servers restarted into the job (the rounds lost; on a DataLoss
  // error from a server, a heartbeat first asks the scheduler for them), the job failed
  // (naming the worker), or the scheduler has not answered heartbeats for a while (lost).
  absl::Status Noted(absl::Status status);
  // FailsWorker: whether an error a store call returned makes the worker finish as failed.
  // Errors that refused the call before anything changed - InvalidArgument, NotFound,
  // AlreadyExists, OutOfRange, FailedPrecondition, Unimplemented - do not (a program may try a
  // call and go on); neither does Cancelled, the job being over. Every other error does.
  static bool FailsWorker(const absl::Status& status);
  // AcknowledgedRound returns the highest round server `rank` has acknowledged to this worker
  // (its acknowledged pushes of the keys the server holds); `exact` when that is the server's
  // own count (dist_sync), so that lost rounds are named exactly. Set once, before the store
  // is used; without it, the scheduler's figure alone names the range, as a lower bound.
  using AcknowledgedRound = std::function<int64_t(int rank)>;
  void set_acknowledged_round(AcknowledgedRound acknowledged, bool exact);
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
  // set_on_routing makes every heartbeat's answer - its view epoch, servers and dead servers -
  // reported to `on_routing` (from the thread that sent the heartbeat): a job with replicas
  // routes by it, and a job without follows its servers when they change. Call once, before
  // the servers are used.
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
  // WhileSchedulerAway runs `call` (one attempt) again, after a backoff, while it fails with
  // Unavailable - the scheduler cannot be reached, or was restarted and is re-forming the job
  // - for at most scheduler_lost_timeout and until `deadline`, saying once that it waits.
  // (A call the scheduler died in the middle of may so run twice: commands run at least once.)
  absl::Status WhileSchedulerAway(const std::string& what, absl::Time deadline,
                                  const std::function<absl::Status()>& call) const;
  // Named prefixes `status`'s message with what was done and the scheduler's name.
  absl::Status Named(const absl::Status& status, const std::string& what) const;
  // DataLossLocked names every server restarted into the job and the rounds it lost ("" when
  // none is known).
  std::string DataLossLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NoteLocked records `status` as the worker's failure when it is the first that fails it.
  void NoteLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<SchedulerLink> link_;
  const MembershipOptions options_;
  JobView view_;
  std::atomic<bool> job_over_{false};
  mutable absl::Mutex mu_;
  std::string job_failure_ ABSL_GUARDED_BY(mu_);  // Why the job failed, from a heartbeat.
  std::vector<LostUpdates> data_loss_ ABSL_GUARDED_BY(mu_);  // Servers restarted, updates lost.
  OnRouting on_routing_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // The first error that fails the worker.
  AcknowledgedRound acknowledged_;             // Set before use; then read only.
  bool exact_rounds_ = false;
  absl::Time last_answer_ ABSL_GUARDED_BY(mu_) = absl::Now();  // The last heartbeat answered.
  absl::Notification stop_heartbeat_;
  std::thread heartbeat_;
  bool left_ = false;
  std::atomic<uint64_t> barriers_{0};         // Barriers entered (their count travels with each).
  std::atomic<uint64_t> barriers_passed_{0};  // Got through (heartbeats say so).
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_MEMBERSHIP_H_
