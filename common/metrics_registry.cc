#include "common/metrics_registry.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kvstore {
namespace {

void AtomicAdd(std::atomic<double>* value, double delta) {
  double old = value->load(std::memory_order_relaxed);
  while (!value->compare_exchange_weak(old, old + delta, std::memory_order_relaxed)) {
  }
}

// FormatValue writes a sample value the way Prometheus parses it.
std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  // The shortest of 15 or 17 digits that reads back as the same double.
  std::string text = absl::StrFormat("%.15g", value);
  if (std::strtod(text.c_str(), nullptr) != value) text = absl::StrFormat("%.17g", value);
  return text;
}

void EscapeInto(const std::string& value, std::string* out) {
  for (char c : value) {
    switch (c) {
      case '\\':
        out->append("\\\\");
        break;
      case '"':
        out->append("\\\"");
        break;
      case '\n':
        out->append("\\n");
        break;
      default:
        out->push_back(c);
    }
  }
}

void Header(const std::string& name, const std::string& help, const char* type, std::string* out) {
  absl::StrAppend(out, "# HELP ", name, " ");
  for (char c : help) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
  absl::StrAppend(out, "\n# TYPE ", name, " ", type, "\n");
}

}  // namespace

void Gauge::Add(double delta) { AtomicAdd(&value_, delta); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(&sum_, value);
}

const char* StatusCodeLabel(int code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? kNames[code] : "UNKNOWN";
}

std::vector<double> LatencyBounds() {
  return {50e-6,  100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
          100e-3, 250e-3, 500e-3, 1,      2.5,  5,      10,   30,    60};
}

std::string FormatLabels(const MetricLabels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out.push_back(',');
    absl::StrAppend(&out, labels[i].first, "=\"");
    EscapeInto(labels[i].second, &out);
    out.push_back('"');
  }
  out.push_back('}');
  return out;
}

void MetricsWriter::Family(const std::string& name, const std::string& help, Type type) {
  Header(name, help, type == Type::kCounter ? "counter" : "gauge", &out_);
}

void MetricsWriter::Sample(const std::string& name, const MetricLabels& labels, double value) {
  absl::StrAppend(&out_, name, FormatLabels(labels), " ", FormatValue(value), "\n");
}

MetricsRegistry::Child* MetricsRegistry::FindOrAdd(const std::string& name, const std::string& help,
                                                   Kind kind, const MetricLabels& labels) {
  auto family = std::find_if(families_.begin(), families_.end(),
                             [&](const Family& f) { return f.name == name; });
  if (family == families_.end()) {
    families_.push_back(Family{name, help, kind, {}});
    family = families_.end() - 1;
  }
  for (Child& child : family->children) {
    if (child.labels == labels) return &child;
  }
  family->children.push_back(Child{labels, nullptr, nullptr, nullptr});
  return &family->children.back();
}

Counter* MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                     const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  Child* child = FindOrAdd(name, help, Kind::kCounter, labels);
  if (!child->counter) child->counter = std::make_unique<Counter>();
  return child->counter.get();
}

Gauge* MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                 const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  Child* child = FindOrAdd(name, help, Kind::kGauge, labels);
  if (!child->gauge) child->gauge = std::make_unique<Gauge>();
  return child->gauge.get();
}

Histogram* MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                         const MetricLabels& labels, std::vector<double> bounds) {
  absl::MutexLock lock(&mu_);
  Child* child = FindOrAdd(name, help, Kind::kHistogram, labels);
  if (!child->histogram) child->histogram = std::make_unique<Histogram>(std::move(bounds));
  return child->histogram.get();
}

void MetricsRegistry::AddCollector(Collector collector) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::Render() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const Family& family : families_) {
    const char* type = family.kind == Kind::kCounter ? "counter"
                       : family.kind == Kind::kGauge ? "gauge"
                                                     : "histogram";
    Header(family.name, family.help, type, &out);
    for (const Child& child : family.children) {
      if (child.counter) {
        absl::StrAppend(&out, family.name, FormatLabels(child.labels), " ", child.counter->value(),
                        "\n");
      } else if (child.gauge) {
        absl::StrAppend(&out, family.name, FormatLabels(child.labels), " ",
                        FormatValue(child.gauge->value()), "\n");
      } else if (child.histogram) {
        const Histogram& h = *child.histogram;
        // Read the buckets first: count and sum then include at least what they show.
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= h.bounds().size(); ++i) {
          cumulative += h.bucket_count(i);
          MetricLabels labels = child.labels;
          labels.emplace_back("le", i < h.bounds().size() ? FormatValue(h.bounds()[i]) : "+Inf");
          absl::StrAppend(&out, family.name, "_bucket", FormatLabels(labels), " ", cumulative,
                          "\n");
        }
        absl::StrAppend(&out, family.name, "_sum", FormatLabels(child.labels), " ",
                        FormatValue(h.sum()), "\n");
        absl::StrAppend(&out, family.name, "_count", FormatLabels(child.labels), " ", cumulative,
                        "\n");
      }
    }
  }
  MetricsWriter writer;
  for (const Collector& collector : collectors_) collector(&writer);
  out.append(*writer.out());
  return out;
}

void AddProcessCollector(MetricsRegistry* registry) {
  const long page = sysconf(_SC_PAGESIZE);
  const long ticks = sysconf(_SC_CLK_TCK);
  const double start = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  registry->AddCollector([page, ticks, start](MetricsWriter* out) {
    std::ifstream statm("/proc/self/statm");
    long vm_pages = 0, rss_pages = 0;
    if (statm >> vm_pages >> rss_pages) {
      out->Family("process_resident_memory_bytes", "Resident memory size in bytes.",
                  MetricsWriter::Type::kGauge);
      out->Sample("process_resident_memory_bytes", {}, static_cast<double>(rss_pages) * page);
      out->Family("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                  MetricsWriter::Type::kGauge);
      out->Sample("process_virtual_memory_bytes", {}, static_cast<double>(vm_pages) * page);
    }
    std::ifstream stat_file("/proc/self/stat");
    std::stringstream buffer;
    buffer << stat_file.rdbuf();
    const std::string stat = buffer.str();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    const size_t paren = stat.rfind(')');
    if (paren != std::string::npos && ticks > 0) {
      std::vector<std::string> fields =
          absl::StrSplit(stat.substr(paren + 2), ' ', absl::SkipEmpty());
      // utime and stime are fields 14 and 15 of the line: 11 and 12 after the state field (3).
      if (fields.size() > 12) {
        const double cpu = (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
        out->Family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                    MetricsWriter::Type::kCounter);
        out->Sample("process_cpu_seconds_total", {}, cpu);
      }
    }
    int fds = 0;
    if (DIR* dir = opendir("/proc/self/fd")) {
      while (readdir(dir) != nullptr) ++fds;
      closedir(dir);
      out->Family("process_open_fds", "Number of open file descriptors.",
                  MetricsWriter::Type::kGauge);
      out->Sample("process_open_fds", {}, std::max(0, fds - 3));  // ".", ".." and the DIR's.
    }
    out->Family("process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                MetricsWriter::Type::kGauge);
    out->Sample("process_start_time_seconds", {}, start);
  });
}

}  // namespace kvstore
