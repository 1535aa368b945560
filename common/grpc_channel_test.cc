#include "common/grpc_channel.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/server.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace kvstore {
namespace {

// SlowLink forwards TCP connections from a port on 127.0.0.1 to `upstream_port` on 127.0.0.1,
// holding every chunk the upstream sends for `delay`: a link with that much latency.
class SlowLink {
 public:
  SlowLink(int upstream_port, absl::Duration delay)
      : upstream_port_(upstream_port), delay_(delay), listener_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr = Loopback(0);
    socklen_t length = sizeof(addr);
    REQUIRE(bind(listener_, reinterpret_cast<sockaddr*>(&addr), length) == 0);
    REQUIRE(listen(listener_, 8) == 0);
    REQUIRE(getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
    port_ = ntohs(addr.sin_port);
    accepting_ = std::thread([this] { Accept(); });
  }
  // The destructor ends every connection and joins every thread.
  ~SlowLink() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      for (int fd : sockets_) shutdown(fd, SHUT_RDWR);
    }
    shutdown(listener_, SHUT_RDWR);
    accepting_.join();  // No pump starts after this.
    absl::MutexLock lock(&mu_);
    for (std::thread& pump : pumps_) pump.join();
    for (int fd : sockets_) close(fd);
    close(listener_);
  }
  int port() const { return port_; }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    return addr;
  }
  void Accept() {
    while (true) {
      const int client = accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      const int upstream = socket(AF_INET, SOCK_STREAM, 0);
      const sockaddr_in addr = Loopback(upstream_port_);
      connect(upstream, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
      absl::MutexLock lock(&mu_);
      sockets_.insert(sockets_.end(), {client, upstream});
      if (stopping_) {
        shutdown(client, SHUT_RDWR);
        shutdown(upstream, SHUT_RDWR);
      }
      pumps_.emplace_back([client, upstream] { Pump(client, upstream, absl::ZeroDuration()); });
      pumps_.emplace_back([client, upstream, delay = delay_] { Pump(upstream, client, delay); });
    }
  }
  // Pump copies `from` to `to` until `from` ends, each chunk after `delay`.
  static void Pump(int from, int to, absl::Duration delay) {
    char buffer[1 << 16];
    ssize_t n;
    while ((n = read(from, buffer, sizeof(buffer))) > 0) {
      absl::SleepFor(delay);
      if (send(to, buffer, static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
    }
    shutdown(to, SHUT_RDWR);
  }

  const int upstream_port_;
  const absl::Duration delay_;
  const int listener_;
  int port_ = 0;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int> sockets_ ABSL_GUARDED_BY(mu_);
  std::thread accepting_;
  std::vector<std::thread> pumps_ ABSL_GUARDED_BY(mu_);
};

TEST_CASE(
    "MakeChannel: a call reaches a peer 300 ms away (connecting may take longer than "
    "a reconnect backoff)",
    "[channel]") {
  // The generic service answers every call UNIMPLEMENTED; a call whose connection attempt
  // was given up ends UNAVAILABLE instead.
  grpc::CallbackGenericService unimplemented;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterCallbackGenericService(&unimplemented);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  {
    SlowLink link(port, absl::Milliseconds(300));
    grpc::GenericStub stub(MakeChannel(absl::StrCat("127.0.0.1:", link.port())));
    grpc::ClientContext context;  // Not wait_for_ready: fails as soon as connecting fails.
    context.set_deadline(GrpcDeadline(absl::Now() + absl::Seconds(10)));
    grpc::Slice bytes("x");
    grpc::ByteBuffer request(&bytes, 1), response;
    grpc::Status status;
    absl::Notification done;
    stub.UnaryCall(&context, "/test.Nothing/Call", grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    done.WaitForNotification();
    INFO(status.error_message());
    CHECK(status.error_code() == grpc::StatusCode::UNIMPLEMENTED);
  }
  server->Shutdown(std::chrono::system_clock::now());
}

TlsOptions Tls(std::string ca, std::string cert, std::string key, bool mutual = false) {
  TlsOptions tls;
  tls.ca_file = std::move(ca);
  tls.cert_file = std::move(cert);
  tls.key_file = std::move(key);
  tls.mutual = mutual;
  return tls;
}

TEST_CASE("Credentials: no TLS options give plaintext credentials", "[tls]") {
  REQUIRE(ChannelCredentialsFor(TlsOptions()).ok());
  REQUIRE(ServerCredentialsFor(TlsOptions()).ok());
  REQUIRE(std::string(TlsOptions().transport()) == "plaintext");
  REQUIRE(std::string(Tls("ca.pem", "", "").transport()) == "TLS");
  REQUIRE(std::string(Tls("ca.pem", "", "", true).transport()) == "mutual TLS");
}

TEST_CASE("Credentials: TLS files or mutual TLS without a CA are refused, not plaintext", "[tls]") {
  for (const TlsOptions& tls : {Tls("", "node.pem", "node.key"), Tls("", "", "", true)}) {
    const auto channel = ChannelCredentialsFor(tls);
    REQUIRE(absl::IsInvalidArgument(channel.status()));
    REQUIRE(channel.status().message().find("without the CA") != absl::string_view::npos);
    REQUIRE(absl::IsInvalidArgument(ServerCredentialsFor(tls).status()));
  }
}

TEST_CASE("Credentials: a certificate without its key is refused", "[tls]") {
  REQUIRE(absl::IsInvalidArgument(ChannelCredentialsFor(Tls("ca.pem", "node.pem", "")).status()));
  REQUIRE(absl::IsInvalidArgument(ServerCredentialsFor(Tls("ca.pem", "", "node.key")).status()));
}

TEST_CASE("Credentials: a file that cannot be read is NotFound, naming it", "[tls]") {
  const auto channel = ChannelCredentialsFor(Tls("/nonexistent/ca.pem", "", ""));
  REQUIRE(absl::IsNotFound(channel.status()));
  REQUIRE(channel.status().message().find("/nonexistent/ca.pem") != absl::string_view::npos);
  REQUIRE(absl::IsNotFound(
      ServerCredentialsFor(Tls("/nonexistent/ca.pem", "node.pem", "node.key")).status()));
}

}  // namespace
}  // namespace kvstore
