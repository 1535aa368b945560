#include "common/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/status_macros.h"

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

// SumRange sums elements [begin, end) of the k inputs into `dst`, adding them in input order.
// One or two inputs take one pass; more go block by block through an accumulator that stays in
// L1, the first two added as they are loaded and the last as the block is stored. Each element
// of `dst` is written after every input's element at that position has been read, so an output
// that aliases an input is safe. The loops are what the compiler vectorises (-O3).
template <typename T>
void SumRange(const typename T::Storage* const* srcs, size_t k, typename T::Storage* dst,
              int64_t begin, int64_t end) {
  using Acc = typename T::Acc;
  if (k <= 2) {
    const auto* a = srcs[0];
    const auto* b = srcs[k - 1];
    if (k == 1) {
      for (int64_t i = begin; i < end; ++i) dst[i] = T::Store(T::Load(a[i]));
    } else {
      for (int64_t i = begin; i < end; ++i) dst[i] = T::Store(T::Load(a[i]) + T::Load(b[i]));
    }
    return;
  }
  Acc acc[kBlock];
  for (int64_t at = begin; at < end; at += kBlock) {
    const int64_t len = std::min(kBlock, end - at);
    const auto* first = srcs[0] + at;
    const auto* second = srcs[1] + at;
    for (int64_t i = 0; i < len; ++i) acc[i] = T::Load(first[i]) + T::Load(second[i]);
    for (size_t j = 2; j + 1 < k; ++j) {
      const auto* src = srcs[j] + at;
      for (int64_t i = 0; i < len; ++i) acc[i] += T::Load(src[i]);
    }
    const auto* last = srcs[k - 1] + at;
    for (int64_t i = 0; i < len; ++i) dst[at + i] = T::Store(acc[i] + T::Load(last[i]));
  }
}

// Values of at least this many bytes are summed by every core, each on a contiguous range.
constexpr size_t kThreadedBytes = 8 << 20;

template <typename T>
void SumBlocks(absl::Span<const Tensor> inputs, Tensor* out) {
  using Storage = typename T::Storage;
  const int64_t n = out->num_elements();
  std::vector<const Storage*> srcs;
  srcs.reserve(inputs.size());
  for (const Tensor& input : inputs) srcs.push_back(input.data_as<const Storage>());
  Storage* dst = out->data_as<Storage>();
  const int64_t threads =
      out->byte_size() < kThreadedBytes
          ? 1
          : std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), 16));
  if (threads == 1) {
    SumRange<T>(srcs.data(), srcs.size(), dst, 0, n);
    return;
  }
  // Ranges in whole blocks.
  const int64_t per = (n / threads + kBlock - 1) / kBlock * kBlock;
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t begin = std::min(n, t * per),
                  end = t + 1 == threads ? n : std::min(n, (t + 1) * per);
    if (begin < end) {
      pool.emplace_back(
          [&srcs, dst, begin, end] { SumRange<T>(srcs.data(), srcs.size(), dst, begin, end); });
    }
  }
  SumRange<T>(srcs.data(), srcs.size(), dst, 0, std::min(n, per));
  for (std::thread& thread : pool) thread.join();
}

}  // namespace

absl::Status CheckSameLayout(const Tensor& a, const Tensor& b, absl::string_view what) {
  if (!a.defined() || !b.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": tensor is undefined"));
  }
  if (!a.device().is_cpu() || !b.device().is_cpu()) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": CPU tensors expected, got ",
                                                      a.Description(), " and ", b.Description()));
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
    RETURN_IF_ERROR(CheckSameLayout(input, *out, "sum"));
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

namespace {
template <typename T>
void AddRange(const void* src, void* dst, int64_t count) {
  using Storage = typename T::Storage;
  const Storage* srcs[] = {static_cast<const Storage*>(dst), static_cast<const Storage*>(src)};
  SumRange<T>(srcs, 2, static_cast<Storage*>(dst), 0, count);
}
}  // namespace

