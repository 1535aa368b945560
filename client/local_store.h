// LocalStore: the in-process store behind the "local" and "device" types.
//
// It sums the values pushed to a key on the calling thread (reusing one merge buffer per key;
// values on GPUs are summed on the GPU and staged through pinned memory, client/gpu/staging.h)
// - with gradient compression on, each device's float32 value is quantised with its own
// residual and decoded before the sum, as MXNet's device store does - and hands the sums to a
// ShardStore - the same engine a kvserver runs - which applies the
// updater. Every operation completes before the call returns.
//
// Threading: thread-safe; one lock serialises operations, so per-key order is call order.
#ifndef KVSTORE_CLIENT_LOCAL_STORE_H_
#define KVSTORE_CLIENT_LOCAL_STORE_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "client/key_groups.h"
#include "client/kvstore.h"
#include "common/compression.h"
#include "common/store/embedding_table.h"
#include "common/store/shard_store.h"

namespace kvstore {

class LocalStore final : public KVStore {
 public:
  explicit LocalStore(std::string type) : KVStore(std::move(type)) {}

  int rank() const override { return 0; }
  int num_workers() const override { return 1; }
  absl::Status Wait(absl::Span<const Key> keys) override;
  absl::Status WaitAll() override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }
  absl::Status SetUpdater(Updater updater) override;
  absl::Status SendCommandToServers(int /*head*/, const std::string& /*body*/) override {
    return absl::OkStatus();
  }
  absl::StatusOr<int> NumDeadNodes(NodeGroup group, absl::Duration timeout) override;
  absl::Status SaveOptimizerStates(const std::string& path) override;
  absl::Status LoadOptimizerStates(const std::string& path) override;
  absl::Status Checkpoint(const std::string& dir) override;

 protected:
  absl::Status DoInit(absl::Span<const Key> keys, absl::Span<const Tensor> values) override;
  absl::Status DoPush(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                      int priority) override;
  absl::Status DoPull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs,
                      int priority) override;
  absl::Status DoPushPull(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                          absl::Span<Tensor* const> outs, int priority) override;
  absl::StatusOr<std::pair<DType, Shape>> StoredSpec(const Key& key) const override;
  absl::Status DoSetGradientCompression(const CompressionParams& params) override;
  absl::Status DoSetOptimizer(const OptimizerConfig& config) override;
  absl::Status DoPushRowSparse(absl::Span<const Key> keys, absl::Span<const RowSparse> values,
                               int priority) override;
  absl::Status DoRowSparsePull(absl::Span<const Key> keys, absl::Span<RowSparse* const> outs,
                               absl::Span<const std::vector<int64_t>> row_ids,
                               int priority) override;

  absl::Status DoInitTable(const Key& key, const TableConfig& config) override;
  absl::Status DoPullRows(const Key& key, int64_t dim, absl::Span<const int64_t> ids,
                          float* out) override;
  absl::Status DoPushRows(const Key& key, int64_t dim, absl::Span<const int64_t> ids,
                          const float* grads) override;

 private:
  // Merge sums the values of each key into one (a merge buffer when there are several).
  // With compression on, float32 values are quantised and decoded into the merge buffer.
  absl::StatusOr<std::vector<KeyValue>> Merge(absl::Span<const Key> keys,
                                              absl::Span<const Tensor> values)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // StageOutputs checks the outputs and replaces those on GPUs by a pinned host buffer per key;
  // CopyStaged then copies each key's buffer to its GPU outputs.
  absl::Status StageOutputs(absl::Span<const Key> keys, absl::Span<Tensor* const> outs,
                            std::vector<Tensor*>* host_outs,
                            std::vector<std::pair<Key, Tensor*>>* copies)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CopyStaged(const std::vector<std::pair<Key, Tensor*>>& copies)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // QuantizeAndSum quantises each float32 value of `group` with its device's residual and
  // returns the sum of the decoded values (in the key's merge buffer).
  Tensor QuantizeAndSum(const KeyGroup& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  // Tables: each push is a round of its table (as dist_async's).
  struct LocalTable {
    std::unique_ptr<EmbeddingTable> rows;
    int64_t round = 0;
  };
  absl::flat_hash_map<Key, LocalTable> tables_ ABSL_GUARDED_BY(mu_);
  ShardStore store_;
  // Per-key buffers for sums of several values, reused across pushes.
  absl::flat_hash_map<Key, Tensor> merge_buffers_ ABSL_GUARDED_BY(mu_);
  // GPU values: per key, the device buffer of their sum and the pinned host buffer through
  // which sums and pulled values pass.
  absl::flat_hash_map<Key, Tensor> gpu_scratch_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, Tensor> gpu_staging_ ABSL_GUARDED_BY(mu_);
  CompressionParams compression_ ABSL_GUARDED_BY(mu_);
  // Per key, one residual per device (position among the key's values in a push).
  absl::flat_hash_map<Key, std::vector<Tensor>> residuals_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> codes_ ABSL_GUARDED_BY(mu_);  // Scratch for one value's codes.
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_LOCAL_STORE_H_
