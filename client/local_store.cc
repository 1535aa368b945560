#include "client/local_store.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/gpu/staging.h"
#include "client/key_groups.h"
#include "common/reduce.h"
#include "common/status_macros.h"
#include "common/store/optimizer.h"
#include "common/store/updater_state.h"

namespace kvstore {

absl::StatusOr<std::vector<KeyValue>> LocalStore::Merge(absl::Span<const Key> keys,
                                                        absl::Span<const Tensor> values) {
  ASSIGN_OR_RETURN(std::vector<KeyGroup> groups, GroupByKey(keys, values));
  // Values on GPUs: summed on the GPU and staged into pinned host memory once.
  std::vector<bool> on_gpu(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    ASSIGN_OR_RETURN(on_gpu[g], gpu::AllOnGpu(groups[g].key, groups[g].values));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!on_gpu[g]) continue;
    KeyGroup& group = groups[g];
    Tensor& host = gpu_staging_[group.key];
    RETURN_IF_ERROR(gpu::SumToHost(group.key, group.values, &gpu_scratch_[group.key], &host));
    group.values = {host};
  }
  std::vector<KeyValue> merged;
  merged.reserve(groups.size());
  if (compression_.enabled()) {
    // Quantising changes the residuals: check every key before the first one is touched.
    for (const KeyGroup& group : groups) {
      ASSIGN_OR_RETURN(TensorSpec spec, store_.Spec(group.key));
      const Tensor& first = group.values.front();
      if (spec.dtype != first.dtype() || spec.shape != first.shape()) {
        return absl::InvalidArgumentError(
            absl::StrCat("key ", group.key.Quoted(), ": pushed ", DTypeName(first.dtype()),
                         ShapeToString(first.shape()), " but the stored value is ",
                         DTypeName(spec.dtype), ShapeToString(spec.shape)));
      }
    }
  }
  for (KeyGroup& group : groups) {
    if (compression_.enabled() && group.values.front().dtype() == DType::kFloat32) {
      merged.push_back(KeyValue{group.key, QuantizeAndSum(group)});
      continue;
    }
    if (group.values.size() == 1) {
      merged.push_back(KeyValue{group.key, group.values.front()});
      continue;
    }
    const Tensor& first = group.values.front();
    Tensor& buffer = merge_buffers_[group.key];
    if (!buffer.defined() || buffer.dtype() != first.dtype() || buffer.shape() != first.shape()) {
      buffer = Tensor::Zeros(first.dtype(), first.shape());
    }
    RETURN_IF_ERROR(SumInto(group.values, &buffer));
    merged.push_back(KeyValue{group.key, buffer});
  }
  return merged;
}

Tensor LocalStore::QuantizeAndSum(const KeyGroup& group) {
  const Tensor& first = group.values.front();
  const int64_t n = first.num_elements();
  Tensor& buffer = merge_buffers_[group.key];
  if (!buffer.defined() || buffer.dtype() != first.dtype() || buffer.shape() != first.shape()) {
    buffer = Tensor::Zeros(first.dtype(), first.shape());
  }
  std::vector<Tensor>& residuals = residuals_[group.key];
  while (residuals.size() < group.values.size()) {
    residuals.push_back(Tensor::Zeros(DType::kFloat32, first.shape()));
  }
  codes_.resize(CompressedBytes(compression_.type, n));
  for (size_t i = 0; i < group.values.size(); ++i) {
    Quantize(compression_, group.values[i].data_as<const float>(), residuals[i].data_as<float>(), n,
             codes_.data());
    if (i == 0) {
      Dequantize(compression_, codes_.data(), n, buffer.data_as<float>());
    } else {
      DequantizeAdd(compression_, codes_.data(), n, buffer.data_as<float>());
    }
  }
  return buffer;
}

