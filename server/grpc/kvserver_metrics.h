// KVServerMetrics: a kvserver's Prometheus metrics (docs/operations.md lists them).
//
// Created once per daemon over its MetricsRegistry; every child is registered in the
// constructor (or in ForJob, once the job is known), so recording is a few relaxed atomic adds:
// no lock, allocation or formatting per request. The per-method call families are
// common/call_metrics.h's, prefix kvstore_server:
//
//   kvstore_server_requests_total{method}            calls answered, by method
//   kvstore_server_request_bytes_total{method}       bytes received in requests
//   kvstore_server_response_bytes_total{method}      bytes sent in replies
//   kvstore_server_request_duration_seconds{method}  histogram: arrival to reply sent
//   kvstore_server_errors_total{method,code}         calls answered with an error, by gRPC code
//   kvstore_server_rounds_total                      dist_sync rounds (one chunk, every worker)
//   kvstore_server_round_wait_seconds                histogram: first push to the last one
//   kvstore_server_round_last_worker_total{worker_rank}  rounds whose last push was this worker's
//
// Threading: thread-safe.
#ifndef KVSTORE_SERVER_GRPC_KVSERVER_METRICS_H_
#define KVSTORE_SERVER_GRPC_KVSERVER_METRICS_H_

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/call_metrics.h"
#include "common/metrics_registry.h"
#include "common/server_methods.h"
#include "common/trace_writer.h"
#include "server/core/round_observer.h"

namespace kvstore {

class KVServerMetrics {
 public:
  // The registry must outlive this object.
  explicit KVServerMetrics(MetricsRegistry* registry);

  // RecordCall counts one answered call of `method` (0 .. kNumServerMethods-1).
  void RecordCall(int method, absl::StatusCode code, size_t request_bytes, size_t response_bytes,
                  absl::Duration latency);

  // ForJob returns the observer of the engine's rounds for a job whose workers have these node
  // ids (in rank order); its counters are labelled by worker rank. With `trace` (which must
  // outlive the observer), every round is also an event of the timeline, on the row of the
  // worker that came last.
  std::shared_ptr<RoundObserver> ForJob(const std::vector<uint64_t>& worker_node_ids,
                                        TraceWriter* trace = nullptr);

  MetricsRegistry* registry() const { return registry_; }

 private:
  MetricsRegistry* registry_;
  CallMetrics calls_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_GRPC_KVSERVER_METRICS_H_
