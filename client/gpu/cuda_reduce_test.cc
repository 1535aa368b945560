// The GPU sum checks under Catch2: reported skipped where no GPU (or no CUDA build) exists.
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "client/gpu/cuda_reduce_check.h"
#include "client/gpu/device_info.h"
#include "tests/test_util.h"

namespace kvstore::gpu {
namespace {

TEST_CASE("GPU sums equal the CPU float64 reference", "[gpu]") {
  std::string reason;
  const int devices = CudaDeviceCount(&reason);
  if (devices == 0) {
    std::printf("SKIPPED: GPU sum checks (%s)\n", reason.c_str());
    return;
  }
  testing::TestRng rng;
  INFO(rng.Describe());
  REQUIRE(CheckSums(rng.seed(), devices) == 0);
}

}  // namespace
}  // namespace kvstore::gpu
