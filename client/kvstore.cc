#include "client/kvstore.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "client/local_store.h"

namespace kvstore {
namespace {

absl::Status CheckValues(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                         absl::string_view op) {
  if (keys.size() != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " of ", keys.size(), " keys with ", values.size(), " values"));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!values[i].defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": key ", keys[i].Quoted(), ": value is undefined"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOutputs(absl::Span<const Key> keys, absl::Span<Tensor* const> outs,
                          absl::string_view op) {
  if (keys.size() != outs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " of ", keys.size(), " keys into ", outs.size(), " outputs"));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (outs[i] == nullptr || !outs[i]->defined()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": key ", keys[i].Quoted(), ": output is null or undefined (allocate it first)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<KVStore>> KVStore::Create(absl::string_view type) {
  if (type == "local" || type == "local_update_cpu" || type == "local_allreduce_cpu" ||
      type == "device" || type == "local_allreduce_device") {
    return std::unique_ptr<KVStore>(new LocalStore(std::string(type)));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown KVStore type \"", type,
      "\"; supported: local, device (and MXNet's local_update_cpu, local_allreduce_cpu, "
      "local_allreduce_device)"));
}

absl::Status KVStore::Init(absl::Span<const Key> keys, absl::Span<const Tensor> values) {
  if (absl::Status s = CheckValues(keys, values, "init"); !s.ok()) return s;
  return DoInit(keys, values);
}

absl::Status KVStore::Init(const Key& key, const Tensor& value) {
  return Init(absl::MakeConstSpan(&key, 1), absl::MakeConstSpan(&value, 1));
}

absl::Status KVStore::Push(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                           int priority) {
  if (absl::Status s = CheckValues(keys, values, "push"); !s.ok()) return s;
  return DoPush(keys, values, priority);
}

absl::Status KVStore::Push(const Key& key, const Tensor& value, int priority) {
  return Push(absl::MakeConstSpan(&key, 1), absl::MakeConstSpan(&value, 1), priority);
}

absl::Status KVStore::Push(const Key& key, absl::Span<const Tensor> values, int priority) {
  const std::vector<Key> keys(values.size(), key);
  return Push(keys, values, priority);
}

absl::Status KVStore::Pull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs,
                           int priority) {
  if (absl::Status s = CheckOutputs(keys, outs, "pull"); !s.ok()) return s;
  return DoPull(keys, outs, priority);
}

absl::Status KVStore::Pull(const Key& key, Tensor* out, int priority) {
  return Pull(absl::MakeConstSpan(&key, 1), absl::MakeConstSpan(&out, 1), priority);
}

absl::Status KVStore::Pull(const Key& key, absl::Span<Tensor* const> outs, int priority) {
  const std::vector<Key> keys(outs.size(), key);
  return Pull(keys, outs, priority);
}

absl::Status KVStore::PushPull(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                               absl::Span<Tensor* const> outs, int priority) {
  if (absl::Status s = CheckValues(keys, values, "pushpull"); !s.ok()) return s;
  if (absl::Status s = CheckOutputs(keys, outs, "pushpull"); !s.ok()) return s;
  return DoPushPull(keys, values, outs, priority);
}

absl::Status KVStore::PushPull(const Key& key, const Tensor& value, Tensor* out, int priority) {
  return PushPull(absl::MakeConstSpan(&key, 1), absl::MakeConstSpan(&value, 1),
                  absl::MakeConstSpan(&out, 1), priority);
}

}  // namespace kvstore
