#include "server/grpc/kvserver_metrics.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kvstore {
namespace {

class RoundMetrics final : public RoundObserver {
 public:
  RoundMetrics(MetricsRegistry* registry, const std::vector<uint64_t>& worker_node_ids,
               TraceWriter* trace)
      : trace_(trace),
        rounds_(registry->AddCounter(
            "kvstore_server_rounds_total",
            "dist_sync rounds completed: one chunk of a key, one push from every worker.")),
        wait_(registry->AddHistogram(
            "kvstore_server_round_wait_seconds",
            "Time from a round's first push to its completion: how long it waited for its last "
            "worker.",
            {}, LatencyBounds())) {
    for (size_t rank = 0; rank < worker_node_ids.size(); ++rank) {
      last_[worker_node_ids[rank]] = registry->AddCounter(
          "kvstore_server_round_last_worker_total",
          "Rounds whose last push came from this worker (a straggler's count grows fastest).",
          {{"worker_rank", absl::StrCat(rank)}});
      ranks_[worker_node_ids[rank]] = static_cast<int>(rank);
      if (trace_ != nullptr) {
        trace_->NameRow(static_cast<int>(rank), absl::StrCat("rounds worker ", rank, " ended"));
      }
    }
  }

  void RoundCompleted(uint64_t last_node_id, absl::Duration waited) override {
    rounds_->Increment();
    wait_->ObserveDuration(waited);
    if (auto it = last_.find(last_node_id); it != last_.end()) it->second->Increment();
    if (trace_ != nullptr) {
      const absl::Time now = absl::Now();
      auto rank = ranks_.find(last_node_id);
      const int row = rank != ranks_.end() ? rank->second : -1;
      trace_->Complete("round", "round", row, now - waited, now,
                       {{"last_worker", absl::StrCat(row)}});
    }
  }

 private:
  Counter* rounds_;
  Histogram* wait_;
  TraceWriter* trace_;
  absl::flat_hash_map<uint64_t, Counter*> last_;  // Read-only after construction.
  absl::flat_hash_map<uint64_t, int> ranks_;      // Read-only after construction.
};

}  // namespace

KVServerMetrics::KVServerMetrics(MetricsRegistry* registry)
    : registry_(registry),
      calls_(registry, "kvstore_server",
             CallMetrics::Help{
                 "Requests answered by the kvserver, by method.",
                 "Bytes received in requests, by method.", "Bytes sent in replies, by method.",
                 "Time from a request's arrival to its reply being sent (a dist_sync push "
                 "includes its wait for the round).",
                 "Requests answered with an error, by method and code."}) {}

void KVServerMetrics::RecordCall(int method, absl::StatusCode code, size_t request_bytes,
                                 size_t response_bytes, absl::Duration latency) {
  calls_.Record(static_cast<ServerMethod>(method), code, request_bytes, response_bytes, latency);
}

std::shared_ptr<RoundObserver> KVServerMetrics::ForJob(const std::vector<uint64_t>& worker_node_ids,
                                                       TraceWriter* trace) {
  return std::make_shared<RoundMetrics>(registry_, worker_node_ids, trace);
}

}  // namespace kvstore
