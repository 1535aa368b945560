#include "client/key_groups.h"

#include <algorithm>

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
          "key ", keys[i].Quoted(), ": values pushed together disagree: ", DTypeName(first.dtype()),
          " ", ShapeToString(first.shape()), " and ", DTypeName(values[i].dtype()), " ",
          ShapeToString(values[i].shape())));
    }
    group.values.push_back(values[i]);
  }
  return groups;
}

absl::Status CheckRowSparseValue(const Key& key, DType dtype, const Shape& shape,
                                 const RowSparse& value) {
  if (value.dtype() != dtype || value.shape() != shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", key.Quoted(), ": pushed row-sparse ", DTypeName(value.dtype()),
                     ShapeToString(value.shape()), " but the stored value is ", DTypeName(dtype),
                     ShapeToString(shape)));
  }
  return CheckRowIds(value.row_ids(), value.shape()[0], absl::StrCat("key ", key.Quoted()));
}

absl::StatusOr<std::vector<int64_t>> CheckRowSparseOutput(const Key& key, DType dtype,
                                                          const Shape& shape, const RowSparse& out,
                                                          absl::Span<const int64_t> row_ids) {
  if (shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("row_sparse_pull: key ", key.Quoted(), " holds a scalar, which has no rows"));
  }
  if (out.dtype() != dtype || out.shape() != shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("row_sparse_pull: key ", key.Quoted(), ": output is ", DTypeName(out.dtype()),
                     ShapeToString(out.shape()), " but the stored value is ", DTypeName(dtype),
                     ShapeToString(shape), " (use RowSparse::Empty(dtype, shape))"));
  }
  const absl::Status ids =
      CheckRowIds(row_ids, shape[0], absl::StrCat("row_sparse_pull: key ", key.Quoted()));
  if (!ids.ok()) return ids;
  std::vector<int64_t> unique(row_ids.begin(), row_ids.end());
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  return unique;
}

}  // namespace kvstore
