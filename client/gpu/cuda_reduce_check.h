// Checks of the CUDA sums against a float64 CPU reference, written with the C++ standard
// library only, so that they build with nvcc alone on a machine without Bazel, Abseil or gRPC
// (cuda_reduce_selftest.cc) as well as in the Bazel test (cuda_reduce_test.cc).
//
// For every dtype, 1 to 9 inputs (9 takes a second pass), sizes 1, 7, 4099 and 1000003, aligned
// and misaligned by one element, inputs spread over every GPU when there are several, and the
// output poisoned first. Prints a line per failure.
#ifndef KVSTORE_CLIENT_GPU_CUDA_REDUCE_CHECK_H_
#define KVSTORE_CLIENT_GPU_CUDA_REDUCE_CHECK_H_

#include <cstdint>

namespace kvstore::gpu {

// CheckSums runs the checks with `devices` GPUs and returns the number of failures (-1 when
// buffers could not even be set up).
int CheckSums(uint64_t seed, int devices);

}  // namespace kvstore::gpu

#endif  // KVSTORE_CLIENT_GPU_CUDA_REDUCE_CHECK_H_
