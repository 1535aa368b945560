// ForEachPiece and GatherBytes: reading a chain of received byte slices in place.
#include "server/core/byte_chunks.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

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

namespace {
// ChainCursor: where a walk stands in one chain - a slice and a byte within it - and the
// element it had to assemble from two slices, when it had to.
struct ChainCursor {
  const ByteChunks* chain = nullptr;
  size_t slice = 0;
  size_t at = 0;
  uint8_t carry[16];

  // Whole elements that lie from here in the current slice, skipping empty and spent slices.
  // Zero only at the end of the chain or when the next element is split between slices.
  size_t Whole(size_t element_size) {
    while (slice < chain->size() && at == (*chain)[slice].size()) {
      ++slice;
      at = 0;
    }
    if (slice == chain->size()) return 0;
    return ((*chain)[slice].size() - at) / element_size;
  }
  const uint8_t* Here() const { return (*chain)[slice].data() + at; }
  // Assembles the next element from the slices it spans into `carry`; false when the chain
  // ends first.
  bool Carry(size_t element_size) {
    size_t filled = 0;
    while (filled < element_size) {
      if (slice == chain->size()) return false;
      const absl::Span<const uint8_t>& s = (*chain)[slice];
      const size_t take = std::min(element_size - filled, s.size() - at);
      std::memcpy(carry + filled, s.data() + at, take);
      filled += take;
      at += take;
      if (at == s.size()) {
        ++slice;
        at = 0;
      }
    }
    return true;
  }
};
}  // namespace

void ForEachCommonPiece(absl::Span<const ByteChunks* const> chains, size_t element_size,
                        const std::function<void(int64_t, const void* const*, int64_t)>& fn) {
  if (chains.empty() || element_size == 0 || element_size > sizeof(ChainCursor::carry)) return;
  std::vector<ChainCursor> cursors(chains.size());
  for (size_t i = 0; i < chains.size(); ++i) cursors[i].chain = chains[i];
  std::vector<const void*> pieces(chains.size());
  int64_t element = 0;
  for (;;) {
    size_t n = SIZE_MAX;
    bool split = false;
    for (ChainCursor& c : cursors) {
      const size_t whole = c.Whole(element_size);
      if (whole == 0) {
        if (c.slice == c.chain->size()) return;  // This chain has ended.
        split = true;
      }
      n = std::min(n, whole);
    }
    if (split) {
      // One element, copied out of the chains that split it, read in place from the others.
      for (size_t i = 0; i < cursors.size(); ++i) {
        ChainCursor& c = cursors[i];
        if (c.Whole(element_size) == 0) {
          if (!c.Carry(element_size)) return;
          pieces[i] = c.carry;
        } else {
          pieces[i] = c.Here();
          c.at += element_size;
        }
      }
      fn(element++, pieces.data(), 1);
      continue;
    }
    for (size_t i = 0; i < cursors.size(); ++i) {
      pieces[i] = cursors[i].Here();
      cursors[i].at += n * element_size;
    }
    fn(element, pieces.data(), static_cast<int64_t>(n));
    element += static_cast<int64_t>(n);
  }
}

}  // namespace kvstore
