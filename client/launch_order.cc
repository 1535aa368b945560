#include "client/launch_order.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"

namespace kvstore {

std::vector<size_t> TakeTurns(absl::Span<const int> servers) {
  std::vector<size_t> turn(servers.size());
  absl::flat_hash_map<int, size_t> seen;
  for (size_t r = 0; r < servers.size(); ++r) turn[r] = seen[servers[r]]++;
  std::vector<size_t> order(servers.size());
  for (size_t r = 0; r < order.size(); ++r) order[r] = r;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return turn[a] != turn[b] ? turn[a] < turn[b] : servers[a] < servers[b];
  });
  return order;
}

}  // namespace kvstore
