// Grouping of a push's (key, value) pairs by key, the first step of every store's Push.
#ifndef KVSTORE_CLIENT_KEY_GROUPS_H_
#define KVSTORE_CLIENT_KEY_GROUPS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/key.h"
#include "common/row_sparse.h"
#include "common/tensor.h"

namespace kvstore {

// KeyGroup: every value pushed to one key in one call.
struct KeyGroup {
  Key key;
  std::vector<Tensor> values;
};

// GroupByKey returns one group per distinct key, in order of first appearance, each with its
// values in call order. InvalidArgument when the spans differ in length or two values of one key
// differ in dtype or shape (naming the key and both).
absl::StatusOr<std::vector<KeyGroup>> GroupByKey(absl::Span<const Key> keys,
                                                 absl::Span<const Tensor> values);

// CheckRowSparseValue checks a pushed RowSparse value against the stored value's dtype and
// shape, and its ids against the rows. InvalidArgument naming the key otherwise.
absl::Status CheckRowSparseValue(const Key& key, DType dtype, const Shape& shape,
                                 const RowSparse& value);

// CheckRowSparseOutput checks a RowSparsePull output and its ids against the stored value's
// dtype and shape (same dtype and shape, ids in [0, shape[0])) and returns the ids sorted
// without duplicates. InvalidArgument naming the key otherwise.
absl::StatusOr<std::vector<int64_t>> CheckRowSparseOutput(const Key& key, DType dtype,
                                                          const Shape& shape, const RowSparse& out,
                                                          absl::Span<const int64_t> row_ids);

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_KEY_GROUPS_H_
