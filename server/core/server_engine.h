// ServerEngine: what a kvserver does with the requests it receives, independent of gRPC.
//
// It holds the server's shard (applying the same Updaters as the in-process store's ShardStore)
// and adds what a distributed job needs:
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
// - chunks: a part bigger than the chunk size is held and updated chunk by chunk, each chunk
//   with its own round, lock and buffers, so that chunks arriving on several connections are
//   summed and updated in parallel while the rest is still on the wire.
// - elastic jobs: workers that left the job (DropWorkers) are no longer waited for; their later
//   requests are refused.
//
// Compressed pushes (2bit, 1bit) are decoded into the chunk's buffers - the round's sum, or a
// scratch value applied at once - and then merged like any push.
//
// Received bytes come as the slices the transport delivered (ByteChunks). A piecewise updater
// (assign, sum) with one push per round is applied straight from them. A round of several
// pushes whose bytes outlive their calls (the gRPC and shared-memory transports keep them
// until the reply) keeps them as received, and its last push merges them all in one pass:
// for assign and sum straight into the stored value (Updater::UpdateSpanOfSum), for other
// updaters into the chunk's reused sum buffer first. Otherwise the first push of a round is
// copied into that buffer and later ones are added from the slices. Pulls return handles on the
// stored buffers, without copying (copy on write), except for the members of a key group's arena
// (see Arena), which are updated in place and pulled as copies.
//
// Threading: thread-safe. The engine's lock guards bookkeeping only; data moves under each
// chunk's lock. Calls never block waiting for other nodes: a sync push registers a completion
// callback that runs on the thread whose push completes the round, after the locks are
// released.
#ifndef KVSTORE_SERVER_CORE_SERVER_ENGINE_H_
#define KVSTORE_SERVER_CORE_SERVER_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/compression.h"
#include "common/key.h"
#include "common/partitioner.h"
#include "common/store/shard_store.h"
#include "common/store/updater.h"
#include "common/tensor.h"
#include "server/core/byte_chunks.h"
#include "server/core/engine_values.h"
#include "server/core/job_workers.h"
#include "server/core/memory_budget.h"
#include "server/core/part_table.h"
#include "server/core/recent_request_ids.h"
#include "server/core/round_observer.h"
#include "server/core/spare_buffer.h"
#include "server/core/updater_slot.h"
#include "server/core/view_floor.h"

namespace kvstore {

// StoredPart: a server's part of a key as Init stored it, with its current elements.
struct StoredPart {
  ValueSlice layout;
  Tensor data;  // layout.count elements of layout.dtype.
  // The dist_sync rounds each chunk of the part has completed, in element order (Snapshot
  // fills it; Restore applies it when given, for a copy that carries on from the same round).
  std::vector<int64_t> chunk_rounds;
};

// EngineSnapshot: what a checkpoint holds of an engine.
struct EngineSnapshot {
  std::vector<StoredPart> parts;
  UpdaterStateData updater_state;
};

// kDefaultMaxValueBytes: the largest value (in bytes, over every server) an engine accepts
// unless its options say otherwise.
inline constexpr int64_t kDefaultMaxValueBytes = int64_t{4} << 30;
// kUnlimitedBytes: a memory budget without a limit.
inline constexpr int64_t kUnlimitedBytes = std::numeric_limits<int64_t>::max();

struct ServerEngineOptions {
  // dist_sync (one update per round over every worker's push) or dist_async.
  bool sync = true;
  // The workers' node ids; a sync round waits for one push from each.
  std::vector<uint64_t> worker_node_ids;
  // How many applied request ids are remembered per node for deduplication.
  size_t dedup_window = 4096;
  // A key's part bigger than this is held, pushed, pulled and updated in chunks of this many
  // bytes (ChunkSlice); every request names exactly one chunk of it.
  int64_t chunk_bytes = kDefaultChunkBytes;
  // The largest value, in bytes: the whole value of a key, over every server. A request naming
  // a bigger one (Init, fill, push), or a row-sparse pull whose reply would be bigger, is
  // refused with ResourceExhausted before anything is allocated.
  int64_t max_value_bytes = kDefaultMaxValueBytes;
  // The most bytes the engine may hold (held_bytes): an Init or a key group registration that
  // would take it further is refused with ResourceExhausted, changing nothing.
  int64_t memory_budget_bytes = kUnlimitedBytes;
  // Whether the updater passed to Create was chosen (a kvserver --updater, a restored
  // checkpoint). When false, dist_sync applies it (ASSIGN, MXNet's default), but dist_async
  // refuses every push with FailedPrecondition naming the key until SetUpdater is called (a
  // worker's SetOptimizer or SendCommandToServers(0, ...)), as MXNet refuses with "Updater
  // needs to be set for async mode": assigning each worker's gradient in turn is never what an
  // asynchronous job means.
  bool updater_chosen = true;

