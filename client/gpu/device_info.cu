#include <cuda_runtime.h>

#include "client/gpu/device_info.h"

namespace kvstore::gpu {

bool CudaBuilt() { return true; }

int CudaDeviceCount(std::string* reason) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    if (reason != nullptr)
      *reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(error);
    return 0;
  }
  if (count == 0 && reason != nullptr) *reason = "no CUDA device present";
  return count;
}

}  // namespace kvstore::gpu
