#include "client/local_server_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/local_channel.h"
#include "common/logging.h"
#include "common/named_thread.h"
#include "common/status_macros.h"

namespace kvstore {

// One connection to a kvserver's local listener: its socket, its region, and the requests in
// its slots.
class LocalServerTransport::Connection {
 public:
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& path,
                                                          std::string peer) {
    absl::StatusOr<UniqueFd> socket = ConnectLocal(path);
    if (!socket.ok()) return socket.status();
    if (!PeerIsThisUser(socket->get())) {
      return absl::PermissionDeniedError(
          absl::StrCat(path, " is served by a process of another user"));
    }
    absl::StatusOr<SharedRegion> region = SharedRegion::Create(kSlots * kSlotBytes);
    if (!region.ok()) return region.status();
    LocalHello hello;
    hello.slots = kSlots;
    hello.slot_bytes = kSlotBytes;
    absl::Status sent =
        SendWithDescriptor(socket->get(), &hello, sizeof(hello), region->fd(), peer);
    if (!sent.ok()) return sent;
    LocalHelloReply reply;
    absl::Status read = ReadFully(socket->get(), &reply, sizeof(reply), peer);
    if (!read.ok()) return read;
    if (reply.magic != kLocalMagic || reply.message_bytes > kMaxLocalMessageBytes) {
      return absl::UnavailableError(absl::StrCat(peer, " answered the hello with garbage"));
    }
    std::string message(reply.message_bytes, '\0');
    read = ReadFully(socket->get(), message.data(), message.size(), peer);
    if (!read.ok()) return read;
    if (reply.code != 0) {
      return absl::Status(static_cast<absl::StatusCode>(reply.code),
                          absl::StrCat(peer, " refused the connection: ", message));
    }
    UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake.ok()) return absl::InternalError("eventfd failed");
    std::unique_ptr<Connection> connection(
        new Connection(*std::move(socket), *std::move(region), std::move(wake), std::move(peer)));
    connection->reader_ = NamedThread("kv-local-read", [c = connection.get()] { c->Read(); });
    return connection;
  }

  ~Connection() { Close(); }

  void Send(int method, std::shared_ptr<const grpc::ByteBuffer> request, absl::Time deadline,
            uint64_t view_epoch, Done done) {
    Outgoing out{method, std::move(request), deadline, view_epoch, std::move(done)};
    uint32_t slot;
    {
      absl::MutexLock lock(&mu_);
      if (!broken_.ok()) {
        refused_.push_back(std::move(out));
        Wake();
        return;
      }
      if (free_.empty()) {
        waiting_.push_back(std::move(out));
        Wake();  // Its deadline counts from now.
        return;
      }
      slot = free_.back();
      free_.pop_back();
      in_flight_[slot] = InFlight{std::move(out.done), deadline, false};
    }
    Write(slot, out);
  }

  // Close stops the reader, which answers whatever is left with Unavailable.
  void Close() {
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
      if (broken_.ok()) broken_ = absl::UnavailableError(absl::StrCat(peer_, ": transport closed"));
    }
    shutdown(socket_.get(), SHUT_RDWR);
    Wake();
    if (reader_.joinable()) reader_.join();
  }

 private:
  struct Outgoing {
    int method = 0;
    std::shared_ptr<const grpc::ByteBuffer> request;
    absl::Time deadline;
    uint64_t view_epoch = 0;
    Done done;
  };
  struct InFlight {
    Done done;
    absl::Time deadline;
    bool answered = false;  // Answered by its deadline; the slot waits for the late reply.
  };

  Connection(UniqueFd socket, SharedRegion region, UniqueFd wake, std::string peer)
      : socket_(std::move(socket)),
        region_(std::move(region)),
        wake_(std::move(wake)),
        peer_(std::move(peer)),
        in_flight_(kSlots) {
    for (uint32_t slot = kSlots; slot-- > 0;) free_.push_back(slot);
  }

  void Wake() {
    const uint64_t one = 1;
    (void)!write(wake_.get(), &one, sizeof(one));
  }

  // Write copies `out`'s request into `slot` (inline when it does not fit) and sends its note.
  void Write(uint32_t slot, const Outgoing& out) {
    RequestNote note;
    note.slot = slot;
    note.method = static_cast<uint32_t>(out.method);
    note.bytes = out.request->Length();
    note.view_epoch = out.view_epoch;
    note.inline_bytes = note.bytes > kSlotBytes ? 1 : 0;
    std::vector<grpc::Slice> slices;
    absl::Status status = out.request->Dump(&slices).ok()
                              ? absl::OkStatus()
                              : absl::InternalError("cannot read a request's bytes");
    std::vector<iovec> iov;
    iov.push_back({&note, sizeof(note)});
    if (note.inline_bytes == 0) {
      char* at = region_.data() + slot * kSlotBytes;
      for (const grpc::Slice& s : slices) {
        std::memcpy(at, s.begin(), s.size());
        at += s.size();
      }
    } else {
      for (const grpc::Slice& s : slices)
        iov.push_back({const_cast<uint8_t*>(s.begin()), s.size()});
    }
    if (status.ok()) {
      absl::MutexLock lock(&write_mu_);
      status = WriteFully(socket_.get(), iov.data(), static_cast<int>(iov.size()), peer_);
    }
    if (!status.ok()) Break(status);  // The reader answers the request.
  }

  // Break marks the connection failed: the reader answers every request with `status`.
  void Break(const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (broken_.ok()) broken_ = status;
    }
    shutdown(socket_.get(), SHUT_RDWR);
    Wake();
  }

  // Release frees `slot`, or gives it to the first waiting request.
  void Release(uint32_t slot) {
    Outgoing next;
    {
      absl::MutexLock lock(&mu_);
      if (waiting_.empty() || !broken_.ok()) {
        free_.push_back(slot);
        return;
      }
      next = std::move(waiting_.front());
      waiting_.pop_front();
      in_flight_[slot] = InFlight{std::move(next.done), next.deadline, false};
    }
    Write(slot, next);
  }

  // ReadReply reads one reply from the socket and runs its request's `done`.
  absl::Status ReadReply() {
    ReplyNote note;
    RETURN_IF_ERROR(ReadFully(socket_.get(), &note, sizeof(note), peer_));
    if (note.slot >= kSlots || note.message_bytes > kMaxLocalMessageBytes ||
        (note.inline_bytes == 0 && note.bytes > kSlotBytes)) {
      return absl::UnavailableError(absl::StrCat(peer_, " sent a malformed reply"));
    }
    std::string message(note.message_bytes, '\0');
    RETURN_IF_ERROR(ReadFully(socket_.get(), message.data(), message.size(), peer_));
    std::string inline_reply;
    const char* bytes = region_.data() + note.slot * kSlotBytes;
    if (note.inline_bytes != 0) {
      inline_reply.resize(note.bytes);
      RETURN_IF_ERROR(ReadFully(socket_.get(), inline_reply.data(), note.bytes, peer_));
      bytes = inline_reply.data();
    }
    InFlight call;
    {
      absl::MutexLock lock(&mu_);
      call = std::move(in_flight_[note.slot]);
      in_flight_[note.slot] = InFlight{};
    }
    if (call.done == nullptr && !call.answered) {
      return absl::UnavailableError(
          absl::StrCat(peer_, " answered slot ", note.slot, ", which holds no request"));
    }
    if (!call.answered) {
      if (note.code == 0) {
        grpc::Slice slice(bytes, note.bytes, grpc::Slice::STATIC_SLICE);
        grpc::ByteBuffer reply(&slice, 1);
        call.done(absl::OkStatus(), &reply);
      } else {
        call.done(absl::Status(static_cast<absl::StatusCode>(note.code), message), nullptr);
      }
    }
    Release(note.slot);
    return absl::OkStatus();
  }

  // Expire answers the requests past their deadline; returns the time to the next one.
  absl::Duration Expire() {
    const absl::Time now = absl::Now();
    absl::Time next = now + absl::Seconds(1);
    std::vector<Done> expired;
    {
      absl::MutexLock lock(&mu_);
      for (InFlight& call : in_flight_) {
        if (call.done == nullptr || call.answered) continue;
        if (call.deadline <= now) {
          expired.push_back(std::move(call.done));
          call.done = nullptr;
          call.answered = true;
        } else {
          next = std::min(next, call.deadline);
        }
      }
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (it->deadline <= now) {
          expired.push_back(std::move(it->done));
          it = waiting_.erase(it);
        } else {
          next = std::min(next, it->deadline);
          ++it;
        }
      }
    }
    for (Done& done : expired) {
      done(absl::DeadlineExceededError(absl::StrCat("no answer from ", peer_, " in time")),
           nullptr);
    }
    return next - now;
  }

  // Answer answers every request held with the connection's failure; true once closing.
  bool AnswerBroken() {
    std::vector<Done> answered;
    absl::Status status;
    bool closing;
    {
      absl::MutexLock lock(&mu_);
      status = broken_;
      closing = closing_;
      for (InFlight& call : in_flight_) {
        if (call.done != nullptr && !call.answered) answered.push_back(std::move(call.done));
        call = InFlight{};
      }
      for (Outgoing& out : waiting_) answered.push_back(std::move(out.done));
      for (Outgoing& out : refused_) answered.push_back(std::move(out.done));
      waiting_.clear();
      refused_.clear();
    }
    for (Done& done : answered) done(status, nullptr);
    return closing;
  }

  // Read is the reader thread: replies, deadlines and, once broken, refusals until closed.
  void Read() {
    for (;;) {
      bool broken;
      {
        absl::MutexLock lock(&mu_);
        broken = !broken_.ok();
      }
      if (broken) {
        if (AnswerBroken()) return;
      }
      const absl::Duration wait = Expire();
      pollfd ready[2] = {{wake_.get(), POLLIN, 0}, {socket_.get(), POLLIN, 0}};
      const int timeout_ms =
          static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(wait) + 1));
      const int n = poll(ready, broken ? 1 : 2, timeout_ms);
      if (n <= 0) continue;
      if (ready[0].revents != 0) {
        uint64_t count;
        (void)!read(wake_.get(), &count, sizeof(count));
      }
      if (!broken && ready[1].revents != 0) {
        absl::Status status = ReadReply();
        if (!status.ok()) Break(status);
      }
    }
  }

  UniqueFd socket_;
  SharedRegion region_;
  UniqueFd wake_;  // An eventfd: wakes the reader.
  const std::string peer_;
  std::thread reader_;
  absl::Mutex write_mu_;  // One note (and its inline bytes) at a time on the socket.
  absl::Mutex mu_;
  std::vector<uint32_t> free_ ABSL_GUARDED_BY(mu_);
  std::deque<Outgoing> waiting_ ABSL_GUARDED_BY(mu_);     // For a free slot, in order.
  std::vector<InFlight> in_flight_ ABSL_GUARDED_BY(mu_);  // By slot.
  std::vector<Outgoing> refused_ ABSL_GUARDED_BY(mu_);    // Sent once broken: to answer.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
};

