// optbench: speed of the server-side optimizers (common/store/optimizer.h) next to memcpy.
//
// For each optimizer it times one update of a float32 value of --elements values (25M by
// default) with a random gradient, after a warm-up update that allocates the state, and
// reports the median over --reps. Memory traffic counts the arrays each update reads and
// writes per element (Adam: w, g, m, v read and w, m, v written = 28 bytes); GB/s = traffic /
// time. In the same run it measures single-thread memcpy of the same value (bytes copied / time,
// as memcpy figures are quoted) and prints each optimizer's ratio to it. The target is Adam >=
// 1.5x. Updates of values this big are split over the machine's cores.
//
//   bazel build -c opt //tests/bench:optbench && bazel-bin/tests/bench/optbench [--format=json]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/clock.h"
#include "common/flags_usage.h"
#include "common/store/optimizer.h"

ABSL_FLAG(int64_t, elements, 25000000, "float32 values per update");
ABSL_FLAG(int, reps, 7, "timed updates per optimizer; the median is reported");
ABSL_FLAG(std::string, format, "text", "text or json");
ABSL_FLAG(std::string, only, "", "run only the optimizers whose name contains this");

namespace kvstore::bench {
namespace {

// Bytes each optimizer reads and writes per element in one update (float32 arrays).
int TrafficBytes(const std::string& name, const OptimizerConfig& c) {
  const std::map<std::string, int> arrays = {
      // {read arrays, written arrays} flattened: w and g read, w written, plus state.
      {"test", 2 + 1},         {"sgd", 3 + 2},      {"nag", 3 + 2},     {"adam", 4 + 3},
      {"adamw", 4 + 3},        {"adagrad", 3 + 2},  {"rmsprop", 3 + 2}, {"adadelta", 4 + 3},
      {"adamax", 4 + 3},       {"nadam", 4 + 3},    {"ftrl", 4 + 3},    {"signum", 3 + 2},
      {"lamb", 4 + 3 + 2 + 1}, {"lars", 3 + 2 + 2},
  };
  (void)c;
  return 4 * arrays.at(name);
}

struct Result {
  std::string name;
  double median_s, min_s, max_s;
  int64_t bytes;
};

int Main() {
  const int64_t n = absl::GetFlag(FLAGS_elements);
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  const std::string format = absl::GetFlag(FLAGS_format);
  if (n < 1 || (format != "text" && format != "json")) {
    std::fprintf(stderr, "optbench: --elements must be >= 1 and --format text or json\n");
    return 2;
  }
  std::mt19937 engine(12345);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  Tensor grad = Tensor::Zeros(DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) grad.data_as<float>()[i] = uniform(engine) * 1e-3f;
  Tensor weight = Tensor::Zeros(DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) weight.data_as<float>()[i] = uniform(engine);

  // memcpy ceiling: one thread, same value size, warm buffers.
  std::vector<float> copy(n);
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    const absl::Time start = absl::Now();
    std::memcpy(copy.data(), weight.data(), n * sizeof(float));
    if (r > 0) times.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  std::sort(times.begin(), times.end());
  const double memcpy_gbps = n * 4.0 / times[times.size() / 2] / 1e9;

  std::vector<Result> results;
  for (const std::string& name : OptimizerNames()) {
    if (name.find(absl::GetFlag(FLAGS_only)) == std::string::npos) continue;
    OptimizerConfig config;
    config.name = name;
    config.wd = 1e-4;
    if (name == "sgd" || name == "lars") config.momentum = 0.9;
    auto optimizer = MakeOptimizer(config);
    if (!optimizer.ok()) {
      std::fprintf(stderr, "optbench: %s\n", optimizer.status().ToString().c_str());
      return 1;
    }
    Tensor w = weight.Clone();
    (void)(*optimizer)->Update(Key(1), grad, &w);  // Warm-up: allocates the state.
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      const absl::Time start = absl::Now();
      (void)(*optimizer)->Update(Key(1), grad, &w);
      t.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
    std::sort(t.begin(), t.end());
    results.push_back(Result{name, t[t.size() / 2], t.front(), t.back(),
                             static_cast<int64_t>(TrafficBytes(name, config)) * n});
  }

  const unsigned cores = std::thread::hardware_concurrency();
  if (format == "json") {
    std::printf("{\"elements\": %lld, \"threads\": %u, \"memcpy_gbps\": %.4f, \"cases\": [",
                static_cast<long long>(n), cores, memcpy_gbps);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      const double gbps = r.bytes / r.median_s / 1e9;
      std::printf(
          "%s{\"name\": \"%s\", \"bytes\": %lld, \"median_s\": %.6g, \"min_s\": %.6g, "
          "\"max_s\": %.6g, \"gbps\": %.4f, \"ceiling_gbps\": %.4f, \"ratio\": %.4f, "
          "\"elements_per_s\": %.4g}",
          i ? ", " : "", r.name.c_str(), static_cast<long long>(r.bytes), r.median_s, r.min_s,
          r.max_s, gbps, memcpy_gbps, gbps / memcpy_gbps, n / r.median_s);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("value: %lld float32, %u cores; memcpy (1 thread): %.2f GB/s\n",
              static_cast<long long>(n), cores, memcpy_gbps);
  std::printf("%-10s %9s %20s %7s %9s %8s\n", "optimizer", "median ms", "min-max ms", "B/elem",
              "GB/s", "ratio");
  for (const Result& r : results) {
    const double gbps = r.bytes / r.median_s / 1e9;
    std::printf("%-10s %9.2f %9.2f - %8.2f %7lld %9.2f %8.2f\n", r.name.c_str(), r.median_s * 1e3,
                r.min_s * 1e3, r.max_s * 1e3, static_cast<long long>(r.bytes / n), gbps,
                gbps / memcpy_gbps);
  }
  return 0;
}

}  // namespace
}  // namespace kvstore::bench

int main(int argc, char** argv) {
  kvstore::InitFlags(argc, argv,
                     "speed of the server-side optimizers next to memcpy.\n\n"
                     "  optbench [--elements=N] [--reps=R] [--only=SUBSTRING] [--format=json]",
                     __FILE__);
  return kvstore::bench::Main();
}
