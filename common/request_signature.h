// Request signatures: how a kvserver knows that a request comes from the node it names, meant
// for this server and this method, and only once - and, as far as the job asks, unaltered.
//
// In a job with a secret, every request to a kvserver ends with a signature trailer that its
// sender appends to the request's bytes. The trailer is protobuf field 15 of the request
// (proto::RequestNode's node_credential, bytes), so that a message without payload still
// parses; in a framed request (common/wire_frame.h) it follows the payload:
//
//   0x7a 0x38 | node id (8 bytes LE) | sequence (8) | view epoch (8) | receiver hint (8) |
//   covered (8) | tag (16)
//
// The tag is ChaCha20-Poly1305 (RFC 8439) under the node's request key, with the nonce 4 zero
// bytes || the sequence, no plaintext, and as associated data a preamble - "kvstore req v1",
// the method (a Backup method distinct from its primary), the node id, the sequence, the view
// epoch the request was routed by (common/view_epoch.h; the trailer carries it, so a kvserver
// reads no call metadata for it), `covered`, the request's length and the receiver's
// advertised address - followed by the request's first `covered` bytes. What is covered:
// - always the whole message of an unframed request (Pull, RowSparsePull, Command, TableInit,
//   TablePull), and the length prefix and header of a framed one (Init, Push, PushPull,
//   TablePush: keys, shapes, offsets, ids, request id, payload sizes), and the request's length;
// - the payload bytes of a framed request too when the job asks for signed payloads
//   (ClusterView::signed_payloads, `scheduler --signed_payloads`): then every byte. A pass over
//   every byte costs each side one core at about 13 GB/s here, which on a CPU-bound 100 MB push
//   is as much again as the push (docs/benchmarks.md, "Signed requests' cost"), so by default
//   payloads are left to TLS, which protects them and replies alike.
// So:
// - the credential cannot be lifted: the node's request key, HMAC-SHA256(node token, "kvstore
//   request key v1"), never travels (the scheduler gives each node its token at registration
//   and each kvserver the tokens of the nodes that may call it; common/job_auth.h), and
//   without it no tag can be made for another request, request id or header;
// - a request's header and length cannot be altered, nor can it be sent to another server or
//   method or re-routed by another view, without its tag failing;
// - a request is accepted once: a kvserver accepts each (node, sequence) once, and none more
//   than kReplayWindow sequences behind the highest it has accepted from that node
//   (ReplayWindow). A sender signs every attempt afresh (RequestSigner numbers them), so a
//   retried push is a new sequence with its old request id, which the server's deduplication
//   still applies once.
// The receiver hint (FNV-1a of the receiver's address) is not trusted: a request signed for
// another address (a replacement server took over the address's rank while the request was
// routed) is answered UNAVAILABLE, which senders retry, signing for the current receiver.
//
// Threading: RequestSigner and RequestVerifier are thread-safe.
#ifndef KVSTORE_COMMON_REQUEST_SIGNATURE_H_
#define KVSTORE_COMMON_REQUEST_SIGNATURE_H_

#include <grpcpp/support/byte_buffer.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/server_methods.h"

namespace kvstore {

// The trailer's size in bytes, its two-byte prefix included.
inline constexpr size_t kSignatureTrailerBytes = 58;
// How many sequences behind the highest accepted one a kvserver still accepts (each once).
inline constexpr uint64_t kReplayWindow = 1 << 15;

using RequestKey = std::array<uint8_t, 32>;

// RequestKeyOf derives a node's request key from its token.
RequestKey RequestKeyOf(absl::string_view node_token);

// Where a request goes: the method (and whether it is the Backup method), the receiver's
// advertised address ("host:port", as in the cluster view) and the view epoch it was routed by.
struct RequestRoute {
  ServerMethod method = ServerMethod::kPull;
  bool backup = false;
  absl::string_view receiver;
  uint64_t view_epoch = 0;
};

// RequestSigner: a node's signing of its kvserver requests.
class RequestSigner {
 public:
  // With `signed_payloads`, signatures cover every byte of a request, payloads included.
  // The first request is signed under `first_sequence` (a scheduler started again draws it
  // from the clock, above every sequence its predecessor used).
  RequestSigner(uint64_t node_id, absl::string_view node_token, bool signed_payloads = false,
                uint64_t first_sequence = 1);

