#include "server/scheduler/core/server_failover.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvstore {

absl::StatusOr<bool> ServerFailover::DeclareServerDead(int rank, std::string reason,
                                                       absl::Time now) {
  std::string lost;
  {
    absl::MutexLock lock(&core_.mu_);
    if (core_.options_.replicas < 2) {
      return absl::FailedPreconditionError("the job has no replicas: no server is failed over");
    }
    if (!core_.complete_) return absl::FailedPreconditionError("the job has not assembled yet");
    // Once the job is over its servers exit on their own: one gone is not a failure.
    if (core_.ShutdownLocked()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the job is over (",
          core_.shutdown_reason_.empty() ? "every worker finished" : core_.shutdown_reason_,
          "): its servers are exiting"));
    }
    if (rank < 0 || rank >= core_.num_servers_) {
      return absl::InvalidArgumentError(absl::StrCat("no server of rank ", rank));
    }
    NodeInfo* dead = nullptr;
    // The servers holding the other copies of this server's shards: the next rank holds the
    // backup of its shard, the previous rank the primary of the shard it backs up.
    const NodeInfo* next = nullptr;
    const NodeInfo* previous = nullptr;
    const int n = core_.num_servers_;
    for (auto& [id, node] : core_.nodes_) {
      if (node.role != NodeRole::kServer) continue;
      if (node.rank == rank) dead = &node;
      if (node.rank == (rank + 1) % n) next = &node;
      if (node.rank == (rank + n - 1) % n) previous = &node;
    }
    if (dead == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("no server of rank ", rank));
    if (dead->dead) return false;
    dead->dead = true;
    dead->death = reason;
    for (const NodeInfo* other : {next, previous}) {
      if (other != nullptr && other->dead) {
        const int shard = other == next ? rank : other->rank;
        lost = absl::StrCat("shard ", shard, " is lost: both its copies are dead (server ", rank,
                            " at ", dead->address, ": ", reason, "; server ", other->rank, " at ",
                            other->address, ": ", other->death, ")");
        break;
      }
    }
  }
  if (!lost.empty()) core_.FailJob(lost, now);
  return true;
}

std::vector<int> ServerFailover::dead_servers() const {
  absl::ReaderMutexLock lock(&core_.mu_);
  std::vector<int> ranks;
  for (const auto& [id, node] : core_.nodes_) {
    if (node.role == NodeRole::kServer && node.dead) ranks.push_back(node.rank);
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

absl::StatusOr<ServerFailover::ShardCopy> ServerFailover::LivingCopy(int shard) const {
  ASSIGN_OR_RETURN(const ClusterView view, core_.view());
  const int n = static_cast<int>(view.servers.size());
  if (shard < 0 || shard >= n) return absl::InvalidArgumentError(absl::StrCat("no shard ", shard));
  const std::vector<int> dead = dead_servers();
  const bool backup = std::find(dead.begin(), dead.end(), shard) != dead.end();
  return ShardCopy{view.servers[backup ? (shard + 1) % n : shard], backup};
}

absl::StatusOr<std::string> ServerFailover::ServerAddress(int rank) const {
  absl::ReaderMutexLock lock(&core_.mu_);
  for (const auto& [id, node] : core_.nodes_) {
    if (node.role == NodeRole::kServer && node.rank == rank) return node.address;
  }
  return absl::NotFoundError(absl::StrCat("no server of rank ", rank));
}

absl::StatusOr<Registration> ServerFailover::JoinServer(int requested_rank,
                                                        const std::string& address,
                                                        const std::string& hostname,
                                                        absl::Time now) {
  const int n = core_.num_servers_;
  int rank = requested_rank;
  if (rank < 0) {
    // Any rank: the lowest one whose server is dead and not being replaced.
    for (int r = 0; r < n && rank < 0; ++r) {
      const NodeInfo* node = core_.nodes_.ServerOfRank(r);
      if (node != nullptr && node->dead && !node->joining) rank = r;
    }
    if (rank < 0) return absl::NotFoundError("no dead server to replace");
  }
  NodeInfo* old = core_.nodes_.ServerOfRank(rank);
  if (old == nullptr) return absl::NotFoundError("no server of that rank");
  if (old->joining) {
    return absl::FailedPreconditionError(
        absl::StrCat("server rank ", rank, " is already being replaced by the server at ",
                     old->address, " (node ", old->node_id, "), which is copying its shards"));
  }
  const absl::Duration silent = now - old->last_heartbeat;
  if (!old->dead && silent <= 2 * core_.options_.heartbeat_interval) {
    return absl::FailedPreconditionError(
        absl::StrCat("server rank ", rank, " at ", old->address, " (node ", old->node_id,
                     ") is alive (last heartbeat ", absl::FormatDuration(silent),
                     " ago); a server joins a running job only in place of a dead one"));
  }
  // The shards it holds: its own (other copy on the next rank) and the previous rank's.
  for (const int other : {(rank + 1) % n, (rank + n - 1) % n}) {
    const NodeInfo* copy = core_.nodes_.ServerOfRank(other);
    if (copy != nullptr && other != rank && copy->dead) {
      const int shard = other == (rank + 1) % n ? rank : other;
      return absl::FailedPreconditionError(
          absl::StrCat("server rank ", rank, " cannot be replaced: shard ", shard,
                       " has no living copy to copy from (server ", other, " at ", copy->address,
                       " is dead too: ", copy->death, ")"));
    }
  }
  const std::string death =
      absl::StrCat("replaced: the server at ", address, " (node ", core_.nodes_.next_id(),
                   ") is copying its shards (was ", old->address,
                   old->dead ? absl::StrCat(": ", old->death) : std::string(), ")");
  NodeInfo& node = core_.nodes_.TakeOver(*old, address, hostname, now);
  node.replaced_address.clear();  // Nothing is lost: no data loss to report.
  node.max_round = 0;
  node.dead = true;  // Its shards are served by their other copies until it is published.
  node.death = death;
  node.joining = true;
  node.join_epoch = ++last_join_epoch_;
  node.join_failure.clear();
  return RegistrationOf(node);
}

absl::Status ServerFailover::CompleteJoin(uint64_t node_id) {
  absl::MutexLock lock(&core_.mu_);
  auto it = core_.nodes_.find(node_id);
  if (it == core_.nodes_.end() || !it->second.joining) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node_id, " is not a server joining the job"));
  }
  if (core_.ShutdownLocked()) {
    return absl::FailedPreconditionError("the job is over: no server joins it any more");
  }
  NodeInfo& node = it->second;
  node.joining = false;
  node.dead = false;
  node.death.clear();
  view_epoch_ = std::max(view_epoch_, node.join_epoch);
  return absl::OkStatus();
}

