// Tests of the kvserver's engine: dist_sync rounds, dist_async, slices, request ids, errors and
// updater changes between rounds.
#include "server/core/server_engine.h"

#include <catch2/catch.hpp>
#include <vector>

#include "common/store/optimizer.h"
#include "server/core/engine_state.h"
#include "server/core/server_engine_test_util.h"
#include "tests/test_util.h"
namespace kvstore {
namespace {

using testing::Incoming;
using testing::MaxAbsDiff;
using testing::NewEngine;
using testing::PullAll;
using testing::TestRng;
using testing::ToDoubles;

TEST_CASE("ServerEngine: a dist_sync round applies the sum once and then acknowledges",
          "[server][sync]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::vector<uint64_t> workers = {2, 3, 4};
  auto engine = NewEngine(true, workers);
  const DType dtype = rng.AnyDType();
  const Shape shape = rng.AnyShape();
  INFO(DTypeName(dtype) << ShapeToString(shape));
  const Tensor init = rng.RandomTensor(dtype, shape);
  REQUIRE(engine->Init(2, {Incoming(5, init)}).ok());
  for (int round = 0; round < 3; ++round) {
    std::vector<double> expected(init.num_elements(), 0.0);
    int acknowledged = 0;
    for (size_t w = 0; w < workers.size(); ++w) {
      const Tensor pushed = rng.RandomTensor(dtype, shape);
      const auto values = ToDoubles(pushed);
      for (size_t i = 0; i < values.size(); ++i) expected[i] += values[i];
      engine->Push(workers[w], 100 + round, {Incoming(5, pushed)}, [&](absl::Status s) {
        REQUIRE(s.ok());
        ++acknowledged;
      });
      // Nobody is acknowledged before the last worker's push completes the round.
      REQUIRE(acknowledged == (w + 1 == workers.size() ? 3 : 0));
    }
    REQUIRE(MaxAbsDiff(PullAll(*engine, 5, init), expected) <= testing::Tolerance(dtype, 3, 4));
  }
}

TEST_CASE("ServerEngine: a retried push is applied once", "[server][dedup]") {
  TestRng rng;
  INFO(rng.Describe());
  SECTION("dist_async") {
    auto engine = NewEngine(false, {2});
    engine->SetUpdater(MakeSumUpdater());
    const Tensor init = rng.RandomTensor(DType::kFloat64, {4});
    const Tensor pushed = rng.RandomTensor(DType::kFloat64, {4});
    REQUIRE(engine->Init(2, {Incoming(1, init)}).ok());
    int acks = 0;
    for (int attempt = 0; attempt < 3; ++attempt) {
      engine->Push(2, 77, {Incoming(1, pushed)}, [&](absl::Status s) { acks += s.ok(); });
    }
    REQUIRE(acks == 3);
    auto expected = ToDoubles(init);
    const auto p = ToDoubles(pushed);
    for (size_t i = 0; i < p.size(); ++i) expected[i] += p[i];
    REQUIRE(PullAll(*engine, 1, init) == expected);
  }
  SECTION("dist_sync: a retry waits for the round") {
    auto engine = NewEngine(true, {2, 3});
    const Tensor init = rng.RandomTensor(DType::kInt32, {3});
    const Tensor a = rng.RandomTensor(DType::kInt32, {3});
    const Tensor b = rng.RandomTensor(DType::kInt32, {3});
    REQUIRE(engine->Init(2, {Incoming("w", init)}).ok());
    int acks = 0;
    engine->Push(2, 9, {Incoming("w", a)}, [&](absl::Status s) { acks += s.ok(); });
    engine->Push(2, 9, {Incoming("w", a)}, [&](absl::Status s) { acks += s.ok(); });
    REQUIRE(acks == 0);
    engine->Push(3, 9, {Incoming("w", b)}, [&](absl::Status s) { acks += s.ok(); });
    REQUIRE(acks == 3);
    auto expected = ToDoubles(a);
    const auto bv = ToDoubles(b);
    for (size_t i = 0; i < bv.size(); ++i) expected[i] += bv[i];
    REQUIRE(PullAll(*engine, "w", init) == expected);
    // A different request id in the same round is a second push: refused.
    engine->Push(2, 10, {Incoming("w", a)}, [](absl::Status s) { REQUIRE(s.ok()); });
    engine->Push(2, 11, {Incoming("w", a)},
                 [](absl::Status s) { REQUIRE(absl::IsFailedPrecondition(s)); });
  }
}

TEST_CASE("ServerEngine: slices of a split value are checked and stored flat", "[server]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = NewEngine(false, {2});
  const Tensor part = rng.RandomTensor(DType::kFloat32, {5});
  const ValueSlice slice{7, DType::kFloat32, {4, 3}, 4, 5};
  REQUIRE(engine->Init(2, {Incoming(7, part, 3, slice)}).ok());
  auto pulled = engine->Pull(2, {slice});
  REQUIRE(pulled.ok());
  REQUIRE((*pulled)[0].shape() == Shape{5});
  REQUIRE(ToDoubles((*pulled)[0]) == ToDoubles(part));
  ValueSlice other = slice;
  other.offset = 3;
  const auto status = engine->Pull(2, {other}).status();
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE(status.message().find("[4, 9)") != absl::string_view::npos);
}

TEST_CASE("ServerEngine: bad requests are refused whole and change nothing", "[server][errors]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = NewEngine(false, {2});
  const Tensor init = rng.RandomTensor(DType::kFloat32, {2, 3});
  REQUIRE(engine->Init(2, {Incoming(1, init)}).ok());
  auto push_status = [&](uint64_t node, std::vector<IncomingValue> values) {
    absl::Status result = absl::UnknownError("not called");
    engine->Push(node, rng.Int(1, 1 << 30), values, [&](absl::Status s) { result = s; });
    return result;
  };
  const Tensor good = rng.RandomTensor(DType::kFloat32, {2, 3});
  REQUIRE(absl::IsNotFound(push_status(2, {Incoming(1, good), Incoming(9, good)})));
  REQUIRE(absl::IsInvalidArgument(
      push_status(2, {Incoming(1, good), Incoming(1, rng.RandomTensor(DType::kFloat32, {3, 2}))})));
  REQUIRE(absl::IsInvalidArgument(
      push_status(2, {Incoming(1, rng.RandomTensor(DType::kFloat64, {2, 3}))})));
  IncomingValue short_bytes = Incoming(1, good);
  short_bytes.bytes.pop_back();
  REQUIRE(absl::IsInvalidArgument(push_status(2, {short_bytes})));
  const absl::Status stranger = push_status(99, {Incoming(1, good)});
  REQUIRE(absl::IsPermissionDenied(stranger));
  REQUIRE(stranger.message().find("99") != absl::string_view::npos);
  REQUIRE(absl::IsAlreadyExists(engine->Init(2, {Incoming(1, good)})));
  REQUIRE(PullAll(*engine, 1, init) == ToDoubles(init));
}

TEST_CASE("ServerEngine: a new updater takes effect between dist_sync rounds",
          "[server][sync][updater]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::vector<uint64_t> workers = {2, 3};
  auto engine = NewEngine(true, workers);
  const Tensor init = rng.RandomTensor(DType::kFloat64, {5});
  REQUIRE(engine->Init(2, {Incoming(1, init)}).ok());
  const Tensor a = rng.RandomTensor(DType::kFloat64, {5});
  const Tensor b = rng.RandomTensor(DType::kFloat64, {5});
  int acknowledged = 0;
  auto ack = [&](absl::Status s) {
    REQUIRE(s.ok());
    ++acknowledged;
  };
  // Round 1 is open (worker 2 pushed) when the updater changes to "sum": the round still
  // completes with ASSIGN.
  engine->Push(2, 1, {Incoming(1, a)}, ack);
  engine->SetUpdater(MakeSumUpdater());
  CHECK(engine->updater_name() == "assign");
  engine->Push(3, 1, {Incoming(1, b)}, ack);
  REQUIRE(acknowledged == 2);
  CHECK(engine->updater_name() == "sum");
  std::vector<double> expected(5);
  const auto va = ToDoubles(a), vb = ToDoubles(b);
  for (int i = 0; i < 5; ++i) expected[i] = va[i] + vb[i];
  REQUIRE(PullAll(*engine, 1, init) == expected);
  // Round 2 uses "sum": stored += a + b.
  engine->Push(2, 2, {Incoming(1, a)}, ack);
  engine->Push(3, 2, {Incoming(1, b)}, ack);
  for (int i = 0; i < 5; ++i) expected[i] += va[i] + vb[i];
  REQUIRE(MaxAbsDiff(PullAll(*engine, 1, init), expected) <= 1e-12);
  // With no round open, the change is immediate.
  engine->SetUpdater(MakeAssignUpdater());
  CHECK(engine->updater_name() == "assign");
}

TEST_CASE(
    "ServerEngine: an optimizer set with keep_state takes the running one's state "
    "between rounds",
    "[server][sync][updater]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = NewEngine(true, {2, 3});
  const Tensor init = rng.RandomTensor(DType::kFloat64, {6});
  REQUIRE(engine->Init(2, {Incoming("torch/w", init)}).ok());
  OptimizerConfig config;
  config.name = "torch_sgd";
  config.momentum = rng.Uniform(0.5, 0.95);
  config.learning_rate = rng.Uniform(0.05, 0.2);
  engine->SetUpdater(*MakeOptimizer(config));
  // The reference: torch's SGD with momentum over the summed pushes, in float64.
  std::vector<double> w = ToDoubles(init), buf(6, 0.0);
  double lr = *config.learning_rate;
  auto round = [&](int request, bool change_midway) {
    const Tensor a = rng.RandomTensor(DType::kFloat64, {6});
    const Tensor b = rng.RandomTensor(DType::kFloat64, {6});
    int acknowledged = 0;
    auto ack = [&](absl::Status s) {
      REQUIRE(s.ok());
      ++acknowledged;
    };
    engine->Push(2, request, {Incoming("torch/w", a)}, ack);
    if (change_midway) {  // The round is open: the change waits for it.
      config.learning_rate = *config.learning_rate * rng.Uniform(0.2, 0.8);
      config.keep_state = true;
      engine->SetUpdater(*MakeOptimizer(config), /*keep_state=*/true);
    }
    engine->Push(3, request, {Incoming("torch/w", b)}, ack);
    REQUIRE(acknowledged == 2);
    const auto va = ToDoubles(a), vb = ToDoubles(b);
    for (int i = 0; i < 6; ++i) {
      buf[i] = *config.momentum * buf[i] + (va[i] + vb[i]);
      w[i] -= lr * buf[i];
    }
    lr = *config.learning_rate;
  };
  round(1, false);
  round(2, true);  // Still at the old rate; the new one, with the momentum, from round 3.
  round(3, false);
  round(4, false);
  CHECK(MaxAbsDiff(PullAll(*engine, "torch/w", init), w) <= 1e-12);
  const absl::StatusOr<UpdaterStateData> state = engine->state().SaveUpdaterState();
  REQUIRE(state.ok());
  REQUIRE(state->parts.size() == 1);
  CHECK(state->parts[0].updates == 4);
}

}  // namespace
}  // namespace kvstore
