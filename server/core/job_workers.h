// JobWorkers: who may send data to a kvserver - the job's workers and the scheduler - and which
// workers have left an elastic job (dropped by the scheduler: they died or failed). A dropped
// worker's requests are refused; the rest of the job goes on without it.
//
// Threading: thread-safe. CheckSender takes no lock until a worker has been dropped. The engine
// changes the dropped set under its own lock too, so that a check made under the engine's lock
// holds until that lock is released.
#ifndef KVSTORE_SERVER_CORE_JOB_WORKERS_H_
#define KVSTORE_SERVER_CORE_JOB_WORKERS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace kvstore {

// The scheduler's node id; it may send commands and data like a worker.
inline constexpr uint64_t kSchedulerNodeId = 1;

class JobWorkers {
 public:
  // `worker_node_ids`: the job's workers in rank order.
  explicit JobWorkers(std::vector<uint64_t> worker_node_ids);

  // The workers in rank order, and their number (dropped ones included).
  const std::vector<uint64_t>& ids() const { return ids_; }
  size_t size() const { return ids_.size(); }

  // CheckSender returns PermissionDenied naming `node_id` unless it is a worker of the job or
  // the scheduler, and has not been dropped (naming its rank then).
  absl::Status CheckSender(uint64_t node_id) const;

  // Dropping returns the workers among `node_ids` not dropped yet, each once, in the order
  // given; ids that are not workers are left out. MarkDropped drops them and returns how many
  // workers are dropped in all.
  std::vector<uint64_t> Dropping(absl::Span<const uint64_t> node_ids) const;
  size_t MarkDropped(absl::Span<const uint64_t> node_ids);

  // dropped: how many workers have been dropped; any_dropped: whether one has.
  size_t dropped() const { return dropped_count_.load(); }
  bool any_dropped() const { return any_dropped_.load(); }

 private:
  const std::vector<uint64_t> ids_;
  absl::flat_hash_set<uint64_t> senders_;  // The workers and the scheduler; never changes.
  mutable absl::Mutex mu_;
  absl::flat_hash_set<uint64_t> dropped_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> dropped_count_{0};
  std::atomic<bool> any_dropped_{false};
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_JOB_WORKERS_H_