std::unique_ptr<ServerTransport> LocalServerTransport::Wrap(
    const std::vector<ServerAddress>& targets, int connections,
    std::unique_ptr<ServerTransport> fallback) {
  const std::string host = ThisHostId();
  std::unique_ptr<LocalServerTransport> transport(new LocalServerTransport(std::move(fallback)));
  int local = 0;
  for (const ServerAddress& target : targets) {
    Target t;
    t.local = std::make_unique<std::atomic<bool>>(false);
    t.next = std::make_unique<std::atomic<uint64_t>>(0);
    t.backup = target.backup;
    if (!host.empty() && target.local_host == host && !target.local_socket.empty()) {
      const std::string peer = absl::StrCat("server ", target.rank, " at ", target.local_socket,
                                            target.backup ? " (backup copy)" : "");
      for (int i = 0; i < std::max(1, connections); ++i) {
        absl::StatusOr<std::unique_ptr<Connection>> connection =
            Connection::Open(target.local_socket, peer);
        if (!connection.ok()) {
          SdkLogger()->warn("the shared-memory path to {} is not usable ({}); using {}", peer,
                            connection.status().ToString(), target.address);
          t.connections.clear();
          break;
        }
        t.connections.push_back(*std::move(connection));
      }
      t.local->store(!t.connections.empty());
      if (!t.connections.empty()) ++local;
    }
    transport->targets_.push_back(std::move(t));
  }
  if (local == 0) return std::move(transport->fallback_);
  SdkLogger()->debug("{} of {} server targets take the shared-memory path", local, targets.size());
  return transport;
}

