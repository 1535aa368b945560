// SchedulerCore: servers declared dead in a job with replicas, whose shards their backups serve.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/scheduler/core/scheduler_core.h"

namespace kvstore {

absl::StatusOr<bool> SchedulerCore::DeclareServerDead(int rank, std::string reason,
                                                      absl::Time now) {
  std::string lost;
  {
    absl::MutexLock lock(&mu_);
    if (options_.replicas < 2) {
      return absl::FailedPreconditionError("the job has no replicas: no server is failed over");
    }
    if (!complete_) return absl::FailedPreconditionError("the job has not assembled yet");
    // Once the job is over its servers exit on their own: one gone is not a failure.
    if (ShutdownLocked()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the job is over (",
                       shutdown_reason_.empty() ? "every worker finished" : shutdown_reason_,
                       "): its servers are exiting"));
    }
    if (rank < 0 || rank >= options_.num_servers) {
      return absl::InvalidArgumentError(absl::StrCat("no server of rank ", rank));
    }
    NodeInfo* dead = nullptr;
    // The servers holding the other copies of this server's shards: the next rank holds the
    // backup of its shard, the previous rank the primary of the shard it backs up.
    const NodeInfo* next = nullptr;
    const NodeInfo* previous = nullptr;
    const int n = options_.num_servers;
    for (auto& [id, node] : nodes_) {
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
  if (!lost.empty()) FailJob(lost, now);
  return true;
}

std::vector<int> SchedulerCore::dead_servers() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<int> ranks;
  for (const auto& [id, node] : nodes_) {
    if (node.role == NodeRole::kServer && node.dead) ranks.push_back(node.rank);
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

absl::StatusOr<std::string> SchedulerCore::ServerAddress(int rank) const {
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [id, node] : nodes_) {
    if (node.role == NodeRole::kServer && node.rank == rank) return node.address;
  }
  return absl::NotFoundError(absl::StrCat("no server of rank ", rank));
}

}  // namespace kvstore
