#include "common/request_signature.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/base/internal/endian.h"
#include "absl/container/fixed_array.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

constexpr uint8_t kTrailerTag = 0x7a;  // Field 15, length-delimited.
constexpr uint8_t kTrailerLength = kSignatureTrailerBytes - 2;
constexpr char kKeyLabel[] = "kvstore request key v1";
constexpr char kPreambleLabel[] = "kvstore req v1";  // 14 bytes.
constexpr size_t kTagBytes = 16;

// The fields of a trailer.
struct Trailer {
  uint64_t node_id = 0;
  uint64_t sequence = 0;
  uint64_t view_epoch = 0;
  uint64_t receiver_hint = 0;
  uint64_t covered = 0;
  uint8_t tag[kTagBytes] = {};
};
constexpr size_t kTagAt = kSignatureTrailerBytes - kTagBytes;

uint64_t Fnv1a(absl::string_view text) {
  uint64_t hash = 1469598103934665603ull;
  for (const char c : text) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

// Preamble: what the tag covers before the request's bytes, written into `out` (on the stack
// for the usual addresses: no allocation per request).
using PreambleBuffer = absl::FixedArray<char, 320>;
PreambleBuffer Preamble(const RequestRoute& route, uint64_t node_id, uint64_t sequence,
                        uint64_t covered, uint64_t length) {
  constexpr size_t kLabel = sizeof(kPreambleLabel) - 1;
  PreambleBuffer preamble(kLabel + 1 + 6 * 8 + route.receiver.size());
  char* at = preamble.data();
  std::memcpy(at, kPreambleLabel, kLabel);
  at += kLabel;
  *at++ =
      static_cast<char>(static_cast<int>(route.method) + (route.backup ? kNumServerMethods : 0));
  for (const uint64_t value : {node_id, sequence, route.view_epoch, covered, length,
                               static_cast<uint64_t>(route.receiver.size())}) {
    absl::little_endian::Store64(at, value);
    at += 8;
  }
  std::memcpy(at, route.receiver.data(), route.receiver.size());
  return preamble;
}

// Slices: a request's slices, without an allocation when it is one slice.
using Slices = absl::InlinedVector<grpc::Slice, 2>;
bool SlicesOf(const grpc::ByteBuffer& buffer, Slices* slices) {
  if (buffer.Length() == 0) return true;
  grpc::Slice single;
  if (buffer.TrySingleSlice(&single).ok()) {
    slices->push_back(std::move(single));
    return true;
  }
  std::vector<grpc::Slice> many;
  if (!buffer.Dump(&many).ok()) return false;
  for (grpc::Slice& slice : many) slices->push_back(std::move(slice));
  return true;
}

// Tagger: one ChaCha20-Poly1305 computation over associated data given in pieces. A context
// per thread, reused.
class Tagger {
 public:
  Tagger(const RequestKey& key, uint64_t sequence) {
    struct Free {
      void operator()(EVP_CIPHER_CTX* context) const { EVP_CIPHER_CTX_free(context); }
    };
    thread_local std::unique_ptr<EVP_CIPHER_CTX, Free> context = [] {
      std::unique_ptr<EVP_CIPHER_CTX, Free> made(EVP_CIPHER_CTX_new());
      if (made != nullptr &&
          EVP_EncryptInit_ex(made.get(), EVP_chacha20_poly1305(), nullptr, nullptr, nullptr) != 1) {
        made.reset();
      }
      return made;
    }();
    context_ = context.get();
    uint8_t nonce[12] = {};
    absl::little_endian::Store64(nonce + 4, sequence);
    ok_ = context_ != nullptr &&
          EVP_EncryptInit_ex(context_, nullptr, nullptr, key.data(), nonce) == 1;
  }
  void Add(const void* data, size_t bytes) {
    int written = 0;
    while (ok_ && bytes > 0) {
      // EVP takes an int length.
      const int piece = static_cast<int>(std::min<size_t>(bytes, 1 << 30));
      ok_ = EVP_EncryptUpdate(context_, nullptr, &written, static_cast<const uint8_t*>(data),
                              piece) == 1;
      data = static_cast<const uint8_t*>(data) + piece;
      bytes -= static_cast<size_t>(piece);
    }
  }
  // Finish writes the tag; false when OpenSSL failed (no tag).
  bool Finish(uint8_t tag[kTagBytes]) {
    int written = 0;
    uint8_t none[1];
    ok_ = ok_ && EVP_EncryptFinal_ex(context_, none, &written) == 1 &&
          EVP_CIPHER_CTX_ctrl(context_, EVP_CTRL_AEAD_GET_TAG, kTagBytes, tag) == 1;
    return ok_;
  }

 private:
  EVP_CIPHER_CTX* context_ = nullptr;
  bool ok_ = false;
};

// HeaderEnd returns where the header of a framed request of `length` bytes ends (4 + the
// length its prefix declares), or `length` when the prefix is cut short or declares more.
size_t HeaderEnd(const Slices& slices, size_t length) {
  if (length < 4) return length;
  uint8_t prefix[4];
  size_t have = 0;
  for (const grpc::Slice& slice : slices) {
    const size_t take = std::min(sizeof(prefix) - have, slice.size());
    std::memcpy(prefix + have, slice.begin(), take);
    have += take;
    if (have == sizeof(prefix)) break;
  }
  const uint64_t end = 4 + uint64_t{absl::little_endian::Load32(prefix)};
  return end <= length ? static_cast<size_t>(end) : length;
}

// TagOf computes the tag of the first `covered` bytes of `slices`, a request of `length` bytes,
// for `route`.
bool TagOf(const RequestKey& key, const RequestRoute& route, uint64_t node_id, uint64_t sequence,
           const Slices& slices, size_t covered, size_t length, uint8_t tag[kTagBytes]) {
  Tagger tagger(key, sequence);
  const PreambleBuffer preamble = Preamble(route, node_id, sequence, covered, length);
  tagger.Add(preamble.data(), preamble.size());
  size_t bytes = covered;
  for (const grpc::Slice& slice : slices) {
    if (bytes == 0) break;
    const size_t take = std::min(bytes, slice.size());
    tagger.Add(slice.begin(), take);
    bytes -= take;
  }
  return tagger.Finish(tag);
}

// ReadTrailer reads the signature trailer - the request's last bytes, which may straddle
// slices - and refuses a request that does not end with one.
absl::Status ReadTrailer(const Slices& slices, Trailer* trailer) {
  uint8_t raw[kSignatureTrailerBytes];
  size_t need = kSignatureTrailerBytes;
  for (auto it = slices.rbegin(); it != slices.rend() && need > 0; ++it) {
    const size_t take = std::min(need, it->size());
    std::memcpy(raw + need - take, it->begin() + (it->size() - take), take);
    need -= take;
  }
  if (raw[0] != kTrailerTag || raw[1] != kTrailerLength) {
    return absl::UnauthenticatedError(
        "the request does not end with a signature (a job with a secret signs every request "
        "with the key of the node the scheduler registered)");
  }
  trailer->node_id = absl::little_endian::Load64(raw + 2);
  trailer->sequence = absl::little_endian::Load64(raw + 10);
  trailer->view_epoch = absl::little_endian::Load64(raw + 18);
  trailer->receiver_hint = absl::little_endian::Load64(raw + 26);
  trailer->covered = absl::little_endian::Load64(raw + 34);
  std::memcpy(trailer->tag, raw + kTagAt, kTagBytes);
  return absl::OkStatus();
}

// WithoutTrailer returns the first `body` bytes of the request: whole slices, then the start of
// the one the trailer begins in.
Slices WithoutTrailer(Slices slices, size_t body) {
  Slices kept;
  size_t left = body;
  for (grpc::Slice& slice : slices) {
    if (left == 0) break;
    if (slice.size() <= left) {
      left -= slice.size();
      kept.push_back(std::move(slice));
    } else {
      kept.push_back(slice.sub(0, left));
      left = 0;
    }
  }
  return kept;
}

}  // namespace

