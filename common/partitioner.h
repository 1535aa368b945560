// Partitioner: decides which server holds which part of a value.
//
// A value with at most `big_value_bound` elements lives whole on one server chosen by
// rendezvous hashing of its key (every server scores the key's stable hash, the highest wins):
// going from S to S + 1 servers moves only the keys the new server wins, about 1/(S + 1) of
// them, and going from S to S - 1 only those of the server that left (docs/state.md measures
// it). A bigger value of R rows of E elements (N = R*E; a row is one index of the
// first dimension, see common/row_sparse.h) is split evenly by rows over all S servers: server
// i holds the rows [round(R*i/S), round(R*(i+1)/S)), i.e. those flattened elements times E; a
// server whose range is empty holds nothing. Row ranges let a row-sparse push send each server
// whole rows. Clients compute the placement from (key, N, E, S, bound), so no table is needed
// per key; servers are told their part at Init.
#ifndef KVSTORE_COMMON_PARTITIONER_H_
#define KVSTORE_COMMON_PARTITIONER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/key.h"

namespace kvstore {

// kPlacement names this placement in checkpoint manifests: a set written under another one (or
// none: sets written when small values were placed by the key's hash modulo S) restores only
// by re-placing every key, from every server's file (docs/state.md, "Restore onto another
// number of servers").
inline constexpr char kPlacement[] = "rendezvous";

// kDefaultBigValueBound: values with more elements than this are split over all servers.
inline constexpr int64_t kDefaultBigValueBound = 1000000;

// Slice: `count` flattened elements starting at `offset`, held by server `server`.
struct Slice {
  int server = 0;
  int64_t offset = 0;
  int64_t count = 0;
  friend bool operator==(const Slice& a, const Slice& b) {
    return a.server == b.server && a.offset == b.offset && a.count == b.count;
  }
};

// kDefaultChunkBytes: a server's part of a value bigger than this travels and is updated in
// chunks of this many bytes, so that transfer, summing and updating overlap. Pushes and pulls
// carry up to 1 MiB of chunks a request (client/chunk_requests.h); a push+pull's reply of one
// chunk travels while the next chunk goes up (docs/performance.md, entry 47).
inline constexpr int64_t kDefaultChunkBytes = 512 << 10;

// ChunkSlice cuts `slice` into consecutive chunks of at most max(1, chunk_bytes / element_size)
// elements, on the same server. A slice that fits (or is empty) is returned whole. Clients and
// servers cut alike from the chunk size in the cluster view.
std::vector<Slice> ChunkSlice(const Slice& slice, size_t element_size, int64_t chunk_bytes);

// ChunkElements returns the number of elements per chunk for `element_size`-byte elements.
int64_t ChunkElements(size_t element_size, int64_t chunk_bytes);

class Partitioner {
 public:
  // Create validates the parameters: at least one server, a positive bound.
  static absl::StatusOr<Partitioner> Create(int num_servers,
                                            int64_t big_value_bound = kDefaultBigValueBound);

  // Partition returns the slices of a value of `num_elements` elements, in rows of
  // `row_elements`, stored under `key`, in server order; slices are never empty except for a
  // value of zero elements (one empty slice). A row size that does not divide the element
  // count is taken as 1.
  std::vector<Slice> Partition(const Key& key, int64_t num_elements,
                               int64_t row_elements = 1) const;

  // ServerOf returns the server that holds a small (unsplit) value of `key` (rendezvous
  // hashing, O(number of servers)).
  int ServerOf(const Key& key) const;

  // SplitBoundary returns round(n * i / s), the first element of server i's part of a split
  // value of n elements over s servers (i in [0, s]).
  static int64_t SplitBoundary(int64_t n, int i, int s);

  int num_servers() const { return num_servers_; }
  int64_t big_value_bound() const { return big_value_bound_; }

 private:
  Partitioner(int num_servers, int64_t big_value_bound)
      : num_servers_(num_servers), big_value_bound_(big_value_bound) {}

  int num_servers_;
  int64_t big_value_bound_;
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_PARTITIONER_H_