LocalServerTransport::LocalServerTransport(std::unique_ptr<ServerTransport> fallback)
    : fallback_(std::move(fallback)) {}

LocalServerTransport::~LocalServerTransport() { Close(); }

void LocalServerTransport::Send(int s, ServerMethod method,
                                std::shared_ptr<const grpc::ByteBuffer> request,
                                absl::Time deadline, uint64_t view_epoch, Done done) {
  Target& target = targets_[s];
  if (!target.local->load(std::memory_order_acquire)) {
    fallback_->Send(s, method, std::move(request), deadline, view_epoch, std::move(done));
    return;
  }
  const uint64_t i = target.next->fetch_add(1, std::memory_order_relaxed);
  const int index = static_cast<int>(method) + (target.backup ? kNumServerMethods : 0);
  target.connections[i % target.connections.size()]->Send(index, std::move(request), deadline,
                                                          view_epoch, std::move(done));
}

absl::Status LocalServerTransport::Retarget(int s, const std::string& address) {
  targets_[s].local->store(false, std::memory_order_release);  // The new server's: gRPC.
  return fallback_->Retarget(s, address);
}

absl::Status LocalServerTransport::Probe(int s, ServerMethod method,
                                         const grpc::ByteBuffer& request, absl::Time deadline) {
  return fallback_->Probe(s, method, request, deadline);
}

void LocalServerTransport::Close() {
  if (closed_) return;
  closed_ = true;
  for (Target& target : targets_) {
    for (auto& connection : target.connections) connection->Close();
  }
  if (fallback_ != nullptr) fallback_->Close();
}

int LocalServerTransport::local_targets() const {
  int n = 0;
  for (const Target& target : targets_) n += target.local->load() ? 1 : 0;
  return n;
}

}  // namespace kvstore
