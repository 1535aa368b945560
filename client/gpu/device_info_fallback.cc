// Fallback when CUDA is not built: no devices.
#include "client/gpu/device_info.h"

namespace kvstore::gpu {

bool CudaBuilt() { return false; }

int CudaDeviceCount(std::string* reason) {
  if (reason != nullptr) *reason = "this build has no CUDA support";
  return 0;
}

}  // namespace kvstore::gpu
