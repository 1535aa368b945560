// LaunchOrder: the order in which a dense operation starts its requests (dense_transfer.h).
#ifndef KVSTORE_CLIENT_LAUNCH_ORDER_H_
#define KVSTORE_CLIENT_LAUNCH_ORDER_H_

#include <cstddef>
#include <vector>

#include "absl/types/span.h"

namespace kvstore {

// TakeTurns returns the indices of requests bound for `servers[i]` in the order to start them:
// the servers take turns (each server's first request, in the order of the servers' numbers,
// then each one's second, ...), and each server's requests keep their order. A window of
// requests in flight then spreads over every server from the start, where in the order of the
// values' parts (a big value's part on server 0, then on server 1, ...) it would reach one
// server at a time, and all the workers of a job the same one (docs/performance.md, entry 43).
std::vector<size_t> TakeTurns(absl::Span<const int> servers);

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_LAUNCH_ORDER_H_
