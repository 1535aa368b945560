// Tensor: the value type of KVStore - a typed, shaped buffer on the CPU or a CUDA device.
//
// A Tensor is a handle, like MXNet's NDArray: copying a Tensor shares its buffer; Clone() makes
// a deep copy. A Tensor either owns its buffer (allocated here, or handed over with a release
// function, e.g. from DLPack) or borrows caller memory, which the caller keeps alive and
// unchanged while any operation that uses the Tensor is in flight.
//
// Thread safety: a Tensor handle is as thread-safe as a std::shared_ptr; concurrent writes to
// the same buffer must be synchronised by the caller.
#ifndef KVSTORE_COMMON_TENSOR_H_
#define KVSTORE_COMMON_TENSOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kvstore {

// DType: the element types. The numbering matches proto/kvstore.proto's DType.
enum class DType : uint8_t {
  kFloat32 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kFloat64 = 4,
  kInt32 = 5,
  kInt64 = 6,
};

// kAllDTypes lists every DType, for loops and tests.
inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                       DType::kFloat64, DType::kInt32,   DType::kInt64};

// DTypeSize returns the size in bytes of one element.
size_t DTypeSize(DType dtype);
// DTypeName returns "float32", "float16", "bfloat16", "float64", "int32" or "int64".
absl::string_view DTypeName(DType dtype);
// ParseDType is the inverse of DTypeName; InvalidArgument for any other string.
absl::StatusOr<DType> ParseDType(absl::string_view name);
// IsFloatingPoint is true for the float types (the ones optimizers accept).
bool IsFloatingPoint(DType dtype);
// DTypeFromInt validates a wire value; InvalidArgument naming it when it is no DType.
absl::StatusOr<DType> DTypeFromInt(int value);

// Device: where a buffer lives.
struct Device {
  enum class Type : uint8_t { kCPU = 0, kCUDA = 1 };
  // The largest CUDA device ordinal a Tensor can name (its handle keeps the id in 16 bits).
  static constexpr int kMaxId = 32767;

  Type type = Type::kCPU;
  int id = 0;  // 0 to kMaxId.

  static Device CPU() { return Device{Type::kCPU, 0}; }
  static Device CUDA(int id) { return Device{Type::kCUDA, id}; }
  bool is_cpu() const { return type == Type::kCPU; }
  // ToString returns "cpu" or "cuda:<id>".
  std::string ToString() const;
  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && (a.type == Type::kCPU || a.id == b.id);
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// Shape: the extent of each dimension, outermost first. A scalar has the empty shape.
using Shape = std::vector<int64_t>;

// NumElements returns the product of the dimensions (1 for a scalar).
int64_t NumElements(const Shape& shape);
// ShapeCode names a small shape in 32 bits: a scalar, a vector of fewer than 2^30 elements, or
// a matrix whose dimensions are both below 2^15. Two small shapes have the same code exactly
// when they are equal; every other shape has code 0. A Tensor keeps its shape's code, so that
// checking a long list of small tensors against a known shape reads no shape's heap array.
uint32_t ShapeCode(const Shape& shape);
// ShapeToString returns "(2, 3)" for {2, 3}, "()" for a scalar and "(5,)" for {5}; a shape of
// more than 16 dimensions shows its first 16 and the number of dimensions.
std::string ShapeToString(const Shape& shape);
// ValidateShape returns InvalidArgument when a dimension is negative or the element count
// overflows.
absl::Status ValidateShape(const Shape& shape);

class Tensor {
 public:
  // Creates an empty handle: defined() is false.
  Tensor() = default;

  // Zeros returns an owning CPU tensor filled with zeros.
  static Tensor Zeros(DType dtype, Shape shape);
  // Unset returns an owning CPU tensor whose bytes are not set: for a buffer whose every byte
  // is written before any is read (its pages are first touched by those writes, not by a
  // zero-fill ahead of them).
  static Tensor Unset(DType dtype, Shape shape);
  // Full returns an owning CPU tensor with every element set to `value` (converted to dtype).
  static Tensor Full(DType dtype, Shape shape, double value);
  // FromValues returns an owning CPU tensor holding `values` converted to dtype; the number of
  // values must equal NumElements(shape) (checked: InvalidArgument).
  static absl::StatusOr<Tensor> FromValues(DType dtype, Shape shape,
                                           absl::Span<const double> values);
  // Borrow wraps `data` without owning it. The caller keeps the memory alive and unchanged
  // while any operation using this Tensor (or a copy of the handle) is in flight.
  static Tensor Borrow(void* data, DType dtype, Shape shape, Device device = Device::CPU());
  // Adopt wraps `data` and calls `release` once when the last handle referring to it goes.
  static Tensor Adopt(void* data, DType dtype, Shape shape, Device device,
                      std::function<void()> release);

