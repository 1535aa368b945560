// dist_async without an updater on the servers: MXNet refuses ("Updater needs to be set for
// async mode"); so does this store, with FailedPrecondition naming the key and saying how to
// set one - and changes nothing. Once a worker sets an updater, pushes apply. Real DistStores
// in an in-process job, values checked against a float64 reference.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/in_process/in_process_job.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

std::unique_ptr<InProcessJob> StartJob(int workers, const std::string& updater) {
  InProcessJobOptions options;
  options.num_servers = 2;
  options.num_workers = workers;
  options.big_value_bound = 10;  // The 4x6 key is split over both servers.
  options.updater = updater;
  options.register_timeout = absl::Seconds(30);
  auto job = InProcessJob::Start(options);
  REQUIRE(job.ok());
  return *std::move(job);
}

DistOptions Timeouts() {
  DistOptions options;
  options.register_timeout = absl::Seconds(30);
  options.rpc_timeout = absl::Seconds(30);
  options.barrier_timeout = absl::Seconds(30);
  return options;
}

TEST_CASE(
    "dist_async: a push with no updater on the servers is FAILED_PRECONDITION naming "
    "the key; after SendCommandToServers(0, \"sum\") pushes apply",
    "[async][updater]") {
  TestRng rng;
  INFO(rng.Describe());
  std::unique_ptr<InProcessJob> job = StartJob(1, "");
  auto store = job->NewWorker("dist_async", Timeouts());
  REQUIRE(store.ok());
  KVStore* kv = store->get();
  const Tensor init = rng.RandomTensor(DType::kFloat32, {4, 6});
  REQUIRE(kv->Init(Key("weight"), init).ok());
  const Tensor pushed = rng.RandomTensor(DType::kFloat32, {4, 6});
  REQUIRE(kv->Push(Key("weight"), pushed).ok());
  const absl::Status refused = kv->WaitAll();
  INFO(refused.ToString());
  REQUIRE(absl::IsFailedPrecondition(refused));
  const std::string message(refused.message());
  CHECK(message.find("\"weight\"") != std::string::npos);
  CHECK(message.find("no updater") != std::string::npos);
  CHECK(message.find("SetOptimizer") != std::string::npos);
  CHECK(message.find("--updater") != std::string::npos);

  // Nothing was applied: the stored value is still the initial one.
  Tensor out = Tensor::Zeros(DType::kFloat32, {4, 6});
  REQUIRE(kv->Pull(Key("weight"), &out).ok());
  REQUIRE(kv->WaitAll().ok());
  CHECK(testing::MaxAbsDiff(testing::ToDoubles(out), testing::ToDoubles(init)) == 0.0);

  // With an updater set by a worker, the same push applies: init + pushed.
  REQUIRE(kv->SendCommandToServers(0, "sum").ok());
  REQUIRE(kv->Push(Key("weight"), pushed).ok());
  REQUIRE(kv->Pull(Key("weight"), &out).ok());
  REQUIRE(kv->WaitAll().ok());
  std::vector<double> expected = testing::ToDoubles(init);
  const std::vector<double> p = testing::ToDoubles(pushed);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] += p[i];
  CHECK(testing::MaxAbsDiff(testing::ToDoubles(out), expected) <=
        testing::Tolerance(DType::kFloat32, 2, 4.0));
}

TEST_CASE("dist_async: SetOptimizer sets the servers' updater; dist_sync without one assigns",
          "[async][updater]") {
  TestRng rng;
  INFO(rng.Describe());
  SECTION("dist_async with sgd: w - lr * g") {
    std::unique_ptr<InProcessJob> job = StartJob(1, "");
    auto store = job->NewWorker("dist_async", Timeouts());
    REQUIRE(store.ok());
    KVStore* kv = store->get();
    OptimizerConfig sgd;
    sgd.name = "sgd";
    sgd.learning_rate = 0.25;
    REQUIRE(kv->SetOptimizer(sgd).ok());
    const Tensor init = rng.RandomTensor(DType::kFloat32, {4, 6});
    const Tensor grad = rng.RandomTensor(DType::kFloat32, {4, 6});
    REQUIRE(kv->Init(Key("weight"), init).ok());
    REQUIRE(kv->Push(Key("weight"), grad).ok());
    Tensor out = Tensor::Zeros(DType::kFloat32, {4, 6});
    REQUIRE(kv->Pull(Key("weight"), &out).ok());
    REQUIRE(kv->WaitAll().ok());
    std::vector<double> expected = testing::ToDoubles(init);
    const std::vector<double> g = testing::ToDoubles(grad);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] -= 0.25 * g[i];
    CHECK(testing::MaxAbsDiff(testing::ToDoubles(out), expected) <=
          testing::Tolerance(DType::kFloat32, 2, 8.0));
  }
  SECTION("dist_sync without an updater assigns the round's sum (MXNet's default)") {
    std::unique_ptr<InProcessJob> job = StartJob(2, "");
    const Tensor init = rng.RandomTensor(DType::kFloat32, {4, 6});
    const std::vector<Tensor> pushes = {rng.RandomTensor(DType::kFloat32, {4, 6}),
                                        rng.RandomTensor(DType::kFloat32, {4, 6})};
    std::vector<double> expected = testing::ToDoubles(pushes[0]);
    const std::vector<double> second = testing::ToDoubles(pushes[1]);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] += second[i];
    std::vector<std::string> failures(2);
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        auto store = job->NewWorker("dist_sync", Timeouts());
        if (!store.ok()) {
          failures[t] = store.status().ToString();
          return;
        }
        KVStore* kv = store->get();
        absl::Status s = kv->Init(Key("weight"), init);
        if (s.ok()) s = kv->Push(Key("weight"), pushes[kv->rank()]);
        Tensor out = Tensor::Zeros(DType::kFloat32, {4, 6});
        if (s.ok()) s = kv->Pull(Key("weight"), &out);
        if (s.ok()) s = kv->WaitAll();
        if (!s.ok()) {
          failures[t] = s.ToString();
          return;
        }
        const double diff = testing::MaxAbsDiff(testing::ToDoubles(out), expected);
        if (!(diff <= testing::Tolerance(DType::kFloat32, 2, 4.0))) {
          failures[t] = absl::StrCat("off by ", diff);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    CHECK(failures[0] == "");
    CHECK(failures[1] == "");
  }
}

}  // namespace
}  // namespace kvstore
