// RoundObserver: what a ServerEngine tells about its dist_sync rounds, for metrics
// (server/grpc/kvserver_metrics.h) - the engine itself knows nothing of Prometheus.
//
// A round is one chunk's wait for one push from every worker (ServerEngine). RoundCompleted
// runs once per completed round, under the engine's lock, on the thread of the push that
// completed it: implementations must be quick and must not call back into the engine
// (relaxed atomics only). Thread-safe implementations only: pushes run on many threads.
#ifndef KVSTORE_SERVER_CORE_ROUND_OBSERVER_H_
#define KVSTORE_SERVER_CORE_ROUND_OBSERVER_H_

#include <cstdint>

#include "absl/time/time.h"

namespace kvstore {

class RoundObserver {
 public:
  virtual ~RoundObserver() = default;
  // RoundCompleted: a round completed; `last_node_id` is the worker whose push arrived last,
  // `waited` the time from the round's first push to its completion (how long the round
  // waited for its last worker).
  virtual void RoundCompleted(uint64_t last_node_id, absl::Duration waited) = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_ROUND_OBSERVER_H_
