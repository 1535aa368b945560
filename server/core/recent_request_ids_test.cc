// RecentRequestIds against a reference: random streams of (node, id) records checked with a
// per-node list of the last `window` distinct ids, kept here by hand.
#include "server/core/recent_request_ids.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <thread>
#include <vector>

#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

TEST_CASE("RecentRequestIds remembers each node's last window of distinct ids") {
  TestRng rng;
  INFO(rng.Describe());
  const size_t window = static_cast<size_t>(rng.Int(1, 12));
  RecentRequestIds ids(window);
  std::map<uint64_t, std::vector<uint64_t>> reference;  // Oldest first.
  for (int step = 0; step < 2000; ++step) {
    const uint64_t node = static_cast<uint64_t>(rng.Int(2, 5));
    const uint64_t id = static_cast<uint64_t>(rng.Int(0, 40));
    std::vector<uint64_t>& kept = reference[node];
    const bool known = std::find(kept.begin(), kept.end(), id) != kept.end();
    REQUIRE(ids.Contains(node, id) == known);
    ids.Record(node, id);
    if (!known) {
      kept.push_back(id);
      if (kept.size() > window) kept.erase(kept.begin());
    }
    REQUIRE(ids.Contains(node, id));
  }
  const std::vector<AppliedRequests> exported = ids.Export();
  std::vector<uint64_t> nodes;
  for (const AppliedRequests& node : exported) {
    nodes.push_back(node.node_id);
    CHECK(node.request_ids == reference[node.node_id]);
  }
  CHECK(std::is_sorted(nodes.begin(), nodes.end()));
  CHECK(nodes.size() == reference.size());

  // A copy loaded from the export answers alike.
  RecentRequestIds copy(window);
  copy.Load(exported);
  for (uint64_t node = 2; node <= 5; ++node) {
    for (uint64_t id = 0; id <= 40; ++id) CHECK(copy.Contains(node, id) == ids.Contains(node, id));
  }
  CHECK_FALSE(ids.Contains(99, 0));
}

TEST_CASE("RecentRequestIds from several threads keeps every node's ids") {
  RecentRequestIds ids(100000);
  std::vector<std::thread> threads;
  for (uint64_t node = 2; node < 6; ++node) {
    threads.emplace_back([&ids, node] {
      for (uint64_t id = 0; id < 5000; ++id) ids.Record(node, id);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const AppliedRequests& node : ids.Export()) CHECK(node.request_ids.size() == 5000);
  CHECK(ids.Export().size() == 4);
}

}  // namespace
}  // namespace kvstore