  // Told of every completed dist_sync round (optional; see round_observer.h).
  std::shared_ptr<RoundObserver> round_observer;
};

class EngineCuts;
class EngineState;
class KeyGroups;

class ServerEngine {
 public:
  using Done = std::function<void(absl::Status)>;

  // Create validates the options (at least one worker id, a positive chunk size, value limit
  // and budget).
  static absl::StatusOr<std::unique_ptr<ServerEngine>> Create(ServerEngineOptions options,
                                                              std::unique_ptr<Updater> updater);
  ~ServerEngine();

  // Init stores the values (each a server's whole part of a key). AlreadyExists for a key
  // already stored or repeated in the call; InvalidArgument for an inconsistent slice or byte
  // count, a negative dimension, a shape whose element count overflows int64, or mixed key
  // kinds; ResourceExhausted for a value over max_value_bytes or values that would take the
  // engine over its memory budget; PermissionDenied for a sender that is not a worker of this
  // job. All-or-nothing. With `deferred` the values carry no bytes: the parts hold zeros until
  // InitFill of the same node fills them.
  absl::Status Init(uint64_t node_id, absl::Span<const IncomingValue> values,
                    bool deferred = false);
  // InitFill copies stretches of parts created by a deferred Init of `node_id` (each value a
  // stretch of its part, with its bytes). NotFound for a key never initialised;
  // FailedPrecondition for a part not waiting for this node's bytes (created whole, by another
  // node, or already complete); InvalidArgument for a dtype, shape, stretch or byte count that
  // does not match. Parts restored from a checkpoint keep their values. All-or-nothing.
  absl::Status InitFill(uint64_t node_id, absl::Span<const IncomingValue> values);

  // Push merges the values - each one chunk of a key - at once (async) or when the chunk's
  // round is complete (sync). `done` runs exactly once: at once with the error when the request
  // is refused (nothing applied: NotFound for a key never initialised, InvalidArgument for a
  // dtype, shape, slice or byte count that does not match, FailedPrecondition for a second push
  // of a chunk by one worker in one round, PermissionDenied for an unknown sender), else when
  // every value is applied. `values`' bytes are read only during the call, except those of a
  // value marked `bytes_outlive_call`, which the caller keeps valid until `done` has run: a
  // dist_sync round then keeps them until its last push instead of copying them.
  void Push(uint64_t node_id, uint64_t request_id, absl::Span<const IncomingValue> values,
            Done done);

  // Key groups (key_groups.h): long lists of small keys registered once and pushed and pulled
  // packed. A node keeps its last kMaxGroupsPerNode groups.
  static constexpr size_t kMaxGroupsPerNode = 256;
  using Ack = GroupAck;
  KeyGroups& groups() { return *groups_; }
  const KeyGroups& groups() const { return *groups_; }

  // Pull returns each requested chunk's stored elements as a read-only handle on the stored
  // buffer (no copy): the engine never writes a buffer while a handle on it is alive - an update
  // then moves the chunk to a second buffer. A chunk in an arena is returned as a copy.
  // NotFound / InvalidArgument as for Push.
  absl::StatusOr<std::vector<Tensor>> Pull(uint64_t node_id,
                                           absl::Span<const ValueSlice> slices) const;

