#include "common/request_signature.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

// RandomRequest builds a request of random bytes in 0 to 6 slices of random sizes.
grpc::ByteBuffer RandomRequest(TestRng* rng, std::string* flat) {
  std::vector<grpc::Slice> slices;
  const int n = static_cast<int>(rng->Int(0, 6));
  flat->clear();
  for (int i = 0; i < n; ++i) {
    std::string bytes(static_cast<size_t>(rng->Int(0, 3000)), '\0');
    for (char& c : bytes) c = static_cast<char>(rng->Int(0, 255));
    flat->append(bytes);
    slices.emplace_back(bytes);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// RandomFrame builds a framed request - [fixed32 N][N header bytes][payload], random bytes
// - in 1 to 4 slices cut at random; `*header_end` gets 4 + N.
grpc::ByteBuffer RandomFrame(TestRng* rng, std::string* flat, size_t* header_end) {
  const size_t n = static_cast<size_t>(rng->Int(0, 200));
  std::string bytes = {static_cast<char>(n), static_cast<char>(n >> 8), 0, 0};
  const size_t payload = static_cast<size_t>(rng->Int(0, 5000));
  for (size_t i = 0; i < n + payload; ++i) bytes.push_back(static_cast<char>(rng->Int(0, 255)));
  *flat = bytes;
  *header_end = 4 + n;
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  const int cuts = static_cast<int>(rng->Int(0, 3));
  for (int i = 0; i < cuts && at < bytes.size(); ++i) {
    const size_t take = static_cast<size_t>(rng->Int(1, static_cast<int64_t>(bytes.size() - at)));
    slices.emplace_back(bytes.substr(at, take));
    at += take;
  }
  if (at < bytes.size()) slices.emplace_back(bytes.substr(at));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Flat(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (buffer.Length() > 0) REQUIRE(buffer.Dump(&slices).ok());
  std::string flat;
  for (const grpc::Slice& slice : slices) {
    flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return flat;
}

grpc::ByteBuffer FromFlat(const std::string& flat) {
  grpc::Slice slice(flat);
  return grpc::ByteBuffer(&slice, 1);
}

TEST_CASE(
    "RequestSignature: a signed request verifies once, whole and unchanged, at the "
    "server, method and view it was signed for",
    "[common][security]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::map<uint64_t, std::string> peers = {
      {1, "token-of-the-scheduler"}, {7, "token-of-worker-7"}, {9, "token-of-worker-9"}};
  const std::string address = "127.0.0.1:4000";
  RequestVerifier verifier(peers, address);
  RequestSigner signer(7, peers.at(7));
  for (int trial = 0; trial < 300; ++trial) {
    std::string flat;
    const grpc::ByteBuffer request = RandomRequest(&rng, &flat);
    const auto method = static_cast<ServerMethod>(rng.Int(0, kNumServerMethods - 1));
    const bool backup = rng.Int(0, 1) == 1;
    const uint64_t epoch = static_cast<uint64_t>(rng.Int(0, 3));
    const grpc::ByteBuffer signed_request = signer.Sign({method, backup, address, epoch}, request);
    CHECK(signed_request.Length() == flat.size() + kSignatureTrailerBytes);
    const std::string signed_flat = Flat(signed_request);
    CHECK(signed_flat.compare(0, flat.size(), flat) == 0);

    // Another method, view or receiver: refused, and nothing recorded.
    const auto other_method =
        static_cast<ServerMethod>((static_cast<int>(method) + 1) % kNumServerMethods);
    CHECK(absl::IsUnauthenticated(verifier.Verify(other_method, backup, signed_request).status()));
    CHECK(absl::IsUnauthenticated(verifier.Verify(method, !backup, signed_request).status()));
    {
      // The view epoch changed in the trailer.
      std::string rerouted = signed_flat;
      rerouted[flat.size() + 18] = static_cast<char>(rerouted[flat.size() + 18] + 1);
      CHECK(absl::IsUnauthenticated(verifier.Verify(method, backup, FromFlat(rerouted)).status()));
    }
    RequestVerifier elsewhere(peers, "127.0.0.1:4001");
    CHECK(absl::IsUnavailable(elsewhere.Verify(method, backup, signed_request).status()));
    // Cut short or lengthened: refused.
    CHECK(absl::IsUnauthenticated(
        verifier.Verify(method, backup, FromFlat(signed_flat.substr(1))).status()));
    CHECK(absl::IsUnauthenticated(
        verifier.Verify(method, backup, FromFlat("x" + signed_flat)).status()));

    absl::StatusOr<RequestVerifier::Verified> verified =
        verifier.Verify(method, backup, signed_request);
    INFO(verified.status().ToString());
    REQUIRE(verified.ok());
    CHECK(verified->node_id == 7);
    CHECK(verified->view_epoch == epoch);
    CHECK(Flat(verified->request) == flat);
    // The same bytes again: a replay.
    const absl::Status replay = verifier.Verify(method, backup, signed_request).status();
    CHECK(absl::IsUnauthenticated(replay));
    CHECK(absl::StrContains(replay.message(), "replayed request: node 7"));
  }
}

TEST_CASE(
    "RequestSignature: a signature covers a framed request's header, and its payload "
    "when the job signs payloads; a signature covering less than the server requires is "
    "refused",
    "[common][security]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::map<uint64_t, std::string> peers = {{7, "token-of-worker-7"}};
  for (const bool signed_payloads : {false, true}) {
    INFO("signed payloads: " << signed_payloads);
    RequestVerifier verifier(peers, "h:3", {}, signed_payloads);
    RequestSigner signer(7, peers.at(7), signed_payloads);
    for (int trial = 0; trial < 300; ++trial) {
      std::string flat;
      size_t header_end = 0;
      const grpc::ByteBuffer frame = RandomFrame(&rng, &flat, &header_end);
      const auto method = static_cast<ServerMethod>(rng.Int(0, 2) == 0   ? ServerMethod::kInit
                                                    : rng.Int(0, 1) == 0 ? ServerMethod::kPush
                                                                         : ServerMethod::kPushPull);
      // One byte changed, anywhere in the request or its signature.
      std::string altered = Flat(signer.Sign({method, false, "h:3", 0}, frame));
      const size_t at = static_cast<size_t>(rng.Int(0, static_cast<int64_t>(altered.size()) - 1));
      altered[at] = static_cast<char>(altered[at] ^ (1 << rng.Int(0, 7)));
      const absl::Status status = verifier.Verify(method, false, FromFlat(altered)).status();
      INFO("byte " << at << " of " << altered.size() << ", header to " << header_end << ": "
                   << status.ToString());
      if (at >= header_end && at < flat.size() && !signed_payloads) {
        CHECK(status.ok());  // A payload byte: left to TLS.
      } else {
        CHECK((absl::IsUnauthenticated(status) || absl::IsUnavailable(status)));
      }
    }
    // A signer that covers only headers, to a server that requires payloads.
    std::string flat;
    size_t header_end = 0;
    const grpc::ByteBuffer frame = RandomFrame(&rng, &flat, &header_end);
    RequestSigner headers_only(7, peers.at(7), false);
    RequestVerifier fresh(peers, "h:3", {}, signed_payloads);  // Its own sequences.
    const absl::Status status =
        fresh
            .Verify(ServerMethod::kPush, false,
                    headers_only.Sign({ServerMethod::kPush, false, "h:3", 0}, frame))
            .status();
    INFO(status.ToString());
    CHECK(status.ok() == (!signed_payloads || header_end == flat.size()));
  }
}

TEST_CASE(
    "RequestSignature: a node cannot sign as another, and unsigned or foreign requests "
    "are refused",
    "[common][security]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::map<uint64_t, std::string> peers = {{7, "token-of-worker-7"},
                                                 {9, "token-of-worker-9"}};
  RequestVerifier verifier(peers, "h:1");
  std::string flat;
  const grpc::ByteBuffer request = RandomRequest(&rng, &flat);
  // Worker 9's token, claiming to be node 7.
  RequestSigner impostor(7, peers.at(9));
  CHECK(absl::IsUnauthenticated(
      verifier
          .Verify(ServerMethod::kPush, false,
                  impostor.Sign({ServerMethod::kPush, false, "h:1", 0}, request))
          .status()));
  // A node the server was not told of.
  RequestSigner stranger(11, "token-of-worker-11");
  const absl::Status unknown =
      verifier
          .Verify(ServerMethod::kPull, false,
                  stranger.Sign({ServerMethod::kPull, false, "h:1", 0}, request))
          .status();
  CHECK(absl::IsUnauthenticated(unknown));
  CHECK(absl::StrContains(unknown.message(), "as node 11"));
  // No trailer at all.
  CHECK(absl::IsUnauthenticated(verifier.Verify(ServerMethod::kPull, false, request).status()));
  CHECK(absl::IsUnauthenticated(
      verifier.Verify(ServerMethod::kPull, false, grpc::ByteBuffer()).status()));
}

TEST_CASE(
    "RequestSignature: requests arriving out of order are each accepted once; those "
    "older than the window are refused",
    "[common][security]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::map<uint64_t, std::string> peers = {{5, "token-5"}};
  RequestVerifier verifier(peers, "h:2");
  RequestSigner signer(5, peers.at(5));
  // Sign a run, then deliver it shuffled, some twice.
  std::vector<grpc::ByteBuffer> sent;
  std::string flat;
  for (int i = 0; i < 400; ++i) {
    sent.push_back(signer.Sign({ServerMethod::kPush, false, "h:2", 0}, RandomRequest(&rng, &flat)));
  }
  std::vector<int> order(sent.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  for (size_t i = order.size() - 1; i > 0; --i) {
    std::swap(order[i], order[static_cast<size_t>(rng.Int(0, static_cast<int64_t>(i)))]);
  }
  std::set<int> delivered;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i : order) {
      const bool ok = verifier.Verify(ServerMethod::kPush, false, sent[i]).ok();
      CHECK(ok == (delivered.count(i) == 0));
      delivered.insert(i);
    }
  }
  // One signed long ago: once the newest is kReplayWindow ahead, it is refused even unseen.
  const grpc::ByteBuffer old =
      signer.Sign({ServerMethod::kPush, false, "h:2", 0}, grpc::ByteBuffer());
  for (uint64_t i = 0; i < kReplayWindow; ++i) {
    signer.Sign({ServerMethod::kPush, false, "h:2", 0}, grpc::ByteBuffer());
  }
  const grpc::ByteBuffer newest =
      signer.Sign({ServerMethod::kPush, false, "h:2", 0}, grpc::ByteBuffer());
  REQUIRE(verifier.Verify(ServerMethod::kPush, false, newest).ok());
  const absl::Status stale = verifier.Verify(ServerMethod::kPush, false, old).status();
  CHECK(absl::IsUnauthenticated(stale));
  CHECK(absl::StrContains(stale.message(), "older than its newest"));
}

TEST_CASE(
    "ReplayWindow: accepts what a set of every accepted sequence within the window "
    "accepts",
    "[common][security]") {
  TestRng rng;
  INFO(rng.Describe());
  ReplayWindow window;
  std::set<uint64_t> accepted;  // The reference: every sequence ever accepted.
  uint64_t highest = 0;
  uint64_t base = 1;
  for (int step = 0; step < 200000; ++step) {
    // Mostly near the front, sometimes far ahead, sometimes old.
    uint64_t sequence;
    const int64_t pick = rng.Int(0, 99);
    if (pick < 80) {
      sequence = base + static_cast<uint64_t>(rng.Int(0, 200));
      base += static_cast<uint64_t>(rng.Int(0, 3));
    } else if (pick < 85) {
      base += static_cast<uint64_t>(rng.Int(0, 3 * kReplayWindow));
      sequence = base;
    } else {
      sequence = static_cast<uint64_t>(rng.Int(0, static_cast<int64_t>(highest) + 1));
    }
    const bool want = sequence > 0 && accepted.count(sequence) == 0 &&
                      (sequence > highest || highest - sequence < kReplayWindow);
    const bool got = window.Accept(sequence);
    INFO("step " << step << " sequence " << sequence << " highest " << highest);
    REQUIRE(got == want);
    if (got) {
      accepted.insert(sequence);
      highest = std::max(highest, sequence);
    }
  }
}

}  // namespace
}  // namespace kvstore
