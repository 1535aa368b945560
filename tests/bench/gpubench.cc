// gpubench: speed of the reductions that sum k buffers into one.
//
// GPU (when a CUDA device is present): sums of k = 2..8 buffers of every dtype (float32,
// float16, bfloat16, float64, int32, int64), 1 MB to 1 GB by 4x, on device 0
// (client/gpu/cuda_reduce.h); GB/s counts the bytes read plus written, (k + 1) * size per sum, and
// the ceiling is the same device's cudaMemcpy device-to-device bandwidth (read plus written)
// measured in the same run, both timed on the device between CUDA events. Target: >= 0.8 of it from
// 64 MB up. Beside them, gpu_sum_call_us: what a synchronous Sum costs the caller beyond that (a 4
// KB sum, from the call to its return). Without a GPU it says so.
//
// CPU (always): SumInto (common/reduce.h), the fallback and the servers' sum, for k = 2, 4, 8
// float32 buffers of 1 MB to --cpu_max_mb, next to single-thread memcpy (read plus written)
// of the same bytes.
//
//   bazel build //tests/bench:gpubench && bazel-bin/tests/bench/gpubench [--format=json]
// The binary links cudart statically, so it also runs on a GPU machine without Bazel.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/gpu/cuda_reduce.h"
#include "client/gpu/device_info.h"
#include "common/flags_usage.h"
#include "common/reduce.h"

ABSL_FLAG(int, reps, 7, "repetitions per case; the median is reported");
ABSL_FLAG(int, gpu_max_mb, 1024, "largest GPU buffer, MB (sizes go up by 4x from 1 MB)");
ABSL_FLAG(int, cpu_max_mb, 64, "largest CPU buffer, MB");
ABSL_FLAG(std::string, format, "text", "text or json");