void ServerFailover::FailJoin(uint64_t node_id, std::string reason) {
  absl::MutexLock lock(&core_.mu_);
  auto it = core_.nodes_.find(node_id);
  if (it == core_.nodes_.end() || !it->second.joining) return;
  NodeInfo& node = it->second;
  node.joining = false;
  node.death = absl::StrCat("its replacement at ", node.address, " failed to join: ", reason);
  node.join_failure = std::move(reason);
  // Writes the join's copies refused asked for its epoch: the view moves to it as it is, the
  // rank still dead, so that their senders find it and send them again to the living copies.
  view_epoch_ = std::max(view_epoch_, node.join_epoch);
}

std::string ServerFailover::join_failure(uint64_t node_id) const {
  absl::ReaderMutexLock lock(&core_.mu_);
  auto it = core_.nodes_.find(node_id);
  return it == core_.nodes_.end() ? std::string() : it->second.join_failure;
}

void ServerFailover::RestoreEpoch(uint64_t epoch) {
  core_.mu_.AssertHeld();
  view_epoch_ = std::max(view_epoch_, epoch);
  last_join_epoch_ = std::max(last_join_epoch_, epoch);
}

Routing ServerFailover::routing() const {
  absl::ReaderMutexLock lock(&core_.mu_);
  Routing routing;
  routing.epoch = view_epoch_;
  routing.servers = core_.ViewLocked().servers;
  for (const ServerEntry& server : routing.servers) {
    if (core_.nodes_.Find(server.node_id)->dead) routing.dead.push_back(server.rank);
  }
  return routing;
}

bool ServerFailover::TakeRunningJobRank(NodeRole role, int requested_rank, std::string& address,
                                        std::string& hostname, absl::Time now, RegisterDone* done,
                                        std::optional<absl::StatusOr<Registration>>* answer) {
  core_.mu_.AssertHeld();
  const int group_size = core_.num_servers_;
  if (role != NodeRole::kServer || !core_.complete_ || core_.ShutdownLocked() || address.empty() ||
      requested_rank < -1 || requested_rank >= group_size) {
    return false;
  }
  if (requested_rank >= 0) {
    // A restart of the server of that rank may come before heartbeats tell that it died.
    const NodeInfo* holder = core_.nodes_.ServerOfRank(requested_rank);
    if (holder != nullptr && HeardFrom(*holder, now)) {
      HoldReplacement(*holder, requested_rank, std::move(address), std::move(hostname), now,
                      std::move(*done));
      *done = nullptr;
      return true;
    }
  }
  if (core_.options_.replicas > 1) {
    // With replicas a dead server's shards live on: its replacement copies them.
    absl::StatusOr<Registration> joined = JoinServer(requested_rank, address, hostname, now);
    if (absl::IsNotFound(joined.status())) return false;
    *answer = std::move(joined);
    return true;
  }
  if (requested_rank < 0) return false;
  std::optional<Registration> replaced = ReplaceServer(requested_rank, address, hostname, now);
  if (!replaced.has_value()) return false;
  *answer = *std::move(replaced);
  return true;
}

std::vector<ServerFailover::RegisterDone> ServerFailover::TakePending() {
  core_.mu_.AssertHeld();
  std::vector<RegisterDone> dones;
  for (PendingReplacement& pending : pending_replacements_)
    dones.push_back(std::move(pending.done));
  pending_replacements_.clear();
  return dones;
}

void ServerFailover::RecordLoss(LostUpdates loss) {
  core_.mu_.AssertHeld();
  data_loss_.push_back(std::move(loss));
}

}  // namespace kvstore
