// SetOptimizer through the SDK: every optimizer runs where the store keeps its values (in
// process, or on the servers) and gives the same bits as the optimizer library applied to the
// same gradients here; the library itself is checked against float64 references in
// common/store/optimizer_test.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/store/optimizer.h"
#include "tests/conformance/store_under_test.h"
#include "tests/test_util.h"

namespace kvstore::testing {
namespace {

TEST_CASE("Optimizers: SetOptimizer runs each optimizer in the store", "[optimizer]") {
  TestRng rng;
  INFO(rng.Describe());
  for (const std::string& name : OptimizerNames()) {
    auto kv = NewStore();
    OptimizerConfig config;
    config.name = name;
    config.learning_rate = rng.Uniform(0.01, 0.1);
    config.wd = 0.001;
    config.rescale_grad = 0.5;
    if (name == "sgd" || name == "lars") config.momentum = 0.9;
    config.lr_scheduler.type = "factor";
    config.lr_scheduler.step = 2;
    config.lr_scheduler.factor = 0.5;
    INFO(name);
    // LAMB and LARS use norms over what one update call sees: keep their value to one chunk
    // of the dist test job (3 float32) so that the comparison is with the whole value.
    const Shape shape = name == "lamb" || name == "lars" ? Shape{3} : rng.AnyShape(2, 12);
    // Half types go through the servers' float32 master copies (multi-precision); pulls
    // return the stored dtype.
    const DType dtype = name == "lamb" || name == "lars" ? DType::kFloat32 : rng.AnyFloatDType();
    INFO(DTypeName(dtype) << ShapeToString(shape));
    const Tensor init = rng.RandomTensor(dtype, shape);
    REQUIRE(kv->Init("w", init).ok());
    const absl::Status set = kv->SetOptimizer(config);
    INFO(set.ToString());
    REQUIRE(set.ok());
    auto local = MakeOptimizer(config);
    REQUIRE(local.ok());
    Tensor expected = init.Clone();
    for (int step = 0; step < 4; ++step) {
      const Tensor grad = rng.RandomTensor(dtype, shape);
      REQUIRE(kv->Push("w", grad).ok());
      REQUIRE((*local)->Update(Key("w"), grad, &expected).ok());
      Tensor out = Tensor::Full(dtype, shape, -99);
      REQUIRE(kv->Pull("w", &out).ok());
      REQUIRE(kv->WaitAll().ok());
      INFO("step " << step);
      REQUIRE(ToDoubles(out) == ToDoubles(expected));
    }
  }
}

TEST_CASE("Optimizers: MXNet's test optimizer adds rescale_grad times the pushes", "[optimizer]") {
  // MXNet's distributed tests: with the `test` optimizer and rescale_grad = rate, pushing
  // ones on 2 devices adds 2 * rate per push.
  auto kv = NewStore();
  OptimizerConfig config;
  config.name = "test";
  config.rescale_grad = 2;
  REQUIRE(kv->Init(3, Tensor::Full(DType::kFloat32, {2, 3}, 1)).ok());
  REQUIRE(kv->SetOptimizer(config).ok());
  for (int step = 1; step <= 3; ++step) {
    REQUIRE(kv->Push(3, {Tensor::Full(DType::kFloat32, {2, 3}, 1),
                         Tensor::Full(DType::kFloat32, {2, 3}, 1)})
                .ok());
    Tensor out = Tensor::Zeros(DType::kFloat32, {2, 3});
    REQUIRE(kv->Pull(3, &out).ok());
    REQUIRE(kv->WaitAll().ok());
    REQUIRE(out.ToString() == Tensor::Full(DType::kFloat32, {2, 3}, 1 + 4 * step).ToString());
  }
}

TEST_CASE("Optimizers: a bad configuration is refused before anything changes",
          "[optimizer][errors]") {
  auto kv = NewStore();
  REQUIRE(kv->Init(4, Tensor::Full(DType::kFloat32, {3}, 1)).ok());
  OptimizerConfig config;
  config.name = "adam";
  config.lamda1 = 0.1;  // FTRL's, not Adam's.
  absl::Status status = kv->SetOptimizer(config);
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE(status.message().find("lamda1") != absl::string_view::npos);
  config = OptimizerConfig();
  config.name = "rmsprop2";
  REQUIRE(absl::IsInvalidArgument(kv->SetOptimizer(config)));
  // The updater is still ASSIGN.
  REQUIRE(kv->Push(4, Tensor::Full(DType::kFloat32, {3}, 5)).ok());
  Tensor out = Tensor::Zeros(DType::kFloat32, {3});
  REQUIRE(kv->Pull(4, &out).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(out.GetAsDouble(0) == 5);
}

}  // namespace
}  // namespace kvstore::testing

namespace kvstore::testing {
namespace {

std::string StatePath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST_CASE("Optimizers: SaveOptimizerStates and LoadOptimizerStates continue bit-exactly",
          "[optimizer][state]") {
  TestRng rng;
  INFO(rng.Describe());
  OptimizerConfig config;
  config.name = "adam";
  config.learning_rate = 0.05;
  config.wd = 0.01;
  config.lr_scheduler.type = "factor";
  config.lr_scheduler.step = 2;
  config.lr_scheduler.factor = 0.5;
  const std::vector<Key> keys = {"a", "b"};
  const std::vector<Shape> shapes = {{5, 4}, {3}};
  const std::string path = StatePath("conformance_adam_state.bin");
  // Four steps, save, three more steps: the uninterrupted run.
  auto first = NewStore();
  std::vector<Tensor> init = {rng.RandomTensor(DType::kFloat32, shapes[0]),
                              rng.RandomTensor(DType::kFloat32, shapes[1])};
  REQUIRE(first->Init(keys, init).ok());
  REQUIRE(first->SetOptimizer(config).ok());
  std::vector<std::vector<Tensor>> grads(7);
  for (auto& g : grads) {
    g = {rng.RandomTensor(DType::kFloat32, shapes[0]),
         rng.RandomTensor(DType::kFloat32, shapes[1])};
  }
  std::vector<Tensor> at_save = {Tensor::Zeros(DType::kFloat32, shapes[0]),
                                 Tensor::Zeros(DType::kFloat32, shapes[1])};
  for (int step = 0; step < 7; ++step) {
    REQUIRE(first->Push(keys, grads[step]).ok());
    if (step == 3) {
      REQUIRE(first->Pull(keys, {&at_save[0], &at_save[1]}).ok());
      REQUIRE(first->WaitAll().ok());
      const absl::Status saved = first->SaveOptimizerStates(path);
      INFO(saved.ToString());
      REQUIRE(saved.ok());
    }
  }
  std::vector<Tensor> uninterrupted = {Tensor::Zeros(DType::kFloat32, shapes[0]),
                                       Tensor::Zeros(DType::kFloat32, shapes[1])};
  REQUIRE(first->Pull(keys, {&uninterrupted[0], &uninterrupted[1]}).ok());
  REQUIRE(first->WaitAll().ok());
  first.reset();

  // A fresh store from the saved weights and states: the same three steps, the same bits.
  auto second = NewStore();
  REQUIRE(second->Init(keys, at_save).ok());
  REQUIRE(second->SetOptimizer(config).ok());
  const absl::Status loaded = second->LoadOptimizerStates(path);
  INFO(loaded.ToString());
  REQUIRE(loaded.ok());
  for (int step = 4; step < 7; ++step) REQUIRE(second->Push(keys, grads[step]).ok());
  std::vector<Tensor> resumed = {Tensor::Zeros(DType::kFloat32, shapes[0]),
                                 Tensor::Zeros(DType::kFloat32, shapes[1])};
  REQUIRE(second->Pull(keys, {&resumed[0], &resumed[1]}).ok());
  REQUIRE(second->WaitAll().ok());
  for (size_t k = 0; k < keys.size(); ++k) {
    REQUIRE(std::memcmp(resumed[k].data(), uninterrupted[k].data(), resumed[k].byte_size()) == 0);
  }

  // A damaged file or another optimizer's state is refused, naming the file.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  absl::Status damaged = second->LoadOptimizerStates(path);
  CHECK(absl::IsDataLoss(damaged));
  CHECK(damaged.message().find(path) != absl::string_view::npos);
  CHECK(absl::IsNotFound(second->LoadOptimizerStates(path + ".nothing")));
  OptimizerConfig sgd;
  sgd.name = "sgd";
  REQUIRE(second->SetOptimizer(sgd).ok());
  const std::string sgd_path = StatePath("conformance_sgd_state.bin");
  REQUIRE(second->SaveOptimizerStates(sgd_path).ok());
  REQUIRE(second->SetOptimizer(config).ok());
  CHECK(absl::IsInvalidArgument(second->LoadOptimizerStates(sgd_path)));
}

TEST_CASE("Optimizers: Checkpoint is for stores with servers", "[optimizer][state]") {
  auto kv = NewStore();
  const absl::Status status = kv->Checkpoint("ckpt");
  if (kv->type().rfind("dist", 0) == 0) {
    // The servers of the dist test job run in this process, their checkpoint root TEST_TMPDIR.
    INFO(status.ToString());
    CHECK(status.ok());
    for (int server = 0; server < GetStoreUnderTest().num_servers; ++server) {
      CHECK(std::ifstream(StatePath(absl::StrCat("ckpt/server-", server, ".ckpt"))).good());
    }
    // An absolute directory below the root's canonical path is taken; one that would leave
    // the root is refused, naming it.
    const std::filesystem::path root = std::filesystem::canonical(StatePath("."));
    REQUIRE(kv->Checkpoint((root / "abs" / "run").string()).ok());
    for (int server = 0; server < GetStoreUnderTest().num_servers; ++server) {
      CHECK(std::ifstream(StatePath(absl::StrCat("abs/run/server-", server, ".ckpt"))).good());
    }
    for (const std::string& dir :
         {(root.parent_path() / "elsewhere").string(),
          (root / "x" / ".." / ".." / "elsewhere").string(), std::string("../elsewhere")}) {
      const absl::Status refused = kv->Checkpoint(dir);
      INFO(refused.ToString());
      CHECK(absl::IsInvalidArgument(refused));
      CHECK(refused.message().find(dir) != absl::string_view::npos);
    }
  } else {
    CHECK(absl::IsFailedPrecondition(status));
  }
}

}  // namespace
}  // namespace kvstore::testing
