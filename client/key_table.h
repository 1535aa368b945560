// KeyTable: what a worker knows of its keys - each key's dtype, shape and placement on the
// servers, recorded by Init - and the planning of a call's keys into per-key work.
//
// Planning checks every key and tensor of a call against the records before anything is sent:
// a key never initialised is NotFound, a mismatched dtype or shape InvalidArgument naming the
// key and both shapes, int and string keys mixed InvalidArgument. A key listed several times in
// one call gets one KeyWork holding all its values (summed when sent) or outputs.
//
// Placement: Init cuts a value into one slice per server (common/partitioner.h: whole on one
// server below the big-value bound, else evenly over all), and each slice into chunks of at
// most the job's chunk size; the transfers send by chunk.
//
// Threading: thread-safe; planning takes a reader lock, so calls from several threads do not
// contend. Records are never dropped, so a KeyInfo pointer stays valid for the table's life.
#ifndef KVSTORE_CLIENT_KEY_TABLE_H_
#define KVSTORE_CLIENT_KEY_TABLE_H_

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "client/key_info.h"
#include "common/partitioner.h"

namespace kvstore {

class KeyTable {
 public:
  KeyTable(Partitioner partitioner, int64_t chunk_bytes)
      : partitioner_(std::move(partitioner)), chunk_bytes_(chunk_bytes) {}

  // PlanInit checks an Init's keys (not yet initialised, not repeated, all of the store's key
  // kind, values usable) and returns one KeyWork per key with a new record of its placement and
  // its value (copied to the CPU when it is on a GPU). Nothing is recorded until Record.
  absl::StatusOr<std::vector<KeyWork>> PlanInit(absl::Span<const Key> keys,
                                                absl::Span<const Tensor> values) const;
  // Record makes the keys of a completed Init known (moving their records out of `work`).
  void Record(std::vector<KeyWork>* work);

  // Plan checks a dense Push (`values`), Pull (`outs`) or PushPull (both) against the records.
  absl::StatusOr<std::vector<KeyWork>> Plan(absl::Span<const Key> keys,
                                            absl::Span<const Tensor> values,
                                            absl::Span<Tensor* const> outs) const;
  // PlanRowSparsePush checks row-sparse values against the records.
  absl::StatusOr<std::vector<KeyWork>> PlanRowSparsePush(absl::Span<const Key> keys,
                                                         absl::Span<const RowSparse> values) const;
  // PlanRowSparsePull checks the outputs and row ids, then gives each output its sorted
  // distinct ids and a zeroed row buffer, into which the rows arrive when the operation runs.
  absl::StatusOr<std::vector<KeyWork>> PlanRowSparsePull(
      absl::Span<const Key> keys, absl::Span<RowSparse* const> outs,
      absl::Span<const std::vector<int64_t>> row_ids) const;

  // Replace places every recorded key anew as `partitioner` places it (the job's servers
  // changed: client/dist_store.h). The records stay the same objects; no operation may be
  // running on them meanwhile.
  void Replace(Partitioner partitioner);

  // StoredSpec returns a key's dtype and shape; NotFound / InvalidArgument as for Plan.
  absl::StatusOr<std::pair<DType, Shape>> StoredSpec(const Key& key) const;
  // InfosOf returns the records of `keys` in order, or nothing when one is unknown or of the
  // other key kind (key groups then leave the call to the per-key path, which reports it).
  std::vector<const KeyInfo*> InfosOf(absl::Span<const Key> keys) const;
  // AcknowledgedRound returns the most acknowledged pushes (KeyInfo::acknowledged_pushes, plus
  // `extra`'s count for the record: its key groups', GroupCache::AddAcknowledged) of any key
  // with a part on server `server`: the last round that server acknowledged to this worker.
  // It reads every record (for error messages, not the hot path).
  int64_t AcknowledgedRound(int server,
                            const absl::flat_hash_map<const KeyInfo*, int64_t>& extra = {}) const;

 private:
  absl::Status CheckKeyKind(const Key& key) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::shared_ptr<KeyInfo>> Lookup(const Key& key) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Place records `info`'s slices and chunks as `partitioner` places a value of `key`.
  void Place(const Key& key, const Partitioner& partitioner, KeyInfo* info) const;

  Partitioner partitioner_ ABSL_GUARDED_BY(mu_);
  const int64_t chunk_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, std::shared_ptr<KeyInfo>> keys_ ABSL_GUARDED_BY(mu_);
  std::optional<bool> int_keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_KEY_TABLE_H_
