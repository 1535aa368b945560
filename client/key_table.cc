#include "client/key_table.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/gpu/staging.h"
#include "client/key_groups.h"
#include "common/status_macros.h"
#include "common/store/shard_store.h"

namespace kvstore {

absl::Status KeyTable::CheckKeyKind(const Key& key) const {
  if (int_keys_.has_value() && *int_keys_ != key.is_int()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", key.Quoted(), " is a ", key.KindName(), " key but this store holds ",
                     *int_keys_ ? "int" : "string", " keys; int and string keys cannot be mixed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<KeyInfo>> KeyTable::Lookup(const Key& key) const {
  RETURN_IF_ERROR(CheckKeyKind(key));
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    return absl::NotFoundError(absl::StrCat("key ", key.Quoted(), " was never initialised"));
  }
  return it->second;
}

absl::StatusOr<std::vector<KeyWork>> KeyTable::PlanInit(absl::Span<const Key> keys,
                                                        absl::Span<const Tensor> values) const {
  std::vector<KeyWork> work;
  absl::ReaderMutexLock lock(&mu_);
  absl::flat_hash_set<Key> seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Key& key = keys[i];
    RETURN_IF_ERROR(gpu::CheckUsable(key, values[i]));
    RETURN_IF_ERROR(CheckKeyKind(key));
    if (key.is_int() != keys.front().is_int()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", key.Quoted(), " is a ", key.KindName(), " key but the same call has ",
          keys.front().KindName(), " keys; int and string keys cannot be mixed"));
    }
    if (keys_.contains(key) || !seen.insert(key).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("key ", key.Quoted(), " is already initialised"));
    }
    auto info = std::make_shared<KeyInfo>();
    info->dtype = values[i].dtype();
    info->shape = values[i].shape();
    info->bytes = static_cast<int64_t>(values[i].byte_size());
    Place(key, partitioner_, info.get());
    Tensor value = values[i];
    if (!value.device().is_cpu()) {
      value = Tensor::Zeros(value.dtype(), value.shape());
      RETURN_IF_ERROR(gpu::CopyTo(key, values[i], &value));
    }
    work.push_back(KeyWork{key, std::move(info), {value}, {}});
  }
  return work;
}

void KeyTable::Place(const Key& key, const Partitioner& partitioner, KeyInfo* info) const {
  info->slices = partitioner.Partition(key, NumElements(info->shape), RowElements(info->shape));
  info->chunks.clear();
  info->alone.clear();
  const size_t element = DTypeSize(info->dtype);
  for (const Slice& slice : info->slices) {
    const std::vector<Slice> chunks = ChunkSlice(slice, element, chunk_bytes_);
    for (const Slice& chunk : chunks) {
      info->chunks.push_back(chunk);
      info->alone.push_back(chunks.size() > 1);
    }
  }
}

void KeyTable::Replace(Partitioner partitioner) {
  absl::MutexLock lock(&mu_);
  partitioner_ = std::move(partitioner);
  for (auto& [key, info] : keys_) Place(key, partitioner_, info.get());
}

void KeyTable::Record(std::vector<KeyWork>* work) {
  absl::MutexLock lock(&mu_);
  if (!work->empty()) int_keys_ = work->front().key.is_int();
  for (KeyWork& entry : *work) {
    // Placed as the table places keys now: the servers may have changed since PlanInit.
    Place(entry.key, partitioner_, entry.info.get());
    keys_[entry.key] = std::move(entry.info);
  }
}

absl::StatusOr<std::vector<KeyWork>> KeyTable::Plan(absl::Span<const Key> keys,
                                                    absl::Span<const Tensor> values,
                                                    absl::Span<Tensor* const> outs) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<KeyWork> work;
  work.reserve(keys.size());
  // A key listed more than once gets one entry, its values summed. A short list is searched
  // as it is; a hash map would cost more than the search (most calls name one key).
  constexpr size_t kSearchedKeys = 16;
  absl::flat_hash_map<Key, size_t> index;
  auto entry_of = [&](const Key& key) -> size_t {
    if (keys.size() <= kSearchedKeys) {
      for (size_t w = 0; w < work.size(); ++w) {
        if (work[w].key == key) return w;
      }
      return work.size();
    }
    return index.emplace(key, work.size()).first->second;
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    const Key& key = keys[i];
    ASSIGN_OR_RETURN(std::shared_ptr<KeyInfo> info, Lookup(key));
    const TensorSpec spec{info->dtype, info->shape};
    const size_t w = entry_of(key);
    if (w == work.size()) work.push_back(KeyWork{key, std::move(info), {}, {}});
    KeyWork& entry = work[w];
    if (!values.empty()) {
      RETURN_IF_ERROR(CheckValueMatches(key, "pushed", values[i], spec));
      entry.values.push_back(values[i]);
    }
    if (!outs.empty()) {
      RETURN_IF_ERROR(gpu::CheckUsable(key, *outs[i]));
      RETURN_IF_ERROR(CheckValueMatches(key, "output", *outs[i], spec));
      entry.outs.push_back(outs[i]);
      // Outputs on GPUs: the value is received into the key's pinned buffer and copied to
      // every output when the operation completes.
      if (!outs[i]->device().is_cpu()) entry.via_host = true;
    }
  }
  // The values of one key are all on GPUs (summed there) or all on the CPU.
  for (const KeyWork& entry : work) {
    if (!entry.values.empty()) {
      RETURN_IF_ERROR(gpu::AllOnGpu(entry.key, entry.values).status());
    }
  }
  return work;
}

