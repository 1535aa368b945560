// The worker's records of one key and of one key's part in an operation.
//
// KeyInfo is what Init recorded about a key (KeyTable owns it); KeyWork is one key's values and
// outputs in one operation, built by the caller's thread when the operation is issued and read
// by the transfers that run it (dense_transfer.h, row_sparse_transfer.h).
#ifndef KVSTORE_CLIENT_KEY_INFO_H_
#define KVSTORE_CLIENT_KEY_INFO_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "common/compression.h"
#include "common/key.h"
#include "common/partitioner.h"
#include "common/row_sparse.h"
#include "common/tensor.h"

namespace kvstore {

// Kind: what an operation does. kInitFill sends the bytes of the parts an Init created deferred
// (parts cut in chunks).
enum class Kind { kInit, kPush, kPull, kPushPull, kRowSparsePush, kRowSparsePull, kInitFill };

// OpDone receives an operation's outcome, exactly once.
using OpDone = std::function<void(absl::Status)>;

// KeyInfo: what Init recorded about a key.
struct KeyInfo {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::vector<Slice> slices;
  // The slices cut into chunks (ChunkSlice); `alone[i]` when chunk i is part of a cut slice
  // and travels in requests of that slice's own (chunk_requests.h), else it shares one request
  // per server with the other small values.
  std::vector<Slice> chunks;
  std::vector<bool> alone;
  int64_t bytes = 0;
  Tensor merge_buffer;  // Sum of several values pushed at once; reused.
  // Gradient compression: the residual (error feedback) and the codes of the last push, both
  // reused; touched only by the operation that is sending the key.
  Tensor residual;
  CompressionParams residual_params;
  Tensor codes;
  // Values on GPUs: the device buffer of their sum, and pinned host buffers for the sum
  // sent and the value pulled.
  Tensor gpu_scratch;
  Tensor gpu_staging;
  Tensor pull_staging;
  // Pushes of the key the servers have acknowledged (dense, row-sparse or in a key group): in
  // dist_sync, the key's round on its servers. Named in DATA_LOSS messages (KeyTable::
  // AcknowledgedRound); counted by the store when a push operation succeeds.
  mutable std::atomic<int64_t> acknowledged_pushes{0};
};

// KeyWork: one key's part of an operation: its values (push) and outputs (pull); for row-sparse
// operations the pushed values, or the outputs with their sorted distinct row ids.
struct KeyWork {
  Key key;
  std::shared_ptr<KeyInfo> info;
  // Most operations give one value or output per key: held inline, no allocation.
  absl::InlinedVector<Tensor, 1> values;
  absl::InlinedVector<Tensor*, 1> outs;
  std::vector<RowSparse> sparse_values;
  std::vector<RowSparse*> sparse_outs;
  std::vector<std::vector<int64_t>> sparse_rows;
  // Some output is on a GPU: receive into info->pull_staging, then copy to every output.
  bool via_host = false;
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_KEY_INFO_H_
