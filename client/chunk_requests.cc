#include "client/chunk_requests.h"

namespace kvstore {

std::vector<size_t> RequestRuns(Kind kind, absl::Span<const int64_t> chunk_bytes,
                                int64_t request_bytes) {
  const bool together = kind == Kind::kPush || kind == Kind::kPull;
  std::vector<size_t> runs;
  int64_t bytes = 0;  // In the current run.
  for (const int64_t chunk : chunk_bytes) {
    if (together && !runs.empty() && bytes + chunk <= request_bytes) {
      ++runs.back();
      bytes += chunk;
      continue;
    }
    runs.push_back(1);
    bytes = chunk;
  }
  return runs;
}

}  // namespace kvstore
