// Many workers as threads: sixteen DistStores in one in-process job, over the in-process
// transport, in dist_sync and dist_async, every pulled value checked against a float64
// reference computed from all workers' pushes.
#include "tests/in_process/in_process_job.h"

#include <catch2/catch.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

constexpr int kWorkers = 16;
constexpr int kServers = 2;
constexpr int kRounds = 5;
// A big value (split over both servers and cut in chunks), a few small ones, and a list long
// enough to travel as a key group.
constexpr int kGroupKeys = 80;

struct Key_ {
  int64_t key;
  Shape shape;
};

std::vector<Key_> JobKeys() {
  std::vector<Key_> keys = {{0, {40, 30}}, {1, {3}}, {2, {2, 5}}};
  for (int i = 0; i < kGroupKeys; ++i) keys.push_back({100 + i, {4}});
  return keys;
}

// Values[w][r][k]: what worker w pushes to key k in round r (random, exactly representable).
using Values = std::vector<std::vector<std::vector<Tensor>>>;

Values RandomValues(TestRng& rng, const std::vector<Key_>& keys) {
  Values values(kWorkers, std::vector<std::vector<Tensor>>(kRounds));
  for (auto& worker : values) {
    for (auto& round : worker) {
      for (const Key_& k : keys) round.push_back(rng.RandomTensor(DType::kFloat32, k.shape));
    }
  }
  return values;
}

std::unique_ptr<InProcessJob> StartJob(const std::string& updater) {
  InProcessJobOptions options;
  options.num_servers = kServers;
  options.num_workers = kWorkers;
  options.big_value_bound = 100;
  options.chunk_bytes = 1024;
  options.updater = updater;
  options.register_timeout = absl::Seconds(30);
  auto job = InProcessJob::Start(options);
  REQUIRE(job.ok());
  return *std::move(job);
}

// RunWorkers runs `body(rank, store)` on kWorkers threads, each a worker of `job`, and returns
// the first failure any of them recorded (empty when none did).
std::string RunWorkers(InProcessJob* job, const std::string& type,
                       const std::function<std::string(KVStore*)>& body) {
  absl::Mutex mu;
  std::string failure;
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&] {
      DistOptions options;
      options.register_timeout = absl::Seconds(30);
      options.rpc_timeout = absl::Seconds(30);
      options.barrier_timeout = absl::Seconds(30);
      auto store = job->NewWorker(type, options);
      std::string error = store.ok() ? body(store->get()) : store.status().ToString();
      absl::MutexLock lock(&mu);
      if (failure.empty()) failure = error;
    });
  }
  for (std::thread& t : threads) t.join();
  return failure;
}

std::vector<Key> KeysOf(const std::vector<Key_>& keys, size_t first, size_t end) {
  std::vector<Key> out;
  for (size_t k = first; k < end; ++k) out.push_back(keys[k].key);
  return out;
}

