// The shared-memory path between a worker and a kvserver on one host: the worker's
// LocalServerTransport against a real LocalListener over a real Unix socket and memfd, with a
// handler that answers each request with a function of its bytes (checked independently), and
// raw clients that break the protocol, which must never reach the handler nor stop the
// listener serving others.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/grpc_server_transport.h"
#include "client/local_server_transport.h"
#include "common/local_channel.h"
#include "common/server_methods.h"
#include "server/grpc/local_listener.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  REQUIRE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

std::shared_ptr<const grpc::ByteBuffer> Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return std::make_shared<grpc::ByteBuffer>(&slice, 1);
}

// Expected is the handler's answer, computed apart: the method's index, then every byte
// complemented, then the request's length.
std::string Expected(int method, const std::string& request) {
  std::string out(1, static_cast<char>(method));
  for (char c : request) out.push_back(static_cast<char>(~c));
  out += absl::StrCat("/", request.size());
  return out;
}

// Server: a listener whose handler answers Expected at once, fails requests that start with
// "fail", and holds those that start with "hold" until Release.
struct Server {
  std::string path;
  std::unique_ptr<LocalListener> listener;
  std::atomic<int> handled{0};
  std::atomic<int> overwritten{0};
  absl::Mutex mu;
  std::vector<std::function<void()>> held;

  explicit Server(int64_t max_request_bytes = 64 << 20) {
    path = absl::StrCat("/tmp/kv-local-test-", getpid(), "-", reinterpret_cast<uintptr_t>(this),
                        ".sock");
    auto started = LocalListener::Start(
        path, max_request_bytes,
        [this](int method, const grpc::ByteBuffer& request, uint64_t view_epoch,
               grpc::ByteBuffer* response, std::function<void(absl::Status)> done) {
          ++handled;
          const std::string bytes = Bytes(request);
          if (bytes.rfind("fail", 0) == 0) {
            done(absl::ResourceExhaustedError(absl::StrCat("refused at epoch ", view_epoch)));
            return;
          }
          const std::string answer = Expected(method, bytes);
          grpc::Slice slice(answer.data(), answer.size());
          *response = grpc::ByteBuffer(&slice, 1);
          if (bytes.rfind("hold", 0) == 0) {
            absl::MutexLock lock(&mu);
            held.push_back([done] { done(absl::OkStatus()); });
            return;
          }
          done(absl::OkStatus());
          // A handler may read its request until it returns, after answering (a key group's
          // push): the bytes must still be the request's.
          if (bytes.rfind("early", 0) == 0 && Bytes(request) != bytes) ++overwritten;
        });
    REQUIRE(started.ok());
    listener = *std::move(started);
  }
  void Release() {
    std::vector<std::function<void()>> now;
    {
      absl::MutexLock lock(&mu);
      now.swap(held);
    }
    for (auto& f : now) f();
  }
};

// Worker: a LocalServerTransport to `server` (target 0, and target 1 as its backup copy),
// falling back to gRPC at an address where nothing listens.
std::unique_ptr<ServerTransport> Worker(const Server& server, int connections) {
  std::vector<ServerAddress> targets = {{0, "127.0.0.1:1", false, server.path, ThisHostId()},
                                        {0, "127.0.0.1:1", true, server.path, ThisHostId()}};
  auto fallback = GrpcServerTransport::Create(targets, 1);
  REQUIRE(fallback.ok());
  return LocalServerTransport::Wrap(targets, connections, *std::move(fallback));
}

struct Outcome {
  absl::Notification done;
  absl::Status status;
  std::string reply;
};

void SendTo(ServerTransport* transport, int target, ServerMethod method, const std::string& bytes,
            Outcome* outcome, absl::Duration timeout = absl::Seconds(30)) {
  transport->Send(target, method, Buffer(bytes), absl::Now() + timeout, 7,
                  [outcome](absl::Status status, grpc::ByteBuffer* reply) {
                    outcome->status = status;
                    if (reply != nullptr) outcome->reply = Bytes(*reply);
                    outcome->done.Notify();
                  });
}

