// OpQueue: the worker's queue of issued operations - per-key order, priority, the in-flight
// limit, tensor fusion, and Wait / WaitAll.
//
// Push, Pull and the others enqueue an Op and return. A dispatcher thread of the queue's own
// ("kv-dispatch") starts queued operations through the `start` function: an operation starts
// once every earlier operation on any of its keys has completed (per-key order: a pull after a
// push sees it), the highest priority first among those ready, at most max_inflight at a time.
// A key-group operation starts once every earlier operation has completed (checking its
// members one by one against the queue would cost what the group saves). Ready dense
// operations of one kind, priority and compression are fused into one Op - one request per
// server - while their payload stays under fusion_bytes (pushes only with
// Options::fuse_pushes).
//
// An operation's error is kept for its keys (and, for a key group, for its members) until a
// Wait on one of them or WaitAll returns it; each error is reported once.
//
// Threading: thread-safe. `start` runs on the dispatcher's thread with no lock held; the
// `done` it is given may run on any thread, once.
#ifndef KVSTORE_CLIENT_OP_QUEUE_H_
#define KVSTORE_CLIENT_OP_QUEUE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/group_plan.h"
#include "client/key_info.h"

namespace kvstore {

// Op: one issued operation - dense or row-sparse work per key, or a key group's.
struct Op {
  int priority = 0;
  Kind kind = Kind::kPush;
  int64_t bytes = 0;
  CompressionParams compression;  // For pushes: as set when the operation was issued.
  std::vector<Key> keys;          // Distinct.
  std::vector<KeyWork> work;
  // A key-group operation (keys and work empty): the group and its data.
  std::shared_ptr<GroupPlan> group;
  GroupWork group_work;
  // When it was issued (a fused operation: its first part's); kept for the timeline.
  absl::Time queued;
};

class OpQueue {
 public:
  using Start = std::function<void(Op op, OpDone done)>;
  struct Options {
    int max_inflight = 64;
    int64_t fusion_bytes = 1 << 20;
    // Whether ready pushes and push-pulls issued by separate calls may be fused. A dist_sync
    // job of several workers must not: each of its push requests waits at the server for the
    // other workers' pushes of the same chunks, fusion depends on timing, so two workers would
    // cut the same chunks into requests differently, and with each operation's bounded window
    // of requests in flight each could wait for a chunk the other has not sent yet - both
    // stalled until their deadline. Pulls are fused either way (they wait for no one).
    bool fuse_pushes = true;
  };

  // Starts the dispatcher thread.
  OpQueue(Options options, Start start);
  // Starts what is still queued, then joins the dispatcher; operations still in flight must
  // have completed (WaitAll) before the queue is destroyed.
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Enqueue issues `op`; `op.keys` lists its distinct keys (empty for a key group).
  void Enqueue(Op op);
  // Wait blocks until every operation issued so far on `keys` has completed and returns the
  // first error among them.
  absl::Status Wait(absl::Span<const Key> keys);
  // WaitAll blocks until every issued operation has completed and returns the first error.
  absl::Status WaitAll();

 private:
  using Finished = std::vector<std::pair<uint64_t, std::vector<Key>>>;

  void Dispatch();
  // InGroupBefore returns whether an unfinished key-group operation issued before `seq`
  // includes `key`.
  bool InGroupBefore(uint64_t seq, const Key& key) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Ready returns whether every earlier operation on the op's keys has completed.
  bool Ready(uint64_t seq, const Op& op) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Complete(absl::Span<const std::pair<uint64_t, std::vector<Key>>> ops,
                const absl::Status& status);
  // SpinWhile yields while `busy()` and few operations are in flight, for a bounded time,
  // before a waiter sleeps on changed_.
  template <typename Busy>
  void SpinWhile(Busy busy) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const Start start_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // Signalled when the queue or the in-flight set changes.
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Op> queued_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, absl::InlinedVector<uint64_t, 2>> unfinished_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, absl::Status> key_errors_ ABSL_GUARDED_BY(mu_);
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;
  // Every issued operation not yet completed; a key-group operation starts once it is the
  // oldest.
  std::set<uint64_t> live_ ABSL_GUARDED_BY(mu_);
  // Unfinished key-group operations, and the errors of failed ones (reported by Wait on any
  // member, or WaitAll).
  std::map<uint64_t, std::shared_ptr<GroupPlan>> group_ops_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::shared_ptr<GroupPlan>, absl::Status>> group_errors_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread dispatcher_;
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_OP_QUEUE_H_