absl::Status LocalStore::DoPushRowSparse(absl::Span<const Key> keys,
                                         absl::Span<const RowSparse> values, int /*priority*/) {
  absl::MutexLock lock(&mu_);
  // Group by key in order of first appearance, checking everything before summing.
  std::vector<Key> order;
  absl::flat_hash_map<Key, std::vector<const RowSparse*>> groups;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Key& key = keys[i];
    const RowSparse& value = values[i];
    ASSIGN_OR_RETURN(TensorSpec spec, store_.Spec(key));
    RETURN_IF_ERROR(CheckRowSparseValue(key, spec.dtype, spec.shape, value));
    auto [it, added] = groups.try_emplace(key);
    if (added) order.push_back(key);
    it->second.push_back(&value);
  }
  // The sum of a key's rows, as the dense value the updater merges.
  std::vector<KeyValue> merged;
  for (const Key& key : order) {
    const std::vector<const RowSparse*>& group = groups[key];
    const RowSparse& first = *group.front();
    Tensor& buffer = merge_buffers_[key];
    if (!buffer.defined() || buffer.dtype() != first.dtype() || buffer.shape() != first.shape()) {
      buffer = Tensor::Zeros(first.dtype(), first.shape());
    } else {
      std::memset(buffer.data(), 0, buffer.byte_size());
    }
    const int64_t row = first.row_elements();
    const size_t row_bytes = static_cast<size_t>(row) * DTypeSize(first.dtype());
    for (const RowSparse* value : group) {
      for (int64_t i = 0; i < value->num_rows(); ++i) {
        const Tensor src = Tensor::Borrow(
            static_cast<uint8_t*>(value->data().data()) + static_cast<size_t>(i) * row_bytes,
            first.dtype(), {row});
        Tensor dst = Tensor::Borrow(static_cast<uint8_t*>(buffer.data()) +
                                        static_cast<size_t>(value->row_ids()[i]) * row_bytes,
                                    first.dtype(), {row});
        RETURN_IF_ERROR(AddInto(src, &dst));
      }
    }
    merged.push_back(KeyValue{key, buffer});
  }
  return store_.Push(merged);
}

absl::Status LocalStore::DoRowSparsePull(absl::Span<const Key> keys,
                                         absl::Span<RowSparse* const> outs,
                                         absl::Span<const std::vector<int64_t>> row_ids,
                                         int /*priority*/) {
  absl::MutexLock lock(&mu_);
  std::vector<std::vector<int64_t>> unique(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSIGN_OR_RETURN(TensorSpec spec, store_.Spec(keys[i]));
    ASSIGN_OR_RETURN(unique[i],
                     CheckRowSparseOutput(keys[i], spec.dtype, spec.shape, *outs[i], row_ids[i]));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    Tensor rows = Tensor::Zeros(outs[i]->dtype(),
                                RowShape(outs[i]->shape(), static_cast<int64_t>(unique[i].size())));
    RETURN_IF_ERROR(store_.PullRows(keys[i], unique[i], &rows));
    outs[i]->Reset(std::move(unique[i]), std::move(rows));
  }
  return absl::OkStatus();
}

absl::Status LocalStore::SaveOptimizerStates(const std::string& path) {
  absl::MutexLock lock(&mu_);
  return SaveOptimizerStateFile(path, store_.SaveUpdaterState());
}

absl::Status LocalStore::LoadOptimizerStates(const std::string& path) {
  ASSIGN_OR_RETURN(UpdaterStateData state, LoadOptimizerStateFile(path));
  absl::MutexLock lock(&mu_);
  const absl::Status status = store_.LoadUpdaterState(state);
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

absl::Status LocalStore::Checkpoint(const std::string& /*dir*/) {
  return absl::FailedPreconditionError(
      absl::StrCat("Checkpoint makes kvservers write their shards; a \"", type(),
                   "\" store has none (save its values with Pull and its optimizer with "
                   "SaveOptimizerStates)"));
}

absl::Status LocalStore::DoSetOptimizer(const OptimizerConfig& config) {
  ASSIGN_OR_RETURN(std::unique_ptr<kvstore::Updater> optimizer, MakeOptimizer(config));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckKeepsState(config, store_.updater_name()));
  return store_.SetUpdater(std::move(optimizer), config.keep_state);
}

absl::Status LocalStore::DoSetGradientCompression(const CompressionParams& params) {
  absl::MutexLock lock(&mu_);
  if (params != compression_) residuals_.clear();
  compression_ = params;
  return absl::OkStatus();
}

absl::Status LocalStore::StageOutputs(absl::Span<const Key> keys, absl::Span<Tensor* const> outs,
                                      std::vector<Tensor*>* host_outs,
                                      std::vector<std::pair<Key, Tensor*>>* copies) {
  host_outs->assign(outs.begin(), outs.end());
  for (size_t i = 0; i < keys.size(); ++i) {
    RETURN_IF_ERROR(gpu::CheckUsable(keys[i], *outs[i]));
    if (outs[i]->device().is_cpu()) continue;
    // One pinned buffer per key: the value is pulled into it once and copied to each device.
    Tensor& host = gpu_staging_[keys[i]];
    if (!host.defined() || host.dtype() != outs[i]->dtype() || host.shape() != outs[i]->shape()) {
      ASSIGN_OR_RETURN(host, gpu::Pinned(outs[i]->dtype(), outs[i]->shape()));
    }
    (*host_outs)[i] = &host;
    copies->emplace_back(keys[i], outs[i]);
  }
  return absl::OkStatus();
}

