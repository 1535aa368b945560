#include "common/wire_frame.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <set>
#include <string>

#include "proto/kvstore.pb.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

// Flattens a ByteBuffer into bytes, as the network would carry it.
std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  REQUIRE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

// Cuts `bytes` into slices at random points, as reads from a socket arrive.
grpc::ByteBuffer Rechunk(const std::string& bytes, TestRng* rng) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t n = std::min<size_t>(bytes.size() - at, rng->Int(1, 5000));
    slices.emplace_back(bytes.data() + at, n);
    at += n;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST_CASE("WireFrame: payload slices reference the tensors and decode from any chunking",
          "[wire]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 20; ++trial) {
    proto::PushRequest header;
    header.set_node_id(rng.Int(2, 1000));
    header.set_request_id(rng.Int(0, 1 << 30));
    std::vector<PayloadPart> parts;
    std::string expected;
    const int n = static_cast<int>(rng.Int(0, 4));
    for (int i = 0; i < n; ++i) {
      Tensor t = rng.RandomTensor(rng.AnyDType(), {rng.Int(1, 3000)});
      const size_t begin = rng.Int(0, t.byte_size() - 1);
      const size_t bytes = rng.Int(0, t.byte_size() - begin);
      auto* entry = header.add_tensors();
      entry->mutable_key()->set_int_key(i);
      entry->set_payload_offset(expected.size());
      entry->set_payload_bytes(bytes);
      expected.append(static_cast<const char*>(t.data()) + begin, bytes);
      parts.push_back(PayloadPart{t, begin, bytes});
    }
    grpc::ByteBuffer encoded = EncodeFrame(header, parts).value();

    // No copy of big parts: each is a slice over its tensor's memory; small ones are copied.
    std::vector<grpc::Slice> slices;
    REQUIRE(encoded.Dump(&slices).ok());
    std::set<const void*> begins;
    for (const grpc::Slice& slice : slices) begins.insert(slice.begin());
    for (const PayloadPart& part : parts) {
      if (part.bytes == 0) continue;
      const void* memory = static_cast<const char*>(part.tensor.data()) + part.byte_offset;
      INFO(part.bytes << " bytes");
      CHECK(begins.count(memory) == (part.bytes >= kFrameCopyBelowBytes ? 1u : 0u));
    }

    for (bool rechunk : {false, true}) {
      INFO("trial " << trial << (rechunk ? " rechunked" : " as sent"));
      const grpc::ByteBuffer received = rechunk ? Rechunk(Flatten(encoded), &rng) : encoded;
      proto::PushRequest decoded;
      Payload payload = DecodeFrame(received, &decoded).value();
      REQUIRE(decoded.SerializeAsString() == header.SerializeAsString());
      REQUIRE(payload.size() == expected.size());
      std::string copy(expected.size(), '\0');
      REQUIRE(payload.CopyTo(0, copy.size(), copy.data()).ok());
      REQUIRE(copy == expected);
      // Each entry's bytes, copied on their own.
      for (const auto& entry : decoded.tensors()) {
        std::string part(entry.payload_bytes(), '\0');
        REQUIRE(payload.CopyTo(entry.payload_offset(), part.size(), part.data()).ok());
        REQUIRE(part == expected.substr(entry.payload_offset(), entry.payload_bytes()));
        const void* view = payload.Contiguous(entry.payload_offset(), entry.payload_bytes());
        if (view != nullptr && !part.empty())
          REQUIRE(std::memcmp(view, part.data(), part.size()) == 0);
      }
      REQUIRE(absl::IsOutOfRange(payload.CopyTo(expected.size(), 1, copy.data())));
    }
  }
}

TEST_CASE("WireFrame: truncated or malformed frames are rejected", "[wire]") {
  TestRng rng;
  INFO(rng.Describe());
  proto::PullRequest header;
  header.set_node_id(7);
  header.add_tensors()->mutable_key()->set_str_key("weight");
  Tensor t = rng.RandomTensor(DType::kFloat32, {64});
  const std::string bytes = Flatten(EncodeFrame(header, {{t, 0, t.byte_size()}}).value());

  proto::PullRequest decoded;
  const grpc::ByteBuffer short_prefix = Rechunk(bytes.substr(0, 3), &rng);
  REQUIRE(absl::IsInvalidArgument(DecodeFrame(short_prefix, &decoded).status()));
  const grpc::ByteBuffer short_header = Rechunk(bytes.substr(0, 8), &rng);
  const auto status = DecodeFrame(short_header, &decoded).status();
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE(status.message().find("claims") != absl::string_view::npos);
  std::string garbage = bytes;
  garbage[4] = '\xff';  // The header's first tag byte becomes invalid.
  garbage[5] = '\xff';
  REQUIRE(absl::IsInvalidArgument(DecodeFrame(Rechunk(garbage, &rng), &decoded).status()));

  REQUIRE(absl::IsInvalidArgument(EncodeFrame(header, {{t, 200, 100}}).status()));
  REQUIRE(absl::IsInvalidArgument(EncodeFrame(header, {{Tensor(), 0, 0}}).status()));
}

}  // namespace
}  // namespace kvstore
