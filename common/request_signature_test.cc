#include "common/request_signature.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

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

TEST_CASE("RequestSignature: a signed request verifies once, whole and unchanged, at the "
          "server, method and view it was signed for",
          "[common][security]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::map<uint64_t, std::string> peers = {{1, "token-of-the-scheduler"},
                                                 {7, "token-of-worker-7"},
                                                 {9, "token-of-worker-9"}};
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
    CHECK(absl::IsUnauthenticated(
        verifier.Verify(other_method, backup, epoch, signed_request).status()));
    CHECK(absl::IsUnauthenticated(
        verifier.Verify(method, !backup, epoch, signed_request).status()));
    CHECK(absl::IsUnauthenticated(
        verifier.Verify(method, backup, epoch + 1, signed_request).status()));
    RequestVerifier elsewhere(peers, "127.0.0.1:4001");
    CHECK(absl::IsUnavailable(elsewhere.Verify(method, backup, epoch, signed_request).status()));

    // Any one byte changed: refused.
    {
      std::string altered = signed_flat;
      const size_t at = static_cast<size_t>(rng.Int(0, static_cast<int64_t>(altered.size()) - 1));
      altered[at] = static_cast<char>(altered[at] ^ (1 << rng.Int(0, 7)));
      const absl::Status status =
          verifier.Verify(method, backup, epoch, FromFlat(altered)).status();
      INFO("byte " << at << " of " << altered.size() << ": " << status.ToString());
      CHECK((absl::IsUnauthenticated(status) || absl::IsUnavailable(status)));
    }

    absl::StatusOr<RequestVerifier::Verified> verified =
        verifier.Verify(method, backup, epoch, signed_request);
    INFO(verified.status().ToString());
    REQUIRE(verified.ok());
    CHECK(verified->node_id == 7);
    CHECK(Flat(verified->request) == flat);
    // The same bytes again: a replay.
    const absl::Status replay = verifier.Verify(method, backup, epoch, signed_request).status();
    CHECK(absl::IsUnauthenticated(replay));
    CHECK(absl::StrContains(replay.message(), "replayed request: node 7"));
  }
}

TEST_CASE("RequestSignature: a node cannot sign as another, and unsigned or foreign requests "
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
      verifier.Verify(ServerMethod::kPush, false, 0,
                      impostor.Sign({ServerMethod::kPush, false, "h:1", 0}, request))
          .status()));
  // A node the server was not told of.
  RequestSigner stranger(11, "token-of-worker-11");
  const absl::Status unknown =
      verifier
          .Verify(ServerMethod::kPull, false, 0,
                  stranger.Sign({ServerMethod::kPull, false, "h:1", 0}, request))
          .status();
  CHECK(absl::IsUnauthenticated(unknown));
  CHECK(absl::StrContains(unknown.message(), "as node 11"));
  // No trailer at all.
  CHECK(absl::IsUnauthenticated(verifier.Verify(ServerMethod::kPull, false, 0, request).status()));
  CHECK(absl::IsUnauthenticated(
      verifier.Verify(ServerMethod::kPull, false, 0, grpc::ByteBuffer()).status()));
}

TEST_CASE("RequestSignature: requests arriving out of order are each accepted once; those "
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
      const bool ok = verifier.Verify(ServerMethod::kPush, false, 0, sent[i]).ok();
      CHECK(ok == (delivered.count(i) == 0));
      delivered.insert(i);
    }
  }
  // One signed long ago: once the newest is kReplayWindow ahead, it is refused even unseen.
  const grpc::ByteBuffer old = signer.Sign({ServerMethod::kPush, false, "h:2", 0}, grpc::ByteBuffer());
  for (uint64_t i = 0; i < kReplayWindow; ++i) {
    signer.Sign({ServerMethod::kPush, false, "h:2", 0}, grpc::ByteBuffer());
  }
  const grpc::ByteBuffer newest =
      signer.Sign({ServerMethod::kPush, false, "h:2", 0}, grpc::ByteBuffer());
  REQUIRE(verifier.Verify(ServerMethod::kPush, false, 0, newest).ok());
  const absl::Status stale = verifier.Verify(ServerMethod::kPush, false, 0, old).status();
  CHECK(absl::IsUnauthenticated(stale));
  CHECK(absl::StrContains(stale.message(), "older than its newest"));
}

TEST_CASE("ReplayWindow: accepts what a set of every accepted sequence within the window "
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
