// SpareBuffer: a value's previous buffer, kept for reuse by the value's next copy on write.
//
// ServerEngine moves a chunk to another buffer when it updates the chunk while a pull still
// holds its buffer (copy on write). The previous buffer is kept in the chunk's SpareBuffer and
// reused by the chunk's next such update once nothing holds it any more, while the spares of
// the whole process stay within kMaxBytes; beyond that it is freed once the pull is sent (so
// that a big value is not held twice).
//
// Threading: a SpareBuffer is used under its owner's lock; the count of bytes kept by the
// process is atomic.
#ifndef KVSTORE_SERVER_CORE_SPARE_BUFFER_H_
#define KVSTORE_SERVER_CORE_SPARE_BUFFER_H_

#include <cstdint>

#include "common/tensor.h"

namespace kvstore {

class SpareBuffer {
 public:
  // kMaxBytes: the most bytes the SpareBuffers of the process keep together.
  static constexpr int64_t kMaxBytes = int64_t{64} << 20;
  // BytesHeld returns the bytes the SpareBuffers of the process keep now.
  static int64_t BytesHeld();

  SpareBuffer() = default;
  ~SpareBuffer() { Reset(); }
  SpareBuffer(const SpareBuffer&) = delete;
  SpareBuffer& operator=(const SpareBuffer&) = delete;
  // TakeIfFree returns the kept buffer when nothing else holds it any more (else undefined).
  Tensor TakeIfFree();
  // Keep keeps `buffer` when no buffer is kept and the budget allows; else drops it.
  void Keep(Tensor buffer);
  // Reset drops the kept buffer, if any.
  void Reset();

 private:
  Tensor buffer_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_SPARE_BUFFER_H_
