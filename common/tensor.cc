#include "common/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/half.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

constexpr std::align_val_t kAlignment{64};

}  // namespace

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
  }
  return "invalid";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (DType dtype : kAllDTypes) {
    if (DTypeName(dtype) == name) return dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name,
                   "\"; expected float32, float16, bfloat16, float64, int32 or int64"));
}

bool IsFloatingPoint(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16 ||
         dtype == DType::kFloat64;
}

absl::StatusOr<DType> DTypeFromInt(int value) {
  for (DType dtype : kAllDTypes) {
    if (static_cast<int>(dtype) == value) return dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype number ", value));
}

std::string Device::ToString() const {
  return type == Type::kCPU ? "cpu" : absl::StrCat("cuda:", id);
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint32_t ShapeCode(const Shape& shape) {
  // The top two bits hold the rank plus one; the rest, the dimensions.
  constexpr int64_t kVectorMax = int64_t{1} << 30;
  constexpr int64_t kMatrixMax = int64_t{1} << 15;
  switch (shape.size()) {
    case 0:
      return uint32_t{1} << 30;
    case 1:
      if (shape[0] >= 0 && shape[0] < kVectorMax) {
        return (uint32_t{2} << 30) | static_cast<uint32_t>(shape[0]);
      }
      return 0;
    case 2:
      if (shape[0] >= 0 && shape[0] < kMatrixMax && shape[1] >= 0 && shape[1] < kMatrixMax) {
        return (uint32_t{3} << 30) | static_cast<uint32_t>(shape[0] << 15 | shape[1]);
      }
      return 0;
    default:
      return 0;
  }
}

std::string ShapeToString(const Shape& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  constexpr size_t kShown = 16;  // A shape from a request may have any number of dimensions.
  if (shape.size() > kShown) {
    return absl::StrCat("(", absl::StrJoin(shape.begin(), shape.begin() + kShown, ", "),
                        ", ...: ", shape.size(), " dimensions)");
  }
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

absl::Status ValidateShape(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeToString(shape), " has a negative dimension"));
    }
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / 8 / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeToString(shape), " has too many elements"));
    }
    n *= d;
  }
  return absl::OkStatus();
}

// An owned buffer. Zeros allocates it with its data, which start kHeader bytes after it (one
// allocation, 64-byte aligned, freed with operator delete); an adopted buffer has a release
// function instead, and the Buffer is allocated alone.
struct Tensor::Buffer {
  std::atomic<int64_t> refs{1};
  std::function<void()> release;
};
constexpr size_t kHeader = 64;

static_assert(sizeof(Tensor) <= 32, "a Tensor handle should fit half a cache line");
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "Tensor::Signature builds the word that signature() reads in little-endian order");

Tensor::Tensor(Buffer* buffer, void* data, DType dtype, Shape shape, Device device, bool owns)
    : buffer_(buffer),
      data_(data),
      dims_(shape.empty() ? nullptr : new Dims{{1}, std::move(shape)}),
      kind_{dims_ == nullptr ? ShapeCode(Shape()) : ShapeCode(dims_->shape), dtype,
            static_cast<uint8_t>(kDefined | (owns ? kOwns : 0) | (device.is_cpu() ? 0 : kCuda)),
            static_cast<int16_t>(device.is_cpu() ? 0 : device.id)} {}

Tensor::Tensor(const Tensor& other)
    : buffer_(other.buffer_), data_(other.data_), dims_(other.dims_), kind_(other.kind_) {
  if (buffer_ != nullptr) buffer_->refs.fetch_add(1, std::memory_order_relaxed);
  if (dims_ != nullptr) dims_->refs.fetch_add(1, std::memory_order_relaxed);
}

Tensor::Tensor(Tensor&& other) noexcept
    : buffer_(std::exchange(other.buffer_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      dims_(std::exchange(other.dims_, nullptr)),
      kind_(std::exchange(other.kind_, Kind{})) {}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) {
    Tensor copy(other);
    *this = std::move(copy);
  }
  return *this;
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    Release();
    buffer_ = std::exchange(other.buffer_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    dims_ = std::exchange(other.dims_, nullptr);
    kind_ = std::exchange(other.kind_, Kind{});
  }
  return *this;
}

Tensor::~Tensor() { Release(); }

void Tensor::Release() {
  if (buffer_ != nullptr && buffer_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (buffer_->release) {
      buffer_->release();
      delete buffer_;
    } else {
      buffer_->~Buffer();
      ::operator delete(static_cast<void*>(buffer_), kAlignment);
    }
  }
  if (dims_ != nullptr && dims_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    delete dims_;
  }
  buffer_ = nullptr;
  dims_ = nullptr;
}

const Shape& Tensor::EmptyShape() {
  static const Shape* const empty = new Shape();
  return *empty;
}

bool Tensor::shared() const {
  return buffer_ != nullptr && buffer_->refs.load(std::memory_order_acquire) > 1;
}

Tensor Tensor::Unset(DType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  static_assert(sizeof(Buffer) <= kHeader, "a Buffer must fit before its data");
  // At least one byte of data, so that every tensor's data pointer is distinct.
  const size_t size = bytes == 0 ? 1 : bytes;
  void* block = ::operator new(kHeader + size, kAlignment);
  Buffer* buffer = new (block) Buffer;
  void* data = static_cast<uint8_t*>(block) + kHeader;
  return Tensor(buffer, data, dtype, std::move(shape), Device::CPU(), true);
}