  // PullRows returns rows `row_ids` (indices of the first dimension, in order; repeats allowed)
  // of the part `part` names - the server's whole part of the key, as Init stored it - as one
  // tensor of shape {row_ids.size(), shape[1:]...}. InvalidArgument naming the key for an id
  // outside the part or a part that does not match; NotFound for an unknown key;
  // ResourceExhausted when those rows, after `reply_bytes` bytes already in the same reply,
  // would make a reply bigger than max_value_bytes.
  absl::StatusOr<Tensor> PullRows(uint64_t node_id, const ValueSlice& part,
                                  absl::Span<const int64_t> row_ids, int64_t reply_bytes = 0) const;

  // What checkpoints and copies of the engine take and restore (engine_state.h).
  EngineState& state() { return *state_; }
  const EngineState& state() const { return *state_; }

  // Consistent cuts (engine_cuts.h): the engine's part of a checkpoint of the whole job at one
  // dist_sync round, and the pushes a cut holds meanwhile.
  EngineCuts& cuts() { return *cuts_; }
  const EngineCuts& cuts() const { return *cuts_; }
  // View epochs (common/view_epoch.h, view_floor.h): the floor below which the engine refuses,
  // with StaleViewError, writes routed by an older view (every request, with reads_too).
  ViewFloor& view_floor() { return view_floor_; }
  const ViewFloor& view_floor() const { return view_floor_; }
  // FailRounds fails every push waiting for a dist_sync round (the job failed: a worker died
  // or failed, `reason` says which) with Aborted naming the key, the round and `reason`, and
  // every later push at once; the held pushes of a cut too. The stored values stay as the last
  // completed round left them.
  void FailRounds(const std::string& reason);
  // DropWorkers removes workers that left an elastic job (the scheduler says which: they died or
  // finished as failed) from the workers a dist_sync round waits for; ids that are not workers
  // of this job, or were dropped before, are ignored. Every open round that has now the push
  // of every remaining worker completes at once - the updater runs on its sum and its waiting
  // pushes are answered - and later rounds wait only for the remaining workers. A dropped
  // worker's push already received in an open round stays in that round's sum (it counts as
  // one of the round's pushes); its later requests (pushes, pulls, Init, commands, including a
  // push a cut holds) are refused with PermissionDenied naming it. Open rounds of whole key
  // groups go member by member from then on (server_engine_drop.cc). Returns the number of
  // rounds (chunks) completed.
  int64_t DropWorkers(absl::Span<const uint64_t> node_ids);
  // workers: who may send (CheckSender: a worker of this job or the scheduler, not dropped),
  // and how many workers DropWorkers has dropped.
  const JobWorkers& workers() const { return workers_; }

  // SetUpdater replaces the updater (and with it any optimizer state). In dist_sync it takes
  // effect between rounds: at once when no round is open, else when the open rounds have
  // completed - a round never mixes two updaters.
  // With `keep_state` the new updater takes the state of the one it replaces, at the switch
  // (Updater::TakeState; a failure there is logged and the new updater starts afresh).
  void SetUpdater(std::unique_ptr<Updater> updater, bool keep_state = false);
  std::string updater_name() const { return updater_.name(); }
  ShardStore::Stats stats() const;
  // held_bytes returns what the memory budget counts: the stored values' bytes, plus
  // kPartOverheadBytes (and the key's text) per key, kChunkOverheadBytes per chunk, and per key
  // group kGroupMemberOverheadBytes per member plus its packed size.
  int64_t held_bytes() const;
  const ServerEngineOptions& options() const { return options_; }
  static constexpr int64_t kPartOverheadBytes = PartTable::kPartOverheadBytes;
  static constexpr int64_t kChunkOverheadBytes = PartTable::kChunkOverheadBytes;
  static constexpr int64_t kGroupMemberOverheadBytes = 64;
  bool sync() const { return options_.sync; }
  // rounds is true when a push waits for the other workers' pushes (dist_sync with several
  // workers); otherwise each push is applied as it arrives and tracked by its request id only.
  bool rounds() const { return options_.sync && options_.worker_node_ids.size() > 1; }

  // A chunk updated while a pull still holds its buffer moves to another buffer (copy on
  // write); the previous one is kept for the chunk's next such update while the spares of the
  // whole process stay under kSpareBytes, and freed once the pull is sent otherwise (so that a
  // big value is not held twice). SpareBuffer::BytesHeld() returns the bytes kept.
  static constexpr int64_t kSpareBytes = SpareBuffer::kMaxBytes;