RequestKey RequestKeyOf(absl::string_view node_token) {
  RequestKey key{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), node_token.data(), static_cast<int>(node_token.size()),
       reinterpret_cast<const uint8_t*>(kKeyLabel), sizeof(kKeyLabel) - 1, key.data(), &length);
  return key;
}

RequestSigner::RequestSigner(uint64_t node_id, absl::string_view node_token, bool signed_payloads,
                             uint64_t first_sequence)
    : node_id_(node_id),
      key_(RequestKeyOf(node_token)),
      signed_payloads_(signed_payloads),
      next_sequence_(first_sequence) {}

grpc::ByteBuffer RequestSigner::Sign(const RequestRoute& route, const grpc::ByteBuffer& request) {
  Slices slices;
  SlicesOf(request, &slices);
  const size_t length = request.Length();
  const size_t covered =
      signed_payloads_ || !Framed(route.method) ? length : HeaderEnd(slices, length);
  const uint64_t sequence = next_sequence_.fetch_add(1, std::memory_order_relaxed);
  uint8_t trailer[kSignatureTrailerBytes];
  trailer[0] = kTrailerTag;
  trailer[1] = kTrailerLength;
  absl::little_endian::Store64(trailer + 2, node_id_);
  absl::little_endian::Store64(trailer + 10, sequence);
  absl::little_endian::Store64(trailer + 18, route.view_epoch);
  absl::little_endian::Store64(trailer + 26, Fnv1a(route.receiver));
  absl::little_endian::Store64(trailer + 34, covered);
  if (!TagOf(key_, route, node_id_, sequence, slices, covered, length, trailer + kTagAt)) {
    // Without a tag the request is refused; zeros make that certain.
    std::memset(trailer + kTagAt, 0, kTagBytes);
  }
  slices.emplace_back(trailer, sizeof(trailer));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

bool ReplayWindow::Accept(uint64_t sequence) {
  if (sequence == 0) return false;
  if (sequence > highest_) {
    // The sequences skipped between the old highest and this one are unseen.
    const uint64_t gap = sequence - highest_;
    if (gap >= kReplayWindow) {
      std::fill(seen_.begin(), seen_.end(), 0);
    } else {
      for (uint64_t s = highest_ + 1; s < sequence; ++s) Clear(s);
    }
    highest_ = sequence;
    Mark(sequence);
    return true;
  }
  if (highest_ - sequence >= kReplayWindow || Seen(sequence)) return false;
  Mark(sequence);
  return true;
}

void ReplayWindow::set_floor(uint64_t floor) {
  if (floor <= highest_) return;
  highest_ = floor;
  std::fill(seen_.begin(), seen_.end(), ~uint64_t{0});
}

RequestVerifier::RequestVerifier(const std::map<uint64_t, std::string>& peers, std::string address,
                                 const std::map<uint64_t, uint64_t>& floors, bool signed_payloads)
    : address_(std::move(address)),
      address_hint_(Fnv1a(address_)),
      signed_payloads_(signed_payloads) {
  for (const auto& [id, token] : peers) {
    auto peer = std::make_unique<Peer>();
    peer->key = RequestKeyOf(token);
    if (auto floor = floors.find(id); floor != floors.end()) {
      absl::MutexLock lock(&peer->mu);
      peer->window.set_floor(floor->second);
    }
    peers_.emplace(id, std::move(peer));
  }
}

void RequestVerifier::AddPeer(uint64_t node_id, const std::string& token) const {
  absl::MutexLock lock(&peers_mu_);
  if (peers_.count(node_id) > 0) return;
  auto peer = std::make_unique<Peer>();
  peer->key = RequestKeyOf(token);
  peers_.emplace(node_id, std::move(peer));
}

absl::StatusOr<RequestVerifier::Verified> RequestVerifier::Verify(
    ServerMethod method, bool backup, const grpc::ByteBuffer& request) const {
  const size_t length = request.Length();
  if (length < kSignatureTrailerBytes) {
    return absl::UnauthenticatedError(
        "the request carries no signature (a job with a secret signs every request with the "
        "key of the node the scheduler registered)");
  }
  Slices slices;
  if (!SlicesOf(request, &slices)) {
    return absl::InvalidArgumentError("the request's bytes cannot be read");
  }
  Trailer trailer;
  RETURN_IF_ERROR(ReadTrailer(slices, &trailer));
  const Peer* peer = nullptr;
  {
    absl::ReaderMutexLock lock(&peers_mu_);
    const auto found = peers_.find(trailer.node_id);
    if (found != peers_.end()) peer = found->second.get();
  }
  if (peer == nullptr) {
    return absl::UnauthenticatedError(
        absl::StrCat("the request is signed as node ", trailer.node_id,
                     ", which is not a node this job's scheduler registered to call this server"));
  }
  if (trailer.receiver_hint != address_hint_) {
    return absl::UnavailableError(absl::StrCat(
        "node ", trailer.node_id, " signed the request for another server than the one at ",
        address_, " (a replacement took this address's place while it was routed); resend it"));
  }
  const size_t body = length - kSignatureTrailerBytes;
  const size_t required = signed_payloads_ || !Framed(method) ? body : HeaderEnd(slices, body);
  if (trailer.covered > body || trailer.covered < required) {
    return absl::UnauthenticatedError(
        absl::StrCat("the signature of the request as node ", trailer.node_id, " covers ",
                     trailer.covered, " of its ", body, " bytes; this server requires ", required,
                     signed_payloads_ ? " (the job signs payloads)" : " (the header at least)"));
  }
  const RequestRoute route{method, backup, address_, trailer.view_epoch};
  uint8_t tag[kTagBytes];
  if (!TagOf(peer->key, route, trailer.node_id, trailer.sequence, slices,
             static_cast<size_t>(trailer.covered), body, tag) ||
      CRYPTO_memcmp(tag, trailer.tag, kTagBytes) != 0) {
    return absl::UnauthenticatedError(
        absl::StrCat("the signature of the request as node ", trailer.node_id,
                     " does not match it: altered, forged, or signed for another method or view"));
  }
  {
    absl::MutexLock lock(&peer->mu);
    if (!peer->window.Accept(trailer.sequence)) {
      return absl::UnauthenticatedError(
          absl::StrCat("replayed request: node ", trailer.node_id, "'s request ", trailer.sequence,
                       " was accepted before or is more than ", kReplayWindow,
                       " requests older than its newest (", peer->window.highest(), ")"));
    }
  }
  Verified verified;
  verified.node_id = trailer.node_id;
  verified.view_epoch = trailer.view_epoch;
  Slices kept = WithoutTrailer(std::move(slices), body);
  verified.request = grpc::ByteBuffer(kept.data(), kept.size());
  return verified;
}

}  // namespace kvstore
