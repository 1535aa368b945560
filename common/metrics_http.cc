#include "common/metrics_http.h"

#include <httplib.h>
#include <sys/socket.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kvstore {

struct MetricsHttpServer::Impl {
  httplib::Server server;
  std::thread thread;
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, const MetricsRegistry* registry) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics port ", port, " is not in 0..65535"));
  }
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->impl_ = std::make_unique<Impl>();
  httplib::Server& http = server->impl_->server;
  http.new_task_queue = [] { return new httplib::ThreadPool(2); };
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which would let a second daemon
  // bind the same metrics port and answer half of the scrapes.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http.set_read_timeout(5, 0);
  http.set_write_timeout(5, 0);
  http.set_keep_alive_timeout(10);
  http.Get("/metrics", [registry](const httplib::Request&, httplib::Response& response) {
    response.set_content(registry->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("KVStore metrics: /metrics\n", "text/plain");
  });
  if (port == 0) {
    server->port_ = http.bind_to_any_port(host);
  } else if (http.bind_to_port(host, port)) {
    server->port_ = port;
  }
  if (server->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for metrics on ", host, ":", port));
  }
  server->impl_->thread =
      std::thread([impl = server->impl_.get()] { impl->server.listen_after_bind(); });
  // Wait until it listens, so that stop() in the destructor cannot come first and be missed.
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (!http.is_running() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (impl_ == nullptr) return;
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace kvstore
