// Tests of UpdaterSlot: when a queued updater is installed, and what it keeps.
#include "server/core/updater_slot.h"

#include <catch2/catch.hpp>
#include <vector>

#include "common/store/optimizer.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;
using testing::ToDoubles;

std::unique_ptr<Updater> Sgd(double lr, double momentum) {
  OptimizerConfig c;
  c.name = "torch_sgd";
  c.learning_rate = lr;
  c.momentum = momentum;
  auto made = MakeOptimizer(c);
  REQUIRE(made.ok());
  return *std::move(made);
}

TEST_CASE("UpdaterSlot: a queued updater waits for idle rounds; keep_state for pushes too",
          "[server][updater]") {
  UpdaterSlot slot(MakeAssignUpdater(), /*chosen=*/true);
  slot.Queue(MakeSumUpdater(), /*keep_state=*/false);
  CHECK(slot.name() == "assign");
  CHECK_FALSE(slot.InstallIfIdle(/*rounds_open=*/true, /*pushes_applying=*/false));
  CHECK(slot.name() == "assign");
  CHECK(slot.InstallIfIdle(false, /*pushes_applying=*/true));  // Fresh state: no need to wait.
  CHECK(slot.name() == "sum");
  CHECK_FALSE(slot.InstallIfIdle(false, false));  // Nothing queued.
  slot.Queue(Sgd(0.1, 0.9), false);
  REQUIRE(slot.InstallIfIdle(false, false));
  slot.Queue(Sgd(0.05, 0.9), /*keep_state=*/true);
  CHECK_FALSE(slot.InstallIfIdle(false, /*pushes_applying=*/true));
  CHECK(slot.InstallIfIdle(false, false));
  // A second queue without keep_state before the first was installed starts afresh.
  slot.Queue(Sgd(0.05, 0.9), true);
  slot.Queue(Sgd(0.01, 0.9), false);
  CHECK(slot.InstallIfIdle(false, true));
}

TEST_CASE("UpdaterSlot: keep_state carries the momentum to the new rate", "[server][updater]") {
  TestRng rng;
  INFO(rng.Describe());
  const double m = rng.Uniform(0.5, 0.9), lr1 = rng.Uniform(0.1, 0.5), lr2 = lr1 / 4;
  UpdaterSlot slot(Sgd(lr1, m), true);
  Tensor w = rng.RandomTensor(DType::kFloat64, {8});
  std::vector<double> ref = ToDoubles(w), buf(8, 0.0);
  for (int step = 0; step < 4; ++step) {
    if (step == 2) {
      slot.Queue(Sgd(lr2, m), /*keep_state=*/true);
      REQUIRE(slot.InstallIfIdle(false, false));
    }
    const double lr = step < 2 ? lr1 : lr2;
    const Tensor g = rng.RandomTensor(DType::kFloat64, {8});
    REQUIRE(slot.current()->Update(Key("w"), g, &w).ok());
    const std::vector<double> gv = ToDoubles(g);
    for (int i = 0; i < 8; ++i) {
      buf[i] = m * buf[i] + gv[i];
      ref[i] -= lr * buf[i];
    }
  }
  CHECK(testing::MaxAbsDiff(ToDoubles(w), ref) <= 1e-12);
}

TEST_CASE("UpdaterSlot: no chosen updater refuses, naming the key, until one is queued",
          "[server][updater]") {
  UpdaterSlot slot(MakeAssignUpdater(), /*chosen=*/false);
  const absl::Status refused = slot.CheckChosen(Key("w"));
  CHECK(absl::IsFailedPrecondition(refused));
  CHECK(refused.message().find("\"w\"") != absl::string_view::npos);
  slot.Queue(MakeSumUpdater(), false);
  CHECK(slot.CheckChosen(Key("w")).ok());
}

}  // namespace
}  // namespace kvstore
