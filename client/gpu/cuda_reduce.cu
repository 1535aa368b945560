// CUDA kernels summing k buffers into one (see cuda_reduce.h).
//
// The vector kernel moves 16 bytes per load and store (float4-sized: 4 float32, 8 float16 or
// bfloat16, 2 float64, 4 int32, 2 int64) with a grid-stride loop over a grid sized to keep
// every SM busy; it runs when every pointer is 16-byte aligned, and a scalar kernel takes the
// tail (and everything, for misaligned buffers). Up to 8 inputs go in one pass; more take
// further passes that add into the output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "client/gpu/cuda_reduce.h"

namespace kvstore::gpu::cuda {
namespace {

#define KV_CUDA(call)                                                  \
  do {                                                                 \
    const cudaError_t kv_error = (call);                               \
    if (kv_error != cudaSuccess) {                                     \
      return std::string(#call) + ": " + cudaGetErrorString(kv_error); \
    }                                                                  \
  } while (0)

constexpr int kMaxInputs = 8;
constexpr int kThreads = 256;

struct Inputs {
  const void* p[kMaxInputs];
};

template <typename S>
struct Traits;
template <>
struct Traits<float> {
  using Acc = float;
  __device__ static Acc Load(float v) { return v; }
  __device__ static float Store(Acc a) { return a; }
};
template <>
struct Traits<double> {
  using Acc = double;
  __device__ static Acc Load(double v) { return v; }
  __device__ static double Store(Acc a) { return a; }
};
template <>
struct Traits<__half> {
  using Acc = float;
  __device__ static Acc Load(__half v) { return __half2float(v); }
  __device__ static __half Store(Acc a) { return __float2half_rn(a); }
};
template <>
struct Traits<__nv_bfloat16> {
  using Acc = float;
  __device__ static Acc Load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 Store(Acc a) { return __float2bfloat16_rn(a); }
};
template <>
struct Traits<int32_t> {
  using Acc = uint32_t;  // Wraps on overflow instead of being undefined.
  __device__ static Acc Load(int32_t v) { return static_cast<Acc>(v); }
  __device__ static int32_t Store(Acc a) { return static_cast<int32_t>(a); }
};
template <>
struct Traits<int64_t> {
  using Acc = uint64_t;
  __device__ static Acc Load(int64_t v) { return static_cast<Acc>(v); }
  __device__ static int64_t Store(Acc a) { return static_cast<int64_t>(a); }
};

template <typename S>
__global__ void SumVectors(Inputs in, int k, S* out, int64_t vectors) {
  constexpr int V = 16 / sizeof(S);
  using Acc = typename Traits<S>::Acc;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
       v += stride) {
    // Issue every input's load before adding, so that k loads are in flight per thread.
    uint4 raw[kMaxInputs];
#pragma unroll
    for (int j = 0; j < kMaxInputs; ++j) {
      if (j < k) raw[j] = reinterpret_cast<const uint4*>(in.p[j])[v];
    }
    Acc acc[V];
    const S* first = reinterpret_cast<const S*>(&raw[0]);
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = Traits<S>::Load(first[i]);
#pragma unroll
    for (int j = 1; j < kMaxInputs; ++j) {
      if (j < k) {
        const S* s = reinterpret_cast<const S*>(&raw[j]);
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] += Traits<S>::Load(s[i]);
      }
    }
    uint4 result;
    S* r = reinterpret_cast<S*>(&result);
#pragma unroll
    for (int i = 0; i < V; ++i) r[i] = Traits<S>::Store(acc[i]);
    reinterpret_cast<uint4*>(out)[v] = result;
  }
}

template <typename S>
__global__ void SumScalars(Inputs in, int k, S* out, int64_t begin, int64_t n) {
  using Acc = typename Traits<S>::Acc;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    Acc acc = Traits<S>::Load(static_cast<const S*>(in.p[0])[i]);
    for (int j = 1; j < k; ++j) acc += Traits<S>::Load(static_cast<const S*>(in.p[j])[i]);
    out[i] = Traits<S>::Store(acc);
  }
}

int Blocks(int64_t work, int device) {
  static std::mutex mu;
  static std::vector<int> sms;
  int count = 80;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (sms.size() <= static_cast<size_t>(device)) sms.resize(device + 1, 0);
    if (sms[device] == 0) {
      int value = 0;
      if (cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device) == cudaSuccess) {
        sms[device] = value;
      } else {
        sms[device] = 80;
      }
    }
    count = sms[device];
  }
  const int64_t needed = (work + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(needed, count * 8)));
}

