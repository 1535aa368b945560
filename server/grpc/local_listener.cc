#include "server/grpc/local_listener.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/local_channel.h"
#include "common/named_thread.h"
#include "common/server_methods.h"
#include "spdlog/spdlog.h"

namespace kvstore {

class LocalListener::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(UniqueFd socket, std::string peer)
      : socket_(std::move(socket)), peer_(std::move(peer)) {}

  // Run serves the connection until it closes; the thread's body.
  void Run(const Handler& handler, int64_t max_request_bytes) {
    absl::Status status = Serve(handler, max_request_bytes);
    if (!status.ok() && !closing_.load()) {
      spdlog::warn("local connection {} closed: {}", peer_, status.ToString());
    }
    // Answers still to come (held pushes keep this object) find it closed; the worker sees
    // the end of the stream now.
    Close();
    finished_.store(true);
  }
  // Close ends the connection: its thread's read returns, later answers are dropped.
  void Close() {
    closing_.store(true);
    shutdown(socket_.get(), SHUT_RDWR);
  }
  bool finished() const { return finished_.load(); }

 private:
  // One request being handled: its reply, which must outlive the handler's answer, and how
  // far it is. The handler may read the request until it returns, even after it has answered
  // (a key group's push is acknowledged before its sum is done, KeyGroups::Push): the reply,
  // which overwrites the request's slot, goes out once the handler has both answered and
  // returned - whichever comes second sends it.
  struct Pending {
    grpc::ByteBuffer response;
    absl::Status status;
    std::atomic<int> steps{0};
  };

  absl::Status Hello() {
    LocalHello hello;
    absl::StatusOr<UniqueFd> fd =
        ReceiveWithDescriptor(socket_.get(), &hello, sizeof(hello), peer_);
    if (!fd.ok()) return fd.status();
    absl::Status refusal;
    if (!PeerIsThisUser(socket_.get())) {
      refusal = absl::PermissionDeniedError(
          "the local path takes connections from this kvserver's user only");
    } else if (hello.magic != kLocalMagic || hello.version != kLocalVersion) {
      refusal = absl::InvalidArgumentError(absl::StrCat("a hello of version ", hello.version,
                                                        " (magic ", hello.magic,
                                                        "); this kvserver speaks ", kLocalVersion));
    } else if (hello.slots == 0 || hello.slots > kMaxLocalSlots) {
      refusal = absl::InvalidArgumentError(
          absl::StrCat(hello.slots, " slots; the limit is 1 to ", kMaxLocalSlots));
    } else if (hello.slot_bytes < 4096 || hello.slot_bytes > kMaxLocalSlotBytes) {
      refusal = absl::InvalidArgumentError(absl::StrCat(
          "slots of ", hello.slot_bytes, " bytes; the limit is 4096 to ", kMaxLocalSlotBytes));
    } else {
      absl::StatusOr<SharedRegion> region =
          SharedRegion::Adopt(*std::move(fd), hello.slots * hello.slot_bytes);
      if (region.ok()) {
        region_ = *std::move(region);
        slots_ = hello.slots;
        slot_bytes_ = hello.slot_bytes;
        absl::MutexLock lock(&busy_mu_);
        busy_.assign(slots_, false);
      } else {
        refusal = region.status();
      }
    }
    LocalHelloReply reply;
    reply.code = static_cast<int32_t>(refusal.code());
    const std::string message(refusal.message().substr(0, kMaxLocalMessageBytes));
    reply.message_bytes = static_cast<uint32_t>(message.size());
    iovec iov[2] = {{&reply, sizeof(reply)}, {const_cast<char*>(message.data()), message.size()}};
    {
      absl::MutexLock lock(&write_mu_);
      absl::Status sent = WriteFully(socket_.get(), iov, 2, peer_);
      if (!sent.ok()) return sent;
    }
    return refusal;
  }

  absl::Status Serve(const Handler& handler, int64_t max_request_bytes) {
    absl::Status hello = Hello();
    if (!hello.ok()) return hello;
    for (;;) {
      RequestNote note;
      absl::Status read = ReadFully(socket_.get(), &note, sizeof(note), peer_);
      if (!read.ok()) {  // The worker went away (or the listener stopped): not an error.
        spdlog::debug("local connection {} ended: {}", peer_, read.ToString());
        return absl::OkStatus();
      }
      if (note.method >= 2 * static_cast<uint32_t>(kNumServerMethods)) {
        return absl::InvalidArgumentError(absl::StrCat("a request of method ", note.method,
                                                       "; there are ", 2 * kNumServerMethods));
      }
      if (note.slot >= slots_) {
        return absl::InvalidArgumentError(
            absl::StrCat("a request in slot ", note.slot, " of ", slots_));
      }
      const uint64_t limit =
          note.inline_bytes != 0 ? static_cast<uint64_t>(max_request_bytes) : slot_bytes_;
      if (note.bytes > limit) {
        return absl::InvalidArgumentError(
            absl::StrCat("a request of ", note.bytes, " bytes; the limit is ", limit));
      }
      {
        absl::MutexLock lock(&busy_mu_);
        if (busy_[note.slot]) {
          return absl::InvalidArgumentError(
              absl::StrCat("a request in slot ", note.slot, ", which is still busy"));
        }
        busy_[note.slot] = true;
      }
      const char* bytes = region_.data() + note.slot * slot_bytes_;
      // A request's bytes stay valid until its answer (request_handler.h): the slot is busy
      // until then, and an inline request's buffer lives in the answer's callback.
      std::shared_ptr<std::string> inline_request;
      if (note.inline_bytes != 0) {
        inline_request = std::make_shared<std::string>(note.bytes, '\0');
        absl::Status got = ReadFully(socket_.get(), inline_request->data(), note.bytes, peer_);
        if (!got.ok()) return closing_.load() ? absl::OkStatus() : got;
        bytes = inline_request->data();
      }
      grpc::Slice slice(bytes, note.bytes, grpc::Slice::STATIC_SLICE);
      const grpc::ByteBuffer request(&slice, 1);
      auto pending = std::make_shared<Pending>();
      const uint32_t slot = note.slot;
      handler(static_cast<int>(note.method), request, note.view_epoch, &pending->response,
              [self = shared_from_this(), pending, slot, inline_request](absl::Status status) {
                pending->status = std::move(status);
                if (pending->steps.fetch_add(1) == 1) {
                  self->Answer(slot, pending->status, &pending->response);
                }
              });
      if (pending->steps.fetch_add(1) == 1) Answer(slot, pending->status, &pending->response);
    }
  }

