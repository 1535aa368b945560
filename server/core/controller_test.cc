// Tests of the server's controller: its built-in commands with the sgd updater, and
// checkpoints restored into the same job only.
#include "server/core/controller.h"

#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/core/server_engine.h"
#include "server/core/server_engine_test_util.h"
#include "server/core/sgd_updater.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::Incoming;
using testing::MaxAbsDiff;
using testing::NewEngine;
using testing::PullAll;
using testing::TestRng;
using testing::ToDoubles;

TEST_CASE("Controller: built-in heads and the sgd updater with momentum", "[server][controller]") {
  TestRng rng;
  INFO(rng.Describe());
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  REQUIRE(RegisterSgdUpdater(&registry).ok());
  auto engine = NewEngine(false, {2});
  Controller controller(engine.get(), &registry,
                        [](int head, absl::string_view body) -> absl::StatusOr<std::string> {
                          return absl::StrCat("custom ", head, " ", body);
                        },
                        /*rank=*/1);
  REQUIRE(controller.Run(kCommandPing, "hi").value() == "server 1: hi");
  REQUIRE(controller.Run(40, "x").value() == "custom 40 x");
  REQUIRE(absl::IsInvalidArgument(controller.Run(7, "").status()));
  REQUIRE(absl::IsNotFound(controller.Run(kCommandSetUpdater, "adamw").status()));
  REQUIRE(absl::IsInvalidArgument(controller.Run(kCommandSetUpdater, "sgd lr=x").status()));
  const double lr = rng.Uniform(0.01, 0.5), momentum = rng.Uniform(0.1, 0.95);
  const double wd = rng.Uniform(0, 0.1), rescale = rng.Uniform(0.1, 2);
  REQUIRE(controller
              .Run(kCommandSetUpdater,
                   absl::StrFormat("sgd lr=%.17g momentum=%.17g,wd=%.17g rescale_grad=%.17g", lr,
                                   momentum, wd, rescale))
              .value() == "sgd");
  const Tensor init = rng.RandomTensor(DType::kFloat64, {6});
  REQUIRE(engine->Init(2, {Incoming(3, init)}).ok());
  std::vector<double> weight = ToDoubles(init), mom(6, 0.0);
  for (int step = 0; step < 4; ++step) {
    const Tensor grad = rng.RandomTensor(DType::kFloat64, {6});
    const auto g = ToDoubles(grad);
    for (size_t i = 0; i < 6; ++i) {
      mom[i] = momentum * mom[i] - lr * (rescale * g[i] + wd * weight[i]);
      weight[i] += mom[i];
    }
    engine->Push(2, step + 1, {Incoming(3, grad)}, [](absl::Status s) { REQUIRE(s.ok()); });
  }
  REQUIRE(MaxAbsDiff(PullAll(*engine, 3, init), weight) <= 1e-12);
  REQUIRE(controller.Run(kCommandStats, "").value() == "keys=1 bytes=48 updater=sgd");
}

TEST_CASE("Controller: a checkpoint restores into the same job only", "[server][checkpoint]") {
  TestRng rng;
  INFO(rng.Describe());
  const char* tmp = std::getenv("TEST_TMPDIR");
  auto root = CheckpointRoot::Open(tmp != nullptr ? tmp : "/tmp");
  REQUIRE(root.ok());
  const std::string dir = "engine-ckpt/nested";
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  auto engine = NewEngine(true, {2});
  Controller controller(engine.get(), &registry, nullptr, /*rank=*/0);
  controller.SetJob(JobShape{2, "dist_sync", 1 << 20});
  const Tensor init = rng.RandomTensor(DType::kFloat32, {2, 3});
  REQUIRE(engine->Init(2, {Incoming("w", init)}).ok());
  // Without a root a server neither writes nor restores checkpoints.
  CHECK(absl::IsFailedPrecondition(controller.Run(kCommandCheckpoint, dir).status()));
  CHECK(absl::IsFailedPrecondition(controller.Restore(dir)));
  controller.SetCheckpointRoot(*root);
  CHECK(absl::IsInvalidArgument(controller.Run(kCommandCheckpoint, "../up").status()));
  CHECK(absl::IsInvalidArgument(controller.Run(kCommandCheckpoint, " ").status()));
  auto path = controller.Run(kCommandCheckpoint, dir);
  INFO(path.status().ToString());
  REQUIRE(path.ok());
  REQUIRE(*path == (*root)->path() + "/" + dir + "/server-0.ckpt");

  // The same job: the value comes back, and a matching Init keeps it.
  auto restored = NewEngine(true, {2});
  Controller same(restored.get(), &registry, nullptr, 0);
  same.SetJob(JobShape{2, "dist_sync", 1 << 20});
  same.SetCheckpointRoot(*root);
  const absl::Status restore = same.Restore(dir);
  INFO(restore.ToString());
  REQUIRE(restore.ok());
  REQUIRE(restored->Init(2, {Incoming("w", Tensor::Zeros(DType::kFloat32, {2, 3}))}).ok());
  REQUIRE(PullAll(*restored, "w", init) == ToDoubles(init));
  REQUIRE(absl::IsInvalidArgument(
      restored->Init(2, {Incoming("w", Tensor::Zeros(DType::kFloat32, {3, 2}))})));

  // Another number of servers, another rank, or no file: refused, naming the file.
  auto other = NewEngine(true, {2});
  Controller three(other.get(), &registry, nullptr, 0);
  three.SetJob(JobShape{3, "dist_sync", 1 << 20});
  three.SetCheckpointRoot(*root);
  absl::Status s = three.Restore(dir);
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(s.message().find(*path) != absl::string_view::npos);
  Controller rank1(other.get(), &registry, nullptr, 1);
  rank1.SetJob(JobShape{2, "dist_sync", 1 << 20});
  rank1.SetCheckpointRoot(*root);
  CHECK(absl::IsNotFound(rank1.Restore(dir)));
  CHECK(other->stats().num_keys == 0);
}

}  // namespace
}  // namespace kvstore
