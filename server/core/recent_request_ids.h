// RecentRequestIds: the request ids of the pushes an engine has applied, per sending node, so
// that a push retried with the same (node id, request id) is applied once (as TensorFlow's
// RecentRequestIds does for its workers). Each node keeps its last `window` ids; an id older
// than that is forgotten (a retry of it would be applied again: the window is sized well beyond
// the retries a client makes).
//
// Threading: thread-safe; its lock is a leaf (taken under the engine's lock, never the other way).
#ifndef KVSTORE_SERVER_CORE_RECENT_REQUEST_IDS_H_
#define KVSTORE_SERVER_CORE_RECENT_REQUEST_IDS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace kvstore {

// AppliedRequests: the request ids of one node's pushes an engine has applied, oldest first.
struct AppliedRequests {
  uint64_t node_id = 0;
  std::vector<uint64_t> request_ids;
};

class RecentRequestIds {
 public:
  // `window`: how many ids are remembered per node (at least 1).
  explicit RecentRequestIds(size_t window) : window_(window < 1 ? 1 : window) {}

  // Contains is true when `request_id` of `node_id` is among the node's remembered ids.
  bool Contains(uint64_t node_id, uint64_t request_id) const;
  // Record remembers an applied id (again: nothing changes), forgetting the node's oldest
  // beyond the window.
  void Record(uint64_t node_id, uint64_t request_id);
  // Export returns every node's remembered ids, oldest first, nodes in increasing id order
  // (what a checkpoint or a copy of the engine carries); Load records them.
  std::vector<AppliedRequests> Export() const;
  void Load(absl::Span<const AppliedRequests> applied);

 private:
  struct Node {
    std::deque<uint64_t> order;
    absl::flat_hash_set<uint64_t> ids;
  };
  void RecordLocked(uint64_t node_id, uint64_t request_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t window_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Node> nodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_RECENT_REQUEST_IDS_H_
