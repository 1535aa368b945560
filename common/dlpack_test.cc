#include "common/dlpack.h"

#include <catch2/catch.hpp>

#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

TEST_CASE("DLPack: a tensor exported and imported again is the same memory", "[dlpack]") {
  TestRng rng;
  INFO(rng.Describe());
  for (DType dtype : kAllDTypes) {
    INFO(DTypeName(dtype));
    Tensor original = rng.RandomTensor(dtype, rng.AnyShape());
    DLManagedTensor* managed = ToDLPack(original).value();
    REQUIRE(managed->dl_tensor.data == original.data());
    REQUIRE(managed->dl_tensor.ndim == static_cast<int>(original.shape().size()));
    Tensor imported = FromDLPack(managed).value();
    REQUIRE(imported.data() == original.data());
    REQUIRE(imported.dtype() == dtype);
    REQUIRE(imported.shape() == original.shape());
    REQUIRE(testing::ToDoubles(imported) == testing::ToDoubles(original));
  }
}

TEST_CASE("DLPack: the importer calls the producer's deleter once", "[dlpack]") {
  static int deletions = 0;
  deletions = 0;
  float data[6] = {0.5f, -1.25f, 2, 3, 4, 5};
  int64_t shape[2] = {2, 3};
  auto* managed = new DLManagedTensor{};
  managed->dl_tensor = DLTensor{data, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, nullptr, 0};
  managed->deleter = [](DLManagedTensor* self) {
    ++deletions;
    delete self;
  };
  {
    Tensor t = FromDLPack(managed).value();
    Tensor copy = t;
    REQUIRE(copy.GetAsDouble(1) == -1.25);
  }
  REQUIRE(deletions == 1);
}

TEST_CASE("DLPack: unsupported tensors are rejected with a reason", "[dlpack]") {
  float data[6] = {};
  int64_t shape[2] = {2, 3};
  int64_t strides[2] = {1, 2};  // Column-major.
  DLManagedTensor managed{};
  managed.dl_tensor = DLTensor{data, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, strides, 0};
  auto strided = FromDLPack(&managed);
  REQUIRE(absl::IsInvalidArgument(strided.status()));
  REQUIRE(strided.status().message().find("row-major") != absl::string_view::npos);

  managed.dl_tensor.strides = nullptr;
  managed.dl_tensor.dtype = DLDataType{kDLUInt, 8, 1};
  REQUIRE(absl::IsInvalidArgument(FromDLPack(&managed).status()));

  managed.dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
  managed.dl_tensor.device = DLDevice{kDLVulkan, 0};
  REQUIRE(absl::IsInvalidArgument(FromDLPack(&managed).status()));

  for (int32_t id : {-1, Device::kMaxId + 1}) {
    managed.dl_tensor.device = DLDevice{kDLCUDA, id};
    auto out_of_range = FromDLPack(&managed);
    REQUIRE(absl::IsInvalidArgument(out_of_range.status()));
    REQUIRE(out_of_range.status().message().find(std::to_string(id)) != absl::string_view::npos);
  }

  managed.dl_tensor.device = DLDevice{kDLCUDA, 2};
  Tensor cuda = FromDLPack(&managed).value();
  REQUIRE(cuda.device() == Device::CUDA(2));
  REQUIRE(absl::IsInvalidArgument(ToDLPack(Tensor()).status()));
}

}  // namespace
}  // namespace kvstore
