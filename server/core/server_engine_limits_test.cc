// Tests of the engine's limits: declared sizes are checked with overflow-safe arithmetic
// (negative dimensions, element counts and slices that overflow int64, row counts), values
// bigger than max_value_bytes and parts beyond the memory budget are refused before anything
// is allocated, and a refused call changes nothing.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/core/key_groups.h"
#include "server/core/server_engine.h"
#include "server/core/server_engine_test_util.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::Incoming;
using testing::PullAll;
using testing::TestRng;
using testing::ToDoubles;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

std::unique_ptr<ServerEngine> LimitedEngine(int64_t max_value_bytes, int64_t budget,
                                            int64_t chunk_bytes = kDefaultChunkBytes) {
  ServerEngineOptions options;
  options.worker_node_ids = {2};
  options.max_value_bytes = max_value_bytes;
  options.memory_budget_bytes = budget;
  options.chunk_bytes = chunk_bytes;
  auto engine = ServerEngine::Create(std::move(options), nullptr);
  REQUIRE(engine.ok());
  return std::move(engine).value();
}

// Declared: a value whose header says `shape`, `offset` and `count`, with no bytes.
IncomingValue Declared(const Key& key, DType dtype, Shape shape, int64_t offset, int64_t count) {
  IncomingValue value;
  value.slice = ValueSlice{key, dtype, std::move(shape), offset, count};
  return value;
}

// RequireRefused checks that `status` has `code` and names each of `names`.
void RequireRefused(const absl::Status& status, absl::StatusCode code,
                    const std::vector<std::string>& names) {
  INFO(status.ToString());
  REQUIRE(status.code() == code);
  for (const std::string& name : names) {
    REQUIRE_THAT(std::string(status.message()), Catch::Contains(name));
  }
}

absl::Status PushNow(ServerEngine& engine, uint64_t request_id, const IncomingValue& value) {
  absl::Status result = absl::UnknownError("push not answered");
  engine.Push(2, request_id, {value}, [&](absl::Status s) { result = s; });
  return result;
}

TEST_CASE("ServerEngine limits: a value limit or budget below one byte is refused",
          "[server][limits]") {
  for (const auto& [max_value_bytes, budget] : {std::pair<int64_t, int64_t>{0, kUnlimitedBytes},
                                                {-1, kUnlimitedBytes},
                                                {kDefaultMaxValueBytes, 0},
                                                {kDefaultMaxValueBytes, -5}}) {
    ServerEngineOptions options;
    options.worker_node_ids = {2};
    options.max_value_bytes = max_value_bytes;
    options.memory_budget_bytes = budget;
    REQUIRE(absl::IsInvalidArgument(ServerEngine::Create(options, nullptr).status()));
  }
}

TEST_CASE("ServerEngine limits: an Init declaring 2^31 to 2^40 elements is refused unallocated",
          "[server][limits]") {
  auto engine = LimitedEngine(kDefaultMaxValueBytes, kUnlimitedBytes);
  for (int bits : {31, 33, 36, 40}) {
    const int64_t elements = int64_t{1} << bits;
    INFO("2^" << bits << " elements");
    for (bool deferred : {true, false}) {
      const absl::Status status =
          engine->Init(2, {Declared(7, DType::kFloat32, {elements}, 0, elements)}, deferred);
      RequireRefused(status, absl::StatusCode::kResourceExhausted,
                     {"key 7", ShapeToString({elements}), std::to_string(kDefaultMaxValueBytes)});
    }
  }
  REQUIRE(engine->stats().num_keys == 0);
  REQUIRE(engine->held_bytes() == 0);
}

