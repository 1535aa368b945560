// The CUDA side of GPU reduction, with no dependency on Abseil or gRPC so that nvcc compiles
// it alone; client/gpu/reduce.h wraps it with absl::Status. Every function returns "" on
// success, or a message naming the CUDA call that failed and CUDA's error text.
#ifndef KVSTORE_CLIENT_GPU_CUDA_REDUCE_H_
#define KVSTORE_CLIENT_GPU_CUDA_REDUCE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

// SumToHostInChunks enqueues, chunk by chunk, the sum of inputs[j][begin, end) into
// scratch[begin, end) (no sum when k == 1: the chunk is read from inputs[0]) and its copy into
// host[begin, end) (pinned memory), on the library's stream of scratch's device, where
// chunk c is [ends[c - 1], ends[c]) elements (ends ascending, the last n); records one event
// per chunk into `events` (WaitChunk, DestroyChunkEvents) and returns without waiting, so that
// a caller can send chunk c while later chunks are summed and copied. On error, the events
// recorded so far are destroyed and `events` is left empty.
std::string SumToHostInChunks(const Buffer* inputs, int k, Buffer scratch, ElementType type,
                              void* host, const int64_t* ends, int chunks,
                              std::vector<void*>* events);
// WaitChunk returns once the work recorded by `event` is done (or with the error it met).
std::string WaitChunk(void* event);
// DestroyChunkEvents releases events of SumToHostInChunks (pending ones once they are done).
void DestroyChunkEvents(const std::vector<void*>& events);

// Memory helpers for tests and benchmarks. Each copy returns once its bytes have landed.
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
// SumSeconds times the sum on the device (median of `reps`, after a warm-up) on buffers it
// allocates itself: from enqueueing it to its end, between CUDA events as CopyBandwidth times
// the copy, without Sum's wait for the result on the host.
std::string SumSeconds(int device, int k, ElementType type, int64_t n, int reps, double* seconds);
std::string DeviceName(int device, std::string* name);

}  // namespace kvstore::gpu::cuda

#endif  // KVSTORE_CLIENT_GPU_CUDA_REDUCE_H_
