// WorkerTelemetry: a worker's own metrics and timeline, both off unless asked for.
//
// - Metrics (DistOptions::metrics_port, KV_METRICS_PORT): the SDK serves Prometheus metrics at
//   http://127.0.0.1:PORT/metrics - the same families as a kvserver's, seen from the worker:
//     kvstore_worker_requests_total{method}, kvstore_worker_request_bytes_total{method},
//     kvstore_worker_response_bytes_total{method}, kvstore_worker_request_duration_seconds{method}
//     (sent to answered, retries included), kvstore_worker_errors_total{method,code},
//     kvstore_worker_operations_total{kind}, kvstore_worker_operation_duration_seconds{kind}
//     (issued to completed, the time in the queue included).
// - Timeline (DistOptions::trace_file, KV_TRACE_FILE): a Chrome trace (common/trace_writer.h)
//   with a row "operations" - one event per operation from issue to completion, named for its
//   kind and keys, with the time it waited in the queue - and a row per server with each
//   request from sent to answered.
//
// Threading: thread-safe; recording is lock-free when only metrics are on.
#ifndef KVSTORE_CLIENT_WORKER_TELEMETRY_H_
#define KVSTORE_CLIENT_WORKER_TELEMETRY_H_

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/key_info.h"
#include "common/call_metrics.h"
#include "common/key.h"
#include "common/metrics_http.h"
#include "common/metrics_registry.h"
#include "common/server_methods.h"
#include "common/trace_writer.h"

namespace kvstore {

class WorkerTelemetry {
 public:
  struct Options {
    int rank = 0;
    int num_servers = 0;
    // -1: no metrics; 0: a port the OS chooses (logged).
    int metrics_port = -1;
    std::string trace_file;  // Empty: no timeline.
  };
  // Start returns null when neither is asked for; the metrics server's or the trace file's
  // error otherwise.
  static absl::StatusOr<std::unique_ptr<WorkerTelemetry>> Start(const Options& options);
  ~WorkerTelemetry();

  // RequestDone records one request to server `server`, from its first send to its answer.
  void RequestDone(int server, ServerMethod method, size_t request_bytes, size_t reply_bytes,
                   absl::Time sent, absl::Time answered, absl::StatusCode code);
  // OperationDone records one operation of `kind` on `keys` (empty for a key group of
  // `group_keys` keys), issued at `queued`, started at `started`, completed now.
  void OperationDone(Kind kind, const std::vector<Key>& keys, size_t group_keys, absl::Time queued,
                     absl::Time started, absl::StatusCode code);

  int metrics_port() const { return http_ == nullptr ? 0 : http_->port(); }

 private:
  static constexpr int kKinds = 7;
  WorkerTelemetry() = default;

  bool metrics_ = false;
  MetricsRegistry registry_;
  std::optional<CallMetrics> calls_;  // With metrics (common/call_metrics.h, kvstore_worker).
  std::array<Counter*, kKinds> operations_{};
  std::array<Histogram*, kKinds> operation_latency_{};
  std::unique_ptr<MetricsHttpServer> http_;
  std::unique_ptr<TraceWriter> trace_;
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_WORKER_TELEMETRY_H_