absl::StatusOr<std::vector<KeyWork>> KeyTable::PlanRowSparsePush(
    absl::Span<const Key> keys, absl::Span<const RowSparse> values) const {
  std::vector<KeyWork> work;
  absl::ReaderMutexLock lock(&mu_);
  absl::flat_hash_map<Key, size_t> index;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Key& key = keys[i];
    ASSIGN_OR_RETURN(std::shared_ptr<KeyInfo> info, Lookup(key));
    const RowSparse& value = values[i];
    RETURN_IF_ERROR(CheckRowSparseValue(key, info->dtype, info->shape, value));
    auto [it, inserted] = index.emplace(key, work.size());
    if (inserted) work.push_back(KeyWork{key, info, {}, {}, {}, {}, {}});
    work[it->second].sparse_values.push_back(value);
  }
  return work;
}

absl::StatusOr<std::vector<KeyWork>> KeyTable::PlanRowSparsePull(
    absl::Span<const Key> keys, absl::Span<RowSparse* const> outs,
    absl::Span<const std::vector<int64_t>> row_ids) const {
  std::vector<KeyWork> work;
  std::vector<std::vector<int64_t>> unique(keys.size());
  {
    absl::ReaderMutexLock lock(&mu_);
    absl::flat_hash_map<Key, size_t> index;
    for (size_t i = 0; i < keys.size(); ++i) {
      const Key& key = keys[i];
      ASSIGN_OR_RETURN(std::shared_ptr<KeyInfo> info, Lookup(key));
      ASSIGN_OR_RETURN(unique[i],
                       CheckRowSparseOutput(key, info->dtype, info->shape, *outs[i], row_ids[i]));
      auto [it, inserted] = index.emplace(key, work.size());
      if (inserted) work.push_back(KeyWork{key, info, {}, {}, {}, {}, {}});
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      KeyWork& entry = work[index[keys[i]]];
      entry.sparse_outs.push_back(outs[i]);
      entry.sparse_rows.push_back(unique[i]);
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const int64_t n = static_cast<int64_t>(unique[i].size());
    outs[i]->Reset(std::move(unique[i]),
                   Tensor::Zeros(outs[i]->dtype(), RowShape(outs[i]->shape(), n)));
  }
  return work;
}

absl::StatusOr<std::pair<DType, Shape>> KeyTable::StoredSpec(const Key& key) const {
  absl::ReaderMutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::shared_ptr<KeyInfo> info, Lookup(key));
  return std::make_pair(info->dtype, info->shape);
}

std::vector<const KeyInfo*> KeyTable::InfosOf(absl::Span<const Key> keys) const {
  std::vector<const KeyInfo*> infos;
  infos.reserve(keys.size());
  absl::ReaderMutexLock lock(&mu_);
  for (const Key& key : keys) {
    if (!CheckKeyKind(key).ok()) return {};
    auto it = keys_.find(key);
    if (it == keys_.end()) return {};
    infos.push_back(it->second.get());
  }
  return infos;
}

int64_t KeyTable::AcknowledgedRound(
    int server, const absl::flat_hash_map<const KeyInfo*, int64_t>& extra) const {
  absl::ReaderMutexLock lock(&mu_);
  int64_t round = 0;
  for (const auto& [key, info] : keys_) {
    for (const Slice& slice : info->slices) {
      if (slice.server == server && slice.count > 0) {
        const auto more = extra.find(info.get());
        round = std::max(round, info->acknowledged_pushes.load(std::memory_order_relaxed) +
                                    (more == extra.end() ? 0 : more->second));
      }
    }
  }
  return round;
}

}  // namespace kvstore