TEST_CASE("ServerEngine limits: shapes whose element count overflows int64 are malformed",
          "[server][limits]") {
  const std::vector<Shape> shapes = {
      {int64_t{1} << 62, 4},     // 2^64 elements: 0 in wrapping int64 arithmetic.
      {3, 6148914691236517206},  // 2^64 + 2 elements: 2 in wrapping int64 arithmetic.
      {int64_t{1} << 32, int64_t{1} << 32},
      {0, int64_t{1} << 62, int64_t{1} << 62},  // No elements, but rows that overflow.
      {kMax, 2},
  };
  for (int64_t max_value_bytes : {kDefaultMaxValueBytes, kMax}) {
    auto engine = LimitedEngine(max_value_bytes, kUnlimitedBytes);
    for (const Shape& shape : shapes) {
      for (int64_t count : {int64_t{0}, int64_t{2}}) {
        for (bool deferred : {true, false}) {
          INFO(ShapeToString(shape) << " count " << count << (deferred ? " deferred" : ""));
          IncomingValue value = Declared(1, DType::kFloat64, shape, 0, count);
          const std::vector<uint8_t> bytes(deferred ? 0 : static_cast<size_t>(count) * 8);
          if (!bytes.empty()) value.bytes = {absl::MakeConstSpan(bytes)};
          RequireRefused(engine->Init(2, {value}, deferred), absl::StatusCode::kInvalidArgument,
                         {"key 1", ShapeToString(shape)});
        }
      }
    }
    REQUIRE(engine->stats().num_keys == 0);
    REQUIRE(engine->held_bytes() == 0);
  }
}

TEST_CASE("ServerEngine limits: negative dimensions and slices past int64 are malformed",
          "[server][limits]") {
  auto engine = LimitedEngine(kDefaultMaxValueBytes, kUnlimitedBytes);
  struct Case {
    Shape shape;
    int64_t offset, count;
  };
  const std::vector<Case> cases = {
      {{-1}, 0, 0},    {{4, -2}, 0, 0}, {{std::numeric_limits<int64_t>::min()}, 0, 0},
      {{10}, kMax, 5},  // offset + count overflows.
      {{10}, 5, kMax}, {{10}, -1, 3},   {{10}, std::numeric_limits<int64_t>::min(), 10},
      {{10}, 0, -1},
  };
  for (const Case& c : cases) {
    INFO(ShapeToString(c.shape) << " offset " << c.offset << " count " << c.count);
    RequireRefused(engine->Init(2, {Declared(3, DType::kInt32, c.shape, c.offset, c.count)}, true),
                   absl::StatusCode::kInvalidArgument, {"key 3"});
  }
  REQUIRE(engine->stats().num_keys == 0);

  // Against a stored value: pushes and pulls naming slices past int64 are refused too.
  TestRng rng;
  INFO(rng.Describe());
  const Tensor init = rng.RandomTensor(DType::kInt32, {10});
  REQUIRE(engine->Init(2, {Incoming(3, init)}).ok());
  for (const Case& c : cases) {
    INFO(ShapeToString(c.shape) << " offset " << c.offset << " count " << c.count);
    REQUIRE(!PushNow(*engine, 1, Declared(3, DType::kInt32, c.shape, c.offset, c.count)).ok());
    REQUIRE(!engine->Pull(2, {ValueSlice{3, DType::kInt32, c.shape, c.offset, c.count}}).ok());
    REQUIRE(!engine->Pull(2, {ValueSlice{3, DType::kInt32, {10}, c.offset, c.count}}).ok());
  }
  REQUIRE(PullAll(*engine, 3, init) == ToDoubles(init));
}

