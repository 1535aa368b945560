// SchedulerCore: the job coordinator's logic, independent of any transport.
//
// Nodes (servers and workers) register and, once every expected node has, each receives a node
// id, a rank and the cluster view. Ranks are deterministic: servers (and workers) that asked for
// a rank get it; the others fill the free ranks in registration order. The core also runs
// barriers over node groups, records heartbeats, counts dead nodes, and ends the job: when every
// worker has called Finish, `shutdown_requested()` turns true and heartbeats tell the servers to
// exit.
//
// Elastic jobs (SchedulerOptions::elastic): a worker that dies (DropDeadWorkers) or finishes as
// failed leaves the job instead of failing it. The job goes on with the workers that remain:
// barriers wait only for the living, heartbeats tell the servers which workers have left
// (left_worker_ids), and the job is over once every worker has finished or left. When no
// worker is left that could finish the job, it fails as a job in the default mode does.
//
// A scheduler restarted in place (or a standby that took over) re-forms the running job from
// its nodes' registrations (Rejoin, scheduler_core_rejoin.cc): each server presents its node
// id, rank, the view it serves by and what heartbeats told it of the job; once every server of
// the newest view that is not dead has, the job is re-formed as it was - node ids, ranks, the
// cluster view, its epoch, dead servers, workers that finished or left - and runs on. Workers
// need not register again: their heartbeats and barriers name node ids the re-formed job knows.
// Until then, calls naming a node id this scheduler does not know yet are Unavailable (retry).
//
// Waiting calls (Register, Rejoin, Barrier) never block: they take a completion callback, which
// runs exactly once - when the wait is satisfied, or from ExpireDeadlines() with DeadlineExceeded
// and a message naming what is still missing. A gRPC reactor can therefore Finish from the callback
// without blocking in a reaction. Callbacks run on the thread whose call completed the wait,
// after the core's lock is released.
//
// Threading: thread-safe. Time is passed in (`now`) so that callers own the clock.
#ifndef KVSTORE_SERVER_SCHEDULER_CORE_SCHEDULER_CORE_H_
#define KVSTORE_SERVER_SCHEDULER_CORE_SCHEDULER_CORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/lost_updates.h"
#include "common/partitioner.h"
#include "server/scheduler/core/barriers.h"
#include "server/scheduler/core/node_table.h"

