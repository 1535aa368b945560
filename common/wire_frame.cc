#include "common/wire_frame.h"

#include <grpc/slice.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvstore {
namespace {

constexpr size_t kPrefixBytes = 4;

void ReleaseTensor(void* handle) { delete static_cast<Tensor*>(handle); }

}  // namespace

absl::StatusOr<grpc::ByteBuffer> EncodeFrame(const google::protobuf::MessageLite& header,
                                             absl::Span<const PayloadPart> parts) {
  const size_t header_bytes = header.ByteSizeLong();
  if (header_bytes > UINT32_MAX) {
    return absl::ResourceExhaustedError(
        absl::StrCat("frame header of ", header_bytes, " bytes exceeds the 4 GiB limit"));
  }
  for (const PayloadPart& part : parts) {
    if (!part.tensor.defined() || !part.tensor.device().is_cpu()) {
      return absl::InvalidArgumentError(
          absl::StrCat("payload part is not a CPU tensor: ", part.tensor.Description()));
    }
    if (part.byte_offset > part.tensor.byte_size() ||
        part.bytes > part.tensor.byte_size() - part.byte_offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "payload part [", part.byte_offset, ", ", part.byte_offset + part.bytes,
          ") lies outside ", part.tensor.Description(), " of ", part.tensor.byte_size(), " bytes"));
    }
  }
  // The prefix, the header and runs of small parts are copied into one slice each (a slice per
  // 16-byte value would cost more than the copy), allocated once at its final size; bigger
  // parts are never copied: their slices reference the tensors' memory.
  std::vector<size_t> runs(1, kPrefixBytes + header_bytes);
  for (const PayloadPart& part : parts) {
    if (part.bytes == 0) continue;
    if (part.bytes < kFrameCopyBelowBytes) {
      runs.back() += part.bytes;
    } else {
      runs.push_back(0);
    }
  }
  std::vector<grpc::Slice> slices;
  size_t run = 0;
  grpc_slice copied = grpc_slice_malloc(runs[0]);
  uint8_t* out = GRPC_SLICE_START_PTR(copied);
  const uint32_t length = static_cast<uint32_t>(header_bytes);
  const unsigned char prefix[kPrefixBytes] = {
      static_cast<unsigned char>(length), static_cast<unsigned char>(length >> 8),
      static_cast<unsigned char>(length >> 16), static_cast<unsigned char>(length >> 24)};
  std::memcpy(out, prefix, kPrefixBytes);
  if (!header.SerializeToArray(out + kPrefixBytes, static_cast<int>(header_bytes))) {
    grpc_slice_unref(copied);
    return absl::InternalError("frame header failed to serialise");
  }
  out += kPrefixBytes + header_bytes;
  auto flush = [&] {
    if (GRPC_SLICE_LENGTH(copied) > 0) {
      slices.emplace_back(copied, grpc::Slice::STEAL_REF);
    } else {
      grpc_slice_unref(copied);
    }
  };
  for (const PayloadPart& part : parts) {
    if (part.bytes == 0) continue;
    char* begin = static_cast<char*>(part.tensor.data()) + part.byte_offset;
    if (part.bytes < kFrameCopyBelowBytes) {
      std::memcpy(out, begin, part.bytes);
      out += part.bytes;
      continue;
    }
    flush();
    slices.emplace_back(begin, part.bytes, ReleaseTensor, new Tensor(part.tensor));
    copied = grpc_slice_malloc(runs[++run]);
    out = GRPC_SLICE_START_PTR(copied);
  }
  flush();
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::StatusOr<Payload> DecodeFrame(const grpc::ByteBuffer& buffer,
                                    google::protobuf::MessageLite* header) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return absl::InvalidArgumentError("unreadable frame");
  // Read the prefix and the header, which may themselves straddle slices (copied: they are small).
  size_t total = 0;
  for (const grpc::Slice& s : slices) total += s.size();
  auto read = [&slices](size_t offset, size_t bytes, char* dst) {
    for (const grpc::Slice& s : slices) {
      if (bytes == 0) return;
      if (offset >= s.size()) {
        offset -= s.size();
        continue;
      }
      const size_t n = std::min(bytes, s.size() - offset);
      std::memcpy(dst, s.begin() + offset, n);
      dst += n;
      bytes -= n;
      offset = 0;
    }
  };
  if (total < kPrefixBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame of ", total, " bytes is shorter than its 4-byte length prefix"));
  }
  unsigned char prefix[kPrefixBytes];
  read(0, kPrefixBytes, reinterpret_cast<char*>(prefix));
  const size_t header_bytes = static_cast<size_t>(prefix[0]) | (size_t{prefix[1]} << 8) |
                              (size_t{prefix[2]} << 16) | (size_t{prefix[3]} << 24);
  if (header_bytes > total - kPrefixBytes) {
    return absl::InvalidArgumentError(absl::StrCat("frame header claims ", header_bytes,
                                                   " bytes but only ", total - kPrefixBytes,
                                                   " follow the prefix"));
  }
  std::string head(header_bytes, '\0');
  read(kPrefixBytes, header_bytes, head.data());
  if (!header->ParseFromString(head)) {
    return absl::InvalidArgumentError("frame header does not parse");
  }
  // Keep the payload as sub-slices of what arrived.
  Payload payload;
  size_t skip = kPrefixBytes + header_bytes;
  for (grpc::Slice& s : slices) {
    if (skip >= s.size()) {
      skip -= s.size();
      continue;
    }
    grpc::Slice rest = skip == 0 ? s : s.sub(skip, s.size());
    skip = 0;
    payload.starts_.push_back(payload.size_);
    payload.size_ += rest.size();
    payload.slices_.push_back(std::move(rest));
  }
  return payload;
}

