// CallMetrics: what one end of the kvserver protocol counts of its calls, per method
// (common/server_methods.h): calls, bytes each way, a latency histogram, and failed calls by
// status code, as the Prometheus families
//
//   PREFIX_requests_total{method}            PREFIX_request_bytes_total{method}
//   PREFIX_response_bytes_total{method}      PREFIX_request_duration_seconds{method}
//   PREFIX_errors_total{method,code}
//
// The kvserver counts the calls it answers (server/grpc/kvserver_metrics.h, prefix
// kvstore_server), a worker those it sends (client/worker_telemetry.h, kvstore_worker). Every
// child is registered in the constructor, so Record is a few relaxed atomic adds: no lock,
// allocation or formatting per call.
//
// Threading: thread-safe.
#ifndef KVSTORE_COMMON_CALL_METRICS_H_
#define KVSTORE_COMMON_CALL_METRICS_H_

#include <array>
#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics_registry.h"
#include "common/server_methods.h"

namespace kvstore {

class CallMetrics {
 public:
  // The help text of each family.
  struct Help {
    std::string requests;
    std::string request_bytes;
    std::string response_bytes;
    std::string duration;
    std::string errors;
  };
  // The registry must outlive this object.
  CallMetrics(MetricsRegistry* registry, const std::string& prefix, const Help& help);

  // Record counts one call of `method` that ended with `code` after `latency`.
  void Record(ServerMethod method, absl::StatusCode code, size_t request_bytes,
              size_t response_bytes, absl::Duration latency);

 private:
  static constexpr int kCodes = 17;  // absl::StatusCode 0..16; OK is not an error.
  struct MethodCounters {
    Counter* requests;
    Counter* request_bytes;
    Counter* response_bytes;
    Histogram* latency;
    std::array<Counter*, kCodes> errors;
  };
  std::array<MethodCounters, kNumServerMethods> methods_{};
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_CALL_METRICS_H_
