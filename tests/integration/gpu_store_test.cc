// CUDA tensors through the stores: "device" (in process) and "dist_sync_device" (a scheduler
// and two kvservers in this process, over 127.0.0.1). Values pushed from several GPUs are
// summed on the GPU; pulls land on every output's GPU. Checked against a float64 CPU reference.
// Reported skipped where no GPU (or no CUDA build) exists.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "client/gpu/cuda_reduce.h"
#include "client/gpu/device_info.h"
#include "client/kvstore.h"
#include "server/grpc/kvserver_daemon.h"
#include "server/scheduler/grpc/scheduler_daemon.h"
#include "tests/test_util.h"

namespace kvstore::testing {
namespace {

bool SkipWithoutGpu(int* devices) {
  std::string reason;
  *devices = gpu::CudaDeviceCount(&reason);
  if (*devices > 0) return false;
  std::printf("SKIPPED: CUDA tensors in the stores (%s)\n", reason.c_str());
  return true;
}

// OnDevice copies a CPU tensor to a new buffer on CUDA device `device`.
Tensor OnDevice(const Tensor& host, int device) {
  void* data = nullptr;
  REQUIRE(gpu::cuda::Alloc(device, std::max<size_t>(host.byte_size(), 1), &data).empty());
  REQUIRE(gpu::cuda::CopyToDevice(device, data, host.data(), host.byte_size()).empty());
  return Tensor::Adopt(data, host.dtype(), host.shape(), Device::CUDA(device),
                       [device, data] { gpu::cuda::Free(device, data); });
}

Tensor ToHost(const Tensor& t) {
  Tensor host = Tensor::Zeros(t.dtype(), t.shape());
  REQUIRE(gpu::cuda::CopyToHost(t.device().id, host.data(), t.data(), t.byte_size()).empty());
  return host;
}

// Pushes values from `copies` GPUs (spread over the devices) and pulls into an output on each,
// several rounds, checking every output against the float64 sum.
void CheckStore(KVStore& kv, int devices, TestRng& rng) {
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kFloat64, DType::kInt64}) {
    const Key key = static_cast<int>(dtype) + 100;
    const Shape shape = {rng.Int(1, 40), rng.Int(1, 300)};
    INFO(DTypeName(dtype) << ShapeToString(shape));
    REQUIRE(kv.Init(key, OnDevice(rng.RandomTensor(dtype, shape), 0)).ok());
    const int copies = static_cast<int>(rng.Int(1, 8));
    for (int round = 0; round < 3; ++round) {
      std::vector<Tensor> values;
      std::vector<double> reference(NumElements(shape), 0.0);
      for (int c = 0; c < copies; ++c) {
        const Tensor host = rng.RandomTensor(dtype, shape);
        const auto v = ToDoubles(host);
        for (size_t i = 0; i < v.size(); ++i) reference[i] += v[i];
        values.push_back(OnDevice(host, c % devices));
      }
      REQUIRE(kv.Push(key, values).ok());
      std::vector<Tensor> outs;
      std::vector<Tensor*> out_ptrs;
      for (int d = 0; d < devices; ++d)
        outs.push_back(OnDevice(Tensor::Full(dtype, shape, -77), d));
      for (Tensor& t : outs) out_ptrs.push_back(&t);
      REQUIRE(kv.Pull(key, out_ptrs).ok());
      REQUIRE(kv.WaitAll().ok());
      for (const Tensor& out : outs) {
        REQUIRE(MaxAbsDiff(ToDoubles(ToHost(out)), reference) <=
                Tolerance(dtype, copies, 4.0 * copies));
      }
    }
  }
}

TEST_CASE("GPU: the device store sums CUDA values on the GPU", "[gpu]") {
  int devices = 0;
  if (SkipWithoutGpu(&devices)) return;
  TestRng rng;
  INFO(rng.Describe());
  auto kv = KVStore::Create("device");
  REQUIRE(kv.ok());
  CheckStore(**kv, devices, rng);
}

TEST_CASE("GPU: dist_sync_device sums on the GPU, then pushes", "[gpu]") {
  int devices = 0;
  if (SkipWithoutGpu(&devices)) return;
  TestRng rng;
  INFO(rng.Describe());
  SchedulerDaemonOptions scheduler;
  scheduler.job.num_servers = 2;
  scheduler.job.num_workers = 1;
  scheduler.job.big_value_bound = 1000;
  scheduler.job.register_timeout = absl::Seconds(30);
  auto started = SchedulerDaemon::Start(scheduler);
  REQUIRE(started.ok());
  std::vector<std::unique_ptr<KVServerDaemon>> servers;
  for (int i = 0; i < 2; ++i) {
    KVServerOptions server;
    server.scheduler_address = (*started)->address();
    server.requested_rank = i;
    auto daemon = KVServerDaemon::Start(std::move(server));
    REQUIRE(daemon.ok());
    servers.push_back(*std::move(daemon));
  }
  DistOptions options;
  options.scheduler_port = (*started)->port();
  options.register_timeout = absl::Seconds(30);
  auto kv = KVStore::Create("dist_sync_device", options);
  REQUIRE(kv.ok());
  CheckStore(**kv, devices, rng);
}

}  // namespace
}  // namespace kvstore::testing