TEST_CASE("ServerEngine limits: values over max_value_bytes are refused naming key, shape, limit",
          "[server][limits]") {
  auto engine = LimitedEngine(4096, kUnlimitedBytes);
  TestRng rng;
  INFO(rng.Describe());
  // 4096 bytes is the limit: 1024 float32 fit, 1025 do not, nor 513 float64.
  REQUIRE(engine->Init(2, {Incoming(1, rng.RandomTensor(DType::kFloat32, {1024}))}).ok());
  RequireRefused(engine->Init(2, {Incoming(2, rng.RandomTensor(DType::kFloat32, {1025}))}),
                 absl::StatusCode::kResourceExhausted, {"key 2", "(1025,)", "4096"});
  RequireRefused(engine->Init(2, {Declared(3, DType::kFloat64, {513}, 0, 513)}, true),
                 absl::StatusCode::kResourceExhausted, {"key 3", "(513,)", "4096"});
  // A slice of a bigger value is refused as well: the limit is on the whole value.
  RequireRefused(engine->Init(2, {Declared(4, DType::kFloat32, {2, 1000}, 0, 1000)}, true),
                 absl::StatusCode::kResourceExhausted, {"key 4", "(2, 1000)", "4096"});
  REQUIRE(engine->stats().num_keys == 1);
}

TEST_CASE("ServerEngine limits: the memory budget refuses Inits beyond it, all or nothing",
          "[server][limits]") {
  TestRng rng;
  INFO(rng.Describe());
  const int64_t budget = 64 << 10;
  auto engine = LimitedEngine(kDefaultMaxValueBytes, budget, 4096);
  const Tensor a = rng.RandomTensor(DType::kFloat32, {6000});  // 24,000 bytes in 6 chunks.
  REQUIRE(engine->Init(2, {Incoming(1, a)}).ok());
  REQUIRE(engine->held_bytes() ==
          24000 + ServerEngine::kPartOverheadBytes + 6 * ServerEngine::kChunkOverheadBytes);
  const int64_t held = engine->held_bytes();
  // Two more such values fit in no budget of 64 KiB: the second is refused, and with it the
  // first of the same call.
  const Tensor b = rng.RandomTensor(DType::kFloat32, {6000});
  const absl::Status status = engine->Init(2, {Incoming(2, b), Incoming(3, b)});
  RequireRefused(status, absl::StatusCode::kResourceExhausted,
                 {"key 3", "(6000,)", std::to_string(budget)});
  REQUIRE(engine->stats().num_keys == 1);
  REQUIRE(engine->held_bytes() == held);
  REQUIRE(!engine->Pull(2, {ValueSlice{2, DType::kFloat32, {6000}, 0, 4096 / 4}}).ok());
  // Deferred Inits hold their zeros: they count alike.
  RequireRefused(engine->Init(2, {Declared(4, DType::kFloat32, {12000}, 0, 12000)}, true),
                 absl::StatusCode::kResourceExhausted, {"key 4", "(12000,)"});
  // One of them fits.
  REQUIRE(engine->Init(2, {Incoming(2, b)}).ok());
  const auto first = engine->Pull(2, {ValueSlice{1, DType::kFloat32, {6000}, 0, 1024}});
  REQUIRE(first.ok());
  REQUIRE(std::memcmp((*first)[0].data(), a.data(), 4096) == 0);
}

TEST_CASE("ServerEngine limits: empty values count their keys against the budget",
          "[server][limits]") {
  auto engine = LimitedEngine(kDefaultMaxValueBytes, 16 << 10);
  int stored = 0;
  absl::Status status;
  while (status.ok() && stored < 1000) {
    status = engine->Init(2, {Declared(Key(std::string(100, 'k') + std::to_string(stored)),
                                       DType::kFloat32, {0}, 0, 0)});
    stored += status.ok();
  }
  RequireRefused(status, absl::StatusCode::kResourceExhausted, {"(0,)", "16384"});
  REQUIRE(stored < 1000 / 16);
  REQUIRE(engine->held_bytes() <= 16 << 10);
}

