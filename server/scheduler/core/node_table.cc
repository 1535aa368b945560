#include "server/scheduler/core/node_table.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvstore {
namespace {

std::string Plural(int n, absl::string_view noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

}  // namespace

NodeInfo& NodeTable::Add(NodeRole role, int requested_rank, std::string address,
                         std::string hostname, absl::Time now) {
  const uint64_t id = next_id_++;
  requested_rank_[id] = requested_rank;
  return nodes_[id] = NodeInfo{id, role, -1, std::move(address), std::move(hostname), now, false};
}

NodeInfo& NodeTable::TakeOver(const NodeInfo& old, std::string address, std::string hostname,
                              absl::Time now) {
  NodeInfo node = old;
  const uint64_t id = next_id_++;
  node.node_id = id;
  node.replaced_address = old.address;
  node.replaced_round = -1;
  node.address = std::move(address);
  node.hostname = std::move(hostname);
  node.last_heartbeat = now;
  node.num_keys = 0;
  node.num_bytes = 0;
  node.restored_round = -1;
  node.released = false;
  const uint64_t old_id = old.node_id;  // `old` lives in nodes_: read it before erasing.
  requested_rank_.erase(old_id);
  nodes_.erase(old_id);
  requested_rank_[id] = node.rank;
  return nodes_[id] = std::move(node);
}

NodeInfo& NodeTable::Restore(NodeInfo node) {
  const uint64_t id = node.node_id;
  next_id_ = std::max(next_id_, id + 1);
  requested_rank_[id] = node.rank;
  return nodes_[id] = std::move(node);
}

NodeInfo* NodeTable::Find(uint64_t id) {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

const NodeInfo* NodeTable::Find(uint64_t id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

NodeInfo* NodeTable::ServerOfRank(int rank) {
  return const_cast<NodeInfo*>(std::as_const(*this).ServerOfRank(rank));
}

const NodeInfo* NodeTable::ServerOfRank(int rank) const {
  for (const auto& [id, node] : nodes_) {
    if (node.role == NodeRole::kServer && node.rank == rank) return &node;
  }
  return nullptr;
}

int NodeTable::requested_rank(uint64_t id) const {
  auto it = requested_rank_.find(id);
  return it == requested_rank_.end() ? -1 : it->second;
}

const NodeInfo* NodeTable::RankHolder(NodeRole role, int rank) const {
  if (rank < 0) return nullptr;
  for (const auto& [id, asked] : requested_rank_) {
    const NodeInfo& node = nodes_.at(id);
    if (asked == rank && node.role == role) return &node;
  }
  return nullptr;
}

int NodeTable::Count(NodeRole role) const {
  int n = 0;
  for (const auto& [id, node] : nodes_) n += node.role == role;
  return n;
}

void NodeTable::AssignRanks() {
  for (NodeRole role : {NodeRole::kServer, NodeRole::kWorker}) {
    std::set<int> taken;
    for (const auto& [id, node] : nodes_) {
      if (node.role == role && requested_rank_[id] >= 0) taken.insert(requested_rank_[id]);
    }
    int next_free = 0;
    // Node ids grow with registration order, so this walks nodes in that order.
    for (auto& [id, node] : nodes_) {
      if (node.role != role) continue;
      if (requested_rank_[id] >= 0) {
        node.rank = requested_rank_[id];
        continue;
      }
      while (taken.count(next_free) > 0) ++next_free;
      node.rank = next_free++;
    }
  }
}

std::string NodeTable::Missing() const {
  const int servers = Count(NodeRole::kServer), workers = Count(NodeRole::kWorker);
  return absl::StrCat("registered ", servers, " of ", Plural(num_servers_, "server"), " and ",
                      workers, " of ", Plural(num_workers_, "worker"), "; missing ",
                      Plural(num_servers_ - servers, "server"), " and ",
                      Plural(num_workers_ - workers, "worker"));
}

void NodeTable::FillView(ClusterView* view) const {
  std::vector<std::pair<int, uint64_t>> workers;
  for (const auto& [id, node] : nodes_) {
    if (node.role == NodeRole::kServer) {
      view->servers.push_back(ServerEntry{node.rank, id, node.address});
    } else {
      workers.emplace_back(node.rank, id);
    }
  }
  std::sort(view->servers.begin(), view->servers.end(),
            [](const ServerEntry& a, const ServerEntry& b) { return a.rank < b.rank; });
  std::sort(workers.begin(), workers.end());
  for (const auto& [rank, id] : workers) view->worker_node_ids.push_back(id);
}

std::vector<NodeInfo> NodeTable::Sorted() const {
  std::vector<NodeInfo> nodes;
  for (const auto& [id, node] : nodes_) nodes.push_back(node);
  std::sort(nodes.begin(), nodes.end(), [](const NodeInfo& a, const NodeInfo& b) {
    return std::make_pair(a.role, a.rank) < std::make_pair(b.role, b.rank);
  });
  return nodes;
}

}  // namespace kvstore
