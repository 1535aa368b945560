// SpareBuffer and the process-wide count of the bytes the spares keep.
#include "server/core/spare_buffer.h"

#include <atomic>
#include <utility>

namespace kvstore {

namespace {
// Bytes held by every SpareBuffer in the process.
std::atomic<int64_t> spare_bytes{0};
}  // namespace

int64_t SpareBuffer::BytesHeld() { return spare_bytes.load(); }

Tensor SpareBuffer::TakeIfFree() {
  if (!buffer_.defined() || buffer_.shared()) return Tensor();
  Tensor taken = std::move(buffer_);
  buffer_ = Tensor();
  spare_bytes.fetch_sub(static_cast<int64_t>(taken.byte_size()));
  return taken;
}

void SpareBuffer::Keep(Tensor buffer) {
  if (buffer_.defined()) return;
  const auto bytes = static_cast<int64_t>(buffer.byte_size());
  if (spare_bytes.fetch_add(bytes) + bytes > kMaxBytes) {
    spare_bytes.fetch_sub(bytes);
    return;
  }
  buffer_ = std::move(buffer);
}

void SpareBuffer::Reset() {
  if (!buffer_.defined()) return;
  spare_bytes.fetch_sub(static_cast<int64_t>(buffer_.byte_size()));
  buffer_ = Tensor();
}

}  // namespace kvstore
