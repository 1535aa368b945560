#include "common/partitioner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvstore {

absl::StatusOr<Partitioner> Partitioner::Create(int num_servers, int64_t big_value_bound) {
  if (num_servers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("number of servers must be at least 1, got ", num_servers));
  }
  if (big_value_bound < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("big value bound must be positive, got ", big_value_bound));
  }
  return Partitioner(num_servers, big_value_bound);
}

int64_t Partitioner::SplitBoundary(int64_t n, int i, int s) {
  // round(n * i / s) with halves rounded up, in exact integer arithmetic.
  const __int128 numerator = static_cast<__int128>(2) * n * i + s;
  return static_cast<int64_t>(numerator / (2 * static_cast<__int128>(s)));
}

namespace {

// Mix is splitmix64's finaliser: a bijection of 64-bit words whose every output bit depends on
// every input bit.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

int Partitioner::ServerOf(const Key& key) const {
  // Rendezvous (highest random weight) hashing: each server scores the key, the highest wins.
  const uint64_t hash = key.StableHash();
  int best = 0;
  uint64_t best_score = 0;
  for (int i = 0; i < num_servers_; ++i) {
    const uint64_t score = Mix(hash ^ (static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull);
    if (i == 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

std::vector<Slice> Partitioner::Partition(const Key& key, int64_t num_elements,
                                          int64_t row_elements) const {
  if (num_elements <= big_value_bound_ || num_servers_ == 1) {
    return {Slice{ServerOf(key), 0, num_elements}};
  }
  if (row_elements < 1 || num_elements % row_elements != 0) row_elements = 1;
  const int64_t rows = num_elements / row_elements;
  std::vector<Slice> slices;
  slices.reserve(num_servers_);
  for (int i = 0; i < num_servers_; ++i) {
    const int64_t begin = SplitBoundary(rows, i, num_servers_) * row_elements;
    const int64_t end = SplitBoundary(rows, i + 1, num_servers_) * row_elements;
    if (end > begin) slices.push_back(Slice{i, begin, end - begin});
  }
  return slices;
}

int64_t ChunkElements(size_t element_size, int64_t chunk_bytes) {
  return std::max<int64_t>(1,
                           chunk_bytes / static_cast<int64_t>(std::max<size_t>(1, element_size)));
}

std::vector<Slice> ChunkSlice(const Slice& slice, size_t element_size, int64_t chunk_bytes) {
  const int64_t per_chunk = ChunkElements(element_size, chunk_bytes);
  if (slice.count <= per_chunk) return {slice};
  std::vector<Slice> chunks;
  chunks.reserve(static_cast<size_t>((slice.count + per_chunk - 1) / per_chunk));
  for (int64_t done = 0; done < slice.count; done += per_chunk) {
    chunks.push_back(
        Slice{slice.server, slice.offset + done, std::min(per_chunk, slice.count - done)});
  }
  return chunks;
}

}  // namespace kvstore
