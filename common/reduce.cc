#include "common/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/half.h"

namespace kvstore {
namespace {

// Storage and accumulation types per dtype. Signed integers accumulate as unsigned so that
// overflow wraps instead of being undefined.
struct F32 {
  using Storage = float;
  using Acc = float;
  static Acc Load(Storage v) { return v; }
  static Storage Store(Acc a) { return a; }
};
struct F64 {
  using Storage = double;
  using Acc = double;
  static Acc Load(Storage v) { return v; }
  static Storage Store(Acc a) { return a; }
};
struct F16 {
  using Storage = uint16_t;
  using Acc = float;
  static Acc Load(Storage v) { return HalfToFloat(v); }
  static Storage Store(Acc a) { return FloatToHalf(a); }
};
struct BF16 {
  using Storage = uint16_t;
  using Acc = float;
  static Acc Load(Storage v) { return BFloat16ToFloat(v); }
  static Storage Store(Acc a) { return FloatToBFloat16(a); }
};
struct I32 {
  using Storage = int32_t;
  using Acc = uint32_t;
  static Acc Load(Storage v) { return static_cast<Acc>(v); }
  static Storage Store(Acc a) { return static_cast<Storage>(a); }
};
struct I64 {
  using Storage = int64_t;
  using Acc = uint64_t;
  static Acc Load(Storage v) { return static_cast<Acc>(v); }
  static Storage Store(Acc a) { return static_cast<Storage>(a); }
};

// Elements per block: the accumulator block stays in L1.
constexpr int64_t kBlock = 4096;

// Sums `inputs` into `out` block by block: every input block is read before the output block is
// written, so an output that aliases an input is safe.
template <typename T>
void SumBlocks(absl::Span<const Tensor> inputs, Tensor* out) {
  using Storage = typename T::Storage;
  using Acc = typename T::Acc;
  const int64_t n = out->num_elements();
  Acc acc[kBlock];
  Storage* dst = out->data_as<Storage>();
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t len = std::min(kBlock, n - begin);
    const Storage* first = inputs[0].data_as<const Storage>() + begin;
    for (int64_t i = 0; i < len; ++i) acc[i] = T::Load(first[i]);
    for (size_t k = 1; k < inputs.size(); ++k) {
      const Storage* src = inputs[k].data_as<const Storage>() + begin;
      for (int64_t i = 0; i < len; ++i) acc[i] += T::Load(src[i]);
    }
    for (int64_t i = 0; i < len; ++i) dst[begin + i] = T::Store(acc[i]);
  }
}

}  // namespace

absl::Status CheckSameLayout(const Tensor& a, const Tensor& b, absl::string_view what) {
  if (!a.defined() || !b.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": tensor is undefined"));
  }
  if (!a.device().is_cpu() || !b.device().is_cpu()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": CPU tensors expected, got ", a.Description(), " and ",
                     b.Description()));
  }
  if (a.dtype() != b.dtype() || a.num_elements() != b.num_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", a.Description(), " does not match ", b.Description()));
  }
  return absl::OkStatus();
}

absl::Status SumInto(absl::Span<const Tensor> inputs, Tensor* out) {
  if (inputs.empty()) return absl::InvalidArgumentError("sum of no tensors");
  if (out == nullptr) return absl::InvalidArgumentError("sum into a null output");
  for (const Tensor& input : inputs) {
    if (absl::Status s = CheckSameLayout(input, *out, "sum"); !s.ok()) return s;
  }
  switch (out->dtype()) {
    case DType::kFloat32:
      SumBlocks<F32>(inputs, out);
      break;
    case DType::kFloat16:
      SumBlocks<F16>(inputs, out);
      break;
    case DType::kBFloat16:
      SumBlocks<BF16>(inputs, out);
      break;
    case DType::kFloat64:
      SumBlocks<F64>(inputs, out);
      break;
    case DType::kInt32:
      SumBlocks<I32>(inputs, out);
      break;
    case DType::kInt64:
      SumBlocks<I64>(inputs, out);
      break;
  }
  return absl::OkStatus();
}

absl::Status AddInto(const Tensor& src, Tensor* dst) {
  if (dst == nullptr) return absl::InvalidArgumentError("add into a null output");
  const Tensor pair[] = {*dst, src};
  return SumInto(pair, dst);
}

absl::Status CopyInto(const Tensor& src, Tensor* dst) {
  if (dst == nullptr) return absl::InvalidArgumentError("copy into a null output");
  if (absl::Status s = CheckSameLayout(src, *dst, "copy"); !s.ok()) return s;
  if (src.data() != dst->data() && src.byte_size() > 0) {
    std::memmove(dst->data(), src.data(), src.byte_size());
  }
  return absl::OkStatus();
}

}  // namespace kvstore
