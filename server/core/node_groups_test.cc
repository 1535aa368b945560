// NodeGroups against a reference: random registrations by several nodes, checked against a
// per-node list of (id, bytes) kept here by hand, with the bytes freed by every drop.
#include "server/core/node_groups.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <vector>

#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

struct FakeGroup {
  int64_t held_bytes = 0;
};

TEST_CASE("NodeGroups keeps each node's last registrations and says what drops free") {
  TestRng rng;
  INFO(rng.Describe());
  const size_t max = static_cast<size_t>(rng.Int(1, 6));
  NodeGroups<FakeGroup> groups(max);
  // Per node: registration order of (id, bytes); a re-registered id keeps its place.
  std::map<uint64_t, std::vector<std::pair<uint64_t, int64_t>>> reference;
  for (int step = 0; step < 3000; ++step) {
    const uint64_t node = static_cast<uint64_t>(rng.Int(2, 4));
    const uint64_t id = static_cast<uint64_t>(rng.Int(0, 9));
    const int64_t bytes = rng.Int(1, 1000);
    auto& kept = reference[node];
    auto found = std::find_if(kept.begin(), kept.end(), [&](auto& e) { return e.first == id; });
    REQUIRE(groups.HeldBytes(node, id) == (found == kept.end() ? 0 : found->second));
    auto group = std::make_shared<FakeGroup>();
    group->held_bytes = bytes;
    const int64_t freed = groups.Put(node, id, group);
    int64_t want_freed = 0;
    if (found != kept.end()) {
      found->second = bytes;
    } else {
      kept.emplace_back(id, bytes);
      while (kept.size() > max) {
        want_freed += kept.front().second;
        kept.erase(kept.begin());
      }
    }
    REQUIRE(freed == want_freed);
    REQUIRE(groups.Find(node, id) == group);
  }
  for (const auto& [node, kept] : reference) {
    for (uint64_t id = 0; id <= 9; ++id) {
      auto found = std::find_if(kept.begin(), kept.end(), [&](auto& e) { return e.first == id; });
      const std::shared_ptr<const FakeGroup> group = groups.Find(node, id);
      CHECK((group != nullptr) == (found != kept.end()));
      if (group != nullptr) CHECK(group->held_bytes == found->second);
    }
  }
  CHECK(groups.Find(99, 0) == nullptr);
}

}  // namespace
}  // namespace kvstore
