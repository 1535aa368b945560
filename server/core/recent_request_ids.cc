#include "server/core/recent_request_ids.h"

#include <algorithm>

namespace kvstore {

bool RecentRequestIds::Contains(uint64_t node_id, uint64_t request_id) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  return it != nodes_.end() && it->second.ids.contains(request_id);
}

void RecentRequestIds::Record(uint64_t node_id, uint64_t request_id) {
  absl::MutexLock lock(&mu_);
  RecordLocked(node_id, request_id);
}

void RecentRequestIds::RecordLocked(uint64_t node_id, uint64_t request_id) {
  Node& node = nodes_[node_id];
  if (!node.ids.insert(request_id).second) return;
  node.order.push_back(request_id);
  while (node.order.size() > window_) {
    node.ids.erase(node.order.front());
    node.order.pop_front();
  }
}

std::vector<AppliedRequests> RecentRequestIds::Export() const {
  absl::MutexLock lock(&mu_);
  std::vector<AppliedRequests> out;
  for (const auto& [node_id, node] : nodes_) {
    if (node.order.empty()) continue;
    out.push_back({node_id, std::vector<uint64_t>(node.order.begin(), node.order.end())});
  }
  std::sort(out.begin(), out.end(), [](const AppliedRequests& a, const AppliedRequests& b) {
    return a.node_id < b.node_id;
  });
  return out;
}

void RecentRequestIds::Load(absl::Span<const AppliedRequests> applied) {
  absl::MutexLock lock(&mu_);
  for (const AppliedRequests& node : applied) {
    for (uint64_t id : node.request_ids) RecordLocked(node.node_id, id);
  }
}

}  // namespace kvstore
