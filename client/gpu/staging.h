// The GPU side of the stores: CUDA tensors reduced on the GPU and staged through pinned host
// memory once (client/gpu/cuda_reduce.h does the CUDA work).
//
// A store keeps values in host memory (in process, or on its servers). With values on GPUs:
// - Push: the values of a key are summed on the GPU of the first one (others are read by peer
//   access or staged, see cuda_reduce.h), and the sum is copied once into a pinned host buffer
//   that the store then merges or sends - chunk by chunk, so that a distributed store sends a
//   chunk while the GPU sums and copies the next;
// - Pull: the value is received once into a pinned host buffer and copied to every output's
//   device.
// Without CUDA (not built, no driver or no device) every entry point returns FailedPrecondition
// naming the key and the tensor, as CUDA tensors did before.
#ifndef KVSTORE_CLIENT_GPU_STAGING_H_
#define KVSTORE_CLIENT_GPU_STAGING_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/key.h"
#include "common/tensor.h"

namespace kvstore::gpu {

// CheckUsable returns OK for a CPU tensor, or for a CUDA tensor when CUDA is usable and its
// device exists; FailedPrecondition naming the key and the device otherwise.
absl::Status CheckUsable(const Key& key, const Tensor& tensor);

// AllOnGpu is true when every tensor is on a CUDA device; InvalidArgument naming the key when
// CPU and CUDA tensors are mixed for one key.
absl::StatusOr<bool> AllOnGpu(const Key& key, absl::Span<const Tensor> tensors);

// PinnedLike returns a pinned host tensor of `dtype` and `shape`.
absl::StatusOr<Tensor> Pinned(DType dtype, const Shape& shape);

// HostStaging: the sum of a key's CUDA values on its way into pinned host memory, chunk by
// chunk in order (StageToHost). Thread-safe.
class HostStaging {
 public:
  HostStaging(Key key, std::vector<size_t> chunk_ends, std::vector<void*> events);
  ~HostStaging();  // Releases the events; the copies they mark run on.
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // WaitFor returns once the host buffer's first `bytes` hold the sum (Internal naming the key
  // and the chunk when the GPU work failed).
  absl::Status WaitFor(size_t bytes);

 private:
  const Key key_;
  const std::vector<size_t> ends_;  // Chunk c's bytes end at ends_[c].
  const std::vector<void*> events_;
  absl::Mutex mu_;
  size_t ready_ ABSL_GUARDED_BY(mu_) = 0;  // Chunks known done.
};

// StageToHost starts summing the CUDA tensors `values` on the first one's device (in
// `*scratch`, a device buffer kept for the next call; not used for one value) and copying the
// sum into `*host` (a pinned buffer, allocated when undefined or of another layout), chunk by
// chunk: chunk c is bytes [chunk_ends[c - 1], chunk_ends[c]) (ascending, whole elements, the
// last the value's size). Returns without waiting: HostStaging::WaitFor says when a prefix has
// landed, so that the caller sends chunk c while the GPU sums and copies the next.
absl::StatusOr<std::shared_ptr<HostStaging>> StageToHost(const Key& key,
                                                         absl::Span<const Tensor> values,
                                                         absl::Span<const size_t> chunk_ends,
                                                         Tensor* scratch, Tensor* host);

// StageEnds returns the stages in which StageToHost should move a value of `total` bytes sent
// in chunks ending at `chunk_ends` (any order): the chunks' ends merged into stages that
// double in size from the first chunk up to `max_stage_bytes`, ascending, the last `total`.
// The first chunk can go as soon as it has landed, and a big value takes a few GPU operations
// rather than one per chunk (each costs the host microseconds to enqueue).
std::vector<size_t> StageEnds(std::vector<size_t> chunk_ends, size_t total,
                              size_t max_stage_bytes = size_t{16} << 20);

// SumToHost is StageToHost in one chunk, waited for.
absl::Status SumToHost(const Key& key, absl::Span<const Tensor> values, Tensor* scratch,
                       Tensor* host);

// CopyTo copies `src` (host or device) into `*dst` (host or device) of the same layout.
absl::Status CopyTo(const Key& key, const Tensor& src, Tensor* dst);

}  // namespace kvstore::gpu

#endif  // KVSTORE_CLIENT_GPU_STAGING_H_
