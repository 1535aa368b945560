// Without CUDA: every call explains that this build has none.
#include "client/gpu/cuda_reduce.h"

namespace kvstore::gpu::cuda {
namespace {
constexpr char kNoCuda[] = "this build has no CUDA (nvcc was not found, or --define=cuda=off)";
}  // namespace

std::string Sum(const Buffer*, int, Buffer, ElementType, int64_t) { return kNoCuda; }
std::string SumToHostInChunks(const Buffer*, int, Buffer, ElementType, void*, const int64_t*, int,
                              std::vector<void*>*) {
  return kNoCuda;
}
std::string WaitChunk(void*) { return kNoCuda; }
void DestroyChunkEvents(const std::vector<void*>&) {}
std::string Alloc(int, size_t, void**) { return kNoCuda; }
std::string Free(int, void*) { return kNoCuda; }
std::string CopyToDevice(int, void*, const void*, size_t) { return kNoCuda; }
std::string CopyToHost(int, void*, const void*, size_t) { return kNoCuda; }
std::string Copy(void*, const void*, size_t) { return kNoCuda; }
std::string AllocHost(size_t, void**) { return kNoCuda; }
std::string FreeHost(void*) { return kNoCuda; }
std::string CopyBandwidth(int, size_t, int, double*) { return kNoCuda; }
std::string SumSeconds(int, int, ElementType, int64_t, int, double*) { return kNoCuda; }
std::string DeviceName(int, std::string*) { return kNoCuda; }

}  // namespace kvstore::gpu::cuda