std::string StreamOf(int device, cudaStream_t* stream) {
  static std::mutex mu;
  static std::vector<cudaStream_t> streams;
  std::lock_guard<std::mutex> lock(mu);
  if (streams.size() <= static_cast<size_t>(device)) streams.resize(device + 1, nullptr);
  if (streams[device] == nullptr) {
    // A blocking stream: work a caller queued on the legacy default stream (cudaMemcpy,
    // cudaMemset, kernels launched without a stream) is done before the library's next work
    // starts, and the library's before theirs. A non-blocking stream let a sum read and write
    // buffers that such a copy was still writing (seen on an H200: a poisoned output's
    // pageable cudaMemcpy landed after the sum).
    KV_CUDA(cudaStreamCreateWithFlags(&streams[device], cudaStreamDefault));
  }
  *stream = streams[device];
  return "";
}

template <typename S>
std::string Launch(const void* const* ptrs, int k, void* out, int64_t n, int device,
                   cudaStream_t stream) {
  constexpr int V = 16 / sizeof(S);
  for (int done = 0; done < k;) {
    // The first pass takes up to 8 inputs; later passes add up to 7 more into the output.
    Inputs in{};
    int count = 0;
    if (done > 0) in.p[count++] = out;
    while (count < kMaxInputs && done < k) in.p[count++] = ptrs[done++];
    bool aligned = reinterpret_cast<uintptr_t>(out) % 16 == 0;
    for (int j = 0; j < count; ++j)
      aligned = aligned && reinterpret_cast<uintptr_t>(in.p[j]) % 16 == 0;
    const int64_t vectors = aligned ? n / V : 0;
    if (vectors > 0) {
      SumVectors<S><<<Blocks(vectors, device), kThreads, 0, stream>>>(
          in, count, static_cast<S*>(out), vectors);
      KV_CUDA(cudaGetLastError());
    }
    const int64_t rest = n - vectors * V;
    if (rest > 0) {
      SumScalars<S><<<Blocks(rest, device), kThreads, 0, stream>>>(in, count, static_cast<S*>(out),
                                                                   vectors * V, n);
      KV_CUDA(cudaGetLastError());
    }
  }
  return "";
}

size_t ElementBytes(ElementType type) {
  switch (type) {
    case ElementType::kFloat16:
    case ElementType::kBFloat16:
      return 2;
    case ElementType::kFloat32:
    case ElementType::kInt32:
      return 4;
    default:
      return 8;
  }
}

// DeviceGuard restores the calling thread's current device.
class DeviceGuard {
 public:
  DeviceGuard() { cudaGetDevice(&previous_); }
  ~DeviceGuard() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

}  // namespace

namespace {

// Enqueue puts the sum on `stream` (of out's device, current) and returns at once; inputs on
// other devices are read by peer access or copied into buffers that it adds to `staged`, freed
// on the stream after the sum.
std::string Enqueue(const Buffer* inputs, int k, Buffer out, ElementType type, int64_t n,
                    cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(n) * ElementBytes(type);
  std::vector<const void*> ptrs(k);
  std::vector<void*> staged;
  std::string error;
  for (int j = 0; j < k && error.empty(); ++j) {
    ptrs[j] = inputs[j].data;
    if (inputs[j].device == out.device) continue;
    int can = 0;
    const cudaError_t query = cudaDeviceCanAccessPeer(&can, out.device, inputs[j].device);
    if (query == cudaSuccess && can) {
      const cudaError_t enable = cudaDeviceEnablePeerAccess(inputs[j].device, 0);
      if (enable == cudaSuccess || enable == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // Clears "already enabled".
        continue;            // Read through peer access.
      }
      cudaGetLastError();
    }
    // No peer access: copy to this device first (the driver stages through host memory).
    void* copy = nullptr;
    cudaError_t e = cudaMallocAsync(&copy, bytes, stream);
    if (e == cudaSuccess) {
      staged.push_back(copy);
      e = cudaMemcpyPeerAsync(copy, out.device, inputs[j].data, inputs[j].device, bytes, stream);
    }
    if (e != cudaSuccess) {
      error = std::string("staging input ") + std::to_string(j) + " from device " +
              std::to_string(inputs[j].device) + ": " + cudaGetErrorString(e);
    }
    ptrs[j] = copy;
  }
  if (error.empty()) {
    switch (type) {
      case ElementType::kFloat32:
        error = Launch<float>(ptrs.data(), k, out.data, n, out.device, stream);
        break;
      case ElementType::kFloat16:
        error = Launch<__half>(ptrs.data(), k, out.data, n, out.device, stream);
        break;
      case ElementType::kBFloat16:
        error = Launch<__nv_bfloat16>(ptrs.data(), k, out.data, n, out.device, stream);
        break;
      case ElementType::kFloat64:
        error = Launch<double>(ptrs.data(), k, out.data, n, out.device, stream);
        break;
      case ElementType::kInt32:
        error = Launch<int32_t>(ptrs.data(), k, out.data, n, out.device, stream);
        break;
      case ElementType::kInt64:
        error = Launch<int64_t>(ptrs.data(), k, out.data, n, out.device, stream);
        break;
    }
  }
  for (void* p : staged) cudaFreeAsync(p, stream);
  return error;
}

}  // namespace