  // Clone returns an owning deep copy on the CPU. Requires a defined CPU tensor.
  Tensor Clone() const;

  // View returns a handle on `shape` elements of `dtype` that start `byte_offset` bytes into
  // this tensor's buffer (e.g. one gradient inside a bucket holding many, as PyTorch's DDP
  // lays them out). It shares the buffer: writes through either handle are seen by both, and
  // an owned buffer lives while any view of it does; a view of a borrowed buffer is borrowed.
  // InvalidArgument, naming both, when the view does not fit in this tensor.
  absl::StatusOr<Tensor> View(size_t byte_offset, DType dtype, Shape shape) const;

  // defined is false only for a default-constructed handle.
  bool defined() const { return (kind_.flags & kDefined) != 0; }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return kind_.dtype; }
  const Shape& shape() const { return dims_ == nullptr ? EmptyShape() : dims_->shape; }
  uint32_t shape_code() const { return kind_.shape_code; }  // ShapeCode(shape()).
  // signature names a defined tensor's dtype, device and small shape in one word: two defined
  // handles whose shapes are small (nonzero ShapeCode) have the same signature exactly when
  // their dtypes, devices and shapes are equal. It equals Signature(dtype(), shape_code(),
  // device()); an undefined handle's signature is no defined handle's. For checking long lists
  // of small tensors against one kind.
  uint64_t signature() const {
    uint64_t word;  // Little-endian, as on x86-64 and ARM.
    std::memcpy(&word, &kind_, sizeof(word));
    return word & ~(uint64_t{kOwns} << 40);
  }
  static uint64_t Signature(DType dtype, uint32_t shape_code, Device device) {
    return uint64_t{shape_code} | uint64_t{static_cast<uint8_t>(dtype)} << 32 |
           uint64_t{static_cast<uint8_t>(kDefined | (device.is_cpu() ? 0 : kCuda))} << 40 |
           uint64_t{static_cast<uint16_t>(device.is_cpu() ? 0 : device.id)} << 48;
  }
  Device device() const {
    return (kind_.flags & kCuda) != 0 ? Device::CUDA(kind_.device_id) : Device::CPU();
  }
  int64_t num_elements() const { return NumElements(shape()); }
  size_t byte_size() const { return static_cast<size_t>(num_elements()) * DTypeSize(kind_.dtype); }
  // SameBuffer is true when both handles keep the same owned buffer alive (e.g. views of one
  // bucket), or neither owns its memory (borrowed).
  bool SameBuffer(const Tensor& other) const { return buffer_ == other.buffer_; }
  // owns_data is false for Borrow()ed tensors.
  bool owns_data() const { return (kind_.flags & kOwns) != 0; }
  // shared is true when another handle refers to this owned buffer (e.g. a reply still being
  // sent from it, or a View of it).
  bool shared() const;

  // GetAsDouble / SetFromDouble read and write flattened element `i` of a CPU tensor, converting
  // through double. Meant for tests, examples and printing, not for hot paths.
  double GetAsDouble(int64_t i) const;
  void SetFromDouble(int64_t i, double value);

  // ToString prints the values like numpy, e.g. "[[2. 2. 2.]\n [2. 2. 2.]]" for float types and
  // "[[2 2 2]\n [2 2 2]]" for integer types. CPU tensors only.
  std::string ToString() const;
  // Description returns "float32(2, 3)@cpu" for error messages.
  std::string Description() const;

  // Copying a handle shares the buffer and the shape (a reference count each); moving one
  // leaves the source undefined.
  Tensor(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(const Tensor& other);
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();

 private:
  struct Buffer;  // An owned buffer: its reference count and how to free it.
  // A shape shared by copies of a handle.
  struct Dims {
    std::atomic<int64_t> refs{1};
    Shape shape;
  };
  static const Shape& EmptyShape();

  Tensor(Buffer* buffer, void* data, DType dtype, Shape shape, Device device, bool owns);
  void Release();

  enum Flags : uint8_t { kDefined = 1, kOwns = 2, kCuda = 4 };

  // What a check of a tensor's kind compares, in one word (signature() reads it whole).
  struct Kind {
    uint32_t shape_code = uint32_t{1} << 30;  // ShapeCode of the empty shape.
    DType dtype = DType::kFloat32;
    uint8_t flags = 0;
    int16_t device_id = 0;
  };
  static_assert(sizeof(Kind) == 8, "Kind is read as one word");

  // 32 bytes, half a cache line. Checking a long list of small tensors reads each handle's data
  // pointer, buffer and kind, all of them here; the shape itself is behind dims_.
  Buffer* buffer_ = nullptr;  // Keeps an owned buffer alive; null for borrowed tensors.
  void* data_ = nullptr;
  Dims* dims_ = nullptr;  // Null for the empty shape (a scalar).
  Kind kind_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& tensor);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_TENSOR_H_
