#include "common/call_metrics.h"

namespace kvstore {

CallMetrics::CallMetrics(MetricsRegistry* registry, const std::string& prefix, const Help& help) {
  for (int m = 0; m < kNumServerMethods; ++m) {
    const char* method = ServerMethodLabel(static_cast<ServerMethod>(m));
    const MetricLabels labels = {{"method", method}};
    MethodCounters& c = methods_[m];
    c.requests = registry->AddCounter(prefix + "_requests_total", help.requests, labels);
    c.request_bytes =
        registry->AddCounter(prefix + "_request_bytes_total", help.request_bytes, labels);
    c.response_bytes =
        registry->AddCounter(prefix + "_response_bytes_total", help.response_bytes, labels);
    c.latency = registry->AddHistogram(prefix + "_request_duration_seconds", help.duration, labels,
                                       LatencyBounds());
    for (int code = 1; code < kCodes; ++code) {
      c.errors[code] = registry->AddCounter(prefix + "_errors_total", help.errors,
                                            {{"method", method}, {"code", StatusCodeLabel(code)}});
    }
  }
}

void CallMetrics::Record(ServerMethod method, absl::StatusCode code, size_t request_bytes,
                         size_t response_bytes, absl::Duration latency) {
  MethodCounters& c = methods_[static_cast<int>(method)];
  c.requests->Increment();
  c.request_bytes->Increment(request_bytes);
  c.response_bytes->Increment(response_bytes);
  c.latency->ObserveDuration(latency);
  const int index = static_cast<int>(code);
  if (index > 0 && index < kCodes) c.errors[index]->Increment();
}

}  // namespace kvstore