Tensor Tensor::Zeros(DType dtype, Shape shape) {
  Tensor t = Unset(dtype, std::move(shape));
  std::memset(t.data(), 0, std::max<size_t>(t.byte_size(), 1));
  return t;
}

Tensor Tensor::Full(DType dtype, Shape shape, double value) {
  Tensor t = Zeros(dtype, std::move(shape));
  const int64_t n = t.num_elements();
  for (int64_t i = 0; i < n; ++i) t.SetFromDouble(i, value);
  return t;
}

absl::StatusOr<Tensor> Tensor::FromValues(DType dtype, Shape shape,
                                          absl::Span<const double> values) {
  if (static_cast<int64_t>(values.size()) != NumElements(shape)) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeToString(shape), " holds ",
                                                   NumElements(shape), " elements but ",
                                                   values.size(), " values were given"));
  }
  Tensor t = Zeros(dtype, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i) t.SetFromDouble(static_cast<int64_t>(i), values[i]);
  return t;
}

Tensor Tensor::Borrow(void* data, DType dtype, Shape shape, Device device) {
  return Tensor(nullptr, data, dtype, std::move(shape), device, false);
}

Tensor Tensor::Adopt(void* data, DType dtype, Shape shape, Device device,
                     std::function<void()> release) {
  Buffer* buffer = new Buffer;
  // An empty release function still marks the buffer as adopted: nothing is freed.
  buffer->release = release ? std::move(release) : [] {};
  return Tensor(buffer, data, dtype, std::move(shape), device, true);
}

Tensor Tensor::Clone() const {
  Tensor copy = Zeros(kind_.dtype, shape());
  if (byte_size() > 0) std::memcpy(copy.data_, data_, byte_size());
  return copy;
}

absl::StatusOr<Tensor> Tensor::View(size_t byte_offset, DType dtype, Shape shape) const {
  if (!defined()) return absl::InvalidArgumentError("View of an undefined tensor");
  RETURN_IF_ERROR(ValidateShape(shape));
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  if (byte_offset > byte_size() || bytes > byte_size() - byte_offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("a view of ", DTypeName(dtype), ShapeToString(shape), " at byte ", byte_offset,
                     " does not fit in ", Description(), " (", byte_size(), " bytes)"));
  }
  void* data = static_cast<uint8_t*>(data_) + byte_offset;
  // The view shares the buffer's ownership and points into it.
  if (buffer_ != nullptr) buffer_->refs.fetch_add(1, std::memory_order_relaxed);
  return Tensor(buffer_, data, dtype, std::move(shape), device(), owns_data());
}

double Tensor::GetAsDouble(int64_t i) const {
  switch (kind_.dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(data_)[i];
    case DType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(data_)[i]);
    case DType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(data_)[i]);
    case DType::kFloat64:
      return static_cast<const double*>(data_)[i];
    case DType::kInt32:
      return static_cast<const int32_t*>(data_)[i];
    case DType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(data_)[i]);
  }
  return 0;
}

void Tensor::SetFromDouble(int64_t i, double value) {
  switch (kind_.dtype) {
    case DType::kFloat32:
      static_cast<float*>(data_)[i] = static_cast<float>(value);
      return;
    case DType::kFloat16:
      static_cast<uint16_t*>(data_)[i] = FloatToHalf(static_cast<float>(value));
      return;
    case DType::kBFloat16:
      static_cast<uint16_t*>(data_)[i] = FloatToBFloat16(static_cast<float>(value));
      return;
    case DType::kFloat64:
      static_cast<double*>(data_)[i] = value;
      return;
    case DType::kInt32:
      static_cast<int32_t*>(data_)[i] = static_cast<int32_t>(value);
      return;
    case DType::kInt64:
      static_cast<int64_t*>(data_)[i] = static_cast<int64_t>(value);
      return;
  }
}

namespace {

// Formats one element the way numpy prints it: "2." for integral floats, "0.5" otherwise,
// and "2" for integer types.
std::string FormatElement(double v, bool floating) {
  if (!floating) return absl::StrFormat("%.0f", v);
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e16) {
    return absl::StrFormat("%.0f.", v);
  }
  return absl::StrFormat("%.8g", v);
}

void PrintDims(const Tensor& t, size_t dim, int64_t* index, std::ostringstream* out) {
  const Shape& shape = t.shape();
  if (dim == shape.size()) {
    *out << FormatElement(t.GetAsDouble((*index)++), IsFloatingPoint(t.dtype()));
    return;
  }
  *out << "[";
  for (int64_t i = 0; i < shape[dim]; ++i) {
    if (i > 0) {
      if (dim + 1 == shape.size()) {
        *out << " ";
      } else {
        *out << "\n" << std::string(dim + 1, ' ');
      }
    }
    PrintDims(t, dim + 1, index, out);
  }
  *out << "]";
}

}  // namespace

std::string Tensor::ToString() const {
  if (!defined()) return "<undefined>";
  if (!device().is_cpu()) return absl::StrCat("<", Description(), ">");
  std::ostringstream out;
  int64_t index = 0;
  PrintDims(*this, 0, &index, &out);
  return out.str();
}

std::string Tensor::Description() const {
  return absl::StrCat(DTypeName(kind_.dtype), ShapeToString(shape()), "@", device().ToString());
}

std::ostream& operator<<(std::ostream& os, const Tensor& tensor) { return os << tensor.ToString(); }

}  // namespace kvstore