 private:
  // Parts of the engine that drive its rounds, sharing its lock.
  friend class EngineCuts;
  friend class EngineState;
  // InitParts is Init, the new parts' chunks holding what `fill` says until filled
  // (EngineState::InitUnset).
  absl::Status InitParts(uint64_t node_id, absl::Span<const IncomingValue> values,
                         PartTable::Fill fill);
  friend class KeyGroups;
  using PushCall = engine::PushCall;
  using Chunk = engine::Chunk;
  using ChunkLock = engine::ChunkLock;
  using Part = engine::Part;
  struct NodeRequests {
    absl::flat_hash_map<uint64_t, std::shared_ptr<PushCall>> pending;
  };

  ServerEngine(ServerEngineOptions options, std::unique_ptr<Updater> updater);

  // ExpandRowSparse replaces each row-sparse value by one dense value per chunk of its part
  // (zero outside the pushed rows, repeated rows added), whose bytes live in `storage`; other
  // values are passed through. A dist_sync round counts a row-sparse push as a push of every
  // chunk of the part.
  absl::Status ExpandRowSparse(absl::Span<const IncomingValue> values,
                               std::vector<IncomingValue>* expanded,
                               std::vector<std::vector<uint8_t>>* storage) const;
  // CheckRound refuses a second push of `chunk` by `node_id` in one open dist_sync round.
  absl::Status CheckRound(const Key& key, const Chunk& chunk, uint64_t node_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // BeginPush registers a validated push of `chunks` (dedup by request id, round membership).
  // Returns null when `done` has been taken over (a retry of a pending push) or must be called
  // at once with `*error` (an error, or OK for a retry of an applied push).
  std::shared_ptr<PushCall> BeginPush(uint64_t node_id, uint64_t request_id,
                                      absl::Span<Chunk* const> chunks, Done* done,
                                      absl::Status* error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // EndPush settles the rounds of the `completed` chunks and calls the `done` of every push
  // that has now been applied in full (`call` itself when it pushed nothing), with `error`.
  void EndPush(const std::shared_ptr<PushCall>& call, bool empty,
               absl::Span<Chunk* const> completed, const absl::Status& error);
  // FinishCall records `call` as applied and moves its `done`s into `*finished`.
  void FinishCall(PushCall* call, std::vector<Done>* finished) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // merge_rule says how chunks merge pushes now (engine_values.h).
  engine::MergeRule merge_rule() const;
  // EndRound closes `chunk`'s open round, if any, once its waiting pushes have been answered
  // (or queued to be): it is counted and observed, and its contributors and calls forgotten.
  void EndRound(Chunk* chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SwapUpdaterIfIdle installs the queued updater when it may (UpdaterSlot::InstallIfIdle).
  void SwapUpdaterIfIdle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const ServerEngineOptions options_;
  // Who may send, and which workers left the job (changed under mu_ too: DropWorkers).
  JobWorkers workers_;
  // The request ids applied per node (deduplication; recorded under mu_).
  RecentRequestIds applied_;
  // What the engine holds against its budget (checked and added under mu_).
  MemoryBudget budget_;
  // The updater applied, and a replacement waiting for the rounds to close.
  UpdaterSlot updater_;
  mutable absl::Mutex mu_;
  // The parts stored, and the checks of the requests that name them.
  PartTable parts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, NodeRequests> requests_ ABSL_GUARDED_BY(mu_);
  // The key groups each node has registered, their arenas and their dist_sync rounds.
  std::unique_ptr<KeyGroups> groups_;
  // Chunks whose dist_sync round has started and not completed, and an updater waiting for
  // their number to reach zero.
  int64_t open_rounds_ ABSL_GUARDED_BY(mu_) = 0;
  // Pushes registered and not yet finished, outside dist_sync rounds (a cut waits for them).
  int64_t pushes_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // The cut under way and the pushes it holds.
  std::unique_ptr<EngineCuts> cuts_;
  std::unique_ptr<EngineState> state_;
  ViewFloor view_floor_;
  // Set by FailRounds: every later push fails with it.
  std::string failed_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_SERVER_ENGINE_H_