void AddRaw(DType dtype, const void* src, void* dst, int64_t count) {
  switch (dtype) {
    case DType::kFloat32:
      return AddRange<F32>(src, dst, count);
    case DType::kFloat16:
      return AddRange<F16>(src, dst, count);
    case DType::kBFloat16:
      return AddRange<BF16>(src, dst, count);
    case DType::kFloat64:
      return AddRange<F64>(src, dst, count);
    case DType::kInt32:
      return AddRange<I32>(src, dst, count);
    case DType::kInt64:
      return AddRange<I64>(src, dst, count);
  }
}

namespace {
// SumRun: one pass over `count` elements of k inputs, rounded to Storage after each addition
// (Load(Store(x)) is the identity for float32, float64 and the integers, so those loops are
// plain sums the compiler vectorises). One and two inputs - the rounds of one and two workers -
// have loops of their own; more go block by block through a Storage accumulator that stays in
// L1.
template <typename T>
void SumRun(const typename T::Storage* const* srcs, size_t k, typename T::Storage* dst,
            int64_t count, bool accumulate) {
  using Storage = typename T::Storage;
  using Acc = typename T::Acc;
  auto round = [](Acc a) { return T::Load(T::Store(a)); };
  const Storage* a = srcs[0];
  if (k == 1) {
    if (accumulate) {
      for (int64_t i = 0; i < count; ++i) dst[i] = T::Store(T::Load(dst[i]) + T::Load(a[i]));
    } else if (dst != a) {
      std::memmove(dst, a, static_cast<size_t>(count) * sizeof(Storage));
    }
    return;
  }
  const Storage* b = srcs[1];
  if (k == 2) {
    if (accumulate) {
      for (int64_t i = 0; i < count; ++i) {
        dst[i] = T::Store(T::Load(dst[i]) + round(T::Load(a[i]) + T::Load(b[i])));
      }
    } else {
      for (int64_t i = 0; i < count; ++i) dst[i] = T::Store(T::Load(a[i]) + T::Load(b[i]));
    }
    return;
  }
  Storage acc[kBlock];
  for (int64_t at = 0; at < count; at += kBlock) {
    const int64_t len = std::min(kBlock, count - at);
    for (int64_t i = 0; i < len; ++i) acc[i] = T::Store(T::Load(a[at + i]) + T::Load(b[at + i]));
    for (size_t j = 2; j < k; ++j) {
      const Storage* src = srcs[j] + at;
      for (int64_t i = 0; i < len; ++i) acc[i] = T::Store(T::Load(acc[i]) + T::Load(src[i]));
    }
    Storage* out = dst + at;
    if (accumulate) {
      for (int64_t i = 0; i < len; ++i) out[i] = T::Store(T::Load(out[i]) + T::Load(acc[i]));
    } else {
      std::memcpy(out, acc, static_cast<size_t>(len) * sizeof(Storage));
    }
  }
}

template <typename T>
void SumRunOf(const void* const* srcs, size_t k, void* dst, int64_t count, bool accumulate) {
  using Storage = typename T::Storage;
  SumRun<T>(reinterpret_cast<const Storage* const*>(srcs), k, static_cast<Storage*>(dst), count,
            accumulate);
}
}  // namespace

void SumRaw(DType dtype, const void* const* srcs, size_t k, void* dst, int64_t count,
            bool accumulate) {
  switch (dtype) {
    case DType::kFloat32:
      return SumRunOf<F32>(srcs, k, dst, count, accumulate);
    case DType::kFloat16:
      return SumRunOf<F16>(srcs, k, dst, count, accumulate);
    case DType::kBFloat16:
      return SumRunOf<BF16>(srcs, k, dst, count, accumulate);
    case DType::kFloat64:
      return SumRunOf<F64>(srcs, k, dst, count, accumulate);
    case DType::kInt32:
      return SumRunOf<I32>(srcs, k, dst, count, accumulate);
    case DType::kInt64:
      return SumRunOf<I64>(srcs, k, dst, count, accumulate);
  }
}

absl::Status CopyInto(const Tensor& src, Tensor* dst) {
  if (dst == nullptr) return absl::InvalidArgumentError("copy into a null output");
  RETURN_IF_ERROR(CheckSameLayout(src, *dst, "copy"));
  if (src.data() != dst->data() && src.byte_size() > 0) {
    std::memmove(dst->data(), src.data(), src.byte_size());
  }
  return absl::OkStatus();
}

}  // namespace kvstore