  // Sign returns `request` followed by its trailer for `route`, under the next sequence. The
  // request's slices are shared, not copied.
  grpc::ByteBuffer Sign(const RequestRoute& route, const grpc::ByteBuffer& request);

  // next_sequence is the sequence the next Sign uses.
  uint64_t next_sequence() const { return next_sequence_.load(std::memory_order_relaxed); }

 private:
  const uint64_t node_id_;
  const RequestKey key_;
  const bool signed_payloads_;
  std::atomic<uint64_t> next_sequence_{1};
};

// ReplayWindow: the sequences accepted from one node - the highest, and which of the
// kReplayWindow before it. Not thread-safe (RequestVerifier locks it).
class ReplayWindow {
 public:
  ReplayWindow() : seen_(kReplayWindow / 64, 0) {}
  // Accept records `sequence` and returns true when it is new and within the window; false
  // (recording nothing) otherwise.
  bool Accept(uint64_t sequence);
  uint64_t highest() const { return highest_; }
  // set_floor makes every sequence up to `floor` count as seen.
  void set_floor(uint64_t floor);

 private:
  bool Seen(uint64_t sequence) const {
    return (seen_[(sequence / 64) % seen_.size()] >> (sequence % 64)) & 1;
  }
  void Mark(uint64_t sequence) {
    seen_[(sequence / 64) % seen_.size()] |= uint64_t{1} << (sequence % 64);
  }
  void Clear(uint64_t sequence) {
    seen_[(sequence / 64) % seen_.size()] &= ~(uint64_t{1} << (sequence % 64));
  }

  uint64_t highest_ = 0;
  std::vector<uint64_t> seen_;  // Bit s % kReplayWindow: sequence s seen.
};

// RequestVerifier: a kvserver's check of the requests it receives.
class RequestVerifier {
 public:
  // `peers`: the tokens of the nodes that may call this server, by node id; `address` the
  // address this server advertises; `floors`: per node, sequences up to which count as seen
  // (the scheduler's commands signed before this server registered); with `signed_payloads`,
  // a signature must cover every byte of its request, payloads included.
  RequestVerifier(const std::map<uint64_t, std::string>& peers, std::string address,
                  const std::map<uint64_t, uint64_t>& floors = {}, bool signed_payloads = false);

  struct Verified {
    uint64_t node_id = 0;
    uint64_t view_epoch = 0;   // The view the sender routed the request by (signed).
    grpc::ByteBuffer request;  // The request without its trailer (slices shared).
  };
  // Verify checks `request`'s trailer for the method it arrived on (`method`, `backup`) and
  // this server. UNAUTHENTICATED, naming what failed, when it has no trailer, names a node that
  // may not call this server, covers less than this server requires, or its tag does not match
  // (altered, forged, or meant for another method, or its view epoch changed);
  // UNAUTHENTICATED naming the node and sequence when that
  // sequence was accepted before or is older than the window (replayed); UNAVAILABLE when it
  // was signed for another receiver (resend). Only a verified request moves its node's window.
  absl::StatusOr<Verified> Verify(ServerMethod method, bool backup,
                                  const grpc::ByteBuffer& request) const;
  // AddPeer lets node `node_id`, whose token is `token`, call this server from now on (a
  // server that joined the running job, which may send others the keys it holds); nothing
  // when it may already. Thread-safe.
  void AddPeer(uint64_t node_id, const std::string& token) const;

 private:
  struct Peer {
    RequestKey key;
    mutable absl::Mutex mu;
    mutable ReplayWindow window ABSL_GUARDED_BY(mu);
  };
  const std::string address_;
  const uint64_t address_hint_;
  const bool signed_payloads_;
  // Peers are added (AddPeer), never removed: a Peer found stays valid.
  mutable absl::Mutex peers_mu_;
  mutable std::map<uint64_t, std::unique_ptr<Peer>> peers_ ABSL_GUARDED_BY(peers_mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_REQUEST_SIGNATURE_H_
