// compressbench: speed of gradient compression (common/compression.h) next to memcpy.
//
// For 2bit and 1bit it times, over one float32 gradient of --elements values (random in
// [-1, 1), threshold 0.5 for 2bit and 0 for 1bit, residual carried from one repetition to the
// next as in training):
//   encode      Quantize: gradient + residual -> codes, residual updated;
//   decode      Dequantize: codes -> float32 values;
//   decode_add  DequantizeAdd: codes added to a float32 sum (what a server does per push).
// GB/s counts the float32 bytes of the gradient (4 per element), like a memcpy of the gradient,
// whose single-thread bandwidth is measured in the same run on the same number of bytes; the
// ratio is GB/s over memcpy GB/s. It also prints the bytes on the wire per float32 byte pushed.
//
//   bazel run -c opt //tests/bench:compressbench -- [--elements=N] [--reps=R] [--format=json]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/clock.h"
#include "common/compression.h"
#include "common/flags_usage.h"

ABSL_FLAG(int64_t, elements, 16 << 20, "float32 values per gradient");
ABSL_FLAG(int, reps, 9, "repetitions per case; the median is reported");
ABSL_FLAG(std::string, format, "text", "text or json");
ABSL_FLAG(int64_t, seed, 0, "random seed (0: from the clock)");

namespace kvstore::bench {
namespace {

struct Result {
  std::string name;
  double median_s = 0;
  double min_s = 0;
  double max_s = 0;
};

template <typename Fn>
Result Time(std::string name, int reps, Fn fn) {
  std::vector<double> seconds;
  fn();  // Warm: pages touched, caches in their steady state.
  for (int i = 0; i < reps; ++i) {
    const absl::Time start = absl::Now();
    fn();
    seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  std::sort(seconds.begin(), seconds.end());
  return Result{std::move(name), seconds[seconds.size() / 2], seconds.front(), seconds.back()};
}

int Main() {
  const int64_t n = absl::GetFlag(FLAGS_elements);
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  const std::string format = absl::GetFlag(FLAGS_format);
  if (n < 1 || (format != "text" && format != "json")) {
    std::fprintf(stderr, "compressbench: --elements must be >= 1 and --format text or json\n");
    return 2;
  }
  uint64_t seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  if (seed == 0) seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);

  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> grad(n), residual(n, 0.0f), out(n, 0.0f), copy(n);
  for (float& g : grad) g = uniform(engine);
  std::vector<uint8_t> codes(CompressedBytes(CompressionType::k2Bit, n));

  std::vector<Result> results;
  results.push_back(Time("memcpy", reps, [&] { std::memcpy(copy.data(), grad.data(), bytes); }));
  std::vector<std::pair<std::string, double>> wire;
  for (const char* type : {"2bit", "1bit"}) {
    const CompressionParams params =
        *MakeCompressionParams(type, std::string(type) == "2bit" ? 0.5 : 0.0);
    std::fill(residual.begin(), residual.end(), 0.0f);
    results.push_back(Time(std::string("encode_") + type, reps, [&] {
      Quantize(params, grad.data(), residual.data(), n, codes.data());
    }));
    results.push_back(Time(std::string("decode_") + type, reps,
                           [&] { Dequantize(params, codes.data(), n, out.data()); }));
    results.push_back(Time(std::string("decode_add_") + type, reps,
                           [&] { DequantizeAdd(params, codes.data(), n, out.data()); }));
    wire.emplace_back(type, static_cast<double>(CompressedBytes(params.type, n)) / bytes);
  }
  // Keep the outputs observable so no loop is optimised away.
  double checksum = 0;
  for (int64_t i = 0; i < n; i += 4099) checksum += out[i] + residual[i] + copy[i];

  const double memcpy_gbps = bytes / results[0].median_s / 1e9;
  if (format == "json") {
    std::printf("{\"seed\": %llu, \"elements\": %lld, \"memcpy_gbps\": %.4f, \"cases\": [",
                static_cast<unsigned long long>(seed), static_cast<long long>(n), memcpy_gbps);
    for (size_t i = 1; i < results.size(); ++i) {
      const Result& r = results[i];
      const double gbps = bytes / r.median_s / 1e9;
      std::printf(
          "%s{\"name\": \"%s\", \"bytes\": %zu, \"median_s\": %.6g, \"min_s\": %.6g, "
          "\"max_s\": %.6g, \"gbps\": %.4f, \"ceiling_gbps\": %.4f, \"ratio\": %.4f}",
          i > 1 ? ", " : "", r.name.c_str(), bytes, r.median_s, r.min_s, r.max_s, gbps, memcpy_gbps,
          gbps / memcpy_gbps);
    }
    std::printf("], \"wire_bytes_per_byte\": {");
    for (size_t i = 0; i < wire.size(); ++i) {
      std::printf("%s\"%s\": %.6f", i ? ", " : "", wire[i].first.c_str(), wire[i].second);
    }
    std::printf("}, \"checksum\": %.3f}\n", checksum);
    return 0;
  }
  std::printf("gradient: %lld float32 (%.1f MiB), %d reps, seed %llu\n", static_cast<long long>(n),
              bytes / 1048576.0, reps, static_cast<unsigned long long>(seed));
  std::printf("memcpy (1 thread): %.2f GB/s\n", memcpy_gbps);
  std::printf("%-16s %10s %22s %9s %8s\n", "case", "median ms", "min-max ms", "GB/s", "ratio");
  for (size_t i = 1; i < results.size(); ++i) {
    const Result& r = results[i];
    const double gbps = bytes / r.median_s / 1e9;
    std::printf("%-16s %10.2f %10.2f - %9.2f %9.2f %8.2f\n", r.name.c_str(), r.median_s * 1e3,
                r.min_s * 1e3, r.max_s * 1e3, gbps, gbps / memcpy_gbps);
  }
  for (const auto& [type, ratio] : wire) {
    std::printf("wire bytes per float32 byte pushed, %s: %.6f (1/%.0f)\n", type.c_str(), ratio,
                1 / ratio);
  }
  std::printf("(checksum %.3f)\n", checksum);
  return 0;
}

}  // namespace
}  // namespace kvstore::bench

int main(int argc, char** argv) {
  kvstore::InitFlags(argc, argv,
                     "speed of gradient compression (2bit, 1bit) next to memcpy.\n\n"
                     "  compressbench [--elements=N] [--reps=R] [--seed=S] [--format=json]",
                     __FILE__);
  return kvstore::bench::Main();
}