std::string Sum(const Buffer* inputs, int k, Buffer out, ElementType type, int64_t n) {
  if (k < 1) return "a sum needs at least one input";
  if (n <= 0) return "";
  DeviceGuard guard;
  KV_CUDA(cudaSetDevice(out.device));
  cudaStream_t stream;
  if (std::string e = StreamOf(out.device, &stream); !e.empty()) return e;
  std::string error = Enqueue(inputs, k, out, type, n, stream);
  const cudaError_t sync = cudaStreamSynchronize(stream);
  if (error.empty() && sync != cudaSuccess) {
    error = std::string("cudaStreamSynchronize: ") + cudaGetErrorString(sync);
  }
  return error;
}

std::string SumToHostInChunks(const Buffer* inputs, int k, Buffer scratch, ElementType type,
                              void* host, const int64_t* ends, int chunks,
                              std::vector<void*>* events) {
  events->clear();
  if (k < 1) return "a sum needs at least one input";
  DeviceGuard guard;
  KV_CUDA(cudaSetDevice(scratch.device));
  cudaStream_t stream;
  if (std::string e = StreamOf(scratch.device, &stream); !e.empty()) return e;
  const size_t element = ElementBytes(type);
  std::vector<Buffer> part(inputs, inputs + k);
  std::string error;
  int64_t begin = 0;
  for (int c = 0; c < chunks && error.empty(); begin = ends[c++]) {
    const int64_t n = ends[c] - begin;
    const size_t offset = static_cast<size_t>(begin) * element;
    const void* chunk = static_cast<const char*>(inputs[0].data) + offset;
    if (k > 1 && n > 0) {
      for (int j = 0; j < k; ++j) part[j].data = static_cast<char*>(inputs[j].data) + offset;
      Buffer out{static_cast<char*>(scratch.data) + offset, scratch.device};
      error = Enqueue(part.data(), k, out, type, n, stream);
      chunk = out.data;
    }
    cudaError_t e = cudaSuccess;
    if (error.empty() && n > 0) {
      e = cudaMemcpyAsync(static_cast<char*>(host) + offset, chunk, n * element,
                          cudaMemcpyDeviceToHost, stream);
    }
    cudaEvent_t event = nullptr;
    if (error.empty() && e == cudaSuccess) {
      e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
      if (e == cudaSuccess) {
        events->push_back(event);
        e = cudaEventRecord(event, stream);
      }
    }
    if (error.empty() && e != cudaSuccess) {
      error = std::string("chunk ") + std::to_string(c) + ": " + cudaGetErrorString(e);
    }
  }
  if (!error.empty()) {
    cudaStreamSynchronize(stream);
    DestroyChunkEvents(*events);
    events->clear();
  }
  return error;
}

std::string WaitChunk(void* event) {
  KV_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  return "";
}

