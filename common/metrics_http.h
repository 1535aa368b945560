// MetricsHttpServer: serves a MetricsRegistry to Prometheus over HTTP, at GET /metrics
// (text exposition format 0.0.4), on a port of its own (the daemons' --metrics_port).
//
// Plain HTTP without authentication, as Prometheus exporters are: the metrics hold counts,
// sizes, times, ranks and host names, never keys' values or the job secret. Bind it to an
// interface that only the monitoring network reaches (docs/operations.md).
//
// Threading: Start returns once the port is bound; requests are answered on two threads of
// the server's own. The registry must outlive the server. The destructor stops and joins.
#ifndef KVSTORE_COMMON_METRICS_HTTP_H_
#define KVSTORE_COMMON_METRICS_HTTP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics_registry.h"

namespace kvstore {

class MetricsHttpServer {
 public:
  // Start binds host:port (port 0: the OS chooses; port() says which) and serves /metrics.
  // Unavailable naming the address when it cannot be bound, InvalidArgument for a port outside
  // 0..65535.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                                  const MetricsRegistry* registry);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  struct Impl;
  MetricsHttpServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_METRICS_HTTP_H_
