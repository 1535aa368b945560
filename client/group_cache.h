// GroupCache: the key groups a worker has planned, by the fingerprint of their key lists.
//
// A training loop repeats the same few lists; the cache finds a list's plan (group_plan.h)
// without planning again, and remembers lists that cannot form a group, so that they are not
// planned again either. The group used last is kept apart: a loop that repeats one list finds
// it without hashing the list. A new group gets an id of its own, which the servers learn with
// the first request that lists its members.
//
// Threading: thread-safe.
#ifndef KVSTORE_CLIENT_GROUP_CACHE_H_
#define KVSTORE_CLIENT_GROUP_CACHE_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "client/group_plan.h"
#include "client/key_table.h"

namespace kvstore {

class GroupCache {
 public:
  // Groups remembered; servers keep more (ServerEngine::kMaxGroupsPerNode), so a group still
  // in this cache is still registered.
  static constexpr size_t kMaxGroups = 64;

  explicit GroupCache(int num_servers) : num_servers_(num_servers) {}

  // For returns the group of `keys`, planning it from `table` the first time; null when the
  // list cannot form a group (or names a key `table` does not know: the per-key path then
  // reports it).
  std::shared_ptr<GroupPlan> For(absl::Span<const Key> keys, const KeyTable& table);
  // ForInts is For for a list of integer keys that formed a group before; null otherwise (the
  // caller then lists Keys, which forms one).
  std::shared_ptr<GroupPlan> ForInts(absl::Span<const int64_t> keys);
  // Recent returns the group used last when its list has `n` keys, without comparing them: the
  // check of the call's tensors compares them on the way (one pass over the call, not two).
  std::shared_ptr<GroupPlan> Recent(size_t n);
  // Reset forgets every group (their plans' counts go to their members) and plans the next
  // ones for `num_servers` servers (the job's servers changed: client/dist_store.h).
  void Reset(int num_servers);
  // num_servers: the servers the groups are planned for now.
  int num_servers() const {
    absl::MutexLock lock(&mu_);
    return num_servers_;
  }
  // AddAcknowledged adds, per member record, the acknowledged pushes of the groups remembered
  // (GroupPlan::acknowledged_pushes) to `*extra`. A group forgotten while an operation still
  // holds it counts again once that ends (its plan then adds its count to its members).
  void AddAcknowledged(absl::flat_hash_map<const KeyInfo*, int64_t>* extra);

 private:
  mutable absl::Mutex mu_;
  int num_servers_ ABSL_GUARDED_BY(mu_);
  // Null for lists that cannot form a group.
  absl::flat_hash_map<uint64_t, std::shared_ptr<GroupPlan>> groups_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::shared_ptr<GroupPlan> last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_GROUP_CACHE_H_
