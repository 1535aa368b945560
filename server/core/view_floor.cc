#include "server/core/view_floor.h"

#include "common/view_epoch.h"

namespace kvstore {

void ViewFloor::Set(uint64_t epoch, bool reads_too) {
  reads_too_.store(reads_too, std::memory_order_release);
  epoch_.store(epoch, std::memory_order_release);
}

absl::Status ViewFloor::Check(uint64_t request_epoch, bool write) const {
  const uint64_t floor = epoch_.load(std::memory_order_acquire);
  if (request_epoch >= floor || (!write && !reads_too_.load(std::memory_order_acquire))) {
    return absl::OkStatus();
  }
  return StaleViewError(request_epoch, floor);
}

}  // namespace kvstore
