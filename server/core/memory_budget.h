// MemoryBudget: the bytes a kvserver's engine holds - stored values and their bookkeeping, key
// groups - against the most it may hold (ServerEngineOptions::memory_budget_bytes). What would
// go over it is refused before anything is allocated.
//
// Threading: Check, Add and held are each atomic. A caller that checks and then adds keeps the
// two together under its own lock (the engine's), as every caller that adds does.
#ifndef KVSTORE_SERVER_CORE_MEMORY_BUDGET_H_
#define KVSTORE_SERVER_CORE_MEMORY_BUDGET_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvstore {

class MemoryBudget {
 public:
  // `limit`: the most bytes that may be held (kUnlimitedBytes: no limit).
  explicit MemoryBudget(int64_t limit) : limit_(limit) {}

  // Check returns ResourceExhausted - naming `what` would take them, the bytes held and the
  // limit - when `bytes` more would take the bytes held over the limit.
  absl::Status Check(int64_t bytes, absl::string_view what) const;
  // Add counts `bytes` more (fewer when negative: released).
  void Add(int64_t bytes) { held_.fetch_add(bytes, std::memory_order_relaxed); }

  int64_t held() const { return held_.load(std::memory_order_relaxed); }
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  std::atomic<int64_t> held_{0};
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_MEMORY_BUDGET_H_