namespace kvstore {

struct SchedulerOptions {
  int num_servers = 1;
  int num_workers = 1;
  // Values with more elements than this are split over all servers.
  int64_t big_value_bound = 1000000;
  // A server's part of a value above this many bytes moves and is updated in chunks.
  int64_t chunk_bytes = kDefaultChunkBytes;
  // How long the first registration waits for the rest of the job.
  absl::Duration register_timeout = absl::Seconds(60);
  // How long a barrier waits for the last member of its group.
  absl::Duration barrier_timeout = absl::Seconds(300);
  // How often nodes send heartbeats (published in the cluster view).
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // Once every worker that has not finished has been silent this long, the job is abandoned
  // (see WorkersLost); absl::InfiniteDuration(): never.
  absl::Duration workers_lost_timeout = absl::Minutes(5);
  // A worker that has not finished and has sent no heartbeat for this long is dead, and a job
  // in "fail" mode fails, naming it (DeadWorkers); absl::InfiniteDuration(): never.
  absl::Duration heartbeat_timeout = absl::InfiniteDuration();
  // Copies of each shard: 1, or 2 (shard p on server p and, as its backup, on server
  // (p + 1) % num_servers; needs 2 servers or more). With 2, a dead server fails the job only
  // when the other copy of one of its shards is dead too.
  int replicas = 1;
  // Elastic dist_sync (see the top): a dead or failed worker leaves the job, which goes on
  // with the others; false: the job fails, naming it.
  bool elastic = false;
  // Published in the view: request signatures cover payloads too (common/request_signature.h).
  bool signed_payloads = false;
  // Names the job (in the view, checkpoint manifests and node keys); empty: drawn at random by
  // Create. A scheduler that re-forms a running job takes the job's own.
  std::string job_id;
};

// PublishedCheckpoint: a checkpoint set the job published - its id ("JOB-N"), its directory
// and the round it cut.
struct PublishedCheckpoint {
  std::string id;
  std::string dir;
  int64_t round = 0;
};

// RejoinClaim: a node of a running job registering again with a scheduler restarted in place:
// who it is and, for servers, what it knows of the job.
struct RejoinClaim {
  NodeRole role = NodeRole::kWorker;
  uint64_t node_id = 0;
  int rank = 0;
  std::string address;  // Servers: the address they serve on.
  std::string hostname;
  // The view the node registered with; its job_id names the job (servers: every field).
  ClusterView view;
  // Servers: the view epoch and every server's address at it that heartbeats last published
  // (epoch 0: none), and the servers declared dead, the workers that left an elastic job and
  // those that finished, as heartbeats told them.
  uint64_t view_epoch = 0;
  std::vector<ServerEntry> servers;
  std::vector<int> dead_servers;
  std::vector<uint64_t> left_workers;
  std::vector<uint64_t> finished_workers;
  int64_t max_round = 0;
  // Servers: the checkpoint sets they published last.
  std::vector<PublishedCheckpoint> checkpoints;
  // Servers: the highest view epoch they know of other than from heartbeats (the epoch they
  // joined at, or one a join's copy made their engines require).
  uint64_t epoch_floor = 0;
};

struct Registration {
  uint64_t node_id = 0;
  int rank = 0;
  ClusterView view;
  // A server replacing a dead one in a running job with replicas (see JoinServer): the view
  // epoch it is published at once its shards are copied; 0 for every other registration.
  uint64_t join_epoch = 0;
  // A server that took the rank of a dead one in a job without replicas (ReplaceServer): the
  // dead one's address. The updates it had acknowledged since the checkpoint are lost.
  std::string replaced_address;
  // A node registering again (Rejoin) that this scheduler knew already: it did not restart.
  bool known = false;
  // A server joining the running job as one more (ServerScaling): its shards are moved in by
  // the rescale at join_epoch.
  bool scaling = false;
};

// Routing: what a worker routes its requests by in a job with replicas - the view epoch, every
// server's address, and the ranks of the dead servers - taken at one moment.
struct Routing {
  uint64_t epoch = 0;
  std::vector<ServerEntry> servers;  // In rank order.
  std::vector<int> dead;
};

// What a server reports with its heartbeat.
struct ServerLoad {
  int64_t num_keys = 0;
  int64_t num_bytes = 0;
  int64_t max_round = 0;
  int64_t restored_round = -1;
  std::string restored_checkpoint;
  std::vector<TableLoad> tables;
};

// What a worker reports with its heartbeat: its host's name (which a scheduler that re-formed
// the job from its servers does not know) and how many barriers it has got through (Barriers,
// "counted barriers").
struct WorkerReport {
  std::string hostname;
  uint64_t barriers_passed = 0;
};

class ServerFailover;
class ServerScaling;
class WorkerLiveness;

class SchedulerCore {
 public:
  using RegisterDone = std::function<void(absl::StatusOr<Registration>)>;
  using BarrierDone = std::function<void(absl::Status)>;

  // Create validates the options (at least one server and one worker, positive timeouts).
  static absl::StatusOr<std::unique_ptr<SchedulerCore>> Create(const SchedulerOptions& options);

  // Register adds a node. `requested_rank` is -1 or a rank in [0, group size); `address` is the
  // host:port a server serves on. `done` runs once the job is complete (or with
  // DeadlineExceeded from ExpireDeadlines, or at once with InvalidArgument for a bad rank or
  // address, or FailedPrecondition when the job already has all its nodes of this role).
  // `mode` is the worker's store type ("dist_sync" or "dist_async"; empty for servers): the first
  // worker's mode is the job's, and a worker asking for another one gets FailedPrecondition.
  // A server asking for the rank of an assembled job's server (a restart, without replicas)
  // takes it once that server has been silent for two heartbeat intervals; while heartbeats
  // still say it is alive, `done` waits up to ReplacementWait() (ExpireDeadlines retries it)
  // and then runs with FailedPrecondition naming the living server.
  // With `join`, a server registers into the assembled, running job as one more server
  // (ServerScaling::TakeJoin).
  void Register(NodeRole role, int requested_rank, std::string address, std::string hostname,
                absl::Time now, RegisterDone done, std::string mode = "", bool join = false);

