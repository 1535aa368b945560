// SchedulerCore: a replacement server joining a running job with replicas, in place of a dead
// one, and the view epochs its joins publish.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/scheduler/core/scheduler_core.h"

namespace kvstore {

absl::StatusOr<Registration> SchedulerCore::JoinServer(int requested_rank,
                                                       const std::string& address,
                                                       const std::string& hostname,
                                                       absl::Time now) {
  const int n = options_.num_servers;
  int rank = requested_rank;
  if (rank < 0) {
    // Any rank: the lowest one whose server is dead and not being replaced.
    for (int r = 0; r < n && rank < 0; ++r) {
      const NodeInfo* node = nodes_.ServerOfRank(r);
      if (node != nullptr && node->dead && !node->joining) rank = r;
    }
    if (rank < 0) return absl::NotFoundError("no dead server to replace");
  }
  NodeInfo* old = nodes_.ServerOfRank(rank);
  if (old == nullptr) return absl::NotFoundError("no server of that rank");
  if (old->joining) {
    return absl::FailedPreconditionError(
        absl::StrCat("server rank ", rank, " is already being replaced by the server at ",
                     old->address, " (node ", old->node_id, "), which is copying its shards"));
  }
  const absl::Duration silent = now - old->last_heartbeat;
  if (!old->dead && silent <= 2 * options_.heartbeat_interval) {
    return absl::FailedPreconditionError(
        absl::StrCat("server rank ", rank, " at ", old->address, " (node ", old->node_id,
                     ") is alive (last heartbeat ", absl::FormatDuration(silent),
                     " ago); a server joins a running job only in place of a dead one"));
  }
  // The shards it holds: its own (other copy on the next rank) and the previous rank's.
  for (const int other : {(rank + 1) % n, (rank + n - 1) % n}) {
    const NodeInfo* copy = nodes_.ServerOfRank(other);
    if (copy != nullptr && other != rank && copy->dead) {
      const int shard = other == (rank + 1) % n ? rank : other;
      return absl::FailedPreconditionError(
          absl::StrCat("server rank ", rank, " cannot be replaced: shard ", shard,
                       " has no living copy to copy from (server ", other, " at ", copy->address,
                       " is dead too: ", copy->death, ")"));
    }
  }
  const std::string death =
      absl::StrCat("replaced: the server at ", address, " (node ", nodes_.next_id(),
                   ") is copying its shards (was ", old->address,
                   old->dead ? absl::StrCat(": ", old->death) : std::string(), ")");
  NodeInfo& node = nodes_.TakeOver(*old, address, hostname, now);
  node.replaced_address.clear();  // Nothing is lost: no data loss to report.
  node.max_round = 0;
  node.dead = true;  // Its shards are served by their other copies until it is published.
  node.death = death;
  node.joining = true;
  node.join_epoch = ++last_join_epoch_;
  node.join_failure.clear();
  return RegistrationOf(node);
}

absl::Status SchedulerCore::CompleteJoin(uint64_t node_id) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || !it->second.joining) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node_id, " is not a server joining the job"));
  }
  if (ShutdownLocked()) {
    return absl::FailedPreconditionError("the job is over: no server joins it any more");
  }
  NodeInfo& node = it->second;
  node.joining = false;
  node.dead = false;
  node.death.clear();
  view_epoch_ = std::max(view_epoch_, node.join_epoch);
  return absl::OkStatus();
}

void SchedulerCore::FailJoin(uint64_t node_id, std::string reason) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || !it->second.joining) return;
  NodeInfo& node = it->second;
  node.joining = false;
  node.death = absl::StrCat("its replacement at ", node.address, " failed to join: ", reason);
  node.join_failure = std::move(reason);
}

std::string SchedulerCore::join_failure(uint64_t node_id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? std::string() : it->second.join_failure;
}

Routing SchedulerCore::routing() const {
  absl::ReaderMutexLock lock(&mu_);
  Routing routing;
  routing.epoch = view_epoch_;
  routing.servers = ViewLocked().servers;
  for (const ServerEntry& server : routing.servers) {
    if (nodes_.Find(server.node_id)->dead) routing.dead.push_back(server.rank);
  }
  return routing;
}

}  // namespace kvstore
