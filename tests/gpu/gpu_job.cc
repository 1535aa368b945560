// gpu_job: a dist_sync_device job on one machine, with every pull checked.
//
// It starts a scheduler and --servers kvservers as real processes over 127.0.0.1
// (tests/bench/bench_job.h: the binaries from --scheduler/--kvserver or the runfiles), joins
// --workers workers in this process (one store each, each with its own TCP connections), and
// for every key size in --key_bytes runs --rounds rounds in which every worker pushes --copies
// float32 values of that key and then pulls it into --copies outputs. With --values=cuda the
// values and the outputs are CUDA buffers spread over the machine's GPUs (summed on the GPU
// before sending, received once into pinned memory and copied to every output's GPU); with
// --values=cpu they are host buffers, the same job from host memory.
//
// Every value is a function of (--seed, worker, copy, key, round), so the float64 reference of
// a round is computed here independently of the job; every output of every worker is compared
// with it. The values are multiples of 1/1024 small enough that every float32 sum is exact, so
// the comparison asks for equality. It prints one line per key size (push and pull seconds, the
// median over the rounds, with the workers released together as kvbench times them; with CUDA
// values also the push with the sum copied whole to pinned memory first, push_staged_first_s, the
// way without the overlap of the GPU work and the sending) and exits 1 on any mismatch or error,
// naming the key, round, worker and output.
//
//   gpu_job --values=cuda|cpu [--servers=2] [--workers=2] [--copies=4] [--rounds=3]
//           [--key_bytes=4096,1048576,16777216,104857600] [--seed=N] [--format=json]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/gpu/cuda_reduce.h"
#include "client/gpu/device_info.h"
#include "client/gpu/staging.h"
#include "client/kvstore.h"
#include "common/flags_usage.h"
#include "tests/bench/bench_job.h"

ABSL_FLAG(std::string, values, "cuda", "where the pushed values and pull outputs live: cuda|cpu");
ABSL_FLAG(int, servers, 2, "kvservers");
ABSL_FLAG(int, workers, 2, "workers (stores in this process)");
ABSL_FLAG(int, copies, 4, "values each worker pushes per key, and outputs it pulls into");
ABSL_FLAG(int, rounds, 3, "push + pull rounds per key");
ABSL_FLAG(std::string, key_bytes, "4096,65536,1048576,16777216,104857600",
          "the keys' sizes in bytes, comma-separated (float32 values)");
ABSL_FLAG(uint64_t, seed, 0, "seed of the values; 0: from the clock (printed)");
ABSL_FLAG(std::string, scheduler, "", "scheduler binary; empty: from the runfiles");
ABSL_FLAG(std::string, kvserver, "", "kvserver binary; empty: from the runfiles");
ABSL_FLAG(std::string, format, "text", "text or json");

namespace kvstore::bench {
namespace {

// Value returns element i of the value that `worker` pushes as `copy` of key `key` in `round`:
// a multiple of 1/1024 in [-4, 4), so that float32 sums of a few of them are exact and any
// difference from the float64 reference is an error, not rounding.
float Value(uint64_t seed, int worker, int copy, int key, int round, int64_t i) {
  uint64_t x = seed ^ (uint64_t(worker) << 56) ^ (uint64_t(copy) << 48) ^ (uint64_t(key) << 40) ^
               (uint64_t(round) << 32) ^ uint64_t(i) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<float>(static_cast<int64_t>(x % 8192) - 4096) / 1024.0f;
}

// Fill runs fn(begin, end) over [0, n) on the machine's cores.
template <typename Fn>
void Parallel(int64_t n, Fn fn) {
  const int threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] { fn(n * t / threads, n * (t + 1) / threads); });
  }
  for (auto& th : pool) th.join();
}

Tensor OnGpu(const Tensor& host, int device) {
  void* data = nullptr;
  if (std::string e = gpu::cuda::Alloc(device, std::max<size_t>(host.byte_size(), 1), &data);
      !e.empty()) {
    Die(e);
  }
  if (std::string e = gpu::cuda::CopyToDevice(device, data, host.data(), host.byte_size());
      !e.empty()) {
    Die(e);
  }
  return Tensor::Adopt(data, host.dtype(), host.shape(), Device::CUDA(device),
                       [device, data] { gpu::cuda::Free(device, data); });
}

Tensor ToHost(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  Tensor host = Tensor::Zeros(t.dtype(), t.shape());
  if (std::string e = gpu::cuda::CopyToHost(t.device().id, host.data(), t.data(), t.byte_size());
      !e.empty()) {
    Die(e);
  }
  return host;
}

