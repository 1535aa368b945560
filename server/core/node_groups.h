// NodeGroups: the key groups each node has registered with an engine
// (KeyGroups::Register), by the node's own group id. A node keeps its last
// `max_per_node` registrations; registering an id again replaces its group. `G` is the engine's
// group type, with `int64_t held_bytes`, what it counts against the memory budget.
//
// Threading: not thread-safe; the engine calls it under its lock (a registration is checked
// against the budget and placed in one step).
#ifndef KVSTORE_SERVER_CORE_NODE_GROUPS_H_
#define KVSTORE_SERVER_CORE_NODE_GROUPS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace kvstore {

template <typename G>
class NodeGroups {
 public:
  explicit NodeGroups(size_t max_per_node) : max_per_node_(max_per_node < 1 ? 1 : max_per_node) {}

  // Find returns node `node_id`'s group `group_id`, or null.
  std::shared_ptr<const G> Find(uint64_t node_id, uint64_t group_id) const {
    auto node = nodes_.find(node_id);
    if (node == nodes_.end()) return nullptr;
    auto it = node->second.groups.find(group_id);
    return it == node->second.groups.end() ? nullptr : it->second;
  }

  // HeldBytes returns what node `node_id`'s group `group_id` holds (0 when it has none): what
  // registering that id again frees.
  int64_t HeldBytes(uint64_t node_id, uint64_t group_id) const {
    const std::shared_ptr<const G> group = Find(node_id, group_id);
    return group == nullptr ? 0 : group->held_bytes;
  }

  // Put registers `group` as node `node_id`'s `group_id`, replacing the group of that id, and
  // drops the node's oldest registrations beyond max_per_node; returns the bytes the dropped
  // ones held (not counting a replaced group: see HeldBytes).
  int64_t Put(uint64_t node_id, uint64_t group_id, std::shared_ptr<const G> group) {
    Node& node = nodes_[node_id];
    auto [it, inserted] = node.groups.insert_or_assign(group_id, std::move(group));
    if (!inserted) return 0;
    node.order.push_back(group_id);
    int64_t freed = 0;
    while (node.order.size() > max_per_node_) {
      auto oldest = node.groups.find(node.order.front());
      freed += oldest->second->held_bytes;
      node.groups.erase(oldest);
      node.order.pop_front();
    }
    return freed;
  }

 private:
  struct Node {
    absl::flat_hash_map<uint64_t, std::shared_ptr<const G>> groups;
    std::deque<uint64_t> order;  // Registration order, for dropping the oldest.
  };
  const size_t max_per_node_;
  absl::flat_hash_map<uint64_t, Node> nodes_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_NODE_GROUPS_H_
