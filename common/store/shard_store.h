// ShardStore: the in-process store's key-value engine.
//
// It holds every key of the in-process `local` and `device` stores (client/local_store.h) and
// applies Init, Push (through an Updater), Pull and PushPull to them. A kvserver runs
// ServerEngine (server/core/server_engine.h) instead, which adds slices, rounds, chunks and
// request ids; both apply the same Updaters (common/store/updater.h).
//
// Every batch call validates all of its entries before changing anything: an error (NotFound for
// a key never initialised, AlreadyExists for a second Init, InvalidArgument for a shape, dtype or
// key-kind mismatch) leaves the store exactly as it was. Messages name the key and both shapes.
//
// Threading: thread-safe; one internal lock serialises the calls, so operations on a key apply
// in the order the calls were made. The Updater runs under that lock and must not call back into
// the store.
#ifndef KVSTORE_COMMON_STORE_SHARD_STORE_H_
#define KVSTORE_COMMON_STORE_SHARD_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/key.h"
#include "common/store/updater.h"
#include "common/tensor.h"

namespace kvstore {

// A key with a value: what Init and Push take.
struct KeyValue {
  Key key;
  Tensor value;
};

// TensorSpec: the dtype and shape of a stored value.
struct TensorSpec {
  DType dtype = DType::kFloat32;
  Shape shape;
};

class ShardStore {
 public:
  // Creates an empty store that merges pushes with ASSIGN.
  ShardStore();
  explicit ShardStore(std::unique_ptr<Updater> updater);

  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;

  // Init stores a copy of each value. AlreadyExists when a key is already stored or repeats in
  // the call; InvalidArgument for an undefined value or a key of the other kind; FailedPrecondition
  // for a value that is not on the CPU.
  absl::Status Init(absl::Span<const KeyValue> values);

  // Push merges each value (already summed over devices and workers) into the stored value with
  // the updater, in order. NotFound for a key never initialised; InvalidArgument when a value's
  // dtype or shape differs from the stored one.
  absl::Status Push(absl::Span<const KeyValue> values);

  // Pull copies the stored value of keys[i] into *outs[i] (sizes must match; an output may
  // appear more than once). NotFound / InvalidArgument as for Push.
  absl::Status Pull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs) const;

  // PushPull is Push(values) followed by Pull(pull_keys, outs) as one step: both are validated
  // before either is applied.
  absl::Status PushPull(absl::Span<const KeyValue> values, absl::Span<const Key> pull_keys,
                        absl::Span<Tensor* const> outs);

  // PullRows copies rows row_ids[i] (indices of the first dimension) of the value stored under
  // `key` into consecutive rows of `*rows`, which must hold exactly that many rows of its
  // dtype. NotFound for an unknown key; InvalidArgument for an id outside the value or an
  // output that does not fit.
  absl::Status PullRows(const Key& key, absl::Span<const int64_t> row_ids, Tensor* rows) const;

  // SaveUpdaterState / LoadUpdaterState: the updater's state (SaveOptimizerStates); Load keeps
  // the parts of stored keys and fails as Updater::LoadState does.
  UpdaterStateData SaveUpdaterState() const;
  absl::Status LoadUpdaterState(const UpdaterStateData& state);

  // Spec returns the dtype and shape stored under `key`; NotFound when absent.
  absl::StatusOr<TensorSpec> Spec(const Key& key) const;

  // SetUpdater replaces the updater for every later push; with `keep_state` the new updater
  // takes the old one's state first (Updater::TakeState), and on an error from that the old
  // updater stays and the error is returned.
  absl::Status SetUpdater(std::unique_ptr<Updater> updater, bool keep_state = false);
  // updater_name returns the current updater's name.
  std::string updater_name() const;

  struct Stats {
    int64_t num_keys = 0;
    int64_t num_bytes = 0;
  };
  Stats stats() const;

 private:
  absl::Status CheckKeyKind(const Key& key) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<const Tensor*> Lookup(const Key& key) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status ValidatePush(absl::Span<const KeyValue> values) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status ValidatePull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status ApplyPush(absl::Span<const KeyValue> values) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyPull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, Tensor> values_ ABSL_GUARDED_BY(mu_);
  // Whether the store holds int keys; unset until the first Init.
  std::optional<bool> int_keys_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Updater> updater_ ABSL_GUARDED_BY(mu_);
  int64_t num_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// CheckValueMatches returns InvalidArgument naming `key` and both dtypes and shapes when `value`
// (what the caller `verb`s, e.g. "pushed") differs from `spec`.
absl::Status CheckValueMatches(const Key& key, absl::string_view verb, const Tensor& value,
                               const TensorSpec& spec);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_STORE_SHARD_STORE_H_
