// Framing of tensor-carrying gRPC messages: [fixed32 N][N bytes: protobuf header][raw payload].
//
// EncodeFrame builds a grpc::ByteBuffer whose payload slices reference the tensors' memory (no
// copy; parts under 8 KiB are copied into the frame instead); each slice holds a handle on its
// tensor, so owning tensors stay alive until gRPC has
// sent the bytes. A borrowed tensor's memory must stay alive and unchanged until the call
// completes. DecodeFrame parses the header and keeps the received slices as they are; a Payload
// copies bytes out once, straight into the destination (an output tensor or an aggregation
// buffer). The layout is described in proto/kvstore.proto.
#ifndef KVSTORE_COMMON_WIRE_FRAME_H_
#define KVSTORE_COMMON_WIRE_FRAME_H_

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"

namespace kvstore {

// Payload parts smaller than this are copied into the frame rather than referenced.
inline constexpr size_t kFrameCopyBelowBytes = 8192;

// A region of a tensor to send: `bytes` bytes starting `byte_offset` bytes into its buffer.
struct PayloadPart {
  Tensor tensor;
  size_t byte_offset = 0;
  size_t bytes = 0;
};

// EncodeFrame serialises `header` and appends the parts, in order, as slices over their memory.
// InvalidArgument when a part lies outside its tensor or is not on the CPU.
absl::StatusOr<grpc::ByteBuffer> EncodeFrame(const google::protobuf::MessageLite& header,
                                             absl::Span<const PayloadPart> parts);

// Payload: the received bytes after the header, as the chain of slices gRPC delivered.
class Payload {
 public:
  Payload() = default;
  size_t size() const { return size_; }
  // CopyTo copies `bytes` bytes starting at `offset` into `dst`; OutOfRange (naming both) when
  // the range exceeds the payload.
  absl::Status CopyTo(size_t offset, size_t bytes, void* dst) const;
  // Contiguous returns a pointer to [offset, offset + bytes) when that range lies within one
  // received slice, or nullptr when it straddles slices (then use CopyTo).
  const void* Contiguous(size_t offset, size_t bytes) const;
  // Chunks returns [offset, offset + bytes) as the spans of the received slices that hold it, in
  // order (no copy; valid while this Payload lives). OutOfRange when the range exceeds the
  // payload.
  absl::StatusOr<std::vector<absl::Span<const uint8_t>>> Chunks(size_t offset, size_t bytes) const;
  // num_slices returns how many slices the payload arrived in.
  size_t num_slices() const { return slices_.size(); }

 private:
  friend absl::StatusOr<Payload> DecodeFrame(const grpc::ByteBuffer& buffer,
                                             google::protobuf::MessageLite* header);
  // SliceIndex returns the index of the slice holding payload byte `offset` (< size()).
  size_t SliceIndex(size_t offset) const;

  std::vector<grpc::Slice> slices_;
  std::vector<size_t> starts_;  // Payload offset of each slice's first byte.
  size_t size_ = 0;
};

// DecodeFrame parses the header into `*header` and returns the payload without copying it.
// InvalidArgument when the frame is shorter than its length prefix or the header does not parse.
absl::StatusOr<Payload> DecodeFrame(const grpc::ByteBuffer& buffer,
                                    google::protobuf::MessageLite* header);

// EncodeMessage / DecodeMessage: plain protobuf messages (no payload) as a ByteBuffer, for the
// raw gRPC methods. DecodeMessage: InvalidArgument when the bytes do not parse.
grpc::ByteBuffer EncodeMessage(const google::protobuf::MessageLite& message);
absl::Status DecodeMessage(const grpc::ByteBuffer& buffer, google::protobuf::MessageLite* message);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_WIRE_FRAME_H_
