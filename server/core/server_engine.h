// ServerEngine: what a kvserver does with the requests it receives, independent of gRPC.
//
// It keeps the server's shard in a ShardStore (the engine the in-process store runs too) and
// adds what a distributed job needs on top:
// - slices: a big value is split over all servers, so a server may hold only elements
//   [offset, offset + count) of a key; requests name the whole value's shape and the slice, and
//   both are checked against what Init stored;
// - dist_sync rounds: the pushes of every worker for one key are summed into a buffer reused
//   across rounds, the updater runs once on the sum, and only then are the round's pushes
//   acknowledged; dist_async applies each push as it arrives;
// - request ids: a push retried with the same (node id, request id) is applied once - a retry of
//   a push still waiting for its round waits with it, a retry of an applied push is acknowledged;
// - senders: only the job's workers (and the scheduler, node 1) may send data.
//
// Received bytes come as the chunks the transport delivered (ByteChunks) and are copied once,
// straight into the round buffer or a reused per-key staging buffer.
//
// Threading: thread-safe. Calls never block waiting for other nodes: a sync push registers a
// completion callback that runs on the thread whose push completes the round, after the
// engine's lock is released.
#ifndef KVSTORE_SERVER_CORE_SERVER_ENGINE_H_
#define KVSTORE_SERVER_CORE_SERVER_ENGINE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/key.h"
#include "common/tensor.h"
#include "server/core/shard_store.h"
#include "server/core/updater.h"

namespace kvstore {

// The scheduler's node id; it may send commands and data like a worker.
inline constexpr uint64_t kSchedulerNodeId = 1;

// Bytes as a chain of contiguous chunks (e.g. the slices a gRPC message arrived in).
using ByteChunks = std::vector<absl::Span<const uint8_t>>;

// ValueSlice: which part of which value a request refers to.
struct ValueSlice {
  Key key = 0;
  DType dtype = DType::kFloat32;
  Shape shape;         // The whole value's shape.
  int64_t offset = 0;  // First flattened element held by this server.
  int64_t count = 0;   // Number of elements held by this server.
};

// IncomingValue: a slice with its bytes (count * dtype size of them).
struct IncomingValue {
  ValueSlice slice;
  ByteChunks bytes;
};

struct ServerEngineOptions {
  // dist_sync (one update per round over every worker's push) or dist_async.
  bool sync = true;
  // The workers' node ids; a sync round waits for one push from each.
  std::vector<uint64_t> worker_node_ids;
  // How many applied request ids are remembered per node for deduplication.
  size_t dedup_window = 4096;
};

class ServerEngine {
 public:
  using Done = std::function<void(absl::Status)>;

  // Create validates the options (at least one worker id).
  static absl::StatusOr<std::unique_ptr<ServerEngine>> Create(ServerEngineOptions options,
                                                              std::unique_ptr<Updater> updater);

  // Init stores the values. AlreadyExists for a key already stored or repeated in the call;
  // InvalidArgument for an inconsistent slice or byte count; PermissionDenied for a sender that
  // is not a worker of this job. All-or-nothing.
  absl::Status Init(uint64_t node_id, absl::Span<const IncomingValue> values);

  // Push merges the values: at once (async) or when each key's round is complete (sync). `done`
  // runs exactly once: at once with the error when the request is refused (nothing applied:
  // NotFound for a key never initialised, InvalidArgument for a dtype, shape, slice or byte
  // count that does not match, FailedPrecondition for a second push of a key by one worker in
  // one round, PermissionDenied for an unknown sender), else when every value is applied.
  // `values`' bytes are read only during the call.
  void Push(uint64_t node_id, uint64_t request_id, absl::Span<const IncomingValue> values,
            Done done);

  // Pull returns a copy of each requested slice's stored elements (shape: the whole value's
  // shape when the slice is the whole value, else {count}). NotFound / InvalidArgument as for
  // Push.
  absl::StatusOr<std::vector<Tensor>> Pull(uint64_t node_id,
                                           absl::Span<const ValueSlice> slices) const;

  // SetUpdater replaces the updater for every later update.
  void SetUpdater(std::unique_ptr<Updater> updater) { store_.SetUpdater(std::move(updater)); }
  std::string updater_name() const { return store_.updater_name(); }
  ShardStore::Stats stats() const { return store_.stats(); }
  bool sync() const { return options_.sync; }

  // CheckSender returns PermissionDenied naming `node_id` unless it is a worker of this job or
  // the scheduler.
  absl::Status CheckSender(uint64_t node_id) const;

 private:
  struct PushCall {
    uint64_t node_id = 0;
    uint64_t request_id = 0;
    int remaining = 0;  // Keys whose round has not completed yet.
    std::vector<Done> done;
  };
  struct Round {
    Tensor sum;  // Reused across rounds.
    std::vector<uint64_t> contributors;
    std::vector<std::shared_ptr<PushCall>> calls;
  };
  struct NodeRequests {
    std::deque<uint64_t> applied_order;
    absl::flat_hash_set<uint64_t> applied;
    absl::flat_hash_map<uint64_t, std::shared_ptr<PushCall>> pending;
  };

  ServerEngine(ServerEngineOptions options, std::unique_ptr<Updater> updater);

  // CheckSlice verifies `slice` against what Init stored for its key.
  absl::Status CheckSlice(const ValueSlice& slice, absl::string_view verb) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  static absl::Status CheckBytes(const IncomingValue& value);
  // Staging returns the reused per-key buffer shaped like the stored slice.
  Tensor& Staging(const Key& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // StoredShape is the shape under which the ShardStore holds a slice.
  static Shape StoredShape(const ValueSlice& slice);
  void RecordApplied(uint64_t node_id, uint64_t request_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServerEngineOptions options_;
  absl::flat_hash_set<uint64_t> senders_;
  ShardStore store_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, ValueSlice> layout_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, Round> rounds_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, Tensor> staging_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, NodeRequests> requests_ ABSL_GUARDED_BY(mu_);
};

// GatherBytes copies `bytes` (chunk after chunk) into `dst`, which must hold exactly as many.
void GatherBytes(const ByteChunks& bytes, void* dst);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_SERVER_ENGINE_H_
