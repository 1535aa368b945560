// ChunkRequests: which of a value's chunks bound for one server travel in one request.
//
// A server's part of a value bigger than a chunk (common/partitioner.h) is cut into chunks,
// the kvserver's unit of rounds and updates. A push or a pull carries consecutive chunks of
// one part together, up to kRequestBytes a request, so that a call's fixed costs (the call
// itself, the wake-ups on both sides) are paid per megabyte rather than per chunk. A
// push+pull sends every chunk alone: its reply brings the chunk back, and a chunk's reply
// then travels while the next chunk goes up (docs/performance.md, entry 47).
#ifndef KVSTORE_CLIENT_CHUNK_REQUESTS_H_
#define KVSTORE_CLIENT_CHUNK_REQUESTS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "client/key_info.h"

namespace kvstore {

// The most bytes of chunks a push or pull request carries (one chunk, when bigger).
inline constexpr int64_t kRequestBytes = int64_t{1} << 20;

// RequestRuns returns how many chunks each request carries, in order, for the consecutive
// chunks of one part whose sizes in bytes are `chunk_bytes`: for kPush and kPull, runs as long
// as their bytes stay within `request_bytes` (a chunk bigger than that goes alone); for every
// other kind, one chunk each. The runs add up to chunk_bytes.size().
std::vector<size_t> RequestRuns(Kind kind, absl::Span<const int64_t> chunk_bytes,
                                int64_t request_bytes);

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_CHUNK_REQUESTS_H_
