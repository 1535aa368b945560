// TableEngine: dist_sync rounds over the workers, dist_async pushes, retries, dropped workers and
// the limits, against a float64 reference of sgd on a map of rows.
#include "server/core/table_engine.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "common/table_wire.h"
#include "server/core/server_engine_test_util.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::PullInto;
using testing::TestRng;

constexpr uint64_t kWorkers[] = {11, 12, 13};

proto::TableSpec SgdSpec(int64_t dim, double lr, double wd) {
  TableConfig config;
  config.dim = dim;
  config.initializer.kind = RowInitializer::Kind::kUniform;
  config.initializer.a = -1;
  config.initializer.b = 1;
  config.initializer.seed = 7;
  config.optimizer.kind = RowOptimizer::Kind::kSgd;
  config.optimizer.lr = lr;
  config.optimizer.wd = wd;
  return TableSpecToProto(config);
}

// Reference: float64 rows, made from the initializer's row (the table's InitialRow, read once
// through a pull of an id never pushed) and stepped by sgd: w -= lr * (g + wd * w).
struct Reference {
  int64_t dim;
  double lr, wd;
  std::map<int64_t, std::vector<double>> rows;
  void Apply(const std::map<int64_t, std::vector<double>>& sums,
             const std::map<int64_t, std::vector<double>>& initial) {
    for (const auto& [id, g] : sums) {
      auto [it, added] = rows.try_emplace(id, initial.at(id));
      for (int64_t j = 0; j < dim; ++j) it->second[j] -= lr * (g[j] + wd * it->second[j]);
    }
  }
};

