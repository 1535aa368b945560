// Grouping of a push's (key, value) pairs by key, the first step of every store's Push.
#ifndef KVSTORE_CLIENT_KEY_GROUPS_H_
#define KVSTORE_CLIENT_KEY_GROUPS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/key.h"
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

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_KEY_GROUPS_H_
