// CPU reduction kernels: the client's sum of several values of one key, and the server's merge.
//
// Every function checks its arguments (defined CPU tensors, equal dtypes and element counts) and
// returns InvalidArgument naming both sides when they disagree, before touching any output.
// float16 and bfloat16 accumulate in float32 and are rounded once; integers wrap on overflow.
// Outputs may be the same buffer as an input. The loops are vectorised by the compiler; values
// of 8 MiB and more are split over the cores.
#ifndef KVSTORE_COMMON_REDUCE_H_
#define KVSTORE_COMMON_REDUCE_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/tensor.h"

namespace kvstore {

// SumInto sets `*out` to the element-wise sum of `inputs` (at least one).
absl::Status SumInto(absl::Span<const Tensor> inputs, Tensor* out);

// AddInto adds `src` to `*dst` element-wise.
absl::Status AddInto(const Tensor& src, Tensor* dst);

// AddRaw adds `count` elements of `dtype` at `src` to those at `dst` (no checks: for callers
// that have checked the layout once for many small values). `src` and `dst` may be equal.
void AddRaw(DType dtype, const void* src, void* dst, int64_t count);

// SumRaw sums `k` (at least one) spans of `count` elements of `dtype` in one pass: each
// element's sum is formed in input order, srcs[0] + srcs[1] + ..., rounded to `dtype` after
// each addition exactly as repeated AddRaw calls round it (so it equals copying srcs[0] into a
// buffer and adding the others with AddRaw, bit for bit). With `accumulate` that sum is then
// added to `dst` as AddRaw adds (dst + sum); otherwise `dst` is set to it. `dst` may be one of
// the inputs only when `accumulate` is false and it is srcs[0]. No checks, as AddRaw.
void SumRaw(DType dtype, const void* const* srcs, size_t k, void* dst, int64_t count,
            bool accumulate);

// CopyInto copies `src`'s bytes into `*dst`.
absl::Status CopyInto(const Tensor& src, Tensor* dst);

// CheckSameLayout returns InvalidArgument when `a` and `b` differ in dtype or element count or
// either is undefined or not on the CPU; `what` prefixes the message.
absl::Status CheckSameLayout(const Tensor& a, const Tensor& b, absl::string_view what);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_REDUCE_H_