std::vector<float> Rows(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// A push's outcome.
struct Outcome {
  std::optional<absl::Status> status;
  TableEngine::Done Callback() {
    return [this](absl::Status s) {
      REQUIRE_FALSE(status.has_value());  // Exactly once.
      status = std::move(s);
    };
  }
};

TEST_CASE("TableEngine: dist_sync sums every worker's push of a round before one update",
          "[tables]") {
  TestRng rng;
  INFO(rng.Describe());
  const int workers = static_cast<int>(rng.Int(1, 3));
  const int64_t dim = rng.Int(1, 8);
  const double lr = 0.1, wd = rng.Int(0, 1) * 0.01;
  JobWorkers job({kWorkers, kWorkers + workers});
  TableEngine engine(TableEngineOptions{}, &job, nullptr);
  const Key key(5);
  for (int w = 0; w < workers; ++w)
    REQUIRE(engine.Init(kWorkers[w], key, SgdSpec(dim, lr, wd)).ok());
  Reference reference{dim, lr, wd, {}};
  std::map<int64_t, std::vector<double>> initial;
  uint64_t request = 1;
  for (int round = 1; round <= 12; ++round) {
    INFO("round " << round);
    std::map<int64_t, std::vector<double>> sums;
    std::vector<Outcome> outcomes(workers);
    std::vector<int> order(workers);
    for (int w = 0; w < workers; ++w) order[w] = w;
    std::shuffle(order.begin(), order.end(), rng.engine());
    for (int i = 0; i < workers; ++i) {
      const int w = order[i];
      // Ids from a small range, duplicates included; a worker may push none.
      const int64_t n = rng.Int(0, 6);
      std::vector<int64_t> ids(n);
      std::vector<float> grads(n * dim);
      for (int64_t r = 0; r < n; ++r) {
        ids[r] = rng.Int(-20, 20);
        for (int64_t j = 0; j < dim; ++j) {
          grads[r * dim + j] = static_cast<float>(rng.Int(-8, 8)) / 4;
          auto [it, added] = sums.try_emplace(ids[r], std::vector<double>(dim, 0.0));
          it->second[j] += grads[r * dim + j];
        }
      }
      for (int64_t id : ids) {
        if (initial.count(id) == 0 && reference.rows.count(id) == 0) {
          std::string bytes;
          REQUIRE(PullInto(engine, kWorkers[w], key, {id}, &bytes).ok());
          const std::vector<float> row = Rows(bytes);
          initial[id] = std::vector<double>(row.begin(), row.end());
        }
      }
      engine.Push(kWorkers[w], request++, key, ids, grads, outcomes[w].Callback());
      // Nobody is answered before the last worker's push.
      for (int v = 0; v < workers; ++v) {
        CHECK(outcomes[v].status.has_value() == (i == workers - 1));
      }
    }
    for (const Outcome& o : outcomes) REQUIRE(o.status->ok());
    reference.Apply(sums, initial);
    // Every row matches the reference.
    std::vector<int64_t> ids;
    for (const auto& [id, row] : reference.rows) ids.push_back(id);
    std::string bytes;
    REQUIRE(PullInto(engine, kWorkers[0], key, ids, &bytes).ok());
    const std::vector<float> got = Rows(bytes);
    for (size_t r = 0; r < ids.size(); ++r) {
      for (int64_t j = 0; j < dim; ++j) {
        INFO("id " << ids[r] << " element " << j);
        CHECK(std::abs(got[r * dim + j] - reference.rows[ids[r]][j]) < 1e-4);
      }
    }
  }
  const std::vector<TableInfo> tables = engine.Tables();
  REQUIRE(tables.size() == 1);
  CHECK(tables[0].round == 12);
  CHECK(tables[0].stats.rows == static_cast<int64_t>(reference.rows.size()));
}

TEST_CASE("TableEngine: a worker's next push waits for the next round; retries apply once",
          "[tables]") {
  JobWorkers job({11, 12});
  TableEngine engine(TableEngineOptions{}, &job, nullptr);
  const Key key("emb");
  REQUIRE(engine.Init(11, key, SgdSpec(1, 1.0, 0)).ok());
  auto pull = [&](int64_t id) {
    std::string bytes;
    REQUIRE(PullInto(engine, 11, key, {id}, &bytes).ok());
    return Rows(bytes)[0];
  };
  const float w0 = pull(3);
  Outcome a1, a2, a1_retry, b1, b2;
  engine.Push(11, 1, key, {3}, {1.0f}, a1.Callback());
  engine.Push(11, 2, key, {3}, {10.0f}, a2.Callback());       // Round 2's.
  engine.Push(11, 1, key, {3}, {1.0f}, a1_retry.Callback());  // A retry waits with it.
  CHECK_FALSE(a1.status.has_value());
  engine.Push(12, 7, key, {3}, {2.0f}, b1.Callback());
  REQUIRE(a1.status.has_value());
  REQUIRE(a1_retry.status.has_value());
  CHECK(a1.status->ok());
  CHECK(a1_retry.status->ok());
  CHECK_FALSE(a2.status.has_value());
  CHECK(std::abs(pull(3) - (w0 - 3.0f)) < 1e-5);
  // A retry of an applied push is acknowledged, not applied again.
  Outcome late;
  engine.Push(12, 7, key, {3}, {2.0f}, late.Callback());
  REQUIRE(late.status.has_value());
  CHECK(late.status->ok());
  CHECK(std::abs(pull(3) - (w0 - 3.0f)) < 1e-5);
  engine.Push(12, 8, key, {}, {}, b2.Callback());
  REQUIRE(a2.status.has_value());
  CHECK(std::abs(pull(3) - (w0 - 13.0f)) < 1e-5);

  // A worker that leaves: the round goes on without it, its waiting push is refused.
  Outcome c1, d1;
  engine.Push(12, 9, key, {3}, {100.0f}, d1.Callback());
  REQUIRE(job.MarkDropped({12}) == 1);
  CHECK(engine.DropWorkers() == 0);
  REQUIRE(d1.status.has_value());
  CHECK(absl::IsPermissionDenied(*d1.status));
  engine.Push(11, 3, key, {3}, {1.0f}, c1.Callback());
  REQUIRE(c1.status.has_value());
  CHECK(c1.status->ok());
  CHECK(std::abs(pull(3) - (w0 - 14.0f)) < 1e-5);
}

TEST_CASE("TableEngine: dist_async applies each push at once", "[tables]") {
  JobWorkers job({11, 12});
  TableEngineOptions options;
  options.sync = false;
  TableEngine engine(options, &job, nullptr);
  const Key key(1);
  REQUIRE(engine.Init(12, key, SgdSpec(2, 0.5, 0)).ok());
  std::string before, after;
  REQUIRE(PullInto(engine, 11, key, {4, 4}, &before).ok());
  Outcome a;
  engine.Push(11, 1, key, {4, 4}, {1, 2, 3, 4}, a.Callback());
  REQUIRE(a.status.has_value());
  REQUIRE(a.status->ok());
  REQUIRE(PullInto(engine, 12, key, {4}, &after).ok());
  CHECK(std::abs(Rows(after)[0] - (Rows(before)[0] - 0.5f * 4)) < 1e-5);
  CHECK(std::abs(Rows(after)[1] - (Rows(before)[1] - 0.5f * 6)) < 1e-5);
  CHECK(engine.Tables()[0].round == 1);
}

TEST_CASE("TableEngine: bad input is refused naming the key and the limit, changing nothing",
          "[tables]") {
  JobWorkers job({11});
  TableEngineOptions options;
  options.max_value_bytes = 4096;
  options.memory_budget_bytes = 1 << 20;
  int64_t elsewhere = 0;
  TableEngine engine(options, &job, [&elsewhere] { return elsewhere; });
  const Key key("t");
  REQUIRE(engine.Init(11, key, SgdSpec(4, 0.1, 0)).ok());
  REQUIRE(engine.Init(11, key, SgdSpec(4, 0.1, 0)).ok());  // The same spec again.
  absl::Status other = engine.Init(11, key, SgdSpec(8, 0.1, 0));
  CHECK(absl::IsAlreadyExists(other));
  CHECK(absl::StrContains(other.message(), "\"t\""));
  absl::Status wide = engine.Init(11, Key(2), SgdSpec(kMaxTableDim + 1, 0.1, 0));
  CHECK(absl::IsInvalidArgument(wide));
  CHECK(absl::StrContains(wide.message(), "kMaxTableDim"));
  proto::TableSpec bad = SgdSpec(4, 0.1, 0);
  bad.set_optimizer("lamb");
  CHECK(absl::IsInvalidArgument(engine.Init(11, Key(3), bad)));
  CHECK(absl::IsPermissionDenied(engine.Init(99, Key(4), SgdSpec(4, 0.1, 0))));

  Outcome size;
  engine.Push(11, 1, key, {1, 2}, {1, 2, 3}, size.Callback());
  REQUIRE(size.status.has_value());
  CHECK(absl::IsInvalidArgument(*size.status));
  CHECK(absl::StrContains(size.status->message(), "\"t\""));
  Outcome unknown;
  engine.Push(11, 2, Key("u"), {1}, {1, 2, 3, 4}, unknown.Callback());
  CHECK(absl::IsNotFound(*unknown.status));
  std::string rows;
  CHECK(absl::IsNotFound(PullInto(engine, 11, Key("u"), {1}, &rows)));
  // 300 rows of 16 bytes: over the 4096-byte reply limit.
  const absl::Status big = PullInto(engine, 11, key, std::vector<int64_t>(300, 1), &rows);
  CHECK(absl::IsResourceExhausted(big));
  CHECK(absl::StrContains(big.message(), "max_value_bytes"));
  // New rows over the memory budget: refused, nothing stored.
  elsewhere = (1 << 20) - 100;
  Outcome budget;
  engine.Push(11, 3, key, {1, 2, 3}, std::vector<float>(12, 1.0f), budget.Callback());
  CHECK(absl::IsResourceExhausted(*budget.status));
  CHECK(absl::StrContains(budget.status->message(), "memory_budget_bytes"));
  CHECK(engine.Tables()[0].stats.rows == 0);
  CHECK(engine.Tables()[0].round == 0);
  elsewhere = 0;
  Outcome fits;
  engine.Push(11, 4, key, {1, 2, 3}, std::vector<float>(12, 1.0f), fits.Callback());
  CHECK(fits.status->ok());
  CHECK(engine.Tables()[0].stats.rows == 3);
  CHECK(engine.bytes() > 0);
}

TEST_CASE("TableEngine: FailRounds answers the pushes still waiting", "[tables]") {
  JobWorkers job({11, 12});
  TableEngine engine(TableEngineOptions{}, &job, nullptr);
  REQUIRE(engine.Init(11, Key(1), SgdSpec(1, 0.1, 0)).ok());
  Outcome waiting;
  engine.Push(11, 1, Key(1), {1}, {1.0f}, waiting.Callback());
  CHECK_FALSE(waiting.status.has_value());
  engine.FailRounds(absl::AbortedError("the job failed: worker 1 died"));
  REQUIRE(waiting.status.has_value());
  CHECK(absl::IsAborted(*waiting.status));
}

TEST_CASE("TableEngine: Snapshot in pieces and Restore carry every table as it was", "[tables]") {
  TestRng rng;
  INFO(rng.Describe());
  JobWorkers job({11});
  TableEngineOptions options;
  options.sync = false;
  TableEngine engine(options, &job, nullptr);
  TableConfig config;
  config.dim = rng.Int(1, 6);
  config.initializer.kind = RowInitializer::Kind::kNormal;
  config.initializer.b = 0.3;
  config.optimizer.kind = RowOptimizer::Kind::kAdam;
  config.optimizer.lr = 0.1;
  config.admit_after = 2;
  config.max_rows = 40;
  const proto::TableSpec spec = TableSpecToProto(config);
  REQUIRE(engine.Init(11, Key("a"), spec).ok());
  REQUIRE(engine.Init(11, Key("b"), SgdSpec(3, 0.1, 0)).ok());
  uint64_t request = 1;
  auto push = [&](TableEngine& e, const Key& key, int64_t dim, std::mt19937_64& g) {
    std::vector<int64_t> ids(std::uniform_int_distribution<int>(0, 12)(g));
    for (int64_t& id : ids) id = std::uniform_int_distribution<int64_t>(0, 80)(g);
    std::vector<float> grads(ids.size() * dim);
    for (float& v : grads) v = static_cast<float>(std::uniform_int_distribution<int>(-4, 4)(g));
    Outcome o;
    e.Push(11, request++, key, ids, grads, o.Callback());
    REQUIRE(o.status->ok());
  };
  std::mt19937_64 g(rng.seed());
  for (int i = 0; i < 30; ++i) {
    push(engine, Key("a"), config.dim, g);
    push(engine, Key("b"), 3, g);
  }
  // Pieces of a few rows each.
  const std::vector<proto::TableCheckpoint> pieces = engine.Snapshot(64);
  CHECK(pieces.size() > 2);
  google::protobuf::RepeatedPtrField<proto::TableCheckpoint> saved(pieces.begin(), pieces.end());
  TableEngine restored(options, &job, nullptr);
  REQUIRE(restored.Restore(saved).ok());
  auto same = [&](TableEngine& a, TableEngine& b) {
    const std::vector<TableInfo> ta = a.Tables(), tb = b.Tables();
    REQUIRE(ta.size() == tb.size());
    for (size_t t = 0; t < ta.size(); ++t) {
      CHECK(ta[t].key == tb[t].key);
      CHECK(ta[t].round == tb[t].round);
      CHECK(ta[t].stats.rows == tb[t].stats.rows);
      CHECK(ta[t].stats.counting == tb[t].stats.counting);
      CHECK(ta[t].stats.admitted == tb[t].stats.admitted);
      CHECK(ta[t].stats.evicted == tb[t].stats.evicted);
      std::vector<int64_t> ids(81);
      for (int64_t i = 0; i <= 80; ++i) ids[i] = i;
      std::string ra, rb;
      REQUIRE(PullInto(a, 11, ta[t].key, ids, &ra).ok());
      REQUIRE(PullInto(b, 11, tb[t].key, ids, &rb).ok());
      CHECK(ra == rb);
    }
  };
  same(engine, restored);
  // Both go on alike: the optimizer state, update counts, admission counts and the recency
  // order (max_rows evicts the least recently used) came along.
  std::mt19937_64 g1(rng.seed() + 1), g2(rng.seed() + 1);
  for (int i = 0; i < 20; ++i) {
    push(engine, Key("a"), config.dim, g1);
    push(restored, Key("a"), config.dim, g2);
  }
  same(engine, restored);

  // Damaged pieces are refused, naming the key.
  google::protobuf::RepeatedPtrField<proto::TableCheckpoint> cut = saved;
  cut.Mutable(0)->mutable_values()->resize(cut.Get(0).values().size() - 1);
  TableEngine empty1(options, &job, nullptr);
  absl::Status damaged = empty1.Restore(cut);
  CHECK(absl::IsDataLoss(damaged));
  CHECK(absl::StrContains(damaged.message(), "\"a\""));
  google::protobuf::RepeatedPtrField<proto::TableCheckpoint> unfinished(saved.begin(),
                                                                        saved.begin() + 1);
  TableEngine empty2(options, &job, nullptr);
  CHECK(absl::IsDataLoss(empty2.Restore(unfinished)));
}

}  // namespace
}  // namespace kvstore