  // Rejoin takes a node of a running job registering again (see the top). `done` runs with the
  // node's registration - its node id, rank and the job's view - once the job is re-formed (or
  // at once when this scheduler knows the node); FailedPrecondition when this scheduler runs
  // or forms another job, or the node is not one of the job's; InvalidArgument for a server's
  // claim without a view; DeadlineExceeded from ExpireDeadlines, naming the servers missing,
  // when the job is not re-formed within register_timeout of the first claim.
  void Rejoin(RejoinClaim claim, absl::Time now, RegisterDone done);

  // ReformMissing returns the servers a job being re-formed still waits for, once `after` has
  // passed since the first claim; empty otherwise, and in a job without replicas (which cannot
  // go on without one).
  std::vector<ServerEntry> ReformMissing(absl::Time now, absl::Duration after) const;
  // ReformWithout declares server `rank`, which a job being re-formed waits for, dead for good
  // (`reason`: nothing answers at its address - it died while the scheduler was away), and
  // re-forms the job once every other server is there. FailedPrecondition, changing nothing,
  // without replicas, when no job is being re-formed, or when the other copy of one of its
  // shards is dead too (the job then fails as the claims expire).
  absl::Status ReformWithout(int rank, std::string reason, absl::Time now);

  // SetStandby makes this scheduler a standby (`why` not empty: it says where the leader is)
  // or the job's scheduler again (`why` empty). A standby answers Register and Rejoin with
  // Unavailable saying `why`, so that nodes keep to the leader (server/scheduler/
  // scheduler_election.h).
  void SetStandby(std::string why);
  bool standby() const;

  // job_id names the job (SchedulerOptions::job_id, or the re-formed job's).
  std::string job_id() const;
  // TakeResumedCheckpoints returns, once, the checkpoint sets a re-formed job's servers had
  // published (each once, oldest round first), for the checkpoint coordinator to continue
  // from; nothing before a job is re-formed, and after.
  std::optional<std::vector<PublishedCheckpoint>> TakeResumedCheckpoints();

  // Barrier enters node `node_id` into a barrier over `group` (bits of kGroupServers and
  // kGroupWorkers, including the node's own role); `done` runs when every node of the group has
  // entered - in an elastic job, every node of the group that has not left, so a barrier
  // waiting for a worker that leaves passes then. InvalidArgument for a node id this scheduler
  // never issued or a group without the node's role; FailedPrecondition for a worker that has
  // left the job; Unavailable for a node id not known yet while a job is re-formed. `sequence`
  // is the node's count of its barriers over the group (Barriers, "counted barriers"; 0: not
  // counted), so that a barrier retried after a restart passes once.
  void Barrier(uint64_t node_id, int group, absl::Time now, BarrierDone done,
               uint64_t sequence = 0);

  // Heartbeat records that the node is alive. Returns whether the job is over (every worker has
  // finished), so a server knows to exit. InvalidArgument for an unknown node id.
  // A true return also marks the node released (see all_servers_released). While the
  // servers are busy (SetServersBusy) a server is not told yet: it exits after that work.
  // A worker's `report` names its host, when this scheduler does not know it, and releases the
  // counted barrier entries its barriers passed show to have passed.
  absl::StatusOr<bool> Heartbeat(uint64_t node_id, absl::Time now, ServerLoad load = {},
                                 const WorkerReport& report = {});

  // SetServersBusy gives the core `busy`, true while the scheduler has work on the servers
  // under way (a checkpoint set, a join: CheckpointCoordinator::busy), so that when every
  // worker has finished meanwhile that work finishes - a periodic set begun with the last round
  // is published, not left half written - before any server hears that the job is over. A job
  // that failed or was shut down (kvctl) may have rounds that never complete: its servers hear
  // it at once. `busy` is called under the core's lock: it must not block nor call the core.
  // The daemon stops holding the servers after half of its shutdown_grace, so that they hear
  // the end before it gives up on them. Call before serving.
  void SetServersBusy(std::function<bool()> busy);

