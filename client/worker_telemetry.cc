#include "client/worker_telemetry.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

const char* KindLabel(Kind kind) {
  switch (kind) {
    case Kind::kInit:
      return "init";
    case Kind::kPush:
      return "push";
    case Kind::kPull:
      return "pull";
    case Kind::kPushPull:
      return "push_pull";
    case Kind::kRowSparsePush:
      return "row_sparse_push";
    case Kind::kRowSparsePull:
      return "row_sparse_pull";
    case Kind::kInitFill:
      return "init_fill";
  }
  return "other";
}

constexpr int kOperationsRow = 0;
constexpr size_t kKeysNamed = 8;  // An event's name lists at most this many keys.

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerTelemetry>> WorkerTelemetry::Start(const Options& options) {
  if (options.metrics_port < 0 && options.trace_file.empty()) return nullptr;
  std::unique_ptr<WorkerTelemetry> t(new WorkerTelemetry());
  if (!options.trace_file.empty()) {
    ASSIGN_OR_RETURN(t->trace_,
                     TraceWriter::Open(options.trace_file, absl::StrCat("worker ", options.rank)));
    t->trace_->NameRow(kOperationsRow, "operations");
    for (int s = 0; s < options.num_servers; ++s) {
      t->trace_->NameRow(1 + s, absl::StrCat("server ", s));
    }
  }
  if (options.metrics_port >= 0) {
    t->metrics_ = true;
    MetricsRegistry& r = t->registry_;
    t->calls_.emplace(
        &r, "kvstore_worker",
        CallMetrics::Help{"Requests this worker sent to servers, by method.",
                          "Bytes this worker sent in requests, by method.",
                          "Bytes this worker received in replies, by method.",
                          "Time from a request's first send to its answer (retries included).",
                          "Requests that failed, by method and code."});
    for (int k = 0; k < kKinds; ++k) {
      const char* kind = KindLabel(static_cast<Kind>(k));
      t->operations_[k] = r.AddCounter("kvstore_worker_operations_total",
                                       "Operations completed, by kind (fused ones count once "
                                       "each part).",
                                       {{"kind", kind}});
      t->operation_latency_[k] =
          r.AddHistogram("kvstore_worker_operation_duration_seconds",
                         "Time from an operation's issue to its completion (queueing included).",
                         {{"kind", kind}}, LatencyBounds());
    }
    AddProcessCollector(&r);
    ASSIGN_OR_RETURN(t->http_,
                     MetricsHttpServer::Start("127.0.0.1", options.metrics_port, &t->registry_));
    SdkLogger()->info("worker {} metrics on http://127.0.0.1:{}/metrics", options.rank,
                      t->http_->port());
  }
  return t;
}

WorkerTelemetry::~WorkerTelemetry() {
  if (trace_ != nullptr) {
    const absl::Status closed = trace_->Close();
    if (!closed.ok()) {
      SdkLogger()->warn("{}", std::string(closed.message()));
    } else {
      SdkLogger()->info("timeline written to {}", trace_->path());
    }
  }
}

void WorkerTelemetry::RequestDone(int server, ServerMethod method, size_t request_bytes,
                                  size_t reply_bytes, absl::Time sent, absl::Time answered,
                                  absl::StatusCode code) {
  if (metrics_) {
    calls_->Record(method, code, request_bytes, reply_bytes, answered - sent);
  }
  if (trace_ != nullptr) {
    TraceWriter::Args args = {{"server", absl::StrCat(server)},
                              {"request_bytes", absl::StrCat(request_bytes)},
                              {"reply_bytes", absl::StrCat(reply_bytes)}};
    if (code != absl::StatusCode::kOk) args.emplace_back("error", StatusCodeLabel(int(code)));
    trace_->Complete(ServerMethodLabel(method), "request", 1 + server, sent, answered, args);
  }
}

void WorkerTelemetry::OperationDone(Kind kind, const std::vector<Key>& keys, size_t group_keys,
                                    absl::Time queued, absl::Time started, absl::StatusCode code) {
  const absl::Time now = absl::Now();
  const int k = static_cast<int>(kind);
  if (metrics_ && k >= 0 && k < kKinds) {
    const uint64_t parts = keys.empty() ? 1 : keys.size();
    operations_[k]->Increment(parts);
    operation_latency_[k]->ObserveDuration(now - queued);
  }
  if (trace_ != nullptr) {
    std::string name = KindLabel(kind);
    std::string listed;
    if (keys.empty()) {
      name += absl::StrCat(" group of ", group_keys, " keys");
    } else {
      std::vector<std::string> shown;
      for (size_t i = 0; i < keys.size() && i < kKeysNamed; ++i) {
        shown.push_back(keys[i].ToString());
      }
      listed = absl::StrJoin(shown, ",");
      absl::StrAppend(&name, " ", listed, keys.size() > kKeysNamed ? ",..." : "");
    }
    TraceWriter::Args args = {
        {"keys", keys.empty() ? absl::StrCat(group_keys) : absl::StrCat(keys.size())},
        {"queued_us", absl::StrCat(absl::ToInt64Microseconds(started - queued))}};
    if (!listed.empty()) args.emplace_back("key_list", listed);
    if (code != absl::StatusCode::kOk) args.emplace_back("error", StatusCodeLabel(int(code)));
    trace_->Complete(name, "operation", kOperationsRow, queued, now, args);
  }
}

}  // namespace kvstore
