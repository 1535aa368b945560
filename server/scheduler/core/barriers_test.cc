// Barriers against a reference: random entries, departures and deadlines over the three
// groups, checked against sets kept here by hand.
#include "server/scheduler/core/barriers.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <vector>

#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

TEST_CASE("Barriers pass when every member that has not left has entered") {
  TestRng rng;
  INFO(rng.Describe());
  const int servers = static_cast<int>(rng.Int(1, 3));
  const int workers = static_cast<int>(rng.Int(2, 5));
  // Node ids: servers 10.., workers 20...
  std::vector<uint64_t> server_ids, worker_ids;
  for (int i = 0; i < servers; ++i) server_ids.push_back(10 + i);
  for (int i = 0; i < workers; ++i) worker_ids.push_back(20 + i);
  Barriers barriers(servers, workers);
  CHECK(barriers.Size(kGroupAll) == servers + workers);
  const absl::Time t0 = absl::UnixEpoch();
  const absl::Duration timeout = absl::Seconds(10);

  std::set<uint64_t> left;
  std::map<int, std::set<uint64_t>> in;  // Reference: who is in each open barrier.
  int passes = 0, released = 0;
  auto members = [&](int group) {
    std::vector<uint64_t> m;
    if (group & kGroupServers) m.insert(m.end(), server_ids.begin(), server_ids.end());
    if (group & kGroupWorkers) m.insert(m.end(), worker_ids.begin(), worker_ids.end());
    return m;
  };
  auto passes_now = [&](int group) {
    for (uint64_t id : members(group)) {
      if (!left.count(id) && !in[group].count(id)) return false;
    }
    return !in[group].empty();
  };
  for (int step = 0; step < 400; ++step) {
    // kGroupAll (the scheduler's bit too) is the barrier over servers and workers.
    const int group = std::vector<int>{kGroupServers, kGroupWorkers, kGroupAll}[rng.Int(0, 2)] &
                      (kGroupServers | kGroupWorkers);
    const std::vector<uint64_t> m = members(group);
    const uint64_t id = m[static_cast<size_t>(rng.Int(0, static_cast<int64_t>(m.size()) - 1))];
    if (left.count(id)) continue;
    // Now and then a worker that is in no barrier leaves (an elastic job), keeping one.
    if (rng.Int(0, 30) == 0 && id >= 20 && left.size() + 1 < worker_ids.size() &&
        !in[kGroupWorkers].count(id) && !in[kGroupServers | kGroupWorkers].count(id)) {
      left.insert(id);
      for (Barriers::Passed& p : barriers.Left(id)) {
        REQUIRE(passes_now(p.group));
        in.erase(p.group);
        ++passes;
        released += static_cast<int>(p.done.size());
      }
      for (int g : {kGroupServers, kGroupWorkers, kGroupServers | kGroupWorkers}) {
        REQUIRE_FALSE(passes_now(g));
      }
      continue;
    }
    const bool already = in[group].count(id) > 0;
    Barriers::Done done = [](absl::Status) {};
    absl::StatusOr<std::optional<Barriers::Passed>> entered =
        barriers.Enter(group, id, t0, timeout, &done);
    REQUIRE(entered.ok() == !already);
    REQUIRE((done != nullptr) == already);  // Taken only when the node entered.
    if (already) continue;
    in[group].insert(id);
    REQUIRE(entered->has_value() == passes_now(group));
    if (entered->has_value()) {
      CHECK((**entered).entered == in[group].size());
      in.erase(group);
      ++passes;
      released += static_cast<int>((**entered).done.size());
    }
    REQUIRE(barriers.Living(group) ==
            barriers.Size(group) - ((group & kGroupWorkers) ? static_cast<int>(left.size()) : 0));
  }
  INFO(passes << " barriers passed");
  CHECK(passes > 0);
  // What is still open expires after its deadline, with its nodes.
  CHECK(barriers.Expire(t0 + timeout).empty());
  size_t open_nodes = 0;
  for (const auto& [group, ids] : in) open_nodes += ids.size();
  size_t expired_nodes = 0;
  for (const Barriers::Expired& e : barriers.Expire(t0 + timeout + absl::Seconds(1))) {
    CHECK(std::set<uint64_t>(e.entered.begin(), e.entered.end()) == in[e.group]);
    CHECK(e.done.size() == e.entered.size());
    expired_nodes += e.entered.size();
  }
  CHECK(expired_nodes == open_nodes);
  CHECK(barriers.TakeAll().empty());
  CHECK(barriers.Open().empty());
}

}  // namespace
}  // namespace kvstore
