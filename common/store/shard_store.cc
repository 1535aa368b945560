#include "common/store/shard_store.h"

#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/reduce.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

std::string SpecString(DType dtype, const Shape& shape) {
  return absl::StrCat(DTypeName(dtype), " ", ShapeToString(shape));
}

absl::Status CheckDefinedOnCpu(const Key& key, absl::string_view what, const Tensor& value) {
  if (!value.defined()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", key.Quoted(), ": ", what, " value is undefined"));
  }
  if (!value.device().is_cpu()) {
    return absl::FailedPreconditionError(
        absl::StrCat("key ", key.Quoted(), ": ", what, " value is on ", value.device().ToString(),
                     "; the store holds CPU values (copy it to the CPU first)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckValueMatches(const Key& key, absl::string_view verb, const Tensor& value,
                               const TensorSpec& spec) {
  if (value.dtype() != spec.dtype || value.shape() != spec.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", key.Quoted(), ": ", verb, " value is ", SpecString(value.dtype(), value.shape()),
        " but the stored value is ", SpecString(spec.dtype, spec.shape)));
  }
  return absl::OkStatus();
}

ShardStore::ShardStore() : ShardStore(MakeAssignUpdater()) {}

ShardStore::ShardStore(std::unique_ptr<Updater> updater) : updater_(std::move(updater)) {}

absl::Status ShardStore::CheckKeyKind(const Key& key) const {
  if (int_keys_.has_value() && *int_keys_ != key.is_int()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", key.Quoted(), " is a ", key.KindName(), " key but this store holds ",
                     *int_keys_ ? "int" : "string", " keys; int and string keys cannot be mixed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const Tensor*> ShardStore::Lookup(const Key& key) const {
  RETURN_IF_ERROR(CheckKeyKind(key));
  auto it = values_.find(key);
  if (it == values_.end()) {
    return absl::NotFoundError(absl::StrCat("key ", key.Quoted(), " was never initialised"));
  }
  return &it->second;
}

absl::Status ShardStore::Init(absl::Span<const KeyValue> values) {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_set<Key> seen;
  for (const KeyValue& kv : values) {
    RETURN_IF_ERROR(CheckKeyKind(kv.key));
    if (kv.key.is_int() != values.front().key.is_int()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", kv.key.Quoted(), " is a ", kv.key.KindName(), " key but the same call has ",
          values.front().key.KindName(), " keys; int and string keys cannot be mixed"));
    }
    RETURN_IF_ERROR(CheckDefinedOnCpu(kv.key, "initial", kv.value));
    if (values_.contains(kv.key)) {
      return absl::AlreadyExistsError(
          absl::StrCat("key ", kv.key.Quoted(), " is already initialised"));
    }
    if (!seen.insert(kv.key).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("key ", kv.key.Quoted(), " appears twice in one Init"));
    }
  }
  for (const KeyValue& kv : values) {
    num_bytes_ += static_cast<int64_t>(kv.value.byte_size());
    values_.emplace(kv.key, kv.value.Clone());
  }
  if (!values.empty()) int_keys_ = values.front().key.is_int();
  return absl::OkStatus();
}

absl::Status ShardStore::ValidatePush(absl::Span<const KeyValue> values) const {
  for (const KeyValue& kv : values) {
    RETURN_IF_ERROR(CheckDefinedOnCpu(kv.key, "pushed", kv.value));
    ASSIGN_OR_RETURN(const Tensor* stored, Lookup(kv.key));
    RETURN_IF_ERROR(
        CheckValueMatches(kv.key, "pushed", kv.value, {stored->dtype(), stored->shape()}));
  }
  return absl::OkStatus();
}

absl::Status ShardStore::ValidatePull(absl::Span<const Key> keys,
                                      absl::Span<Tensor* const> outs) const {
  if (keys.size() != outs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull of ", keys.size(), " keys into ", outs.size(), " outputs"));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (outs[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("key ", keys[i].Quoted(), ": output is null"));
    }
    RETURN_IF_ERROR(CheckDefinedOnCpu(keys[i], "output", *outs[i]));
    ASSIGN_OR_RETURN(const Tensor* stored, Lookup(keys[i]));
    RETURN_IF_ERROR(
        CheckValueMatches(keys[i], "output", *outs[i], {stored->dtype(), stored->shape()}));
  }
  return absl::OkStatus();
}

