// ByteChunks: received bytes as the chain of contiguous slices a transport delivered them in,
// and helpers that read such a chain without first copying it into one buffer.
#ifndef KVSTORE_SERVER_CORE_BYTE_CHUNKS_H_
#define KVSTORE_SERVER_CORE_BYTE_CHUNKS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/types/span.h"

namespace kvstore {

// Bytes as a chain of contiguous chunks (e.g. the slices a gRPC message arrived in).
using ByteChunks = std::vector<absl::Span<const uint8_t>>;

// ForEachPiece calls fn(element_offset, piece) for the pieces of `bytes` that hold whole
// elements of `element_size` bytes, in order; an element split between two chunks is copied
// into a small buffer and passed as a piece of its own.
void ForEachPiece(const ByteChunks& bytes, size_t element_size,
                  const std::function<void(int64_t, const void*, int64_t)>& fn);

// ForEachCommonPiece walks several chains that hold the same number of elements of
// `element_size` bytes (the pushes of one dist_sync round, each cut into slices where its
// transport cut it) in step: fn(element_offset, pieces, n) gets, for each stretch of `n`
// elements that lies contiguously in every chain, a pointer per chain (in the chains' order).
// An element split between two slices of a chain is copied into a small buffer and passed in
// a stretch of one. Chains that hold unequal numbers of bytes are walked as far as the shortest.
void ForEachCommonPiece(absl::Span<const ByteChunks* const> chains, size_t element_size,
                        const std::function<void(int64_t, const void* const*, int64_t)>& fn);

// GatherBytes copies `bytes` (chunk after chunk) into `dst`, which must hold exactly as many.
void GatherBytes(const ByteChunks& bytes, void* dst);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_BYTE_CHUNKS_H_