TEST_CASE("ServerEngine limits: a row-sparse push whose row count wraps is refused",
          "[server][limits][row_sparse]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = LimitedEngine(kDefaultMaxValueBytes, kUnlimitedBytes);
  const Tensor init = rng.RandomTensor(DType::kFloat32, {8, 2});  // Rows of 8 bytes.
  REQUIRE(engine->Init(2, {Incoming(5, init)}).ok());
  // One row id and one row: 16 bytes. (2^60 + 1) * 16 wraps to 16 in 64 bits.
  std::vector<uint8_t> payload(16);
  const int64_t id = 3;
  std::memcpy(payload.data(), &id, sizeof(id));
  for (int64_t rows : {(int64_t{1} << 60) + 1, int64_t{1} << 61, kMax, int64_t{-1}, int64_t{2}}) {
    INFO(rows << " rows");
    IncomingValue value = Declared(5, DType::kFloat32, {8, 2}, 0, 16);
    value.row_sparse = true;
    value.num_rows = rows;
    value.bytes = {absl::MakeConstSpan(payload)};
    RequireRefused(PushNow(*engine, 10, value), absl::StatusCode::kInvalidArgument, {"key 5"});
  }
  REQUIRE(PullAll(*engine, 5, init) == ToDoubles(init));
}

TEST_CASE("ServerEngine limits: a row-sparse pull bigger than max_value_bytes is refused",
          "[server][limits][row_sparse]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = LimitedEngine(4096, kUnlimitedBytes);
  const Tensor init = rng.RandomTensor(DType::kFloat64, {16, 4});  // Rows of 32 bytes.
  REQUIRE(engine->Init(2, {Incoming(6, init)}).ok());
  const ValueSlice part{6, DType::kFloat64, {16, 4}, 0, 64};
  // Ids may repeat: 128 rows make the largest reply, 129 one too big.
  REQUIRE(engine->PullRows(2, part, std::vector<int64_t>(128, 5)).ok());
  RequireRefused(engine->PullRows(2, part, std::vector<int64_t>(129, 5)).status(),
                 absl::StatusCode::kResourceExhausted, {"key 6", "(16, 4)", "4096"});
  // Rows already in the same reply count.
  RequireRefused(engine->PullRows(2, part, std::vector<int64_t>(100, 5), 1024).status(),
                 absl::StatusCode::kResourceExhausted, {"key 6"});
  RequireRefused(engine->PullRows(2, part, std::vector<int64_t>(1 << 20, 0)).status(),
                 absl::StatusCode::kResourceExhausted, {"key 6"});
}

TEST_CASE("ServerEngine limits: key groups count against the budget; a refused one changes nothing",
          "[server][limits][group]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = LimitedEngine(kDefaultMaxValueBytes, 32 << 10);
  std::vector<ValueSlice> members;
  for (int k = 0; k < 8; ++k) {
    const Tensor t = rng.RandomTensor(DType::kFloat32, {256});  // 1 KiB each.
    REQUIRE(engine->Init(2, {Incoming(k, t)}).ok());
    members.push_back(ValueSlice{k, DType::kFloat32, {256}, 0, 256});
  }
  const int64_t values = engine->held_bytes();
  REQUIRE(engine->groups().Register(2, 1, members).ok());
  const int64_t group = 8 * ServerEngine::kGroupMemberOverheadBytes + 8 * 1024;
  REQUIRE(engine->held_bytes() == values + group);
  // Registering the same id again replaces the group: it is counted once.
  REQUIRE(engine->groups().Register(2, 1, members).ok());
  REQUIRE(engine->held_bytes() == values + group);
  int registered = 1;
  absl::Status status;
  while (status.ok() && registered < 100) {
    status = engine->groups().Register(2, 100 + registered, members);
    registered += status.ok();
  }
  RequireRefused(status, absl::StatusCode::kResourceExhausted,
                 {"key group " + std::to_string(100 + registered), "32768"});
  REQUIRE(engine->held_bytes() <= 32 << 10);
  REQUIRE(!engine->groups().Pull(2, 100 + registered).ok());
  REQUIRE(engine->groups().Pull(2, 1).ok());
}

}  // namespace
}  // namespace kvstore