TEST_CASE("InProcessJob: 16 workers in dist_sync pull the sum of every worker's push",
          "[in_process][sync]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::vector<Key_> keys = JobKeys();
  const Values values = RandomValues(rng, keys);
  // The float64 reference: each round's stored value is the sum of the round's pushes (assign).
  std::vector<std::vector<std::vector<double>>> expected(kRounds);
  for (int r = 0; r < kRounds; ++r) {
    for (size_t k = 0; k < keys.size(); ++k) {
      std::vector<double> sum(values[0][r][k].num_elements(), 0.0);
      for (int w = 0; w < kWorkers; ++w) {
        const std::vector<double> v = testing::ToDoubles(values[w][r][k]);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += v[i];
      }
      expected[r].push_back(std::move(sum));
    }
  }
  const double tolerance = testing::Tolerance(DType::kFloat32, kWorkers, 4.0);
  std::unique_ptr<InProcessJob> job = StartJob("assign");
  const std::string failure = RunWorkers(job.get(), "dist_sync", [&](KVStore* kv) -> std::string {
    const int w = kv->rank();
    std::vector<Key> all = KeysOf(keys, 0, keys.size());
    std::vector<Tensor> zeros;
    for (const Key_& k : keys) zeros.push_back(Tensor::Zeros(DType::kFloat32, k.shape));
    if (absl::Status s = kv->Init(all, zeros); !s.ok()) return s.ToString();
    for (int r = 0; r < kRounds; ++r) {
      // The big and small keys one call each; the long list in one call (a key group).
      std::vector<Tensor> outs;
      for (const Key_& k : keys) outs.push_back(Tensor::Zeros(DType::kFloat32, k.shape));
      for (size_t k = 0; k < 3; ++k) {
        if (absl::Status s = kv->Push(keys[k].key, values[w][r][k]); !s.ok()) return s.ToString();
        if (absl::Status s = kv->Pull(keys[k].key, &outs[k]); !s.ok()) return s.ToString();
      }
      const std::vector<Key> group = KeysOf(keys, 3, keys.size());
      std::vector<Tensor> pushed(values[w][r].begin() + 3, values[w][r].end());
      std::vector<Tensor*> pulled;
      for (size_t k = 3; k < keys.size(); ++k) pulled.push_back(&outs[k]);
      if (absl::Status s = kv->Push(group, pushed); !s.ok()) return s.ToString();
      if (absl::Status s = kv->Pull(group, pulled); !s.ok()) return s.ToString();
      if (absl::Status s = kv->WaitAll(); !s.ok()) return s.ToString();
      for (size_t k = 0; k < keys.size(); ++k) {
        const double diff = testing::MaxAbsDiff(testing::ToDoubles(outs[k]), expected[r][k]);
        if (!(diff <= tolerance)) {
          return absl::StrCat("worker ", w, " round ", r, " key ", keys[k].key, ": off by ", diff);
        }
      }
    }
    return "";
  });
  CHECK(failure == "");
}

TEST_CASE("InProcessJob: 16 workers in dist_async with the sum updater add every push",
          "[in_process][async]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::vector<Key_> keys = JobKeys();
  const Values values = RandomValues(rng, keys);
  std::vector<Tensor> init;
  std::vector<std::vector<double>> expected;
  for (size_t k = 0; k < keys.size(); ++k) {
    init.push_back(rng.RandomTensor(DType::kFloat32, keys[k].shape));
    std::vector<double> sum = testing::ToDoubles(init.back());
    for (int w = 0; w < kWorkers; ++w) {
      for (int r = 0; r < kRounds; ++r) {
        const std::vector<double> v = testing::ToDoubles(values[w][r][k]);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += v[i];
      }
    }
    expected.push_back(std::move(sum));
  }
  const double tolerance = testing::Tolerance(DType::kFloat32, kWorkers * kRounds + 1, 4.0);
  std::unique_ptr<InProcessJob> job = StartJob("sum");
  const std::string failure = RunWorkers(job.get(), "dist_async", [&](KVStore* kv) -> std::string {
    const int w = kv->rank();
    const std::vector<Key> all = KeysOf(keys, 0, keys.size());
    if (absl::Status s = kv->Init(all, init); !s.ok()) return s.ToString();
    for (int r = 0; r < kRounds; ++r) {
      if (absl::Status s = kv->Push(all, values[w][r]); !s.ok()) return s.ToString();
    }
    if (absl::Status s = kv->WaitAll(); !s.ok()) return s.ToString();
    if (absl::Status s = kv->Barrier(); !s.ok()) return s.ToString();
    std::vector<Tensor> outs;
    for (const Key_& k : keys) outs.push_back(Tensor::Zeros(DType::kFloat32, k.shape));
    std::vector<Tensor*> pulled;
    for (Tensor& out : outs) pulled.push_back(&out);
    if (absl::Status s = kv->Pull(all, pulled); !s.ok()) return s.ToString();
    if (absl::Status s = kv->WaitAll(); !s.ok()) return s.ToString();
    for (size_t k = 0; k < keys.size(); ++k) {
      const double diff = testing::MaxAbsDiff(testing::ToDoubles(outs[k]), expected[k]);
      if (!(diff <= tolerance)) {
        return absl::StrCat("worker ", w, " key ", keys[k].key, ": off by ", diff);
      }
    }
    return "";
  });
  CHECK(failure == "");
}

TEST_CASE("InProcessJob: a worker of a store type that is not distributed is refused",
          "[in_process]") {
  std::unique_ptr<InProcessJob> job = StartJob("assign");
  auto store = job->NewWorker("local");
  REQUIRE(absl::IsInvalidArgument(store.status()));
  CHECK(std::string(store.status().message()).find("\"local\"") != std::string::npos);
}

}  // namespace
}  // namespace kvstore
