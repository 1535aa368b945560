#include "tests/signed_request.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"

namespace kvstore::testing {
namespace {

constexpr absl::string_view kServerMethods = "/kvstore.proto.KVServer/";
constexpr int kCredentialField = 15;  // proto::RequestNode.node_credential

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Dump(&slices).ok()) return bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

grpc::ByteBuffer FromBytes(const std::string& bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

// Field encodes `credential` as protobuf field kCredentialField (length-delimited).
std::string Field(absl::string_view credential) {
  std::string out(1, static_cast<char>((kCredentialField << 3) | 2));
  uint64_t n = credential.size();
  while (n >= 0x80) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  out.append(credential.data(), credential.size());
  return out;
}

}  // namespace

grpc::ByteBuffer SignRequest(absl::string_view method, const grpc::ByteBuffer& request,
                             absl::string_view credential) {
  if (credential.empty() || !absl::StartsWith(method, kServerMethods)) return request;
  const absl::string_view name = method.substr(kServerMethods.size());
  std::string bytes = Flatten(request);
  const std::string field = Field(credential);
  if (name != "Init" && name != "Push" && name != "PushPull") return FromBytes(field + bytes);
  if (bytes.size() < 4) return request;
  auto byte = [&](int i) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])); };
  const uint32_t n = byte(0) | byte(1) << 8 | byte(2) << 16 | byte(3) << 24;
  if (bytes.size() - 4 < n) return request;
  const uint32_t grown = n + static_cast<uint32_t>(field.size());
  std::string out = {static_cast<char>(grown), static_cast<char>(grown >> 8),
                     static_cast<char>(grown >> 16), static_cast<char>(grown >> 24)};
  out.append(field);
  out.append(bytes, 4, std::string::npos);
  return FromBytes(out);
}

}  // namespace kvstore::testing
