// Tests of EmbeddingTable against an independent reference: a map of rows in float64 with its
// own admission counts, its own least-recently-used choice (a use clock and a scan) and its own
// optimizer steps, over random id streams drawn from a Zipf distribution (seed printed).
#include "common/store/embedding_table.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/table_reference.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TableReference;
using testing::TestRng;
using testing::Zipf;

// Same checks that the table and the reference agree on which rows exist, on every count, and
// on the values of the ids in `probe` (stored or not).
void Same(EmbeddingTable& table, TableReference& reference, const std::vector<int64_t>& probe) {
  const std::vector<int64_t> held = table.Ids();
  REQUIRE(std::set<int64_t>(held.begin(), held.end()) == reference.Ids());
  const TableStats stats = table.stats();
  CHECK(stats.admitted == reference.admitted());
  CHECK(stats.evicted == reference.evicted());
  const int64_t dim = table.config().dim;
  std::vector<float> out(probe.size() * dim);
  REQUIRE(table.Pull(probe, absl::MakeSpan(out)).ok());
  for (size_t r = 0; r < probe.size(); ++r) {
    CHECK(table.Count(probe[r]) == reference.Count(probe[r]));
    const std::vector<double> want = reference.Pull(probe[r]);
    for (int64_t j = 0; j < dim; ++j) {
      INFO("id " << probe[r] << " element " << j);
      CHECK(out[r * dim + j] == Approx(want[j]).epsilon(2e-4).margin(2e-5));
    }
  }
}

TableConfig RandomConfig(TestRng& rng) {
  TableConfig c;
  c.name = "7";
  c.dim = rng.Int(1, 9);
  c.initializer.kind = static_cast<RowInitializer::Kind>(rng.Int(0, 2));
  c.initializer.a = c.initializer.kind == RowInitializer::Kind::kUniform ? -0.5 : 0.1;
  c.initializer.b = 0.5;
  c.initializer.seed = rng.engine()();
  c.optimizer.kind = static_cast<RowOptimizer::Kind>(rng.Int(0, 2));
  c.optimizer.lr = rng.Uniform(0.01, 0.2);
  c.optimizer.wd = rng.Int(0, 1) == 1 ? 0.01 : 0.0;
  c.optimizer.rescale_grad = rng.Int(0, 1) == 1 ? 0.5 : 1.0;
  c.optimizer.clip_gradient = rng.Int(0, 1) == 1 ? 3.0 : -1.0;
  c.optimizer.epsilon = c.optimizer.kind == RowOptimizer::Kind::kAdagrad ? 1e-7 : 1e-8;
  c.admit_after = rng.Int(1, 3);
  c.evict_unseen_rounds = rng.Int(0, 1) == 1 ? rng.Int(1, 4) : 0;
  c.max_rows = rng.Int(0, 1) == 1 ? rng.Int(20, 60) : 0;
  c.evict_over_budget = rng.Int(0, 3) > 0;
  return c;
}

std::string Describe(const TableConfig& c) {
  return absl::StrCat("dim ", c.dim, ", initializer ", static_cast<int>(c.initializer.kind),
                      ", optimizer ", static_cast<int>(c.optimizer.kind), ", admit_after ",
                      c.admit_after, ", evict_unseen_rounds ", c.evict_unseen_rounds, ", max_rows ",
                      c.max_rows, ", evict_over_budget ", c.evict_over_budget);
}

TEST_CASE(
    "EmbeddingTable: Zipf id streams match a float64 reference: rows, counts, admissions, "
    "evictions and values",
    "[store][tables]") {
  TestRng rng;
  INFO(rng.Describe());
  const Zipf zipf(5000, 1.05);
  for (int trial = 0; trial < 24; ++trial) {
    const TableConfig config = RandomConfig(rng);
    INFO("trial " << trial << ": " << Describe(config));
    std::unique_ptr<EmbeddingTable> table = EmbeddingTable::Create(config).value();
    TableReference reference(*table);
    int refused = 0;
    for (int64_t round = 1; round <= 25; ++round) {
      const size_t batch = static_cast<size_t>(rng.Int(1, 40));
      std::vector<int64_t> ids(batch);
      for (int64_t& id : ids) id = zipf.Draw(rng.engine());
      std::vector<float> grads(batch * config.dim);
      for (float& g : grads) g = static_cast<float>(rng.Uniform(-4, 4));
      const bool accepted = reference.Push(ids, grads, round);
      const absl::Status pushed = table->Push(ids, grads, round);
      INFO("round " << round << ": " << pushed.ToString());
      REQUIRE(pushed.ok() == accepted);
      if (!accepted) {
        ++refused;
        CHECK(absl::IsResourceExhausted(pushed));
        CHECK(pushed.message().find("max_rows") != absl::string_view::npos);
        CHECK(pushed.message().find("table 7") != absl::string_view::npos);
      }
      if (round % 5 == 0) {
        CHECK(table->EvictUnseen(round) >= 0);
        reference.EvictUnseen(round);
      }
      // Probe the batch, a few stored rows and a few ids never pushed.
      std::vector<int64_t> probe = ids;
      const std::vector<int64_t> held = table->Ids();
      for (size_t i = 0; i < held.size() && i < 5; ++i) probe.push_back(held[i]);
      probe.push_back(static_cast<int64_t>(rng.engine()()));
      Same(*table, reference, probe);
    }
    INFO("refused " << refused);
  }
}