  // RequestShutdown ends the job now (kvctl shutdown): every later heartbeat says so, and
  // registrations and barriers still waiting are answered ABORTED naming the reason.
  void RequestShutdown(std::string reason);
  // shutdown_reason says why the job ended ("every worker finished", "every remaining worker
  // finished (1 worker left the elastic job)", or the request's reason).
  std::string shutdown_reason() const;
  // all_servers_released is true once every server has been told that the job is over.
  bool all_servers_released() const;
  // servers_released_or_gone: every server has been told, or has sent no heartbeat for
  // `gone_after` (it stopped on its own, e.g. on SIGTERM, and will never ask).
  bool servers_released_or_gone(absl::Time now, absl::Duration gone_after) const;
  // workers_released_or_gone: every worker that has not finished has been told, or has sent
  // no heartbeat for `gone_after` (it died, or left an elastic job).
  bool workers_released_or_gone(absl::Time now, absl::Duration gone_after) const;

  // Finish records that a worker is done, with `failure` (empty: it succeeded) naming why it
  // failed; when every worker is, the job is over. A failed worker ends the job at once, as
  // failed, naming it - in an elastic job, it leaves the job instead, unless no other worker
  // is left that could finish it. A worker that has left finishes nothing (OK, no change).
  absl::Status Finish(uint64_t node_id, absl::Time now, std::string failure = "");

  // FailJob ends the job as failed with `reason` (kept when the job already failed), marking
  // the workers silent for heartbeat_timeout as failed (died).
  void FailJob(std::string reason, absl::Time now);
  // job_failure returns why the job failed - FailJob's reason, or the first failed worker's -
  // once the job is over; "" while it runs or when it succeeded.
  std::string job_failure() const;

  // ExpireDeadlines fails the registrations and barriers whose deadline has passed, naming the
  // missing nodes. Call it periodically (the scheduler daemon does, every few hundred ms).
  void ExpireDeadlines(absl::Time now);

  // Progress describes what the job waits for now, one line per wait, for the scheduler's
  // periodic progress log: "registered 1 of 2 servers and 2 of 2 workers; waiting for server
  // rank 1" while registering, "barrier: 3 of 4 workers; waiting for worker 2 on HOST" per open
  // barrier. Empty when nothing waits (scheduler_core_progress.cc).
  std::vector<std::string> Progress() const;

  // Workers' liveness: dead and lost workers, and those that left an elastic job
  // (worker_liveness.h).
  WorkerLiveness& liveness() { return *liveness_; }
  const WorkerLiveness& liveness() const { return *liveness_; }

  // Servers that die and are replaced: declared dead (replicas), replacements joining or
  // restarted into the running job, routing, data loss (server_failover.h).
  ServerFailover& failover() { return *failover_; }
  const ServerFailover& failover() const { return *failover_; }

  // Servers added to and drained from the running job (server_scaling.h).
  ServerScaling& scaling() { return *scaling_; }
  const ServerScaling& scaling() const { return *scaling_; }
  ~SchedulerCore();

  // finished_worker_ids returns the node ids of the workers that have finished (heartbeats
  // tell the servers, which present them when they register again).
  std::vector<uint64_t> finished_worker_ids() const;

  // Nodes returns every registered node (servers by rank, then workers by rank).
  std::vector<NodeInfo> Nodes() const;
  // view returns the cluster view; FailedPrecondition until every node has registered.
  absl::StatusOr<ClusterView> view() const;
  bool shutdown_requested() const;
  // registration_status is the error that closed registration (DeadlineExceeded naming the
  // missing nodes), or OK.
  absl::Status registration_status() const;

 private:
  // Parts of the core, sharing its lock.
  friend class ServerFailover;
  friend class ServerScaling;
  friend class WorkerLiveness;
  struct PendingRegistration {
    uint64_t node_id;
    RegisterDone done;
  };

  explicit SchedulerCore(const SchedulerOptions& options);

