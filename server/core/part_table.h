// PartTable: the parts of keys a kvserver's engine stores, by key, and the checks that every
// request naming them passes: a slice against its value's shape and the largest value, the
// bytes received against the slice, a slice against the part Init stored (its dtype, shape and
// chunks, or its rows), and a new part against the keys already held.
//
// A part is cut in chunks of chunk_bytes when Init stores it (ChunkSlice); a request names one
// chunk (FindChunk), or, for row-sparse requests, the whole part (FindRows). What a part counts
// against the engine's memory budget (HeldBytes) is its elements' bytes, kPartOverheadBytes and
// the key's text, and kChunkOverheadBytes per chunk.
//
// Threading: not thread-safe; the engine guards it with its lock. The parts and chunks it
// returns stay where they are while the table lives (parts are never removed).
#ifndef KVSTORE_SERVER_CORE_PART_TABLE_H_
#define KVSTORE_SERVER_CORE_PART_TABLE_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/key.h"
#include "server/core/engine_values.h"

namespace kvstore {

class PartTable {
 public:
  using Parts = absl::flat_hash_map<Key, std::unique_ptr<engine::Part>>;
  static constexpr int64_t kPartOverheadBytes = 256;
  static constexpr int64_t kChunkOverheadBytes = 512;

  // max_value_bytes: the largest value (over every server) a slice may name; chunk_bytes: the
  // size of a part's chunks.
  PartTable(int64_t max_value_bytes, int64_t chunk_bytes)
      : max_value_bytes_(max_value_bytes), chunk_bytes_(chunk_bytes) {}

  // CheckSlice checks a slice against its shape (InvalidArgument naming the key for a negative
  // dimension, an element count that overflows int64, a slice outside the value) and the shape
  // against max_value_bytes (ResourceExhausted). CheckBytes also checks the bytes received
  // for it (its count of elements, or of 2bit/1bit codes of float32 elements).
  absl::Status CheckSlice(const ValueSlice& slice) const;
  absl::Status CheckBytes(const IncomingValue& value) const;

  // CheckInit checks one value of an Init (with no bytes when `deferred`: they follow in
  // fills): never compressed, CheckBytes, a key of the kind the table holds (or of `first`'s
  // kind, the call's first key, while it holds none), and a key not stored yet - except a part
  // restored from a checkpoint with the same layout, for which it returns false (the
  // checkpoint's value stands); true for a new part. AlreadyExists for a key stored.
  absl::StatusOr<bool> CheckInit(const IncomingValue& value, bool deferred, const Key& first) const;
  // Fill: what a new part's chunks hold until `node_id`'s fills, when its bytes follow.
  enum class Fill {
    kNone,   // Its bytes are given with it.
    kZeros,  // Zeros until filled (a worker's deferred Init: a pull may come first).
    kUnset,  // Not set: every byte is filled before any is read (a copy streamed in).
  };
  // Add stores the part `value` (checked by CheckInit) describes, cut in chunks holding its
  // bytes, or waiting for `node_id`'s fills as `fill` says.
  void Add(const IncomingValue& value, Fill fill, uint64_t node_id);
  // Remove removes the part of `key`, if any (a copy abandoned before it was complete).
  void Remove(const Key& key);
  // HeldBytes returns what a part of `slice`'s layout counts against the memory budget (the
  // slice is valid: CheckSlice).
  int64_t HeldBytes(const ValueSlice& slice) const;

  // Find returns the part of `slice`'s key after checking its dtype and shape: NotFound for a
  // key never initialised, InvalidArgument naming the key and both otherwise; `verb` says
  // what the request did ("pushed", "pulled", ...).
  absl::StatusOr<engine::Part*> Find(const ValueSlice& slice, absl::string_view verb) const;
  // FindChunk returns the chunk `slice` names exactly (Find, then its offset and count).
  absl::StatusOr<engine::Chunk*> FindChunk(const ValueSlice& slice, absl::string_view verb) const;
  // FindRows checks that `slice` is exactly the part Init stored, of rank >= 1 and cut in whole
  // rows (row-sparse requests).
  absl::StatusOr<engine::Part*> FindRows(const ValueSlice& slice, absl::string_view verb) const;
  // Get returns the part of `key`, or null.
  engine::Part* Get(const Key& key) const;

  // all returns every part (the parts themselves may be changed through it).
  const Parts& all() const { return parts_; }
  // num_bytes: the stored elements' bytes.
  int64_t num_bytes() const { return num_bytes_; }

 private:
  const int64_t max_value_bytes_;
  const int64_t chunk_bytes_;
  Parts parts_;
  std::optional<bool> int_keys_;  // The kind of every key held, once one is.
  int64_t num_bytes_ = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_PART_TABLE_H_