TEST_CASE(
    "LocalPath, requests of every size come back exactly, more at once than there are slots") {
  TestRng rng;
  INFO(rng.Describe());
  Server server;
  auto transport = Worker(server, 2);
  REQUIRE(dynamic_cast<LocalServerTransport*>(transport.get()) != nullptr);
  const int n = 200;  // Over the 2 x 16 slots: the rest wait for one.
  std::vector<std::string> requests(n);
  std::vector<Outcome> outcomes(n);
  std::vector<int> methods(n);
  for (int i = 0; i < n; ++i) {
    // Mostly small; some over a slot (sent inline, answered inline).
    const int64_t size = rng.Int(0, 9) == 0 ? rng.Int(LocalServerTransport::kSlotBytes + 1, 3 << 20)
                                            : rng.Int(0, 64 << 10);
    requests[i].resize(size);
    for (char& c : requests[i]) c = static_cast<char>(rng.Int(0, 255));
    methods[i] = static_cast<int>(rng.Int(0, kNumServerMethods - 1));
    SendTo(transport.get(), static_cast<int>(rng.Int(0, 1)), static_cast<ServerMethod>(methods[i]),
           requests[i], &outcomes[i]);
  }
  for (int i = 0; i < n; ++i) {
    REQUIRE(outcomes[i].done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    REQUIRE(outcomes[i].status.ok());
    // Target 1 is the backup copy: its requests arrive as the Backup methods.
    CHECK((outcomes[i].reply == Expected(methods[i], requests[i]) ||
           outcomes[i].reply == Expected(methods[i] + kNumServerMethods, requests[i])));
  }
  CHECK(server.handled.load() == n);
  CHECK(server.listener->connections() == 4);  // 2 connections to each of the 2 targets.
  transport->Close();
}

TEST_CASE("LocalPath, a handler reads its request until it returns, even after answering") {
  Server server;
  auto transport = Worker(server, 1);
  for (int i = 0; i < 20; ++i) {
    Outcome outcome;
    const std::string request = absl::StrCat("early ", i, std::string(1000, 'x'));
    SendTo(transport.get(), 0, ServerMethod::kPush, request, &outcome);
    REQUIRE(outcome.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    REQUIRE(outcome.status.ok());
    CHECK(outcome.reply == Expected(static_cast<int>(ServerMethod::kPush), request));
  }
  CHECK(server.overwritten.load() == 0);
  transport->Close();
}

TEST_CASE("LocalPath, the backup copy's requests arrive as the Backup methods") {
  Server server;
  auto transport = Worker(server, 1);
  Outcome primary, backup;
  SendTo(transport.get(), 0, ServerMethod::kPush, "abc", &primary);
  SendTo(transport.get(), 1, ServerMethod::kPush, "abc", &backup);
  REQUIRE(primary.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  REQUIRE(backup.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(primary.reply == Expected(static_cast<int>(ServerMethod::kPush), "abc"));
  CHECK(backup.reply == Expected(static_cast<int>(ServerMethod::kPush) + kNumServerMethods, "abc"));
  transport->Close();
}

TEST_CASE("LocalPath, errors keep their code and message; deadlines are kept") {
  Server server;
  auto transport = Worker(server, 1);
  Outcome failed;
  SendTo(transport.get(), 0, ServerMethod::kPull, "fail please", &failed);
  REQUIRE(failed.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(failed.status.code() == absl::StatusCode::kResourceExhausted);
  CHECK(failed.status.message() == "refused at epoch 7");

  // Held past its deadline: DeadlineExceeded; its slot comes back with the late reply.
  Outcome late;
  SendTo(transport.get(), 0, ServerMethod::kPull, "hold on", &late, absl::Milliseconds(100));
  REQUIRE(late.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(late.status.code() == absl::StatusCode::kDeadlineExceeded);
  server.Release();
  // Every slot still serves: more requests than slots, one after another.
  for (uint32_t i = 0; i < 2 * LocalServerTransport::kSlots; ++i) {
    Outcome again;
    SendTo(transport.get(), 0, ServerMethod::kPull, absl::StrCat("again ", i), &again);
    REQUIRE(again.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    REQUIRE(again.status.ok());
    CHECK(again.reply ==
          Expected(static_cast<int>(ServerMethod::kPull), absl::StrCat("again ", i)));
  }
  transport->Close();
}

TEST_CASE(
    "LocalPath, a stopped kvserver fails the requests in flight and later ones: Unavailable") {
  auto server = std::make_unique<Server>();
  auto transport = Worker(*server, 1);
  Outcome held;
  SendTo(transport.get(), 0, ServerMethod::kPush, "hold me", &held);
  while (server->handled.load() == 0) absl::SleepFor(absl::Milliseconds(1));
  server->listener->Stop();
  // Sent at once, before the worker has seen the end of the stream: writes to a closed socket
  // fail (never SIGPIPE, which would end the worker).
  std::vector<Outcome> racing(200);
  for (Outcome& outcome : racing) SendTo(transport.get(), 0, ServerMethod::kPush, "x", &outcome);
  for (Outcome& outcome : racing) {
    REQUIRE(outcome.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    CHECK(outcome.status.code() == absl::StatusCode::kUnavailable);
  }
  REQUIRE(held.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(held.status.code() == absl::StatusCode::kUnavailable);
  Outcome later;
  SendTo(transport.get(), 0, ServerMethod::kPush, "later", &later);
  REQUIRE(later.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(later.status.code() == absl::StatusCode::kUnavailable);
  server->Release();  // The answer comes after the connection closed: dropped.
  transport->Close();
}

TEST_CASE("LocalPath, a moved server (Retarget) and one on another host take the fallback") {
  Server server;
  {
    // Another host's boot id: not even tried.
    std::vector<ServerAddress> targets = {{0, "127.0.0.1:1", false, server.path, "another-host"}};
    auto fallback = GrpcServerTransport::Create(targets, 1);
    REQUIRE(fallback.ok());
    auto transport = LocalServerTransport::Wrap(targets, 1, *std::move(fallback));
    CHECK(dynamic_cast<LocalServerTransport*>(transport.get()) == nullptr);
    transport->Close();
  }
  auto transport = Worker(server, 1);
  REQUIRE(transport->Retarget(0, "127.0.0.1:1").ok());
  CHECK(dynamic_cast<LocalServerTransport*>(transport.get())->local_targets() == 1);
  Outcome moved;
  SendTo(transport.get(), 0, ServerMethod::kPull, "x", &moved, absl::Seconds(5));
  REQUIRE(moved.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK_FALSE(moved.status.ok());  // Went to gRPC, where nothing listens.
  CHECK(server.handled.load() == 0);
  transport->Close();
}

TEST_CASE("LocalPath, writing to a peer that closed fails without SIGPIPE") {
  int ends[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) == 0);
  UniqueFd mine(ends[0]);
  close(ends[1]);
  char byte = 'x';
  iovec iov{&byte, 1};
  // SIGPIPE's default action would end the test's process here.
  const absl::Status status = WriteFully(mine.get(), &iov, 1, "a closed peer");
  CHECK(status.code() == absl::StatusCode::kUnavailable);
}

// A raw client: connects and sends `hello` with `fd` attached (or none), then `tail`.
struct RawClient {
  UniqueFd socket;
  explicit RawClient(const std::string& path) {
    auto connected = ConnectLocal(path);
    REQUIRE(connected.ok());
    socket = *std::move(connected);
  }
  // Hello returns the reply's code, or -1 when the connection closed without one.
  int Hello(const LocalHello& hello, int fd) {
    if (fd >= 0) {
      REQUIRE(SendWithDescriptor(socket.get(), &hello, sizeof(hello), fd, "server").ok());
    } else {
      iovec iov{const_cast<LocalHello*>(&hello), sizeof(hello)};
      REQUIRE(WriteFully(socket.get(), &iov, 1, "server").ok());
    }
    LocalHelloReply reply;
    if (!ReadFully(socket.get(), &reply, sizeof(reply), "server").ok()) return -1;
    std::string message(reply.message_bytes, '\0');
    if (!ReadFully(socket.get(), message.data(), message.size(), "server").ok()) return -1;
    INFO(message);
    return reply.code;
  }
  void Note(const RequestNote& note) {
    iovec iov{const_cast<RequestNote*>(&note), sizeof(note)};
    WriteFully(socket.get(), &iov, 1, "server").IgnoreError();
  }
  // Closed: whether the listener closed the connection (reads reach the end).
  bool Closed() {
    char byte;
    const absl::Status status = ReadFully(socket.get(), &byte, 1, "server");
    return !status.ok();
  }
};

TEST_CASE("LocalPath, protocol violations close the connection and never reach the handler") {
  Server server(/*max_request_bytes=*/1 << 20);
  LocalHello good;
  good.slots = 2;
  good.slot_bytes = 4096;

  SECTION("a hello without the region's descriptor") {
    RawClient client(server.listener->path());
    CHECK(client.Hello(good, -1) != 0);
  }
  SECTION("a region that is not sealed against shrinking") {
    UniqueFd fd(memfd_create("unsealed", MFD_CLOEXEC));
    REQUIRE(ftruncate(fd.get(), 2 * 4096) == 0);
    RawClient client(server.listener->path());
    CHECK(client.Hello(good, fd.get()) == static_cast<int>(absl::StatusCode::kInvalidArgument));
  }
  SECTION("a region of another size than announced") {
    auto region = SharedRegion::Create(4096);
    REQUIRE(region.ok());
    RawClient client(server.listener->path());
    CHECK(client.Hello(good, region->fd()) == static_cast<int>(absl::StatusCode::kInvalidArgument));
  }
  SECTION("too many slots, too big slots, another version") {
    auto region = SharedRegion::Create(2 * 4096);
    REQUIRE(region.ok());
    for (int variant = 0; variant < 4; ++variant) {
      LocalHello bad = good;
      if (variant == 0) bad.slots = kMaxLocalSlots + 1;
      if (variant == 1) bad.slots = 0;
      if (variant == 2) bad.slot_bytes = kMaxLocalSlotBytes + 1;
      if (variant == 3) bad.version = kLocalVersion + 1;
      RawClient client(server.listener->path());
      CHECK(client.Hello(bad, region->fd()) ==
            static_cast<int>(absl::StatusCode::kInvalidArgument));
    }
  }
  SECTION("notes naming a slot out of range, a busy slot, a method out of range, too much inline") {
    auto region = SharedRegion::Create(2 * 4096);
    REQUIRE(region.ok());
    for (int variant = 0; variant < 5; ++variant) {
      RawClient client(server.listener->path());
      REQUIRE(client.Hello(good, region->fd()) == 0);
      RequestNote note;
      note.bytes = 4;
      std::memcpy(region->data(), "hold", 4);
      std::memcpy(region->data() + 4096, "hold", 4);
      if (variant == 0) note.slot = 2;
      if (variant == 1) {
        const int first = server.handled.load();
        client.Note(note);  // Held: slot 0 stays busy.
        while (server.handled.load() == first) absl::SleepFor(absl::Milliseconds(1));
      }
      if (variant == 2) note.method = 2 * kNumServerMethods;
      if (variant == 3) {
        note.inline_bytes = 1;
        note.bytes = (1 << 20) + 1;
      }
      if (variant == 4) note.bytes = 4097;  // More than a slot.
      INFO("variant " << variant);
      const int before = server.handled.load();
      client.Note(note);
      CHECK(client.Closed());
      CHECK(server.handled.load() == before);
    }
    server.Release();
  }
  SECTION("a worker that goes away before its answer (no SIGPIPE for the kvserver)") {
    auto region = SharedRegion::Create(2 * 4096);
    REQUIRE(region.ok());
    {
      RawClient client(server.listener->path());
      REQUIRE(client.Hello(good, region->fd()) == 0);
      std::memcpy(region->data(), "hold", 4);
      RequestNote note;
      note.bytes = 4;
      client.Note(note);
      while (server.handled.load() == 0) absl::SleepFor(absl::Milliseconds(1));
    }  // Closed with its request held.
    absl::SleepFor(absl::Milliseconds(50));
    server.Release();  // The answer goes to a closed socket: an error, not a signal.
  }
  // After all that, a well-behaved worker is served.
  auto transport = Worker(server, 1);
  Outcome fine;
  SendTo(transport.get(), 0, ServerMethod::kInit, "fine", &fine);
  REQUIRE(fine.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(fine.status.ok());
  CHECK(fine.reply == Expected(static_cast<int>(ServerMethod::kInit), "fine"));
  transport->Close();
}

TEST_CASE("LocalPath, random notes and region bytes never stop the listener") {
  TestRng rng;
  INFO(rng.Describe());
  Server server(/*max_request_bytes=*/1 << 20);
  LocalHello hello;
  hello.slots = 4;
  hello.slot_bytes = 4096;
  auto region = SharedRegion::Create(hello.slots * hello.slot_bytes);
  REQUIRE(region.ok());
  int served = 0;
  for (int client = 0; client < 40; ++client) {
    RawClient raw(server.listener->path());
    REQUIRE(raw.Hello(hello, region->fd()) == 0);
    for (int i = 0; i < 50; ++i) {
      // The region's bytes change under the listener at will, as a hostile worker's may.
      for (int b = 0; b < 64; ++b) {
        region->data()[rng.Int(0, static_cast<int64_t>(region->size()) - 1)] =
            static_cast<char>(rng.Int(0, 255));
      }
      RequestNote note;
      note.slot = static_cast<uint32_t>(rng.Int(0, 5));
      note.method = static_cast<uint32_t>(rng.Int(0, 2 * kNumServerMethods + 1));
      note.bytes = static_cast<uint64_t>(rng.Int(0, 1) == 0 ? rng.Int(0, 5000)
                                                            : rng.Int(0, int64_t{1} << 40));
      note.view_epoch = static_cast<uint64_t>(rng.Int(0, 1000));
      note.inline_bytes = static_cast<uint32_t>(rng.Int(0, 1) == 0 ? 0 : rng.Int(1, 3));
      raw.Note(note);
      if (note.inline_bytes != 0 && note.bytes <= (1 << 20)) {
        std::string junk(note.bytes, 'j');
        iovec iov{junk.data(), junk.size()};
        WriteFully(raw.socket.get(), &iov, 1, "server").IgnoreError();
      }
    }
    served += 1;
  }
  server.Release();
  CHECK(served == 40);
  // Still serving a well-behaved worker.
  auto transport = Worker(server, 1);
  Outcome fine;
  SendTo(transport.get(), 0, ServerMethod::kPull, "fine", &fine);
  REQUIRE(fine.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(fine.status.ok());
  CHECK(fine.reply == Expected(static_cast<int>(ServerMethod::kPull), "fine"));
  transport->Close();
}

}  // namespace
}  // namespace kvstore
