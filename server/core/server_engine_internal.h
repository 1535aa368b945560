// Helpers shared by the files that implement ServerEngine (server_engine*.cc); not part of its
// interface.
#ifndef KVSTORE_SERVER_CORE_SERVER_ENGINE_INTERNAL_H_
#define KVSTORE_SERVER_CORE_SERVER_ENGINE_INTERNAL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/tensor.h"
#include "server/core/byte_chunks.h"

namespace kvstore::server_engine_internal {

// View wraps `elements` elements of `dtype` at `data` as a tensor that does not own them.
inline Tensor View(const void* data, DType dtype, int64_t elements) {
  return Tensor::Borrow(const_cast<void*>(data), dtype, Shape{elements});
}

// NumElementsOf returns the number of elements of a value of `shape`.
inline int64_t NumElementsOf(const Shape& shape) {
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  return total;
}

// ElementRange returns "[offset, offset + count)" for messages, without overflowing int64 when
// the two come from a request.
inline std::string ElementRange(int64_t offset, int64_t count) {
  const __int128 end = static_cast<__int128>(offset) + count;
  if (end > std::numeric_limits<int64_t>::max() || end < std::numeric_limits<int64_t>::min()) {
    return absl::StrCat("[", offset, ", ", offset, " + ", count, ")");
  }
  return absl::StrCat("[", offset, ", ", static_cast<int64_t>(end), ")");
}

// SaturatingAdd returns a + b for non-negative a and b, or the largest int64 when that
// overflows.
inline int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

// CopyBytes copies bytes [offset, offset + n) of `bytes` into `dst`.
inline void CopyBytes(const ByteChunks& bytes, size_t offset, size_t n, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  for (const absl::Span<const uint8_t>& chunk : bytes) {
    if (n == 0) return;
    if (offset >= chunk.size()) {
      offset -= chunk.size();
      continue;
    }
    const size_t take = std::min(chunk.size() - offset, n);
    std::memcpy(out, chunk.data() + offset, take);
    out += take;
    n -= take;
    offset = 0;
  }
}

// SubRange returns the parts of `bytes` that hold its bytes [begin, end).
inline ByteChunks SubRange(const ByteChunks& bytes, size_t begin, size_t end) {
  ByteChunks out;
  size_t start = 0;
  for (const absl::Span<const uint8_t>& chunk : bytes) {
    const size_t stop = start + chunk.size();
    if (stop > begin && start < end) {
      const size_t from = std::max(begin, start) - start;
      out.push_back(chunk.subspan(from, std::min(end, stop) - start - from));
    }
    start = stop;
  }
  return out;
}

}  // namespace kvstore::server_engine_internal

#endif  // KVSTORE_SERVER_CORE_SERVER_ENGINE_INTERNAL_H_
