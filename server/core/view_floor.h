// ViewFloor: the oldest view epoch (common/view_epoch.h) whose requests an engine still serves.
// When a replacement kvserver joins, the copies it reads from raise it for writes and the joiner
// for every request: a request routed by an older view is refused with StaleViewError, and the
// worker sends it again by the new view, so that no write misses the new copy.
//
// Threading: thread-safe, lock-free.
#ifndef KVSTORE_SERVER_CORE_VIEW_FLOOR_H_
#define KVSTORE_SERVER_CORE_VIEW_FLOOR_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"

namespace kvstore {

class ViewFloor {
 public:
  // Set refuses from now on writes routed by a view older than `epoch` (every request with
  // `reads_too`); 0 refuses none.
  void Set(uint64_t epoch, bool reads_too);
  // Check returns StaleViewError for a request of `request_epoch` that Set refuses.
  absl::Status Check(uint64_t request_epoch, bool write) const;
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

 private:
  std::atomic<uint64_t> epoch_{0};
  std::atomic<bool> reads_too_{false};
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_VIEW_FLOOR_H_
