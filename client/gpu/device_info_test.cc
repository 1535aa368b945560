#include "client/gpu/device_info.h"

#include <catch2/catch.hpp>
#include <cstdio>

namespace kvstore::gpu {
namespace {

TEST_CASE("DeviceInfo: answers without a GPU and says why", "[gpu]") {
  std::string reason;
  const int count = CudaDeviceCount(&reason);
  REQUIRE(count >= 0);
  if (count == 0) {
    REQUIRE_FALSE(reason.empty());
    std::printf("SKIPPED: GPU device checks (%s)\n", reason.c_str());
    return;
  }
  REQUIRE(CudaBuilt());
  std::printf("found %d CUDA device(s)\n", count);
}

}  // namespace
}  // namespace kvstore::gpu
