#include "client/gpu/staging.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/gpu/cuda_reduce.h"
#include "client/gpu/device_info.h"
#include "common/status_macros.h"

namespace kvstore::gpu {
namespace {

absl::Status CudaError(const Key& key, const std::string& what, const std::string& error) {
  return absl::InternalError(absl::StrCat("key ", key.Quoted(), ": ", what, ": ", error));
}

}  // namespace

absl::Status CheckUsable(const Key& key, const Tensor& tensor) {
  if (tensor.device().is_cpu()) return absl::OkStatus();
  std::string reason;
  const int devices = CudaDeviceCount(&reason);
  if (devices == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("key ", key.Quoted(), ": tensor is on ", tensor.device().ToString(),
                     " but CUDA cannot be used here (", reason, ")"));
  }
  if (tensor.device().id < 0 || tensor.device().id >= devices) {
    return absl::FailedPreconditionError(absl::StrCat("key ", key.Quoted(), ": tensor is on ",
                                                      tensor.device().ToString(), " but only ",
                                                      devices, " CUDA device(s) exist"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> AllOnGpu(const Key& key, absl::Span<const Tensor> tensors) {
  size_t gpu = 0;
  for (const Tensor& t : tensors) {
    RETURN_IF_ERROR(CheckUsable(key, t));
    if (!t.device().is_cpu()) ++gpu;
  }
  if (gpu != 0 && gpu != tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", key.Quoted(), ": ", gpu, " of its ", tensors.size(),
        " values are on GPUs and the others on the CPU; give them all on GPUs or all on the "
        "CPU"));
  }
  return gpu != 0;
}

absl::StatusOr<Tensor> Pinned(DType dtype, const Shape& shape) {
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  void* data = nullptr;
  if (std::string e = cuda::AllocHost(std::max<size_t>(bytes, 1), &data); !e.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("pinned host memory of ", bytes, " bytes: ", e));
  }
  return Tensor::Adopt(data, dtype, shape, Device::CPU(), [data] { cuda::FreeHost(data); });
}

HostStaging::HostStaging(Key key, std::vector<size_t> chunk_ends, std::vector<void*> events)
    : key_(std::move(key)), ends_(std::move(chunk_ends)), events_(std::move(events)) {}

HostStaging::~HostStaging() { cuda::DestroyChunkEvents(events_); }

absl::Status HostStaging::WaitFor(size_t bytes) {
  absl::MutexLock lock(&mu_);
  while (ready_ < ends_.size() && (ready_ == 0 || ends_[ready_ - 1] < bytes)) {
    if (std::string e = cuda::WaitChunk(events_[ready_]); !e.empty()) {
      return CudaError(key_,
                       absl::StrCat("summing and copying chunk ", ready_, " of ", ends_.size(),
                                    " to host memory"),
                       e);
    }
    ++ready_;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<HostStaging>> StageToHost(const Key& key,
                                                         absl::Span<const Tensor> values,
                                                         absl::Span<const size_t> chunk_ends,
                                                         Tensor* scratch, Tensor* host) {
  const Tensor& first = values.front();
  const size_t element = DTypeSize(first.dtype());
  if (chunk_ends.empty() || chunk_ends.back() != first.byte_size()) {
    return absl::InternalError(absl::StrCat("key ", key.Quoted(), ": chunks end at ",
                                            chunk_ends.empty() ? 0 : chunk_ends.back(),
                                            ", not at the value's ", first.byte_size(), " bytes"));
  }
  if (!host->defined() || host->dtype() != first.dtype() || host->shape() != first.shape()) {
    ASSIGN_OR_RETURN(*host, Pinned(first.dtype(), first.shape()));
  }
  const int device = first.device().id;
  if (values.size() > 1 &&
      (!scratch->defined() || scratch->device() != first.device() ||
       scratch->dtype() != first.dtype() || scratch->shape() != first.shape())) {
    void* data = nullptr;
    if (std::string e = cuda::Alloc(device, std::max<size_t>(first.byte_size(), 1), &data);
        !e.empty()) {
      return CudaError(key, "allocating the sum on " + first.device().ToString(), e);
    }
    *scratch = Tensor::Adopt(data, first.dtype(), first.shape(), first.device(),
                             [device, data] { cuda::Free(device, data); });
  }
  std::vector<cuda::Buffer> inputs;
  for (const Tensor& v : values) inputs.push_back(cuda::Buffer{v.data(), v.device().id});
  std::vector<int64_t> ends;
  for (size_t end : chunk_ends) ends.push_back(static_cast<int64_t>(end / element));
  std::vector<void*> events;
  if (std::string e = cuda::SumToHostInChunks(
          inputs.data(), static_cast<int>(inputs.size()),
          cuda::Buffer{values.size() > 1 ? scratch->data() : nullptr, device},
          static_cast<cuda::ElementType>(first.dtype()), host->data(), ends.data(),
          static_cast<int>(ends.size()), &events);
      !e.empty()) {
    return CudaError(key, "summing on " + first.device().ToString() + " into host memory", e);
  }
  return std::make_shared<HostStaging>(
      key, std::vector<size_t>(chunk_ends.begin(), chunk_ends.end()), std::move(events));
}

std::vector<size_t> StageEnds(std::vector<size_t> chunk_ends, size_t total,
                              size_t max_stage_bytes) {
  std::sort(chunk_ends.begin(), chunk_ends.end());
  std::vector<size_t> ends;
  size_t begin = 0, target = 0;
  for (size_t end : chunk_ends) {
    if (end <= begin || end >= total) continue;
    if (target == 0) target = end;  // The first stage: the first chunk.
    if (end - begin >= target) {
      ends.push_back(end);
      begin = end;
      target = std::min(target * 2, std::max(max_stage_bytes, size_t{1}));
    }
  }
  ends.push_back(total);
  return ends;
}

absl::Status SumToHost(const Key& key, absl::Span<const Tensor> values, Tensor* scratch,
                       Tensor* host) {
  const size_t bytes = values.front().byte_size();
  ASSIGN_OR_RETURN(std::shared_ptr<HostStaging> staging,
                   StageToHost(key, values, {bytes}, scratch, host));
  return staging->WaitFor(bytes);
}

absl::Status CopyTo(const Key& key, const Tensor& src, Tensor* dst) {
  if (src.byte_size() != dst->byte_size() || src.dtype() != dst->dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", key.Quoted(), ": cannot copy ", src.Description(), " into ", dst->Description()));
  }
  if (src.data() == dst->data() || src.byte_size() == 0) return absl::OkStatus();
  if (std::string e = cuda::Copy(dst->data(), src.data(), src.byte_size()); !e.empty()) {
    return CudaError(key, "copying to " + dst->device().ToString(), e);
  }
  return absl::OkStatus();
}

}  // namespace kvstore::gpu
