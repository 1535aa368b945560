// ServerFailover: the servers of a job that die and are replaced (a part of SchedulerCore,
// scheduler_core.h): servers declared dead in a job with replicas, whose shards their backups
// serve; a replacement server joining in place of a dead one while the scheduler copies its
// shards, published at a new view epoch; a server restarted into a job without replicas, which
// takes a silent server's rank and whose predecessor's acknowledged updates since the last
// checkpoint are reported lost.
//
// Threading: thread-safe. Its state is guarded by the core's lock, which it takes itself; the
// core calls its hooks (TakeRunningJobRank, RetryReplacements, TakePending, RecordLoss,
// ProgressLines) with that lock held.
#ifndef KVSTORE_SERVER_SCHEDULER_CORE_SERVER_FAILOVER_H_
#define KVSTORE_SERVER_SCHEDULER_CORE_SERVER_FAILOVER_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/lost_updates.h"
#include "server/scheduler/core/node_table.h"
#include "server/scheduler/core/scheduler_core.h"

namespace kvstore {

class ServerFailover {
 public:
  using RegisterDone = SchedulerCore::RegisterDone;

  explicit ServerFailover(SchedulerCore* core) : core_(*core) {}

  // DeclareServerDead marks the server of `rank` dead for good in a job with replicas, saying
  // `reason`, so that workers fail over to the backups of its shards (dead_servers); the job
  // fails, naming both, when the other copy of one of its shards is dead too. True when this
  // call declared it (false: already dead). FailedPrecondition without replicas, before the
  // job assembled or once it is over (its servers exit then); InvalidArgument for a rank out
  // of range.
  absl::StatusOr<bool> DeclareServerDead(int rank, std::string reason, absl::Time now)
      ABSL_LOCKS_EXCLUDED(core_.mu_);
  // dead_servers returns the ranks of the servers declared dead, in order.
  std::vector<int> dead_servers() const;

  // Replacement servers (scheduler_core_join.cc). In a job with replicas that runs, a server
  // registering for the rank of a dead server (declared dead, or silent for more than two
  // heartbeat intervals, which declares it), or for any rank while one is dead, takes that
  // rank: it gets a new node id and a Registration with a join_epoch, and stays dead (its
  // shards served by the other copies) while the scheduler copies its shards into it. Refused,
  // naming why, when the rank's server is alive, already being replaced, or when the other copy
  // of one of its shards is dead too.
  // CompleteJoin publishes it: alive at its address, the view at its join epoch.
  // FailedPrecondition when it is no longer joining (the job ended, or the join failed).
  absl::Status CompleteJoin(uint64_t node_id);
  // FailJoin records that its shards could not be copied (`reason`): it stays dead, and its
  // heartbeats are answered with join_failure, so that it exits. The view still moves to the
  // join's epoch (unchanged but for the epoch): the writes the living copies refused once their
  // copy was taken name that epoch, and their senders wait for it before sending them again.
  void FailJoin(uint64_t node_id, std::string reason);
  // join_failure returns why node `node_id`'s join failed, or "".
  std::string join_failure(uint64_t node_id) const;
  // routing returns the view epoch, the servers and the dead ones, at one moment.
  Routing routing() const;
  // LivingCopy returns the server that serves shard `shard` now: its own, or, while that one
  // is dead, the next rank's, which holds its backup (`backup` true). InvalidArgument for a
  // shard out of range; FailedPrecondition before the job assembled.
  struct ShardCopy {
    ServerEntry server;
    bool backup = false;
  };
  absl::StatusOr<ShardCopy> LivingCopy(int shard) const;
  // ServerAddress returns the address of the server of `rank`, or NotFound.
  absl::StatusOr<std::string> ServerAddress(int rank) const;
  // data_loss returns one record per server restarted into the running job (ReplaceServer),
  // naming it, what it restored and the last round its predecessor reported, once it has said
  // what it restored (its first heartbeat).
  std::vector<LostUpdates> data_loss() const;