struct Result {
  int64_t bytes = 0;
  // push_staged_first: with CUDA values, the sum and its copy to pinned memory done whole
  // (gpu::SumToHost) before the push of that host value - the sum and copy not overlapped with
  // sending, for comparison.
  Timing push, push_staged_first, pull;
  double max_error = 0;
  int outputs_checked = 0;
};

int Main(const char* argv0) {
  const bool cuda = absl::GetFlag(FLAGS_values) == "cuda";
  if (!cuda && absl::GetFlag(FLAGS_values) != "cpu") Die("--values must be cuda or cpu");
  const int servers = absl::GetFlag(FLAGS_servers), workers = absl::GetFlag(FLAGS_workers);
  const int copies = absl::GetFlag(FLAGS_copies), rounds = absl::GetFlag(FLAGS_rounds);
  if (servers < 1 || workers < 1 || copies < 1 || rounds < 1) {
    Die("--servers, --workers, --copies and --rounds must be at least 1");
  }
  std::vector<int64_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_key_bytes), ',')) {
    int64_t b = 0;
    if (!absl::SimpleAtoi(s, &b) || b < 4 || b % 4 != 0) {
      Die(absl::StrCat("--key_bytes: '", s, "' is not a positive multiple of 4"));
    }
    sizes.push_back(b);
  }
  uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (seed == 0) seed = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  std::string reason, device_name = "cpu";
  const int devices = gpu::CudaDeviceCount(&reason);
  if (cuda && devices == 0) {
    std::printf("SKIPPED: gpu_job --values=cuda needs a CUDA device (%s)\n", reason.c_str());
    return 0;
  }
  if (cuda) (void)gpu::cuda::DeviceName(0, &device_name);
  std::fprintf(stderr, "gpu_job: seed %llu, %s values, %d GPU(s) (%s), %dw%ds, %d copies\n",
               static_cast<unsigned long long>(seed), cuda ? "cuda" : "cpu", devices,
               device_name.c_str(), workers, servers, copies);

  JobSpec spec;
  spec.scheduler = absl::GetFlag(FLAGS_scheduler);
  spec.kvserver = absl::GetFlag(FLAGS_kvserver);
  spec.store_type = "dist_sync_device";
  std::unique_ptr<Job> job = StartJob(argv0, servers, workers, spec);
  Crew crew(workers);

  std::vector<Result> results;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const int key = static_cast<int>(k) + 1;
    const int64_t n = sizes[k] / 4;
    Result result;
    result.bytes = sizes[k];
    // Every worker inits the key with zeros at once (Init ends with a barrier).
    {
      const Tensor zeros = Tensor::Zeros(DType::kFloat32, {n});
      const Tensor init = cuda ? OnGpu(zeros, 0) : zeros;
      crew.Run([&](int w) { Check(job->workers[w]->Init(key, init), "init"); });
    }
    // The stored value: the servers' `sum` updater adds every round's sum to it.
    std::vector<double> stored(n, 0.0), round_sum(n, 0.0);
    // Per worker, for push_staged_first: the pinned buffer and the device buffer of the sum,
    // allocated before the timed pushes.
    std::vector<Tensor> scratch(workers), staged(workers);
    if (cuda) {
      for (int w = 0; w < workers; ++w) {
        std::vector<Tensor> ones;
        const Tensor zeros = Tensor::Zeros(DType::kFloat32, {n});
        for (int c = 0; c < copies; ++c) ones.push_back(OnGpu(zeros, c % devices));
        Check(gpu::SumToHost(key, ones, &scratch[w], &staged[w]), "sum to host");
      }
    }
    for (int round = 0; round < rounds; ++round) {
      // values[w][c], outs[w][c]: on GPU c % devices, or host memory.
      std::vector<std::vector<Tensor>> values(workers), outs(workers);
      for (int w = 0; w < workers; ++w) {
        for (int c = 0; c < copies; ++c) {
          Tensor host = Tensor::Zeros(DType::kFloat32, {n});
          float* p = host.data_as<float>();
          Parallel(n, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) p[i] = Value(seed, w, c, key, round, i);
          });
          const Tensor poison = Tensor::Full(DType::kFloat32, {n}, -77);
          values[w].push_back(cuda ? OnGpu(host, c % devices) : host);
          outs[w].push_back(cuda ? OnGpu(poison, c % devices) : poison);
        }
      }
      Parallel(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          double s = 0;
          for (int w = 0; w < workers; ++w) {
            for (int c = 0; c < copies; ++c) s += Value(seed, w, c, key, round, i);
          }
          round_sum[i] = s;
          stored[i] += s;
        }
      });
      auto push = [&] {
        result.push.seconds.push_back(crew.Run([&](int w) {
          Check(job->workers[w]->Push(key, values[w]), absl::StrCat("push key ", key));
          Check(job->workers[w]->WaitAll(), absl::StrCat("push key ", key));
        }));
      };
      auto push_staged_first = [&] {
        result.push_staged_first.seconds.push_back(crew.Run([&](int w) {
          Check(gpu::SumToHost(key, values[w], &scratch[w], &staged[w]), "sum to host");
          Check(job->workers[w]->Push(key, staged[w]), absl::StrCat("push key ", key));
          Check(job->workers[w]->WaitAll(), absl::StrCat("push key ", key));
        }));
      };
      // With CUDA values both pushes go, in turns first, and the reference counts both.
      if (!cuda) {
        push();
      } else if (round % 2 == 0) {
        push();
        push_staged_first();
      } else {
        push_staged_first();
        push();
      }
      if (cuda) {
        for (int64_t i = 0; i < n; ++i) stored[i] += round_sum[i];
      }
      result.pull.seconds.push_back(crew.Run([&](int w) {
        std::vector<Tensor*> ptrs;
        for (Tensor& t : outs[w]) ptrs.push_back(&t);
        Check(job->workers[w]->Pull(key, ptrs), absl::StrCat("pull key ", key));
        Check(job->workers[w]->WaitAll(), absl::StrCat("pull key ", key));
      }));
      for (int w = 0; w < workers; ++w) {
        for (int c = 0; c < copies; ++c) {
          const Tensor got = ToHost(outs[w][c]);
          const float* g = got.data_as<float>();
          double worst = 0;
          int64_t at = 0;
          for (int64_t i = 0; i < n; ++i) {
            const double d = std::fabs(double(g[i]) - stored[i]);
            if (d > worst || std::isnan(g[i])) {
              worst = std::isnan(g[i]) ? INFINITY : d;
              at = i;
            }
          }
          result.max_error = std::max(result.max_error, worst);
          ++result.outputs_checked;
          if (worst != 0) {
            Die(absl::StrCat("key ", key, " (", sizes[k], " bytes), round ", round, ", worker ", w,
                             ", output ", c, " on ", outs[w][c].device().ToString(), ": element ",
                             at, " is ", g[at], ", the float64 reference ", stored[at], " (seed ",
                             seed, ")"));
          }
        }
      }
    }
    results.push_back(std::move(result));
  }

  const char* where = cuda ? "cuda" : "cpu";
  if (absl::GetFlag(FLAGS_format) == "json") {
    std::printf("{\"values\": \"%s\", \"device\": \"%s\", \"seed\": %llu, \"cases\": [", where,
                device_name.c_str(), static_cast<unsigned long long>(seed));
  }
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    // Bytes every worker together pushes (or pulls) in one round: workers x copies x key.
    const double moved = double(r.bytes) * workers * copies;
    if (absl::GetFlag(FLAGS_format) == "json") {
      std::printf(
          "%s{\"key_bytes\": %lld, \"push_s\": %.6g, \"push_staged_first_s\": %.6g, "
          "\"pull_s\": %.6g, \"push_gbps\": %.4f, "
          "\"pull_gbps\": %.4f, \"outputs_checked\": %d, \"max_error\": %g}",
          i ? ", " : "", static_cast<long long>(r.bytes), r.push.median(),
          r.push_staged_first.seconds.empty() ? 0.0 : r.push_staged_first.median(), r.pull.median(),
          moved / r.push.median() / 1e9, moved / r.pull.median() / 1e9, r.outputs_checked,
          r.max_error);
    } else {
      std::printf(
          "values=%s key_bytes=%lld %dw%ds copies=%d push_s=%.6f push_staged_first_s=%.6f "
          "pull_s=%.6f push_GBps=%.3f pull_GBps=%.3f outputs_checked=%d max_error=%g\n",
          where, static_cast<long long>(r.bytes), workers, servers, copies, r.push.median(),
          r.push_staged_first.seconds.empty() ? 0.0 : r.push_staged_first.median(), r.pull.median(),
          moved / r.push.median() / 1e9, moved / r.pull.median() / 1e9, r.outputs_checked,
          r.max_error);
    }
  }
  if (absl::GetFlag(FLAGS_format) == "json") std::printf("]}\n");
  return 0;
}

}  // namespace
}  // namespace kvstore::bench

int main(int argc, char** argv) {
  kvstore::InitFlags(argc, argv,
                     "a dist_sync_device job (scheduler, kvservers, workers) on this machine with "
                     "every pull checked\nagainst a float64 reference.\n\n"
                     "  gpu_job --values=cuda|cpu [--servers=2] [--workers=2] [--copies=4] "
                     "[--rounds=3] [--key_bytes=...]",
                     __FILE__);
  return kvstore::bench::Main(argv[0]);
}