TEST_CASE("EmbeddingTable: rows are the initializer's, the same in every table of one seed",
          "[store][tables]") {
  TestRng rng;
  INFO(rng.Describe());
  TableConfig c;
  c.dim = 4096;
  c.initializer = {RowInitializer::Kind::kUniform, -0.25, 0.75, rng.engine()()};
  auto first = EmbeddingTable::Create(c).value();
  auto second = EmbeddingTable::Create(c).value();
  const int64_t id = static_cast<int64_t>(rng.engine()());
  std::vector<float> a(c.dim), b(c.dim);
  first->InitialRow(id, a.data());
  second->InitialRow(id, b.data());
  CHECK(a == b);
  double mean = 0;
  for (float v : a) {
    REQUIRE(v >= -0.25f);
    REQUIRE(v <= 0.75f);
    mean += v / c.dim;
  }
  CHECK(mean == Approx(0.25).margin(0.03));
  // Another id, or another seed, draws other values.
  first->InitialRow(id + 1, b.data());
  CHECK(a != b);
  c.initializer.seed ^= 1;
  EmbeddingTable::Create(c).value()->InitialRow(id, b.data());
  CHECK(a != b);
  // normal(mean, std): the sample's moments.
  c.initializer = {RowInitializer::Kind::kNormal, 1.5, 0.5, rng.engine()()};
  auto normal = EmbeddingTable::Create(c).value();
  normal->InitialRow(id, a.data());
  double sum = 0, squares = 0;
  for (float v : a) {
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  const double m = sum / c.dim, sd = std::sqrt(squares / c.dim - m * m);
  CHECK(m == Approx(1.5).margin(0.05));
  CHECK(sd == Approx(0.5).margin(0.03));
  // zeros.
  c.initializer = {};
  EmbeddingTable::Create(c).value()->InitialRow(id, a.data());
  CHECK(std::all_of(a.begin(), a.end(), [](float v) { return v == 0; }));
}

TEST_CASE("EmbeddingTable: bad configurations and bad input are refused, changing nothing",
          "[store][tables]") {
  TableConfig c;
  c.name = "emb";
  c.dim = 0;
  absl::Status made = EmbeddingTable::Create(c).status();
  CHECK(absl::IsInvalidArgument(made));
  CHECK(made.message().find("table emb: dim 0") != absl::string_view::npos);
  c.dim = 3;
  c.admit_after = 0;
  CHECK(absl::IsInvalidArgument(EmbeddingTable::Create(c).status()));
  c.admit_after = 1;
  c.initializer = {RowInitializer::Kind::kUniform, 1, 0, 0};
  CHECK(absl::IsInvalidArgument(EmbeddingTable::Create(c).status()));
  c.initializer = {RowInitializer::Kind::kNormal, 0, 0.1, 3};
  c.optimizer.beta1 = 1;
  CHECK(absl::IsInvalidArgument(EmbeddingTable::Create(c).status()));
  c.optimizer = {};
  c.max_rows = 4;
  c.evict_over_budget = false;
  auto table = EmbeddingTable::Create(c).value();
  REQUIRE(table->Push({1, 2, 3}, std::vector<float>(9, 1.0f), 1).ok());
  std::vector<float> before(9);
  REQUIRE(table->Pull({1, 2, 3}, absl::MakeSpan(before)).ok());
  // Gradients of the wrong size; an output of the wrong size.
  absl::Status bad = table->Push({1, 2}, std::vector<float>(5, 1.0f), 2);
  CHECK(absl::IsInvalidArgument(bad));
  CHECK(bad.message().find("pushing 2 rows of 3 elements with 5 elements") !=
        absl::string_view::npos);
  std::vector<float> small(2);
  CHECK(absl::IsInvalidArgument(table->Pull({1}, absl::MakeSpan(small))));
  // Two new rows would make 5, over the budget, with eviction off: nothing changes, the
  // stored row pushed along with them included.
  bad = table->Push({1, 4, 5}, std::vector<float>(9, 1.0f), 2);
  INFO(bad.ToString());
  CHECK(absl::IsResourceExhausted(bad));
  CHECK(bad.message().find("limit of 4 (max_rows)") != absl::string_view::npos);
  CHECK(!table->Contains(4));
  CHECK(table->Count(4) == 0);
  std::vector<float> after(9);
  REQUIRE(table->Pull({1, 2, 3}, absl::MakeSpan(after)).ok());
  CHECK(before == after);
  CHECK(table->stats().rows == 3);
}

TEST_CASE("EmbeddingTable: a stored row costs its elements and about 64 bytes more",
          "[store][tables]") {
  TestRng rng;
  INFO(rng.Describe());
  for (const RowOptimizer::Kind kind :
       {RowOptimizer::Kind::kSgd, RowOptimizer::Kind::kAdagrad, RowOptimizer::Kind::kAdam}) {
    TableConfig c;
    c.dim = 64;
    c.optimizer.kind = kind;
    auto table = EmbeddingTable::Create(c).value();
    const int64_t own = c.dim * 4 *
                        (kind == RowOptimizer::Kind::kSgd       ? 1
                         : kind == RowOptimizer::Kind::kAdagrad ? 2
                                                                : 3);
    std::vector<int64_t> ids(4096);
    std::vector<float> grads(ids.size() * c.dim, 0.5f);
    for (int batch = 0; batch < 12; ++batch) {
      for (int64_t& id : ids) id = static_cast<int64_t>(rng.engine()());
      REQUIRE(table->Push(ids, grads, batch).ok());
    }
    const TableStats stats = table->stats();
    REQUIRE(stats.rows == 12 * 4096);
    const double per_row = static_cast<double>(stats.bytes) / stats.rows;
    const std::string measured =
        absl::StrCat("optimizer ", static_cast<int>(kind), ": ", stats.bytes, " bytes for ",
                     stats.rows, " rows: ", per_row - own, " bytes a row besides its ", own);
    std::printf("%s\n", measured.c_str());
    INFO(measured);
    // The goal: at most 1.5 times the row's own bytes plus 64.
    CHECK(per_row <= 1.5 * own + 64);
    CHECK(per_row <= own + 64);
    CHECK(table->BytesPerRow() <= own + 80);
  }
}

TEST_CASE("EmbeddingTable: rows unseen for some seconds are evicted; max_bytes bounds the rows",
          "[tables]") {
  TestRng rng;
  INFO(rng.Describe());
  TableConfig config;
  config.name = "t";
  config.dim = 2;
  config.evict_unseen_seconds = 2.5;
  std::unique_ptr<EmbeddingTable> table = EmbeddingTable::Create(config).value();
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  const std::vector<float> g = {1, 1};
  // Id r is pushed in round r, one second after round r - 1; id 1 again in every round.
  for (int64_t r = 1; r <= 6; ++r) {
    REQUIRE(table->Push({r}, g, r).ok());
    if (r > 1) REQUIRE(table->Push({1}, g, r).ok());
    table->EvictStale(r, t0 + absl::Seconds(r));
    // Rounds given at least 2.5 s before now are stale: ids r - 3 and older are gone.
    for (int64_t id = 2; id <= r; ++id) {
      INFO("round " << r << " id " << id);
      CHECK(table->Contains(id) == (id > r - 3));
    }
    CHECK(table->Contains(1));
  }
  // Without time passing, nothing more goes.
  const int64_t rows = table->stats().rows;
  CHECK(table->EvictStale(6, t0 + absl::Seconds(6)) == 0);
  CHECK(table->stats().rows == rows);

  // max_bytes: as many rows as fit, the least recently used evicted beyond; with eviction off,
  // refused naming the limit.
  TableConfig bounded;
  bounded.name = "b";
  bounded.dim = 4;
  std::unique_ptr<EmbeddingTable> probe = EmbeddingTable::Create(bounded).value();
  const int64_t fit = rng.Int(3, 9);
  bounded.max_bytes = fit * probe->BytesPerRow() + rng.Int(0, probe->BytesPerRow() - 1);
  std::unique_ptr<EmbeddingTable> capped = EmbeddingTable::Create(bounded).value();
  CHECK(capped->max_rows() == fit);
  for (int64_t id = 0; id < 2 * fit; ++id) {
    REQUIRE(capped->Push({id}, std::vector<float>(4, 1.0f), id + 1).ok());
  }
  CHECK(capped->stats().rows == fit);
  CHECK(capped->Contains(2 * fit - 1));
  CHECK_FALSE(capped->Contains(0));
  bounded.evict_over_budget = false;
  std::unique_ptr<EmbeddingTable> refusing = EmbeddingTable::Create(bounded).value();
  for (int64_t id = 0; id < fit; ++id) {
    REQUIRE(refusing->Push({id}, std::vector<float>(4, 1.0f), 1).ok());
  }
  const absl::Status over = refusing->Push({fit}, std::vector<float>(4, 1.0f), 2);
  CHECK(absl::IsResourceExhausted(over));
  CHECK(absl::StrContains(over.message(), "max_bytes"));
  CHECK(refusing->stats().rows == fit);
  bounded.max_bytes = -1;
  CHECK(absl::IsInvalidArgument(EmbeddingTable::Create(bounded).status()));
}

}  // namespace
}  // namespace kvstore
