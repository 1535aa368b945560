// ForEachPiece and GatherBytes: reading a chain of received byte slices in place.
#include "server/core/byte_chunks.h"

#include <algorithm>
#include <cstring>

namespace kvstore {

void GatherBytes(const ByteChunks& bytes, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  for (const absl::Span<const uint8_t>& chunk : bytes) {
    if (chunk.empty()) continue;
    std::memcpy(out, chunk.data(), chunk.size());
    out += chunk.size();
  }
}

void ForEachPiece(const ByteChunks& bytes, size_t element_size,
                  const std::function<void(int64_t, const void*, int64_t)>& fn) {
  int64_t element = 0;
  uint8_t carry[16];
  size_t carried = 0;
  for (const absl::Span<const uint8_t>& chunk : bytes) {
    const uint8_t* p = chunk.data();
    size_t n = chunk.size();
    if (carried > 0) {
      const size_t take = std::min(element_size - carried, n);
      std::memcpy(carry + carried, p, take);
      carried += take;
      p += take;
      n -= take;
      if (carried == element_size) {
        fn(element++, carry, 1);
        carried = 0;
      }
    }
    const size_t whole = n / element_size;
    if (whole > 0) {
      fn(element, p, static_cast<int64_t>(whole));
      element += static_cast<int64_t>(whole);
      p += whole * element_size;
      n -= whole * element_size;
    }
    if (n > 0) {
      std::memcpy(carry, p, n);
      carried = n;
    }
  }
}

}  // namespace kvstore