absl::Status LocalStore::CopyStaged(const std::vector<std::pair<Key, Tensor*>>& copies) {
  for (const auto& [key, out] : copies) {
    RETURN_IF_ERROR(gpu::CopyTo(key, gpu_staging_.at(key), out));
  }
  return absl::OkStatus();
}

absl::Status LocalStore::DoInit(absl::Span<const Key> keys, absl::Span<const Tensor> values) {
  std::vector<KeyValue> entries;
  entries.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    RETURN_IF_ERROR(gpu::CheckUsable(keys[i], values[i]));
    if (values[i].device().is_cpu()) {
      entries.push_back(KeyValue{keys[i], values[i]});
      continue;
    }
    Tensor host = Tensor::Zeros(values[i].dtype(), values[i].shape());
    RETURN_IF_ERROR(gpu::CopyTo(keys[i], values[i], &host));
    entries.push_back(KeyValue{keys[i], host});
  }
  absl::MutexLock lock(&mu_);
  return store_.Init(entries);
}

absl::Status LocalStore::DoPush(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                                int /*priority: operations complete in call order*/) {
  RETURN_IF_ERROR(CheckDefined(keys, values, "push"));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::vector<KeyValue> merged, Merge(keys, values));
  return store_.Push(merged);
}

absl::StatusOr<std::pair<DType, Shape>> LocalStore::StoredSpec(const Key& key) const {
  absl::StatusOr<TensorSpec> spec = store_.Spec(key);
  if (!spec.ok()) return spec.status();
  return std::make_pair(spec->dtype, spec->shape);
}

absl::Status LocalStore::DoPull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs,
                                int /*priority*/) {
  absl::MutexLock lock(&mu_);
  std::vector<Tensor*> host_outs;
  std::vector<std::pair<Key, Tensor*>> copies;
  RETURN_IF_ERROR(StageOutputs(keys, outs, &host_outs, &copies));
  RETURN_IF_ERROR(store_.Pull(keys, host_outs));
  return CopyStaged(copies);
}

absl::Status LocalStore::DoPushPull(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                                    absl::Span<Tensor* const> outs, int /*priority*/) {
  RETURN_IF_ERROR(CheckDefined(keys, values, "pushpull"));
  absl::MutexLock lock(&mu_);
  std::vector<Tensor*> host_outs;
  std::vector<std::pair<Key, Tensor*>> copies;
  RETURN_IF_ERROR(StageOutputs(keys, outs, &host_outs, &copies));
  ASSIGN_OR_RETURN(std::vector<KeyValue> merged, Merge(keys, values));
  RETURN_IF_ERROR(store_.PushPull(merged, keys, host_outs));
  return CopyStaged(copies);
}

absl::Status LocalStore::Wait(absl::Span<const Key> /*keys*/) {
  // Operations complete before their call returns; errors were returned by the call itself.
  return absl::OkStatus();
}

absl::Status LocalStore::SetUpdater(Updater updater) {
  if (!updater) return absl::InvalidArgumentError("updater is empty");
  absl::MutexLock lock(&mu_);
  return store_.SetUpdater(MakeFunctionUpdater("user", std::move(updater)));
}

absl::StatusOr<int> LocalStore::NumDeadNodes(NodeGroup /*group*/, absl::Duration /*timeout*/) {
  return 0;  // No other nodes: MXNet's local store also answers 0.
}

absl::Status LocalStore::DoInitTable(const Key& key, const TableConfig& config) {
  ASSIGN_OR_RETURN(std::unique_ptr<EmbeddingTable> rows, EmbeddingTable::Create(config));
  absl::MutexLock lock(&mu_);
  tables_[key].rows = std::move(rows);
  return absl::OkStatus();
}

absl::Status LocalStore::DoPullRows(const Key& key, int64_t dim, absl::Span<const int64_t> ids,
                                    float* out) {
  absl::MutexLock lock(&mu_);
  return tables_.at(key).rows->Pull(ids, absl::MakeSpan(out, ids.size() * dim));
}

absl::Status LocalStore::DoPushRows(const Key& key, int64_t dim, absl::Span<const int64_t> ids,
                                    const float* grads) {
  absl::MutexLock lock(&mu_);
  LocalTable& table = tables_.at(key);
  RETURN_IF_ERROR(
      table.rows->Push(ids, absl::MakeConstSpan(grads, ids.size() * dim), table.round + 1));
  ++table.round;
  table.rows->EvictStale(table.round, absl::Now());
  return absl::OkStatus();
}

}  // namespace kvstore