size_t Payload::SliceIndex(size_t offset) const {
  return std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin() - 1;
}

absl::Status Payload::CopyTo(size_t offset, size_t bytes, void* dst) const {
  if (offset > size_ || bytes > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("payload range [", offset, ", ", offset + bytes,
                                              ") exceeds the ", size_, " bytes received"));
  }
  char* out = static_cast<char*>(dst);
  // Copy slice by slice from the one holding `offset`.
  size_t i = bytes > 0 ? SliceIndex(offset) : 0;
  while (bytes > 0) {
    const size_t within = offset - starts_[i];
    const size_t n = std::min(bytes, slices_[i].size() - within);
    std::memcpy(out, slices_[i].begin() + within, n);
    out += n;
    offset += n;
    bytes -= n;
    ++i;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<absl::Span<const uint8_t>>> Payload::Chunks(size_t offset,
                                                                       size_t bytes) const {
  if (offset > size_ || bytes > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("payload range [", offset, ", ", offset + bytes,
                                              ") exceeds the ", size_, " bytes received"));
  }
  std::vector<absl::Span<const uint8_t>> chunks;
  size_t i = bytes > 0 ? SliceIndex(offset) : 0;
  while (bytes > 0) {
    const size_t within = offset - starts_[i];
    const size_t n = std::min(bytes, slices_[i].size() - within);
    chunks.emplace_back(slices_[i].begin() + within, n);
    offset += n;
    bytes -= n;
    ++i;
  }
  return chunks;
}

grpc::ByteBuffer EncodeMessage(const google::protobuf::MessageLite& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status DecodeMessage(const grpc::ByteBuffer& buffer, google::protobuf::MessageLite* message) {
  grpc::Slice slice;
  if (!buffer.DumpToSingleSlice(&slice).ok() ||
      !message->ParseFromArray(slice.begin(), static_cast<int>(slice.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request of ", buffer.Length(), " bytes is not a valid ", message->GetTypeName()));
  }
  return absl::OkStatus();
}

const void* Payload::Contiguous(size_t offset, size_t bytes) const {
  if (offset > size_ || bytes > size_ - offset || slices_.empty()) return nullptr;
  const size_t i = SliceIndex(std::min(offset, size_ - 1));
  const size_t within = offset - starts_[i];
  if (bytes > slices_[i].size() - within) return nullptr;
  return slices_[i].begin() + within;
}

}  // namespace kvstore
