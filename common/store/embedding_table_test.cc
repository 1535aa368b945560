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

#include "absl/strings/str_cat.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

// Zipf draws ranks 1..n with P(k) proportional to 1 / k^s, mapped to scattered 64-bit ids.
class Zipf {
 public:
  Zipf(int64_t n, double s) {
    double total = 0;
    for (int64_t k = 1; k <= n; ++k) cdf_.push_back(total += std::pow(static_cast<double>(k), -s));
    for (double& c : cdf_) c /= total;
  }
  int64_t Draw(TestRng& rng) const {
    const double u = rng.Uniform(0, 1);
    const int64_t k = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
    return static_cast<int64_t>((static_cast<uint64_t>(k) + 1) * 0x9e3779b97f4a7c15ULL);
  }

 private:
  std::vector<double> cdf_;
};

// Reference: what the table should hold, in float64.
class Reference {
 public:
  explicit Reference(const EmbeddingTable& table) : table_(table), c_(table.config()) {}

  std::vector<double> Pull(int64_t id) {
    auto found = rows_.find(id);
    if (found == rows_.end()) return Initial(id);
    found->second.used = ++clock_;
    return found->second.w;
  }

  // Push returns false (changing nothing) when the table must refuse it.
  bool Push(const std::vector<int64_t>& ids, const std::vector<float>& grads, int64_t round) {
    const int64_t dim = c_.dim;
    std::vector<int64_t> order;
    std::map<int64_t, std::vector<double>> sums;
    for (size_t r = 0; r < ids.size(); ++r) {
      auto [it, added] = sums.try_emplace(ids[r], std::vector<double>(dim, 0.0));
      if (added) order.push_back(ids[r]);
      for (int64_t j = 0; j < dim; ++j) it->second[j] += grads[r * dim + j];
    }
    int64_t fresh = 0, touched = 0;
    for (int64_t id : order) {
      if (rows_.count(id)) {
        ++touched;
      } else if (counts_[id] + 1 >= c_.admit_after) {
        ++fresh;
      }
    }
    for (auto it = counts_.begin(); it != counts_.end();) {
      it = it->second == 0 ? counts_.erase(it) : std::next(it);  // Undo operator[].
    }
    const int64_t rows = static_cast<int64_t>(rows_.size());
    if (c_.max_rows > 0 && rows + fresh > c_.max_rows &&
        (!c_.evict_over_budget || touched + fresh > c_.max_rows)) {
      return false;
    }
    for (int64_t id : order) {
      if (rows_.count(id)) rows_[id].used = ++clock_;
    }
    for (int64_t id : order) {
      if (!rows_.count(id)) {
        if (++counts_[id] < c_.admit_after) continue;
        counts_.erase(id);
        if (c_.max_rows > 0 && static_cast<int64_t>(rows_.size()) >= c_.max_rows) {
          auto oldest = std::min_element(
              rows_.begin(), rows_.end(),
              [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
          rows_.erase(oldest);
          ++evicted_;
        }
        Row& row = rows_[id];
        row.w = Initial(id);
        row.a.assign(dim, 0.0);
        row.b.assign(dim, 0.0);
        ++admitted_;
      }
      Row& row = rows_[id];
      row.used = ++clock_;
      row.pushed = round;
      Step(row, sums[id]);
    }
    return true;
  }

  void EvictUnseen(int64_t round) {
    if (c_.evict_unseen_rounds == 0) return;
    for (auto it = rows_.begin(); it != rows_.end();) {
      if (round - it->second.pushed > c_.evict_unseen_rounds) {
        it = rows_.erase(it);
        ++evicted_;
      } else {
        ++it;
      }
    }
  }

  std::set<int64_t> Ids() const {
    std::set<int64_t> ids;
    for (const auto& [id, row] : rows_) ids.insert(id);
    return ids;
  }
  int64_t Count(int64_t id) const {
    auto found = counts_.find(id);
    return found == counts_.end() ? 0 : found->second;
  }
  int64_t admitted() const { return admitted_; }
  int64_t evicted() const { return evicted_; }

 private:
  struct Row {
    std::vector<double> w, a, b;
    int64_t steps = 0, used = 0, pushed = 0;
  };

  std::vector<double> Initial(int64_t id) const {
    std::vector<float> row(c_.dim);
    table_.InitialRow(id, row.data());
    return std::vector<double>(row.begin(), row.end());
  }

  void Step(Row& row, const std::vector<double>& grad) const {
    const RowOptimizer& o = c_.optimizer;
    const int64_t t = ++row.steps;
    for (int64_t i = 0; i < c_.dim; ++i) {
      double g = grad[i] * o.rescale_grad;
      if (o.clip_gradient >= 0) g = std::clamp(g, -o.clip_gradient, o.clip_gradient);
      g += o.wd * row.w[i];
      switch (o.kind) {
        case RowOptimizer::Kind::kSgd:
          row.w[i] -= o.lr * g;
          break;
        case RowOptimizer::Kind::kAdagrad:
          row.a[i] += g * g;
          row.w[i] -= o.lr * g / (std::sqrt(row.a[i]) + o.epsilon);
          break;
        case RowOptimizer::Kind::kAdam: {
          row.a[i] = o.beta1 * row.a[i] + (1 - o.beta1) * g;
          row.b[i] = o.beta2 * row.b[i] + (1 - o.beta2) * g * g;
          const double lr_t =
              o.lr * std::sqrt(1 - std::pow(o.beta2, t)) / (1 - std::pow(o.beta1, t));
          row.w[i] -= lr_t * row.a[i] / (std::sqrt(row.b[i]) + o.epsilon);
          break;
        }
      }
    }
  }

  const EmbeddingTable& table_;
  const TableConfig c_;
  std::map<int64_t, Row> rows_;
  std::map<int64_t, int64_t> counts_;
  int64_t clock_ = 0, admitted_ = 0, evicted_ = 0;
};

// Same checks that the table and the reference agree on which rows exist, on every count, and
// on the values of the ids in `probe` (stored or not).
void Same(EmbeddingTable& table, Reference& reference, const std::vector<int64_t>& probe) {
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
    Reference reference(*table);
    int refused = 0;
    for (int64_t round = 1; round <= 25; ++round) {
      const size_t batch = static_cast<size_t>(rng.Int(1, 40));
      std::vector<int64_t> ids(batch);
      for (int64_t& id : ids) id = zipf.Draw(rng);
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

}  // namespace
}  // namespace kvstore
