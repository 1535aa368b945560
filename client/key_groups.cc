#include "client/key_groups.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace kvstore {

absl::StatusOr<std::vector<KeyGroup>> GroupByKey(absl::Span<const Key> keys,
                                                 absl::Span<const Tensor> values) {
  if (keys.size() != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(keys.size(), " keys but ", values.size(), " values"));
  }
  std::vector<KeyGroup> groups;
  absl::flat_hash_map<Key, size_t> index;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, inserted] = index.emplace(keys[i], groups.size());
    if (inserted) {
      groups.push_back(KeyGroup{keys[i], {values[i]}});
      continue;
    }
    KeyGroup& group = groups[it->second];
    const Tensor& first = group.values.front();
    if (values[i].dtype() != first.dtype() || values[i].shape() != first.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", keys[i].Quoted(), ": values pushed together disagree: ",
          DTypeName(first.dtype()), " ", ShapeToString(first.shape()), " and ",
          DTypeName(values[i].dtype()), " ", ShapeToString(values[i].shape())));
    }
    group.values.push_back(values[i]);
  }
  return groups;
}

}  // namespace kvstore