  // Hooks, called with the core's lock held (not analysed across the classes: each asserts the
  // lock). TakeRunningJobRank handles a server registering into the assembled, running job: a
  // restart for a rank whose server heartbeats say is alive is held (HoldReplacement; `*done`
  // taken); with replicas, a replacement of a dead server joins (JoinServer); without, a
  // restart takes a silent server's rank (ReplaceServer). True with `*answer` set (or `*done`
  // taken) when it did one of them; false when the registration goes the ordinary way.
  bool TakeRunningJobRank(NodeRole role, int requested_rank, std::string& address,
                          std::string& hostname, absl::Time now, RegisterDone* done,
                          std::optional<absl::StatusOr<Registration>>* answer);
  // RetryReplacements gives each pending replacement its rank once its holder counts as dead,
  // moving the registration into `*replaced`, or fails it once past its deadline (or when the
  // job is over) into `*failed`.
  void RetryReplacements(absl::Time now,
                         std::vector<std::pair<RegisterDone, Registration>>* replaced,
                         std::vector<std::pair<RegisterDone, absl::Status>>* failed);
  // NextEpochLocked issues a view epoch for a change of the servers (a rescale,
  // server_scaling.h); PublishEpochLocked publishes it (the servers' addresses go with it).
  uint64_t NextEpochLocked() {
    core_.mu_.AssertHeld();
    return ++last_join_epoch_;
  }
  void PublishEpochLocked(uint64_t epoch) {
    core_.mu_.AssertHeld();
    view_epoch_ = std::max(view_epoch_, epoch);
  }
  // RestoreEpoch sets the view epoch published (a running job re-formed at that epoch).
  void RestoreEpoch(uint64_t epoch);
  // TakePending forgets the pending replacements, returning their callbacks (the job is over).
  std::vector<RegisterDone> TakePending();
  // RecordLoss adds a restarted server's data loss (its first heartbeat said what it restored).
  void RecordLoss(LostUpdates loss);
  // ProgressLines adds a line per pending replacement to `*lines` (SchedulerCore::Progress).
  void ProgressLines(std::vector<std::string>* lines) const;

 private:
  // A server asking for the rank of a server that heartbeats said was alive (it may just have
  // died: a restart by systemd comes within a second or two): it waits, until `deadline`, for
  // that server to be silent long enough to count as dead (ReplaceServer), then takes the rank.
  struct PendingReplacement {
    int rank;
    std::string address;
    std::string hostname;
    absl::Time deadline;
    RegisterDone done;
  };
  // ReplaceServer lets a server asking for rank `rank` of an assembled job take the place of
  // the server of that rank when that one has been silent for more than two heartbeat
  // intervals (it died): the new node gets that rank and a new node id, the cluster view its
  // address. Returns the registration, or nothing when the rank's server is alive.
  std::optional<Registration> ReplaceServer(int rank, const std::string& address,
                                            const std::string& hostname, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu_);
  // ReplacementWait is how long a server asking for a living server's rank waits for it to
  // count as dead: the silence ReplaceServer needs (two heartbeat intervals), twice, and 1 s.
  absl::Duration ReplacementWait() const {
    return 4 * core_.options_.heartbeat_interval + absl::Seconds(1);
  }
  // HoldReplacement parks a registration for the rank of server `holder`, which heartbeats say
  // is alive, as a PendingReplacement (ExpireDeadlines retries it), logging what it waits for.
  void HoldReplacement(const NodeInfo& holder, int rank, std::string address, std::string hostname,
                       absl::Time now, RegisterDone done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu_);
  // HeardFrom: server `node` counts as alive - not declared dead, not being replaced, and
  // heard from within two heartbeat intervals.
  bool HeardFrom(const NodeInfo& node, absl::Time now) const ABSL_SHARED_LOCKS_REQUIRED(core_.mu_) {
    return !node.dead && !node.joining &&
           now - node.last_heartbeat <= 2 * core_.options_.heartbeat_interval;
  }
  // RegistrationOf is the registration answering `node` (its join epoch when it is joining).
  Registration RegistrationOf(const NodeInfo& node) const ABSL_SHARED_LOCKS_REQUIRED(core_.mu_);
  // JoinServer registers a replacement server (see CompleteJoin); NotFound when this
  // registration is not one (no dead server to replace), another error to refuse it.
  absl::StatusOr<Registration> JoinServer(int requested_rank, const std::string& address,
                                          const std::string& hostname, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu_);

  SchedulerCore& core_;
  std::vector<PendingReplacement> pending_replacements_ ABSL_GUARDED_BY(core_.mu_);
  std::vector<LostUpdates> data_loss_ ABSL_GUARDED_BY(core_.mu_);
  // The view epoch published (CompleteJoin) and the last one given to a joining server.
  uint64_t view_epoch_ ABSL_GUARDED_BY(core_.mu_) = 0;
  uint64_t last_join_epoch_ ABSL_GUARDED_BY(core_.mu_) = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_CORE_SERVER_FAILOVER_H_
