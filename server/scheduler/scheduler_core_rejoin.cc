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
  NodeInfo node = old->second;
  const uint64_t id = next_node_id_++;
  node.node_id = id;
  node.replaced_address = old->second.address;
  node.replaced_round = old->second.max_round;
  node.address = address;
  node.hostname = hostname;
  node.last_heartbeat = now;
  node.num_keys = 0;
  node.num_bytes = 0;
  node.restored_round = -1;
  node.released = false;
  requested_rank_.erase(old->first);
  nodes_.erase(old);
  nodes_[id] = node;
  requested_rank_[id] = rank;
  Registration registration;
  registration.node_id = id;
  registration.rank = rank;
  registration.view = ViewLocked();  // view() takes the lock itself.
  return registration;
}

std::vector<std::string> SchedulerCore::data_loss() const {
  absl::ReaderMutexLock lock(&mu_);
  return data_loss_;
}

}  // namespace kvstore
