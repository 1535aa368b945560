// SchedulerCore: a server restarted into the running job (ReplaceServer) and the data loss
// the workers are told of.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/scheduler/scheduler_core.h"

namespace kvstore {

std::optional<Registration> SchedulerCore::ReplaceServer(int rank, const std::string& address,
                                                         const std::string& hostname,
                                                         absl::Time now) {
  auto old = nodes_.end();
  for (auto it = nodes_.begin(); it != nodes_.end(); ++it) {
    if (it->second.role == NodeRole::kServer && it->second.rank == rank) old = it;
  }
  if (old == nodes_.end()) return std::nullopt;
  const absl::Duration silent = now - old->second.last_heartbeat;
  if (silent <= 2 * options_.heartbeat_interval) return std::nullopt;  // Alive.
  const int64_t replaced_round = old->second.max_round;
  NodeInfo& node = TakeOverRank(&old->second, address, hostname, now);
  node.replaced_round = replaced_round;
  return RegistrationOf(node);
}

NodeInfo& SchedulerCore::TakeOverRank(NodeInfo* old, const std::string& address,
                                      const std::string& hostname, absl::Time now) {
  NodeInfo node = *old;
  const uint64_t id = next_node_id_++;
  node.node_id = id;
  node.replaced_address = old->address;
  node.replaced_round = -1;
  node.address = address;
  node.hostname = hostname;
  node.last_heartbeat = now;
  node.num_keys = 0;
  node.num_bytes = 0;
  node.restored_round = -1;
  node.released = false;
  const int rank = node.rank;
  requested_rank_.erase(old->node_id);
  nodes_.erase(old->node_id);
  requested_rank_[id] = rank;
  return nodes_[id] = std::move(node);
}

Registration SchedulerCore::RegistrationOf(const NodeInfo& node) const {
  Registration registration;
  registration.node_id = node.node_id;
  registration.rank = node.rank;
  registration.view = ViewLocked();  // view() takes the lock itself.
  registration.join_epoch = node.joining ? node.join_epoch : 0;
  return registration;
}

std::vector<std::string> SchedulerCore::data_loss() const {
  absl::ReaderMutexLock lock(&mu_);
  return data_loss_;
}

}  // namespace kvstore
