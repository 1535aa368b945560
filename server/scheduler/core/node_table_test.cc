// Tests of NodeTable: node ids, ranks asked for and given, take-overs, views.
#include "server/scheduler/core/node_table.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <set>
#include <vector>

#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

TEST_CASE("NodeTable: asked-for ranks are kept, the others fill the free ranks in order",
          "[scheduler][node_table]") {
  TestRng rng;
  INFO(rng.Describe());
  const int servers = static_cast<int>(rng.Int(1, 5)), workers = static_cast<int>(rng.Int(1, 5));
  NodeTable table(servers, workers);
  const absl::Time now = absl::UnixEpoch();
  // Each role: a random subset of ranks asked for, in a random order of registration.
  std::vector<std::pair<NodeRole, int>> order;
  for (auto [role, size] : {std::pair{NodeRole::kServer, servers}, {NodeRole::kWorker, workers}}) {
    std::vector<int> ranks(size);
    std::iota(ranks.begin(), ranks.end(), 0);
    for (int r : ranks) order.emplace_back(role, rng.Int(0, 1) ? r : -1);
  }
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Int(0, i - 1)]);
  std::vector<uint64_t> ids;
  for (const auto& [role, rank] : order) {
    CHECK_FALSE(table.full());
    NodeInfo& node =
        table.Add(role, rank, role == NodeRole::kServer ? "127.0.0.1:1" : "", "h", now);
    CHECK(node.rank == -1);
    CHECK(node.node_id == 2 + ids.size());  // Ids from 2, in registration order.
    ids.push_back(node.node_id);
    if (rank >= 0) CHECK(table.RankHolder(role, rank) == &node);
  }
  REQUIRE(table.full());
  table.AssignRanks();
  for (auto [role, size] : {std::pair{NodeRole::kServer, servers}, {NodeRole::kWorker, workers}}) {
    std::set<int> given;
    int last_free = -1;  // Nodes without a rank asked for get the free ranks in id order.
    for (size_t i = 0; i < order.size(); ++i) {
      if (order[i].first != role) continue;
      const NodeInfo* node = table.Find(ids[i]);
      REQUIRE(node != nullptr);
      given.insert(node->rank);
      if (order[i].second >= 0) {
        CHECK(node->rank == order[i].second);
      } else {
        CHECK(node->rank > last_free);
        last_free = node->rank;
      }
    }
    CHECK(static_cast<int>(given.size()) == size);
    CHECK(*given.rbegin() == size - 1);
  }
  ClusterView view;
  table.FillView(&view);
  REQUIRE(static_cast<int>(view.servers.size()) == servers);
  for (int r = 0; r < servers; ++r) {
    CHECK(view.servers[r].rank == r);
    CHECK(table.ServerOfRank(r)->node_id == view.servers[r].node_id);
  }
  CHECK(static_cast<int>(view.worker_node_ids.size()) == workers);
  const std::vector<NodeInfo> sorted = table.Sorted();
  CHECK(std::is_sorted(sorted.begin(), sorted.end(), [](const NodeInfo& a, const NodeInfo& b) {
    return std::make_pair(a.role, a.rank) < std::make_pair(b.role, b.rank);
  }));
}

TEST_CASE("NodeTable: a take-over keeps the rank under a new id; Missing counts",
          "[scheduler][node_table]") {
  NodeTable table(2, 1);
  const absl::Time now = absl::UnixEpoch();
  CHECK(table.Missing() ==
        "registered 0 of 2 servers and 0 of 1 worker; missing 2 servers and 1 worker");
  table.Add(NodeRole::kServer, 1, "127.0.0.1:5", "a", now).num_keys = 7;
  table.Add(NodeRole::kServer, -1, "127.0.0.1:6", "b", now);
  CHECK(table.Missing() ==
        "registered 2 of 2 servers and 0 of 1 worker; missing 0 servers and 1 worker");
  table.Add(NodeRole::kWorker, -1, "", "c", now);
  table.AssignRanks();
  const NodeInfo old = *table.ServerOfRank(1);
  NodeInfo& fresh = table.TakeOver(old, "127.0.0.1:9", "d", now + absl::Seconds(3));
  CHECK(fresh.node_id == 5);
  CHECK(fresh.rank == 1);
  CHECK(fresh.replaced_address == "127.0.0.1:5");
  CHECK(fresh.num_keys == 0);
  CHECK(table.Find(old.node_id) == nullptr);
  CHECK(table.ServerOfRank(1) == &fresh);
  CHECK(table.requested_rank(fresh.node_id) == 1);
  CHECK(table.Count(NodeRole::kServer) == 2);
}

}  // namespace
}  // namespace kvstore