absl::Status ShardStore::ApplyPush(absl::Span<const KeyValue> values) {
  for (const KeyValue& kv : values) {
    Tensor& stored = values_.find(kv.key)->second;
    RETURN_IF_ERROR(updater_->Update(kv.key, kv.value, &stored));
  }
  return absl::OkStatus();
}

void ShardStore::ApplyPull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs) const {
  for (size_t i = 0; i < keys.size(); ++i) {
    // Validated: same dtype and shape, both on the CPU, so the copy cannot fail.
    CopyInto(values_.find(keys[i])->second, outs[i]).IgnoreError();
  }
}

absl::Status ShardStore::Push(absl::Span<const KeyValue> values) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ValidatePush(values));
  return ApplyPush(values);
}

absl::Status ShardStore::Pull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs) const {
  absl::ReaderMutexLock lock(&mu_);
  RETURN_IF_ERROR(ValidatePull(keys, outs));
  ApplyPull(keys, outs);
  return absl::OkStatus();
}

absl::Status ShardStore::PushPull(absl::Span<const KeyValue> values,
                                  absl::Span<const Key> pull_keys, absl::Span<Tensor* const> outs) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ValidatePush(values));
  RETURN_IF_ERROR(ValidatePull(pull_keys, outs));
  RETURN_IF_ERROR(ApplyPush(values));
  ApplyPull(pull_keys, outs);
  return absl::OkStatus();
}

absl::Status ShardStore::PullRows(const Key& key, absl::Span<const int64_t> row_ids,
                                  Tensor* rows) const {
  absl::ReaderMutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const Tensor* stored, Lookup(key));
  const Shape& shape = stored->shape();
  const int64_t num_rows = shape.empty() ? 1 : shape[0];
  for (int64_t id : row_ids) {
    if (id < 0 || id >= num_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", key.Quoted(), ": row id ", id, " is outside [0, ", num_rows, ")"));
    }
  }
  const size_t row_bytes = num_rows == 0 ? 0 : stored->byte_size() / static_cast<size_t>(num_rows);
  if (rows->dtype() != stored->dtype() || rows->byte_size() != row_bytes * row_ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("key ", key.Quoted(), ": ", row_ids.size(),
                                                   " rows of the stored ", stored->Description(),
                                                   " do not fit the output ", rows->Description()));
  }
  for (size_t i = 0; i < row_ids.size(); ++i) {
    std::memcpy(
        static_cast<uint8_t*>(rows->data()) + i * row_bytes,
        static_cast<const uint8_t*>(stored->data()) + static_cast<size_t>(row_ids[i]) * row_bytes,
        row_bytes);
  }
  return absl::OkStatus();
}

UpdaterStateData ShardStore::SaveUpdaterState() const {
  absl::ReaderMutexLock lock(&mu_);
  return updater_->SaveState();
}

absl::Status ShardStore::LoadUpdaterState(const UpdaterStateData& state) {
  absl::MutexLock lock(&mu_);
  return updater_->LoadState(state, [this](const PartStateData& part) {
    mu_.AssertReaderHeld();
    return values_.contains(part.key);
  });
}

absl::StatusOr<TensorSpec> ShardStore::Spec(const Key& key) const {
  absl::ReaderMutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const Tensor* stored, Lookup(key));
  return TensorSpec{stored->dtype(), stored->shape()};
}

absl::Status ShardStore::SetUpdater(std::unique_ptr<Updater> updater, bool keep_state) {
  absl::MutexLock lock(&mu_);
  if (keep_state) RETURN_IF_ERROR(updater->TakeState(updater_.get()));
  updater_ = std::move(updater);
  return absl::OkStatus();
}

std::string ShardStore::updater_name() const {
  absl::ReaderMutexLock lock(&mu_);
  return std::string(updater_->name());
}

ShardStore::Stats ShardStore::stats() const {
  absl::ReaderMutexLock lock(&mu_);
  return Stats{static_cast<int64_t>(values_.size()), num_bytes_};
}

}  // namespace kvstore
