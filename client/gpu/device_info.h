// CUDA device discovery for the SDK: whether this process can use GPUs at all.
//
// Built by nvcc when the build found CUDA (see bazel/cuda.bzl); otherwise a plain C++ fallback
// reports that CUDA was not built. Never requires a GPU: on a machine without one the calls
// answer 0 devices. Does not depend on gRPC.
#ifndef KVSTORE_CLIENT_GPU_DEVICE_INFO_H_
#define KVSTORE_CLIENT_GPU_DEVICE_INFO_H_

#include <string>

namespace kvstore::gpu {

// CudaBuilt is true when this binary was compiled with CUDA support.
bool CudaBuilt();

// CudaDeviceCount returns the number of usable CUDA devices: 0 when CUDA was not built, no
// driver is loaded or no device is present (`reason`, when given, then says why).
int CudaDeviceCount(std::string* reason = nullptr);

}  // namespace kvstore::gpu

#endif  // KVSTORE_CLIENT_GPU_DEVICE_INFO_H_