namespace kvstore::bench {
namespace {

struct Case {
  std::string name;
  int64_t bytes = 0;  // Read plus written.
  double median_s = 0;
  double ceiling_gbps = 0;
};

template <typename Fn>
double Median(int reps, Fn fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const absl::Time start = absl::Now();
    fn();
    t.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int Main() {
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  const bool json = absl::GetFlag(FLAGS_format) == "json";
  std::vector<Case> cases;

  // CPU.
  const int64_t cpu_max = int64_t{absl::GetFlag(FLAGS_cpu_max_mb)} << 20;
  std::vector<float> a(cpu_max / 4, 1.0f), b(cpu_max / 4, 2.0f);
  const double memcpy_s = Median(reps, [&] { std::memcpy(b.data(), a.data(), cpu_max); });
  const double cpu_ceiling = 2.0 * cpu_max / memcpy_s / 1e9;
  for (int k : {2, 4, 8}) {
    std::vector<Tensor> inputs;
    for (int j = 0; j < k; ++j) inputs.push_back(Tensor::Full(DType::kFloat32, {cpu_max / 4}, j));
    Tensor out = Tensor::Zeros(DType::kFloat32, {cpu_max / 4});
    for (int64_t bytes = 1 << 20; bytes <= cpu_max; bytes *= 4) {
      const int64_t n = bytes / 4;
      std::vector<Tensor> views;
      for (const Tensor& t : inputs)
        views.push_back(Tensor::Borrow(t.data(), DType::kFloat32, {n}));
      Tensor dst = Tensor::Borrow(out.data(), DType::kFloat32, {n});
      const double s = Median(reps, [&] { (void)SumInto(views, &dst); });
      cases.push_back(Case{absl::StrCat("cpu_sum_k", k, "_", bytes >> 20, "MB"), (k + 1) * bytes, s,
                           cpu_ceiling});
    }
  }

  // GPU.
  std::string reason, device_name;
  const int devices = gpu::CudaDeviceCount(&reason);
  double copy_gbps = 0, sum_call_s = 0;
  std::string gpu_error;
  if (devices > 0) {
    gpu_error = gpu::cuda::DeviceName(0, &device_name);
    if (gpu_error.empty())
      gpu_error = gpu::cuda::CopyBandwidth(0, size_t{256} << 20, reps, &copy_gbps);
    // The synchronous Sum's own cost: a 4 KB sum of two buffers, timed on the host from the
    // call to its return (launch and the wait for the result), which the cases below leave out.
    if (gpu_error.empty()) {
      void* small[3] = {nullptr, nullptr, nullptr};
      for (void*& p : small) {
        if (gpu_error.empty()) gpu_error = gpu::cuda::Alloc(0, 4096, &p);
      }
      const gpu::cuda::Buffer in[2] = {{small[0], 0}, {small[1], 0}};
      if (gpu_error.empty()) {
        sum_call_s = Median(std::max(reps, 101), [&] {
          (void)gpu::cuda::Sum(in, 2, {small[2], 0}, gpu::cuda::ElementType::kFloat32, 1024);
        });
      }
      for (void* p : small) {
        if (p != nullptr) (void)gpu::cuda::Free(0, p);
      }
    }
    const int64_t gpu_max = int64_t{absl::GetFlag(FLAGS_gpu_max_mb)} << 20;
    struct GpuType {
      const char* name;
      gpu::cuda::ElementType type;
      int bytes;
    };
    const GpuType types[] = {{"float32", gpu::cuda::ElementType::kFloat32, 4},
                             {"float16", gpu::cuda::ElementType::kFloat16, 2},
                             {"bfloat16", gpu::cuda::ElementType::kBFloat16, 2},
                             {"float64", gpu::cuda::ElementType::kFloat64, 8},
                             {"int32", gpu::cuda::ElementType::kInt32, 4},
                             {"int64", gpu::cuda::ElementType::kInt64, 8}};
    for (const GpuType& t : types) {
      for (int k = 2; k <= 8; ++k) {
        for (int64_t bytes = 1 << 20; bytes <= gpu_max && gpu_error.empty(); bytes *= 4) {
          double s = 0;
          gpu_error = gpu::cuda::SumSeconds(0, k, t.type, bytes / t.bytes, reps, &s);
          if (gpu_error.empty()) {
            cases.push_back(Case{absl::StrCat("gpu_sum_", t.name, "_k", k, "_", bytes >> 20, "MB"),
                                 (k + 1) * bytes, s, copy_gbps});
          }
        }
      }
    }
  }

  if (json) {
    std::printf(
        "{\"cpu_memcpy_gbps\": %.4f, \"gpu\": %s, \"gpu_copy_gbps\": %.4f, "
        "\"gpu_sum_call_us\": %.2f, \"cases\": [",
        cpu_ceiling, devices > 0 ? absl::StrCat("\"", device_name, "\"").c_str() : "null",
        copy_gbps, sum_call_s * 1e6);
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const double gbps = c.bytes / c.median_s / 1e9;
      std::printf(
          "%s{\"name\": \"%s\", \"bytes\": %lld, \"median_s\": %.6g, \"gbps\": %.4f, "
          "\"ceiling_gbps\": %.4f, \"ratio\": %.4f}",
          i ? ", " : "", c.name.c_str(), static_cast<long long>(c.bytes), c.median_s, gbps,
          c.ceiling_gbps, gbps / c.ceiling_gbps);
    }
    std::printf("]%s}\n",
                devices == 0 ? absl::StrCat(", \"no_gpu\": \"", reason, "\"").c_str() : "");
  } else {
    std::printf("CPU memcpy (1 thread, read + written): %.2f GB/s\n", cpu_ceiling);
    if (devices > 0) {
      std::printf("GPU 0: %s, device-to-device copy (read + written): %.1f GB/s\n",
                  device_name.c_str(), copy_gbps);
      std::printf("a synchronous Sum of 4 KB (launch and wait): %.1f us\n", sum_call_s * 1e6);
    } else {
      std::printf("no GPU: %s; GPU cases not run\n", reason.c_str());
    }
    std::printf("%-30s %12s %10s %10s %8s\n", "case", "median ms", "GB/s", "ceiling", "ratio");
    for (const Case& c : cases) {
      const double gbps = c.bytes / c.median_s / 1e9;
      std::printf("%-30s %12.3f %10.2f %10.2f %8.2f\n", c.name.c_str(), c.median_s * 1e3, gbps,
                  c.ceiling_gbps, gbps / c.ceiling_gbps);
    }
  }
  if (!gpu_error.empty()) {
    std::fprintf(stderr, "gpubench: %s\n", gpu_error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kvstore::bench

int main(int argc, char** argv) {
  kvstore::InitFlags(argc, argv,
                     "speed of the reductions that sum k buffers into one, on the GPU (when "
                     "there is one)\nand on the CPU.\n\n"
                     "  gpubench [--reps=N] [--gpu_max_mb=N] [--cpu_max_mb=N] [--format=json]",
                     __FILE__);
  return kvstore::bench::Main();
}
