#include "common/local_channel.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kvstore {
namespace {

absl::Status Errno(absl::StatusCode code, const std::string& what) {
  return absl::Status(code, absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the Unix socket path \"", path, "\" is ", path.empty() ? "empty" : "too long",
                     " (at most ", sizeof(address.sun_path) - 1, " bytes)"));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

}  // namespace

absl::StatusOr<SharedRegion> SharedRegion::Create(size_t bytes) {
  UniqueFd fd(memfd_create("kvstore-local", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.ok()) return Errno(absl::StatusCode::kResourceExhausted, "memfd_create");
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return Errno(absl::StatusCode::kResourceExhausted,
                 absl::StrCat("sizing a shared region of ", bytes, " bytes"));
  }
  if (fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return Errno(absl::StatusCode::kInternal, "sealing a shared region");
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) {
    return Errno(absl::StatusCode::kResourceExhausted,
                 absl::StrCat("mapping a shared region of ", bytes, " bytes"));
  }
  return SharedRegion(std::move(fd), static_cast<char*>(data), bytes);
}

absl::StatusOr<SharedRegion> SharedRegion::Adopt(UniqueFd fd, size_t bytes) {
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0 || (seals & F_SEAL_GROW) == 0) {
    return absl::InvalidArgumentError(
        "the shared region is not a memfd sealed against shrinking and growing");
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) != bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the shared region holds ", st.st_size,
                                                   " bytes where its hello announced ", bytes));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) {
    return Errno(absl::StatusCode::kResourceExhausted,
                 absl::StrCat("mapping a shared region of ", bytes, " bytes"));
  }
  return SharedRegion(std::move(fd), static_cast<char*>(data), bytes);
}

SharedRegion::~SharedRegion() {
  if (data_ != nullptr) munmap(data_, size_);
}

SharedRegion::SharedRegion(SharedRegion&& other) noexcept
    : fd_(std::move(other.fd_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedRegion& SharedRegion::operator=(SharedRegion&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    fd_ = std::move(other.fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

absl::Status WriteFully(int fd, struct iovec* iov, int count, const std::string& peer) {
  while (count > 0) {
    // sendmsg with MSG_NOSIGNAL: a peer that went away is an error here, never SIGPIPE.
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = static_cast<size_t>(count);
    const ssize_t n = sendmsg(fd, &message, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(absl::StatusCode::kUnavailable, absl::StrCat("writing to ", peer));
    }
    size_t left = static_cast<size_t>(n);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return absl::OkStatus();
}

absl::Status ReadFully(int fd, void* data, size_t bytes, const std::string& peer) {
  char* at = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = read(fd, at, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(absl::StatusCode::kUnavailable, absl::StrCat("reading from ", peer));
    }
    if (n == 0) return absl::UnavailableError(absl::StrCat(peer, " closed the connection"));
    at += n;
    bytes -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

namespace {

// OneDescriptorMessage: a msghdr over one buffer with room for one descriptor (SCM_RIGHTS).
struct OneDescriptorMessage {
  OneDescriptorMessage(void* data, size_t bytes) : iov{data, bytes} {
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
  }
  OneDescriptorMessage(const OneDescriptorMessage&) = delete;
  OneDescriptorMessage& operator=(const OneDescriptorMessage&) = delete;

  iovec iov;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
};

}  // namespace

absl::Status SendWithDescriptor(int socket, const void* data, size_t bytes, int attached,
                                const std::string& peer) {
  OneDescriptorMessage holder(const_cast<void*>(data), bytes);
  msghdr& message = holder.message;
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &attached, sizeof(int));
  ssize_t n;
  do {
    n = sendmsg(socket, &message, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Errno(absl::StatusCode::kUnavailable, absl::StrCat("writing to ", peer));
  if (static_cast<size_t>(n) < bytes) {
    iovec rest{static_cast<char*>(const_cast<void*>(data)) + n, bytes - static_cast<size_t>(n)};
    return WriteFully(socket, &rest, 1, peer);
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> ReceiveWithDescriptor(int socket, void* data, size_t bytes,
                                               const std::string& peer) {
  OneDescriptorMessage holder(data, bytes);
  msghdr& message = holder.message;
  ssize_t n;
  do {
    n = recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Errno(absl::StatusCode::kUnavailable, absl::StrCat("reading from ", peer));
  if (n == 0) return absl::UnavailableError(absl::StrCat(peer, " closed the connection"));
  UniqueFd received;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      if (!received.ok()) {
        received = UniqueFd(fd);
      } else {
        close(fd);  // Only one is expected.
      }
    }
  }
  if (static_cast<size_t>(n) < bytes) {
    absl::Status rest =
        ReadFully(socket, static_cast<char*>(data) + n, bytes - static_cast<size_t>(n), peer);
    if (!rest.ok()) return rest;
  }
  if (!received.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(peer, " sent its hello without the shared region's descriptor"));
  }
  return received;
}

namespace {

// UnixSocket: a new Unix stream socket and the address of `path`.
struct UnixSocket {
  UniqueFd fd;
  sockaddr_un address;
};

absl::StatusOr<UnixSocket> NewUnixSocket(const std::string& path) {
  absl::StatusOr<sockaddr_un> address = UnixAddress(path);
  if (!address.ok()) return address.status();
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return Errno(absl::StatusCode::kInternal, "socket(AF_UNIX)");
  return UnixSocket{std::move(fd), *address};
}

}  // namespace

absl::StatusOr<UniqueFd> ListenLocal(const std::string& path) {
  absl::StatusOr<UnixSocket> s = NewUnixSocket(path);
  if (!s.ok()) return s.status();
  unlink(path.c_str());  // A socket file left by a process of the same name that was killed.
  if (bind(s->fd.get(), reinterpret_cast<const sockaddr*>(&s->address), sizeof(s->address)) != 0) {
    return Errno(absl::StatusCode::kFailedPrecondition,
                 absl::StrCat("binding the Unix socket ", path));
  }
  // The socket file: this user only (the listener also checks every peer's user).
  if (chmod(path.c_str(), 0600) != 0 || listen(s->fd.get(), 64) != 0) {
    return Errno(absl::StatusCode::kInternal, absl::StrCat("listening on ", path));
  }
  return std::move(s->fd);
}

absl::StatusOr<UniqueFd> ConnectLocal(const std::string& path) {
  absl::StatusOr<UnixSocket> s = NewUnixSocket(path);
  if (!s.ok()) return s.status();
  UniqueFd& fd = s->fd;
  const sockaddr_un* address = &s->address;
  int result;
  do {
    result = connect(fd.get(), reinterpret_cast<const sockaddr*>(address), sizeof(*address));
  } while (result != 0 && errno == EINTR);
  if (result != 0) {
    return Errno(absl::StatusCode::kUnavailable, absl::StrCat("connecting to ", path));
  }
  return std::move(fd);
}

bool PeerIsThisUser(int socket) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return false;
  return credentials.uid == geteuid() || credentials.uid == 0;
}

std::string ThisHostId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!std::getline(in, id)) return "";
  return std::string(absl::StripAsciiWhitespace(id));
}

}  // namespace kvstore
