// Local channel: the wire of the shared-memory path between a worker and a kvserver on the same
// host (client/local_server_transport.h is the worker's end, server/grpc/local_listener.h the
// kvserver's; docs/colocated.md tells why and what it measures).
//
// A connection is a Unix stream socket plus one shared-memory region the worker creates: a
// memfd sealed against shrinking and growing, handed to the kvserver once with SCM_RIGHTS in the
// LocalHello, and cut into `slots` slots of `slot_bytes` each. For each request the worker
// writes the request's bytes (the same frame the gRPC path sends) into a free slot and sends a
// RequestNote on the socket; the kvserver reads the request in place, runs it, writes the reply
// into the same slot and answers with a ReplyNote, then the error message, if any. A request or
// a reply bigger than a slot travels on the socket right after its note instead ("inline"). The
// slot is the worker's again once it has read the reply. The notes are fixed-size structs in
// the host's byte order: both ends run on one host, built from one tree (kLocalVersion).
//
// Who may connect: the kvserver takes connections only from processes of its own user (or root)
// - SO_PEERCRED - and still checks every request's signature in a job with a secret, as on gRPC.
//
// Threading: the functions are thread-safe; a SharedRegion is read and written by both ends at
// once, and the slot protocol above keeps them off each other's bytes.
#ifndef KVSTORE_COMMON_LOCAL_CHANNEL_H_
#define KVSTORE_COMMON_LOCAL_CHANNEL_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace kvstore {

inline constexpr uint32_t kLocalMagic = 0x4b564c43;  // "KVLC"
inline constexpr uint32_t kLocalVersion = 1;
// The most slots, and bytes a slot, a kvserver accepts in a LocalHello.
inline constexpr uint32_t kMaxLocalSlots = 64;
inline constexpr uint64_t kMaxLocalSlotBytes = 64 << 20;
// The most bytes of an error message in a ReplyNote.
inline constexpr uint32_t kMaxLocalMessageBytes = 4096;

// LocalHello opens a connection (worker to kvserver), with the region's descriptor attached.
struct LocalHello {
  uint32_t magic = kLocalMagic;
  uint32_t version = kLocalVersion;
  uint32_t slots = 0;
  uint32_t reserved = 0;
  uint64_t slot_bytes = 0;
};

// LocalHelloReply answers it: code 0 (OK), or an absl::StatusCode, then `message_bytes` of
// message on the socket.
struct LocalHelloReply {
  uint32_t magic = kLocalMagic;
  int32_t code = 0;
  uint32_t message_bytes = 0;
  uint32_t reserved = 0;
};

// RequestNote: slot `slot` holds a request of `bytes` bytes for method `method` (common/
// server_methods.h's order, plus kNumServerMethods for the Backup methods), routed by view
// `view_epoch` (common/view_epoch.h; 0 says nothing); with `inline_bytes` 1 the bytes follow on
// the socket instead and the slot is only reserved for the reply.
struct RequestNote {
  uint32_t slot = 0;
  uint32_t method = 0;
  uint64_t bytes = 0;
  uint64_t view_epoch = 0;
  uint32_t inline_bytes = 0;
  uint32_t reserved = 0;
};

// ReplyNote: the answer to the request in slot `slot`: `code` (absl::StatusCode; 0 is OK), a
// message of `message_bytes` that follows on the socket, and on OK a reply of `bytes` bytes, in
// the slot or (with `inline_bytes` 1) on the socket after the message.
struct ReplyNote {
  uint32_t slot = 0;
  int32_t code = 0;
  uint64_t bytes = 0;
  uint32_t message_bytes = 0;
  uint32_t inline_bytes = 0;
};

// SharedRegion: a mapped shared-memory region (move-only; unmapped when destroyed).
class SharedRegion {
 public:
  // Create makes a sealed memfd of `bytes` bytes (the worker's end) and maps it.
  static absl::StatusOr<SharedRegion> Create(size_t bytes);
  // Adopt maps a region received from a peer (the kvserver's end): it must be a memfd of
  // exactly `bytes` bytes sealed against shrinking and growing (so that no access through the
  // mapping can fault); InvalidArgument saying what is wrong otherwise.
  static absl::StatusOr<SharedRegion> Adopt(UniqueFd fd, size_t bytes);

  SharedRegion() = default;
  ~SharedRegion();
  SharedRegion(SharedRegion&& other) noexcept;
  SharedRegion& operator=(SharedRegion&& other) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_.get(); }

 private:
  SharedRegion(UniqueFd fd, char* data, size_t size)
      : fd_(std::move(fd)), data_(data), size_(size) {}

  UniqueFd fd_;
  char* data_ = nullptr;
  size_t size_ = 0;
};

// WriteFully writes every byte of `iov` to socket `fd` (retrying short writes and EINTR);
// Unavailable naming `peer` when the socket fails - a closed peer too, without SIGPIPE.
absl::Status WriteFully(int fd, struct iovec* iov, int count, const std::string& peer);
// ReadFully reads exactly `bytes` bytes; Unavailable naming `peer` at end of stream or error.
absl::Status ReadFully(int fd, void* data, size_t bytes, const std::string& peer);
// SendWithDescriptor writes `bytes` bytes with descriptor `attached` alongside (SCM_RIGHTS);
// ReceiveWithDescriptor reads them and returns the descriptor (InvalidArgument when none came).
absl::Status SendWithDescriptor(int socket, const void* data, size_t bytes, int attached,
                                const std::string& peer);
absl::StatusOr<UniqueFd> ReceiveWithDescriptor(int socket, void* data, size_t bytes,
                                               const std::string& peer);

// ListenLocal binds a Unix stream socket at `path` (removing a stale socket file there first),
// readable and writable by this user only, and listens on it.
absl::StatusOr<UniqueFd> ListenLocal(const std::string& path);
// ConnectLocal connects to the Unix socket at `path`; Unavailable naming it on failure.
absl::StatusOr<UniqueFd> ConnectLocal(const std::string& path);
// PeerIsThisUser: whether the process at the other end of Unix socket `socket` runs as this
// process's user, or as root.
bool PeerIsThisUser(int socket);

// ThisHostId names this host until it reboots (the kernel's boot id), or "" when it cannot be
// read: a kvserver advertises it, and a worker takes the local path only to a kvserver that
// advertised its own.
std::string ThisHostId();

}  // namespace kvstore

#endif  // KVSTORE_COMMON_LOCAL_CHANNEL_H_
