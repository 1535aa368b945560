#include "client/launch_order.h"

#include <catch2/catch.hpp>
#include <map>

#include "tests/test_util.h"

namespace kvstore {
namespace {

TEST_CASE("TakeTurns, a big value's parts: the servers take turns", "[transfer]") {
  // Three chunks on server 0, then three on server 1, then one on server 2.
  const std::vector<int> servers = {0, 0, 0, 1, 1, 1, 2};
  CHECK(TakeTurns(servers) == std::vector<size_t>{0, 3, 6, 1, 4, 2, 5});
  CHECK(TakeTurns({}).empty());
  CHECK(TakeTurns(std::vector<int>{5}) == std::vector<size_t>{0});
}

TEST_CASE("TakeTurns, random lists: a permutation, each server's order kept, turns even",
          "[transfer]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 200; ++trial) {
    const int num_servers = static_cast<int>(rng.Int(1, 5));
    std::vector<int> servers(static_cast<size_t>(rng.Int(0, 40)));
    for (int& s : servers) s = static_cast<int>(rng.Int(0, num_servers - 1));
    const std::vector<size_t> order = TakeTurns(servers);
    REQUIRE(order.size() == servers.size());
    std::vector<bool> taken(servers.size(), false);
    std::map<int, size_t> last;     // Per server: the last index started.
    std::map<int, size_t> started;  // Per server: requests started so far.
    std::map<int, size_t> total;
    for (int s : servers) ++total[s];
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t r = order[k];
      REQUIRE(r < servers.size());
      REQUIRE_FALSE(taken[r]);
      taken[r] = true;
      const int s = servers[r];
      if (started[s] > 0) REQUIRE(r > last[s]);  // In the server's own order.
      last[s] = r;
      ++started[s];
      // Turns: no server starts its n-th request while another with requests left has
      // started fewer than n - 1.
      for (const auto& [other, count] : total) {
        if (started[other] < count) REQUIRE(started[other] + 1 >= started[s]);
      }
    }
  }
}

}  // namespace
}  // namespace kvstore
