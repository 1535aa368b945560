// MetricsRegistry: a daemon's Prometheus metrics, rendered in the text exposition format
// (version 0.0.4) that Prometheus scrapes from /metrics (common/metrics_http.h serves it).
//
// A metric is a family (name, help, type) with one child per set of label values. Children are
// created once, when a component starts (never per request), and recorded into with relaxed
// atomics only: no lock, allocation or string formatting on the hot path. Values known only at
// scrape time (nodes by state, keys held, memory) come from collectors: callbacks that the
// registry runs while it renders, which append samples through a MetricsWriter.
//
// Names follow Prometheus' conventions: a `kvstore_` prefix, base units (seconds, bytes),
// `_total` on counters; MetricsRegistry does not invent them, the caller passes full names.
//
// Threading: Counter, Gauge and Histogram are thread-safe and lock-free. The registry's
// Add* methods and Render may be called from any thread (they take the registry's lock);
// pointers that Add* return stay valid as long as the registry.
#ifndef KVSTORE_COMMON_METRICS_REGISTRY_H_
#define KVSTORE_COMMON_METRICS_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvstore {

// Labels: (name, value) pairs, in the order they are rendered.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Counter: a monotonically increasing count.
class Counter {
 public:
  void Increment(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// Gauge: a value that goes up and down.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Histogram: counts observations in cumulative buckets with fixed upper bounds, plus their
// count and sum. Observe costs one bucket search over the bounds and three relaxed atomic adds.
class Histogram {
 public:
  // `bounds`: increasing upper bounds; +Inf is implicit.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  void ObserveDuration(absl::Duration d) { Observe(absl::ToDoubleSeconds(d)); }

  const std::vector<double>& bounds() const { return bounds_; }
  // bucket_count(i): observations <= bounds()[i] and above the bound before (not cumulative);
  // i == bounds().size() is the +Inf bucket.
  uint64_t bucket_count(size_t i) const { return counts_[i].load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// LatencyBounds: 50 us to 60 s, roughly x2.5 apart: the buckets of every latency histogram.
std::vector<double> LatencyBounds();

// MetricsWriter: what a collector appends samples through while the registry renders.
class MetricsWriter {
 public:
  enum class Type { kCounter, kGauge };
  // Family starts a family (# HELP and # TYPE lines); the samples that follow belong to it.
  // A family a collector writes must not also be registered with Add*.
  void Family(const std::string& name, const std::string& help, Type type);
  // Sample appends `name{labels} value`.
  void Sample(const std::string& name, const MetricLabels& labels, double value);

  std::string* out() { return &out_; }

 private:
  std::string out_;
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // AddCounter returns the child of family `name` with `labels`, creating both as needed (the
  // same child for the same labels). `help` is that of the family's first registration.
  Counter* AddCounter(const std::string& name, const std::string& help,
                      const MetricLabels& labels = {});
  Gauge* AddGauge(const std::string& name, const std::string& help,
                  const MetricLabels& labels = {});
  Histogram* AddHistogram(const std::string& name, const std::string& help,
                          const MetricLabels& labels, std::vector<double> bounds);

  // Collector: appends samples computed now. Runs on the rendering thread, must not call back
  // into the registry.
  using Collector = std::function<void(MetricsWriter*)>;
  void AddCollector(Collector collector);

  // Render returns every metric in the text exposition format: families in registration
  // order, then what the collectors write.
  std::string Render() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Child {
    MetricLabels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    std::string name;
    std::string help;
    Kind kind;
    std::deque<Child> children;
  };
  Child* FindOrAdd(const std::string& name, const std::string& help, Kind kind,
                   const MetricLabels& labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::deque<Family> families_ ABSL_GUARDED_BY(mu_);
  std::vector<Collector> collectors_ ABSL_GUARDED_BY(mu_);
};

// AddProcessCollector adds the standard process metrics of this process, read from /proc at
// scrape time: process_resident_memory_bytes, process_virtual_memory_bytes,
// process_cpu_seconds_total, process_open_fds, process_start_time_seconds.
void AddProcessCollector(MetricsRegistry* registry);

// StatusCodeLabel returns the gRPC name of status code `code` (0..16: "OK", "CANCELLED", ...,
// "UNAUTHENTICATED"), the `code` label of error counters; "UNKNOWN" outside that range.
const char* StatusCodeLabel(int code);

// FormatLabels returns `{a="x",b="y"}` with values escaped as the format requires ("" for no
// labels).
std::string FormatLabels(const MetricLabels& labels);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_METRICS_REGISTRY_H_