  // CheckRegistration refuses an ordinary registration: the window closed, the role full, a
  // rank out of range or taken, a server without an address, a worker of another mode.
  absl::Status CheckRegistration(NodeRole role, int requested_rank, const std::string& address,
                                 const std::string& hostname, const std::string& mode) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // AddNode adds a checked registration; once every node has registered it assigns the ranks,
  // marks the job complete and moves the registrations waiting into `*completed`.
  void AddNode(NodeRole role, int requested_rank, std::string address, std::string hostname,
               std::string mode, absl::Time now, RegisterDone done,
               std::vector<PendingRegistration>* completed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static bool InGroup(NodeRole role, int group);
  // HeartbeatLocked is Heartbeat under the lock (which it takes); the barrier entries it
  // releases go to `*released`, run once it is released.
  absl::StatusOr<bool> HeartbeatLocked(uint64_t node_id, absl::Time now, ServerLoad load,
                                       const WorkerReport& report,
                                       std::vector<BarrierDone>* released) ABSL_LOCKS_EXCLUDED(mu_);
  // UnknownNodeLocked is the error for `what` ("a heartbeat") naming a node id this scheduler
  // does not know: Unavailable while the job is not (re-)formed - it may be a node of a
  // running job this scheduler re-forms - and InvalidArgument after.
  absl::Status UnknownNodeLocked(uint64_t node_id, absl::string_view what) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Re-forming (scheduler_core_rejoin.cc). ReformReadyLocked: every server of the newest
  // claimed view that is not dead has presented itself. ReformLocked rebuilds the job from the
  // claims, moving the waiting registrations into `*completed` (an error when the claims do
  // not fit this scheduler's options).
  bool ReformReadyLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status ReformLocked(absl::Time now, std::vector<PendingRegistration>* completed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AnswerRejoins answers the registrations a re-forming completed (`reform_error`, or each
  // node's registration).
  void AnswerRejoins(std::vector<PendingRegistration> completed, const absl::Status& reform_error)
      ABSL_LOCKS_EXCLUDED(mu_);
  // AwaitedLocked returns the servers of the newest claimed view, not dead, that have not
  // presented themselves yet; `*expected` (when given) counts those not dead.
  std::vector<ServerEntry> AwaitedLocked(int* expected) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // MissingFromReformLocked names the servers of the newest claimed view not heard from yet.
  std::string MissingFromReformLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  const RejoinClaim* NewestClaimLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // DeadInNewestLocked: the ranks declared dead by the claims of the newest view's epoch.
  std::set<int> DeadInNewestLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string MissingFromBarrier(int group, const std::vector<uint64_t>& entered) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const SchedulerOptions options_;
  mutable absl::Mutex mu_;
  // The registered nodes and their ranks.
  NodeTable nodes_ ABSL_GUARDED_BY(mu_);
  std::vector<PendingRegistration> pending_registrations_ ABSL_GUARDED_BY(mu_);
  // When the first node registered; registration may wait register_timeout from then.
  absl::Time first_registration_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool complete_ ABSL_GUARDED_BY(mu_) = false;
  std::function<bool()> servers_busy_ ABSL_GUARDED_BY(mu_);
  bool registration_failed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status registration_error_ ABSL_GUARDED_BY(mu_);
  Barriers barriers_ ABSL_GUARDED_BY(mu_);
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  std::string standby_ ABSL_GUARDED_BY(mu_);  // SetStandby's reason; empty: not a standby.
  // Re-forming a running job: the servers' claims by node id, the registrations waiting for
  // the job to re-form, and when the first claim came.
  std::map<uint64_t, RejoinClaim> claims_ ABSL_GUARDED_BY(mu_);
  std::vector<PendingRegistration> pending_rejoins_ ABSL_GUARDED_BY(mu_);
  absl::Time first_rejoin_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool reformed_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<std::vector<PublishedCheckpoint>> resumed_checkpoints_ ABSL_GUARDED_BY(mu_);
  // Servers declared dead while the job was re-formed (ReformWithout), and why.
  std::map<int, std::string> reform_dead_ ABSL_GUARDED_BY(mu_);
  int finished_workers_ ABSL_GUARDED_BY(mu_) = 0;
  std::string mode_ ABSL_GUARDED_BY(mu_);
  std::string shutdown_reason_ ABSL_GUARDED_BY(mu_);  // Set by RequestShutdown.
  std::string failure_ ABSL_GUARDED_BY(mu_);          // Set by FailJob or a failed worker's Finish.
  // Servers declared dead, replaced and joining (server_failover.h).
  std::unique_ptr<ServerFailover> failover_;
  // Dead, lost and departed workers (worker_liveness.h).
  std::unique_ptr<WorkerLiveness> liveness_;
  // Servers added and drained (server_scaling.h), and the job's number of servers now.
  std::unique_ptr<ServerScaling> scaling_;
  int num_servers_ ABSL_GUARDED_BY(mu_);

  // ViewLocked builds the cluster view of the registered nodes (view() once complete).
  ClusterView ViewLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool ShutdownLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_CORE_SCHEDULER_CORE_H_
