// CopySource: the bytes of a copy one kvserver sends another (controller commands 14 "send" and
// "sendpart"), read page by page as they go rather than held whole: a rescale's part is a
// string (BytesSource), a replacement's shard is read from the engine itself
// (ShardStreamOut, server/core/shard_stream.h). The sender (server/grpc/shard_copy_sender.h)
// cuts it into pages, each placed by the receiver at its offset.
//
// Threading: a source is read from several threads at once (pages in flight); its methods
// are const and must be safe to call concurrently.
#ifndef KVSTORE_SERVER_CORE_COPY_SOURCE_H_
#define KVSTORE_SERVER_CORE_COPY_SOURCE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvstore {

class CopySource {
 public:
  virtual ~CopySource() = default;
  // size: the copy's length in bytes.
  virtual uint64_t size() const = 0;
  // head_bytes: how many of the first bytes the receiver must hold, every one, before any later
  // page reaches it (a streamed shard's header, which says where the values go); 0 when pages
  // may arrive in any order.
  virtual uint64_t head_bytes() const { return 0; }
  // PageEnd: where a page that starts at `begin` (< size) and holds at most `limit` bytes ends,
  // after `begin`: a source whose pages must not split an element ends them earlier.
  virtual uint64_t PageEnd(uint64_t begin, uint64_t limit) const {
    return std::min(size(), begin + std::max<uint64_t>(limit, 1));
  }
  // Read writes the bytes [begin, end) into `out`. An error (the source was withdrawn, its
  // values are gone) stops the copy.
  virtual absl::Status Read(uint64_t begin, uint64_t end, char* out) const = 0;
};

// BytesSource: a copy held as bytes; they must outlive it.
class BytesSource final : public CopySource {
 public:
  explicit BytesSource(absl::string_view bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  absl::Status Read(uint64_t begin, uint64_t end, char* out) const override {
    std::memcpy(out, bytes_.data() + begin, end - begin);
    return absl::OkStatus();
  }

 private:
  const absl::string_view bytes_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_COPY_SOURCE_H_
