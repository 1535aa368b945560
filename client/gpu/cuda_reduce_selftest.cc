// cuda_reduce_selftest: the GPU sum checks (cuda_reduce_check.h) as a program that nvcc builds
// alone, for machines with a GPU but without Bazel, Abseil or gRPC:
//
//   nvcc -std=c++17 -O2 -I. client/gpu/cuda_reduce.cu client/gpu/device_info.cu \
//        client/gpu/cuda_reduce_check.cc client/gpu/cuda_reduce_selftest.cc \
//        -o cuda_reduce_selftest && ./cuda_reduce_selftest [SEED]
//
// Prints "SKIPPED: ..." and exits 0 without a GPU; exits 1 when a check fails.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "client/gpu/cuda_reduce_check.h"
#include "client/gpu/device_info.h"

int main(int argc, char** argv) {
  std::string reason;
  const int devices = kvstore::gpu::CudaDeviceCount(&reason);
  if (devices == 0) {
    std::printf("SKIPPED: GPU sum checks (%s)\n", reason.c_str());
    return 0;
  }
  const uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : std::random_device()();
  std::printf("seed %llu, %d device(s)\n", static_cast<unsigned long long>(seed), devices);
  return kvstore::gpu::CheckSums(seed, devices) == 0 ? 0 : 1;
}