void DestroyChunkEvents(const std::vector<void*>& events) {
  for (void* event : events) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

std::string Alloc(int device, size_t bytes, void** out) {
  DeviceGuard guard;
  KV_CUDA(cudaSetDevice(device));
  KV_CUDA(cudaMalloc(out, bytes));
  return "";
}

std::string Free(int device, void* pointer) {
  DeviceGuard guard;
  KV_CUDA(cudaSetDevice(device));
  KV_CUDA(cudaFree(pointer));
  return "";
}

// The copies return once done: cudaMemcpy from pageable host memory returns when the bytes are
// staged, before they land, so each also waits for the legacy default stream.
std::string CopyToDevice(int device, void* dst, const void* src, size_t bytes) {
  DeviceGuard guard;
  KV_CUDA(cudaSetDevice(device));
  KV_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  KV_CUDA(cudaStreamSynchronize(nullptr));
  return "";
}

std::string CopyToHost(int device, void* dst, const void* src, size_t bytes) {
  DeviceGuard guard;
  KV_CUDA(cudaSetDevice(device));
  KV_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  KV_CUDA(cudaStreamSynchronize(nullptr));
  return "";
}

std::string Copy(void* dst, const void* src, size_t bytes) {
  KV_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  KV_CUDA(cudaStreamSynchronize(nullptr));
  return "";
}

std::string AllocHost(size_t bytes, void** out) {
  KV_CUDA(cudaMallocHost(out, bytes));
  return "";
}

std::string FreeHost(void* pointer) {
  KV_CUDA(cudaFreeHost(pointer));
  return "";
}

namespace {

// TimeMedian runs `fn` (which enqueues on `stream`) once to warm up and `reps` times between
// events, and returns the median in seconds.
template <typename Fn>
std::string TimeMedian(cudaStream_t stream, int reps, Fn fn, double* seconds) {
  cudaEvent_t start, stop;
  KV_CUDA(cudaEventCreate(&start));
  KV_CUDA(cudaEventCreate(&stop));
  std::vector<float> ms;
  std::string error = fn();
  KV_CUDA(cudaStreamSynchronize(stream));
  for (int r = 0; r < reps && error.empty(); ++r) {
    KV_CUDA(cudaEventRecord(start, stream));
    error = fn();
    KV_CUDA(cudaEventRecord(stop, stream));
    KV_CUDA(cudaEventSynchronize(stop));
    float elapsed = 0;
    KV_CUDA(cudaEventElapsedTime(&elapsed, start, stop));
    ms.push_back(elapsed);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!error.empty()) return error;
  std::sort(ms.begin(), ms.end());
  *seconds = ms[ms.size() / 2] / 1e3;
  return "";
}

}  // namespace

std::string CopyBandwidth(int device, size_t bytes, int reps, double* gbps) {
  DeviceGuard guard;
  KV_CUDA(cudaSetDevice(device));
  cudaStream_t stream;
  if (std::string e = StreamOf(device, &stream); !e.empty()) return e;
  void *a = nullptr, *b = nullptr;
  KV_CUDA(cudaMalloc(&a, bytes));
  KV_CUDA(cudaMalloc(&b, bytes));
  double seconds = 0;
  const std::string error = TimeMedian(
      stream, reps,
      [&]() -> std::string {
        KV_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
        return "";
      },
      &seconds);
  cudaFree(a);
  cudaFree(b);
  if (!error.empty()) return error;
  *gbps = 2.0 * bytes / seconds / 1e9;
  return "";
}

std::string SumSeconds(int device, int k, ElementType type, int64_t n, int reps, double* seconds) {
  DeviceGuard guard;
  KV_CUDA(cudaSetDevice(device));
  cudaStream_t stream;
  if (std::string e = StreamOf(device, &stream); !e.empty()) return e;
  const size_t bytes = static_cast<size_t>(n) * ElementBytes(type);
  std::vector<void*> buffers(k + 1, nullptr);
  std::string error;
  for (void*& p : buffers) {
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess && error.empty())
      error = std::string("cudaMalloc: ") + cudaGetErrorString(e);
    if (e == cudaSuccess) cudaMemset(p, 0, bytes);
  }
  if (error.empty()) {
    std::vector<Buffer> in(k);
    for (int j = 0; j < k; ++j) in[j] = Buffer{buffers[j], device};
    error = TimeMedian(
        stream, reps,
        [&] {
          return Enqueue(in.data(), k, Buffer{buffers[k], device}, type, n, stream);
        },
        seconds);
  }
  for (void* p : buffers) {
    if (p != nullptr) cudaFree(p);
  }
  return error;
}

std::string DeviceName(int device, std::string* name) {
  cudaDeviceProp prop;
  KV_CUDA(cudaGetDeviceProperties(&prop, device));
  *name = prop.name;
  return "";
}

}  // namespace kvstore::gpu::cuda
