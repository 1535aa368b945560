#include "common/dlpack.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

DLDataType ToDLDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return DLDataType{kDLFloat, 32, 1};
    case DType::kFloat16:
      return DLDataType{kDLFloat, 16, 1};
    case DType::kBFloat16:
      return DLDataType{kDLBfloat, 16, 1};
    case DType::kFloat64:
      return DLDataType{kDLFloat, 64, 1};
    case DType::kInt32:
      return DLDataType{kDLInt, 32, 1};
    case DType::kInt64:
      return DLDataType{kDLInt, 64, 1};
  }
  return DLDataType{kDLFloat, 32, 1};
}

absl::StatusOr<DType> FromDLDataType(DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::kFloat32;
    if (t.code == kDLFloat && t.bits == 16) return DType::kFloat16;
    if (t.code == kDLBfloat && t.bits == 16) return DType::kBFloat16;
    if (t.code == kDLFloat && t.bits == 64) return DType::kFloat64;
    if (t.code == kDLInt && t.bits == 32) return DType::kInt32;
    if (t.code == kDLInt && t.bits == 64) return DType::kInt64;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("DLPack dtype (code ", t.code, ", bits ", t.bits, ", lanes ", t.lanes,
                   ") is not one of float32, float16, bfloat16, float64, int32, int64"));
}

// What a DLManagedTensor made by ToDLPack owns: a handle on the tensor and the shape array.
struct ExportContext {
  Tensor tensor;
  std::vector<int64_t> shape;
};

}  // namespace

absl::StatusOr<DLManagedTensor*> ToDLPack(const Tensor& tensor) {
  if (!tensor.defined()) return absl::InvalidArgumentError("cannot export an undefined tensor");
  auto* context = new ExportContext{tensor, tensor.shape()};
  auto* managed = new DLManagedTensor{};
  managed->dl_tensor.data = tensor.data();
  managed->dl_tensor.device =
      tensor.device().is_cpu() ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, tensor.device().id};
  managed->dl_tensor.ndim = static_cast<int>(context->shape.size());
  managed->dl_tensor.dtype = ToDLDataType(tensor.dtype());
  managed->dl_tensor.shape = context->shape.data();
  managed->dl_tensor.strides = nullptr;
  managed->dl_tensor.byte_offset = 0;
  managed->manager_ctx = context;
  managed->deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
    delete self;
  };
  return managed;
}

absl::StatusOr<Tensor> FromDLPack(DLManagedTensor* managed) {
  if (managed == nullptr) return absl::InvalidArgumentError("DLManagedTensor is null");
  const DLTensor& t = managed->dl_tensor;
  Device device;
  switch (t.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      device = Device::CPU();
      break;
    case kDLCUDA:
      if (t.device.device_id < 0 || t.device.device_id > Device::kMaxId) {
        return absl::InvalidArgumentError(
            absl::StrCat("DLPack CUDA device id ", t.device.device_id, " is out of range"));
      }
      device = Device::CUDA(t.device.device_id);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("DLPack device type ", t.device.device_type,
                                                     " is not supported (CPU or CUDA only)"));
  }
  auto dtype = FromDLDataType(t.dtype);
  if (!dtype.ok()) return dtype.status();
  if (t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr)) {
    return absl::InvalidArgumentError("DLPack tensor has no shape");
  }
  Shape shape(t.shape, t.shape + t.ndim);
  RETURN_IF_ERROR(ValidateShape(shape));
  if (t.strides != nullptr) {
    int64_t expected = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (shape[d] != 1 && t.strides[d] != expected) {
        return absl::InvalidArgumentError(
            absl::StrCat("DLPack tensor of shape ", ShapeToString(shape),
                         " is not compact row-major (stride of dimension ", d, " is ", t.strides[d],
                         ", expected ", expected, "); make it contiguous first"));
      }
      expected *= shape[d];
    }
  }
  if (t.data == nullptr && NumElements(shape) > 0) {
    return absl::InvalidArgumentError("DLPack tensor has a null data pointer");
  }
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  return Tensor::Adopt(data, *dtype, std::move(shape), device, [managed] {
    if (managed->deleter != nullptr) managed->deleter(managed);
  });
}

}  // namespace kvstore