  // Answer writes the reply to the request in `slot` into the slot (or inline) and sends its
  // note; dropped when the connection is closed.
  void Answer(uint32_t slot, const absl::Status& status, grpc::ByteBuffer* response) {
    ReplyNote note;
    note.slot = slot;
    note.code = static_cast<int32_t>(status.code());
    const std::string message(status.message().substr(0, kMaxLocalMessageBytes));
    note.message_bytes = static_cast<uint32_t>(message.size());
    std::vector<grpc::Slice> slices;
    if (status.ok()) {
      note.bytes = response->Length();
      if (!response->Dump(&slices).ok()) {
        note.code = static_cast<int32_t>(absl::StatusCode::kInternal);
        note.bytes = 0;
        slices.clear();
      }
    }
    note.inline_bytes = note.bytes > slot_bytes_ ? 1 : 0;
    if (note.inline_bytes == 0) {
      char* at = region_.data() + slot * slot_bytes_;
      for (const grpc::Slice& s : slices) {
        std::memcpy(at, s.begin(), s.size());
        at += s.size();
      }
    }
    {
      // The slot is the worker's again as soon as it reads the note.
      absl::MutexLock lock(&busy_mu_);
      busy_[slot] = false;
    }
    std::vector<iovec> iov;
    iov.push_back({&note, sizeof(note)});
    if (!message.empty()) iov.push_back({const_cast<char*>(message.data()), message.size()});
    if (note.inline_bytes != 0) {
      for (const grpc::Slice& s : slices) {
        iov.push_back({const_cast<uint8_t*>(s.begin()), s.size()});
      }
    }
    absl::MutexLock lock(&write_mu_);
    if (closing_.load()) return;
    // A failure here means the worker went away; its reader sees the end of the stream.
    WriteFully(socket_.get(), iov.data(), static_cast<int>(iov.size()), peer_).IgnoreError();
  }

  UniqueFd socket_;
  const std::string peer_;
  SharedRegion region_;
  uint32_t slots_ = 0;
  uint64_t slot_bytes_ = 0;
  absl::Mutex write_mu_;  // One note (and its bytes) at a time on the socket.
  absl::Mutex busy_mu_;
  std::vector<bool> busy_ ABSL_GUARDED_BY(busy_mu_);  // By slot: a request is being handled.
  std::atomic<bool> closing_{false};
  std::atomic<bool> finished_{false};
};

absl::StatusOr<std::unique_ptr<LocalListener>> LocalListener::Start(std::string path,
                                                                    int64_t max_request_bytes,
                                                                    Handler handler) {
  absl::StatusOr<UniqueFd> socket = ListenLocal(path);
  if (!socket.ok()) return socket.status();
  std::unique_ptr<LocalListener> listener(new LocalListener(std::move(path), *std::move(socket),
                                                            max_request_bytes, std::move(handler)));
  listener->accepting_ = NamedThread("kv-local-accept", [l = listener.get()] { l->Accept(); });
  return listener;
}

LocalListener::LocalListener(std::string path, UniqueFd socket, int64_t max_request_bytes,
                             Handler handler)
    : path_(std::move(path)),
      socket_(std::move(socket)),
      max_request_bytes_(max_request_bytes),
      handler_(std::move(handler)) {}

LocalListener::~LocalListener() { Stop(); }

int LocalListener::connections() const {
  absl::MutexLock lock(&mu_);
  return accepted_;
}

void LocalListener::Accept() {
  for (;;) {
    pollfd ready{socket_.get(), POLLIN, 0};
    const int n = poll(&ready, 1, 200);
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return;
      // Reap the connections that ended.
      for (size_t i = 0; i < connections_.size();) {
        if (connections_[i]->finished()) {
          threads_[i].join();
          threads_.erase(threads_.begin() + static_cast<std::ptrdiff_t>(i));
          connections_.erase(connections_.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
    }
    if (n <= 0) continue;
    UniqueFd accepted(accept4(socket_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!accepted.ok()) continue;
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    ++accepted_;
    auto connection = std::make_shared<Connection>(
        std::move(accepted), absl::StrCat("local worker ", accepted_, " on ", path_));
    connections_.push_back(connection);
    threads_.push_back(NamedThread(
        "kv-local", [connection, this] { connection->Run(handler_, max_request_bytes_); }));
  }
}

void LocalListener::Stop() {
  std::vector<std::shared_ptr<Connection>> connections;
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    connections.swap(connections_);
    threads.swap(threads_);
  }
  if (accepting_.joinable()) accepting_.join();
  for (const auto& connection : connections) connection->Close();
  for (std::thread& thread : threads) thread.join();
  socket_.Reset();
  unlink(path_.c_str());
}

}  // namespace kvstore
