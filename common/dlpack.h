// Conversions between Tensor and DLPack's DLManagedTensor, so that PyTorch, JAX or CuPy tensors
// pass into the SDK (and pulled values out of it) without a copy.
#ifndef KVSTORE_COMMON_DLPACK_H_
#define KVSTORE_COMMON_DLPACK_H_

#include <dlpack/dlpack.h>

#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace kvstore {

// ToDLPack returns a DLManagedTensor that views `tensor`'s buffer and keeps it alive until the
// consumer calls the returned tensor's deleter (exactly once, as DLPack requires). A borrowed
// tensor's memory must outlive the DLManagedTensor. InvalidArgument for an undefined tensor.
absl::StatusOr<DLManagedTensor*> ToDLPack(const Tensor& tensor);

// FromDLPack takes ownership of `managed`: the returned Tensor views its data and calls its
// deleter when the last handle goes. Only compact row-major tensors of the six KVStore dtypes on
// kDLCPU, kDLCUDAHost (treated as CPU) or kDLCUDA are accepted; anything else is
// InvalidArgument naming what was wrong, and then `managed` is left to the caller (its deleter
// is not called).
absl::StatusOr<Tensor> FromDLPack(DLManagedTensor* managed);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_DLPACK_H_
