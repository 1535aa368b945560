// The CUDA side of GPU reduction, with no dependency on Abseil or gRPC so that nvcc compiles
// it alone; client/gpu/reduce.h wraps it with absl::Status. Every function returns "" on
// success, or a message naming the CUDA call that failed and CUDA's error text.
#ifndef KVSTORE_CLIENT_GPU_CUDA_REDUCE_H_
#define KVSTORE_CLIENT_GPU_CUDA_REDUCE_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvstore::gpu::cuda {

// Element types; the numbering is common/tensor.h's DType.
enum class ElementType : int {
  kFloat32 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kFloat64 = 4,
  kInt32 = 5,
  kInt64 = 6,
};

// Buffer: device memory on CUDA device `device`.
struct Buffer {
  void* data = nullptr;
  int device = 0;
};

// Sum sets out[0, n) to the element-wise sum of inputs[j][0, n), j < k (k >= 1; `out` may be
// one of the inputs). float16 and bfloat16 accumulate in float32 and are rounded once;
// integers wrap. Inputs on another device are read through peer access where the devices
// allow it, otherwise copied to out's device first (cudaMemcpyPeerAsync, which stages through
// host memory). Runs on the library's own stream of out's device and returns when done.
std::string Sum(const Buffer* inputs, int k, Buffer out, ElementType type, int64_t n);

// Memory helpers for tests and benchmarks.
std::string Alloc(int device, size_t bytes, void** out);
std::string Free(int device, void* pointer);
std::string CopyToDevice(int device, void* dst, const void* src, size_t bytes);
std::string CopyToHost(int device, void* dst, const void* src, size_t bytes);
// Copy copies between any two of host memory and the devices' memory (unified addressing).
std::string Copy(void* dst, const void* src, size_t bytes);
// AllocHost / FreeHost: page-locked (pinned) host memory, which devices copy to and from at
// full speed.
std::string AllocHost(size_t bytes, void** out);
std::string FreeHost(void* pointer);
// CopyBandwidth measures device-to-device cudaMemcpy bandwidth on `device` (bytes read plus
// written per second, the median of `reps` copies of `bytes`).
std::string CopyBandwidth(int device, size_t bytes, int reps, double* gbps);
// SumSeconds times Sum (median of `reps`, after a warm-up) on buffers it allocates itself.
std::string SumSeconds(int device, int k, ElementType type, int64_t n, int reps, double* seconds);
std::string DeviceName(int device, std::string* name);

}  // namespace kvstore::gpu::cuda

#endif  // KVSTORE_CLIENT_GPU_CUDA_REDUCE_H_
