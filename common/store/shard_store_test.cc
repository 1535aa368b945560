#include "common/store/shard_store.h"

#include <catch2/catch.hpp>

#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;
using testing::ToDoubles;

bool Contains(const absl::Status& status, absl::string_view text) {
  return status.message().find(text) != absl::string_view::npos;
}

TEST_CASE("ShardStore: a failing batch changes nothing", "[server][core]") {
  TestRng rng;
  INFO(rng.Describe());
  ShardStore store(MakeSumUpdater());
  const Tensor a = rng.RandomTensor(DType::kFloat32, {2, 3});
  const Tensor b = rng.RandomTensor(DType::kFloat32, {4});
  REQUIRE(store.Init({{1, a}, {2, b}}).ok());

  SECTION("push with one bad shape applies none of the batch") {
    const auto status = store.Push({{1, a}, {2, Tensor::Full(DType::kFloat32, {5}, 1)}});
    REQUIRE(absl::IsInvalidArgument(status));
    REQUIRE(Contains(status, "key 2"));
    REQUIRE(Contains(status, "(5,)"));
    REQUIRE(Contains(status, "(4,)"));
  }
  SECTION("push with an unknown key applies none of the batch") {
    REQUIRE(absl::IsNotFound(store.Push({{1, a}, {9, b}})));
  }
  SECTION("init with one existing key stores none of the batch") {
    REQUIRE(absl::IsAlreadyExists(store.Init({{3, a}, {1, a}})));
    REQUIRE(absl::IsNotFound(store.Spec(3).status()));
  }
  SECTION("pushpull with a bad output applies neither half") {
    Tensor wrong = Tensor::Zeros(DType::kFloat64, {2, 3});
    Tensor* outs[] = {&wrong};
    const Key keys[] = {1};
    REQUIRE(absl::IsInvalidArgument(store.PushPull({{1, a}}, keys, outs)));
  }
  Tensor out = Tensor::Zeros(DType::kFloat32, {2, 3});
  Tensor* outs[] = {&out};
  const Key keys[] = {1};
  REQUIRE(store.Pull(keys, outs).ok());
  REQUIRE(ToDoubles(out) == ToDoubles(a));
  REQUIRE(store.stats().num_keys == 2);
  REQUIRE(store.stats().num_bytes == 40);
}

TEST_CASE("ShardStore: init copies, so later writes to the caller's tensor do not leak in",
          "[server][core]") {
  Tensor value = Tensor::Full(DType::kInt64, {3}, 7);
  ShardStore store;
  REQUIRE(store.Init({{"w", value}}).ok());
  value.SetFromDouble(0, 100);
  Tensor out = Tensor::Zeros(DType::kInt64, {3});
  Tensor* outs[] = {&out};
  const Key keys[] = {"w"};
  REQUIRE(store.Pull(keys, outs).ok());
  REQUIRE(ToDoubles(out) == std::vector<double>{7, 7, 7});
}

TEST_CASE("ShardStore: key kinds are not mixed", "[server][core]") {
  ShardStore store;
  const Tensor v = Tensor::Full(DType::kFloat32, {1}, 1);
  REQUIRE(absl::IsInvalidArgument(store.Init({{1, v}, {"a", v}})));
  REQUIRE(store.Init({{1, v}}).ok());
  const auto status = store.Init({{"a", v}});
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE(Contains(status, "\"a\""));
  REQUIRE(absl::IsInvalidArgument(store.Push({{"a", v}})));
}

TEST_CASE("ShardStore: SUM accumulates and ASSIGN replaces", "[server][core]") {
  TestRng rng;
  INFO(rng.Describe());
  const DType dtype = rng.AnyDType();
  const Shape shape = rng.AnyShape();
  INFO(DTypeName(dtype) << ShapeToString(shape));
  ShardStore store(MakeSumUpdater());
  const Tensor init = rng.RandomTensor(dtype, shape);
  REQUIRE(store.Init({{0, init}}).ok());
  std::vector<double> reference = ToDoubles(init);
  Tensor last;
  for (int round = 0; round < 5; ++round) {
    last = rng.RandomTensor(dtype, shape);
    const auto values = ToDoubles(last);
    for (size_t i = 0; i < values.size(); ++i) reference[i] += values[i];
    REQUIRE(store.Push({{0, last}}).ok());
  }
  Tensor out = Tensor::Zeros(dtype, shape);
  Tensor* outs[] = {&out};
  const Key keys[] = {0};
  REQUIRE(store.Pull(keys, outs).ok());
  // Each push rounds to the dtype once: 5 roundings of values up to 24 in magnitude.
  REQUIRE(testing::MaxAbsDiff(ToDoubles(out), reference) <= testing::Tolerance(dtype, 5, 24));

  REQUIRE(store.SetUpdater(MakeAssignUpdater()).ok());
  REQUIRE(store.updater_name() == "assign");
  REQUIRE(store.Push({{0, last}}).ok());
  REQUIRE(store.Pull(keys, outs).ok());
  REQUIRE(ToDoubles(out) == ToDoubles(last));
}

TEST_CASE("UpdaterRegistry: builtins, registration and unknown names", "[server][core]") {
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  REQUIRE(registry.Names() == std::vector<std::string>{"assign", "sum"});
  REQUIRE(registry.Create("sum").value()->name() == "sum");
  REQUIRE(absl::IsInvalidArgument(registry.Create("sum", "lr=1").status()));
  const auto unknown = registry.Create("adam");
  REQUIRE(absl::IsNotFound(unknown.status()));
  REQUIRE(Contains(unknown.status(), "assign, sum"));

  REQUIRE(registry
              .Register("double",
                        [](absl::string_view) -> absl::StatusOr<std::unique_ptr<Updater>> {
                          return MakeFunctionUpdater(
                              "double", [](const Key&, const Tensor& in, Tensor* stored) {
                                for (int64_t i = 0; i < in.num_elements(); ++i) {
                                  stored->SetFromDouble(i, 2 * in.GetAsDouble(i));
                                }
                              });
                        })
              .ok());
  REQUIRE(absl::IsAlreadyExists(registry.Register("sum", nullptr)));
  ShardStore store(registry.Create("double").value());
  REQUIRE(store.Init({{5, Tensor::Full(DType::kFloat32, {2}, 1)}}).ok());
  REQUIRE(store.Push({{5, Tensor::Full(DType::kFloat32, {2}, 1.5)}}).ok());
  Tensor out = Tensor::Zeros(DType::kFloat32, {2});
  Tensor* outs[] = {&out};
  const Key keys[] = {5};
  REQUIRE(store.Pull(keys, outs).ok());
  REQUIRE(ToDoubles(out) == std::vector<double>{3, 3});
}

}  // namespace
}  // namespace kvstore
