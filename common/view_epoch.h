// View epochs: which servers a worker's requests were routed by, in a job with replicas.
//
// The scheduler's view of the job starts at epoch 0 and moves on each time a replacement
// kvserver has joined the running job (a dead server's rank taken back, its shards copied from
// the survivors). A worker sends the epoch its routing was taken from with every request (the
// gRPC metadata kViewEpochKey; none for epoch 0). A copy that a join has read refuses writes
// routed by an older view, and the joining server refuses every request routed by one: a write
// routed before the join would miss the new copy. The refusal (StaleViewError) names the epoch
// needed; the worker then learns the new view from the scheduler and sends the request again,
// under the same request id, to every copy of the new view.
#ifndef KVSTORE_COMMON_VIEW_EPOCH_H_
#define KVSTORE_COMMON_VIEW_EPOCH_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace kvstore {

inline constexpr char kViewEpochKey[] = "kv-view-epoch";

// StaleViewError: the request was routed by view `have`; this copy needs `need` or later.
absl::Status StaleViewError(uint64_t have, uint64_t need);

// RequiredViewEpoch returns the epoch a StaleViewError asks for; nothing for any other status.
std::optional<uint64_t> RequiredViewEpoch(const absl::Status& status);

// ParseViewEpoch reads the metadata value (absent or malformed: 0).
uint64_t ParseViewEpoch(const std::string& value);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_VIEW_EPOCH_H_
