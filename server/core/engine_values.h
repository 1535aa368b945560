// The values a kvserver's engine (ServerEngine, server_engine.h) holds, and how pushes are
// merged into them: a key's part cut in chunks, each with its stored elements, its dist_sync
// round's buffers and its lock; the arenas that hold a key group's members back to back; key
// groups; and the pushes waiting for their rounds. Internal to the engine's files.
//
// Threading: each struct says which lock guards which field - a chunk's own lock (ChunkLock),
// or the engine's lock (named mu_ below). Chunk's methods take or expect the chunk's lock and
// never the engine's.
#ifndef KVSTORE_SERVER_CORE_ENGINE_VALUES_H_
#define KVSTORE_SERVER_CORE_ENGINE_VALUES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/compression.h"
#include "common/key.h"
#include "common/store/updater.h"
#include "common/tensor.h"
#include "server/core/byte_chunks.h"
#include "server/core/spare_buffer.h"

namespace kvstore {

// ValueSlice: which part of which value a request refers to.
struct ValueSlice {
  Key key = 0;
  DType dtype = DType::kFloat32;
  Shape shape;         // The whole value's shape.
  int64_t offset = 0;  // First flattened element held by this server.
  int64_t count = 0;   // Number of elements held by this server.
};

// IncomingValue: a slice with its bytes: count * dtype size of them, or, for a compressed push
// (float32 only), CompressedBytes(compression.type, count) bytes of codes, or, for a row-sparse
// push (`row_sparse`), `num_rows` int64 row ids followed by those rows: the slice is then the
// server's whole part of the key and every id must be a row of it.
struct IncomingValue {
  ValueSlice slice;
  ByteChunks bytes;
  CompressionParams compression;
  bool row_sparse = false;
  int64_t num_rows = 0;
  // The bytes stay valid until the push's `done` has run, not only during the call
  // (ServerEngine::Push): the engine may then keep them for the push's dist_sync round
  // instead of copying them.
  bool bytes_outlive_call = false;
};

// GroupAck: when a key group's push is acknowledged (KeyGroups::Push).
enum class GroupAck { kApplied, kOrdered };

// PackedGroup: a key group's members' elements packed in member order - the first `bytes`
// bytes of `buffer` (KeyGroups::Pull).
struct PackedGroup {
  Tensor buffer;
  size_t bytes = 0;
};

namespace engine {

using Done = std::function<void(absl::Status)>;

// MergeRule: how a chunk merges a push. At once (dist_async, or dist_sync with one worker: the
// push is the round), or into the round's sum until `workers` pushes, less those excused, have
// arrived; `dropped` workers (DropWorkers) are excused from the round after.
struct MergeRule {
  bool at_once = true;
  size_t workers = 1;
  size_t dropped = 0;
};

struct PushCall {
  uint64_t node_id = 0;
  uint64_t request_id = 0;
  int remaining = 0;  // Chunks whose round has not completed yet.
  std::vector<Done> done;
};
// Arena: one buffer holding the stored values of many small chunks back to back (the members
// of a key group, in the group's order), so that a group push is applied with one update per
// run of one dtype and a group pull is one copy. Its lock is the lock of every member chunk.
// A chunk joins an arena when a group is registered and stays in it; nothing outside the
// engine ever holds arena memory (pulls of members are copies), so it is updated in place.
struct GroupRound;  // server_engine_group_rounds.cc
struct Arena {
  absl::Mutex mu;
  Tensor buffer;
  // dist_sync rounds of whole groups in this arena, by (first byte, bytes, members); guarded
  // by the engine's mu_, as is `open_group_rounds`, how many of them are open.
  absl::flat_hash_map<std::tuple<size_t, size_t, size_t>, std::shared_ptr<GroupRound>> group_rounds;
  int open_group_rounds = 0;
};
// Chunk: one chunk of a key's part, with its round. Its fields (all but offset and count)
// are guarded by its lock, taken with ChunkLock: its own mutex, or its arena's.
struct Chunk {
  int64_t offset = 0;  // First flattened element of the whole value.
  int64_t count = 0;
  mutable absl::Mutex own_mu;
  mutable std::atomic<absl::Mutex*> mu{&own_mu};  // Changes once, to the arena's lock.
  Tensor stored;      // Replaced (copy on write) while a pull holds it; a view in an arena.
  SpareBuffer spare;  // The previous buffer, reused by the next replacement.
  Tensor sum;         // The round's merged pushes; reused across rounds.
  // The round's pushes kept as received (Merge with bytes that outlive the call, in a chunk of
  // no arena) instead of merged into `sum`: the round's last push merges them all in one pass.
  // While any are kept, `sum` holds nothing of the round; SettleHeld adds them to it.
  std::vector<ByteChunks> held;
  Tensor gather;  // A contiguous copy of one push, when one is needed.
  size_t arrived = 0;
  // Workers of the job whose push the current round does not wait for (dropped, and not
  // among its contributors): the round completes when arrived + excused reaches the number
  // of workers. Set to the number dropped when a round completes (DropWorkers).
  size_t excused = 0;
  // Set when a push completed the round's data, until EndPush settles it (under mu_).
  bool completing = false;
  // Rounds completed (dist_sync), or pushes applied (otherwise); guarded by the engine's mu_.
  int64_t rounds_done = 0;
  // Set once, under the engine's mu_ and the chunk's lock.
  std::shared_ptr<Arena> arena;
  size_t arena_offset = 0;
  // Guarded by the engine's mu_:
  std::vector<uint64_t> contributors;
  absl::Time round_started;  // When the first push of the open round arrived.
  std::vector<std::shared_ptr<PushCall>> calls;
  // rounds_started counts the completed rounds and the open one (under the engine's mu_).
  int64_t rounds_started() const { return rounds_done + (contributors.empty() ? 0 : 1); }

