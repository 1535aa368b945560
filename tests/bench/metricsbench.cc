// metricsbench: what recording a kvserver's metrics costs per request, on this machine, next to
// what a request costs (kvbench): the work KVServerService adds to each call when --metrics_port
// is set - two clock reads, the request and reply lengths, RecordCall (counters, a histogram,
// the error counter) - on 1 and on 4 threads at once (the serving threads share the counters),
// and the time one scrape (Render of a kvserver's registry) takes.
//
//   bazel run -c opt //tests/bench:metricsbench -- [--calls=N]
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/clock.h"
#include "common/flags_usage.h"
#include "common/metrics_registry.h"
#include "server/grpc/kvserver_metrics.h"

ABSL_FLAG(int64_t, calls, 2000000, "Calls recorded per thread.");

namespace kvstore {
namespace {

// PerCall returns the nanoseconds one thread spends per recorded call with `threads` threads
// recording into `metrics` at once.
double PerCall(KVServerMetrics* metrics, int threads, int64_t calls) {
  std::vector<std::thread> workers;
  std::vector<double> ns(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const absl::Time start = absl::Now();
      for (int64_t i = 0; i < calls; ++i) {
        const absl::Time arrived = absl::Now();  // As Proceed does at arrival ...
        const int method = static_cast<int>(i % 3);
        // ... and at the end: the lengths are read for the small-call poll anyway.
        metrics->RecordCall(method, absl::StatusCode::kOk, 4096 + (i & 63), 64,
                            absl::Now() - arrived);
      }
      ns[t] = absl::ToDoubleNanoseconds(absl::Now() - start) / calls;
    });
  }
  for (auto& w : workers) w.join();
  double sum = 0;
  for (double v : ns) sum += v;
  return sum / threads;
}

// ClockPair returns the nanoseconds of two absl::Now() calls alone.
double ClockPair(int64_t calls) {
  const absl::Time start = absl::Now();
  int64_t sink = 0;
  for (int64_t i = 0; i < calls; ++i) {
    const absl::Time a = absl::Now();
    sink += absl::ToInt64Nanoseconds(absl::Now() - a);
  }
  if (sink == -1) std::printf("%lld\n", static_cast<long long>(sink));
  return absl::ToDoubleNanoseconds(absl::Now() - start) / calls;
}

int Run() {
  const int64_t calls = absl::GetFlag(FLAGS_calls);
  MetricsRegistry registry;
  KVServerMetrics metrics(&registry);
  std::vector<uint64_t> workers = {2, 3, 4, 5};
  std::shared_ptr<RoundObserver> rounds = metrics.ForJob(workers);
  AddProcessCollector(&registry);
  const double clock = ClockPair(calls);
  const double one = PerCall(&metrics, 1, calls);
  const double four = PerCall(&metrics, 4, calls / 2);
  const absl::Time round_start = absl::Now();
  for (int64_t i = 0; i < calls; ++i) {
    rounds->RoundCompleted(2 + (i & 3), absl::Microseconds(i & 1023));
  }
  const double round_ns = absl::ToDoubleNanoseconds(absl::Now() - round_start) / calls;
  const int scrapes = 200;
  size_t bytes = 0;
  const absl::Time render_start = absl::Now();
  for (int i = 0; i < scrapes; ++i) bytes = registry.Render().size();
  const double render_us = absl::ToDoubleMicroseconds(absl::Now() - render_start) / scrapes;
  std::printf("two clock reads:                      %7.1f ns\n", clock);
  std::printf("record one call, 1 thread:            %7.1f ns (clock reads included)\n", one);
  std::printf("record one call, 4 threads at once:   %7.1f ns per call per thread\n", four);
  std::printf("record one dist_sync round:           %7.1f ns\n", round_ns);
  std::printf("one scrape (Render, %zu bytes):     %7.1f us\n", bytes, render_us);
  return 0;
}

}  // namespace
}  // namespace kvstore

int main(int argc, char** argv) {
  kvstore::InitFlags(argc, argv,
                     "the cost of recording a kvserver's metrics per call, per round and per "
                     "scrape.\n\n  metricsbench [--calls=N]",
                     __FILE__);
  return kvstore::Run();
}