  // Merge takes the chunk's lock and applies one received push of it - its bytes as the
  // transport delivered them, 2bit/1bit codes when `compression` is enabled - through
  // `updater` into the stored value at once (rule.at_once), or adds it to the round's sum and,
  // when that completes the round, runs the updater on the sum (marking it `completing`).
  // Returns true when the push was applied or completed the round. A piecewise updater applying
  // a push at once reads the received pieces directly. In a round, when `bytes_outlive_call`
  // (they stay valid until the push's `done` runs) and the chunk is in no arena, pushes are
  // kept as received (`held`) and the last one merges them all in one pass: through
  // Updater::UpdateSpanOfSum straight into the stored value when the updater sums in place,
  // else into `sum` for the updater. Otherwise the first push of a round is copied into the
  // reused sum buffer and later ones added to it. Either way the result is the same, bit for bit.
  absl::StatusOr<bool> Merge(const Key& key, const ByteChunks& bytes,
                             const CompressionParams& compression, Updater* updater,
                             const MergeRule& rule, bool bytes_outlive_call = false);
  // SettleHeld adds the pushes kept in `held` to `sum` (copying the first), as Merge would
  // have, and forgets them: for every reader of `sum` and for a push that cannot be kept.
  void SettleHeld();
  // MergeSpan is Merge for a push whose bytes are contiguous (a member of a key group).
  absl::StatusOr<bool> MergeSpan(const Key& key, const void* data, Updater* updater,
                                 const MergeRule& rule);
  // Apply runs the updater on the stored value with `received` (updating a copy when a pull
  // holds the stored buffer; in place in an arena). The chunk's lock is held.
  absl::Status Apply(const Key& key, const Tensor& received, Updater* updater);
  // Writable returns the stored value to update in place: a copy of it, which replaces it,
  // when a pull still holds the stored buffer. The chunk's lock is held.
  Tensor& Writable();

 private:
  absl::StatusOr<bool> MergeCompressed(const Key& key, const ByteChunks& bytes,
                                       const CompressionParams& compression, Updater* updater,
                                       const MergeRule& rule);
  // MergeHeld merges the round's pushes in `held` (complete) through `updater`, then forgets
  // them.
  absl::Status MergeHeld(const Key& key, Updater* updater);
  // Arrive counts a push added to the round's sum; true when it completes the round (the
  // arrivals start over, the workers dropped meanwhile are excused from the next round).
  bool Arrive(const MergeRule& rule);
  // Buffer returns `*t`, made as zeros of `dtype` in the chunk's shape the first time.
  Tensor& Buffer(Tensor* t, DType dtype) const;
};
// ChunkLock holds a chunk's lock (following it into an arena).
class ChunkLock {
 public:
  explicit ChunkLock(const Chunk& chunk);
  ~ChunkLock() { mu_->Unlock(); }
  ChunkLock(const ChunkLock&) = delete;
  ChunkLock& operator=(const ChunkLock&) = delete;

 private:
  absl::Mutex* mu_;
};
struct Part {
  ValueSlice layout;      // What Init stored: the server's whole part of the key.
  bool restored = false;  // Stored by Restore; a matching Init keeps it.
  int64_t chunk_elements = 0;
  std::vector<std::unique_ptr<Chunk>> chunks;
  // A deferred Init's part, until every chunk is filled: the node sending the bytes, and
  // which chunks it has filled whole.
  std::optional<uint64_t> filling_node;
  std::vector<bool> filled;
  size_t unfilled = 0;
};
struct Group {
  int64_t held_bytes = 0;  // What the group counts against the memory budget.
  std::vector<Key> keys;
  std::vector<Chunk*> chunks;
  std::vector<size_t> offsets;  // Member i's bytes start at offsets[i]; the last is the size.
  // When every member lives in one arena, back to back in this order: the arena, where the
  // first member starts in it, and the members cut in runs of one dtype (byte ranges).
  std::shared_ptr<Arena> arena;
  size_t arena_base = 0;
  struct Run {
    DType dtype;
    size_t begin, end;
  };
  std::vector<Run> runs;
  bool group_rounds = false;  // In an arena, every member with bytes: may take group rounds.
  // ApplyInPlace runs a piecewise updater over a push of the group straight from the
  // received slices into its arena, once per run of one dtype. The arena's lock is held.
  absl::Status ApplyInPlace(const ByteChunks& bytes, Updater* updater) const;
  mutable absl::Mutex reply_mu;
  mutable Tensor reply ABSL_GUARDED_BY(reply_mu);  // Reused by KeyGroups::Pull.
};

}  // namespace engine
}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_ENGINE_VALUES_H_
