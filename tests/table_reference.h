// Test references for tables (docs/tables.md): Zipf, random ids with a heavy head as recommender
// traffic has, and TableReference, what an EmbeddingTable should hold computed independently -
// a map of rows in float64 with its own admission counts, its own least-recently-used choice (a
// use clock and a scan) and its own optimizer steps.
#ifndef KVSTORE_TESTS_TABLE_REFERENCE_H_
#define KVSTORE_TESTS_TABLE_REFERENCE_H_

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "common/store/embedding_table.h"

namespace kvstore::testing {

// Zipf draws ranks 1..n with P(k) proportional to 1 / k^s, mapped to scattered 64-bit ids.
class Zipf {
 public:
  Zipf(int64_t n, double s);
  int64_t Draw(std::mt19937_64& engine) const;

 private:
  std::vector<double> cdf_;
};

// TableReference: what a table of `config` should hold. Its initial rows are InitialRow's of
// `initial`, a table of the same config (the initializer is tested on its own).
class TableReference {
 public:
  explicit TableReference(const EmbeddingTable& initial) : table_(initial), c_(initial.config()) {}

  // Pull returns the row of `id` (stored, or the initializer's), marking it used.
  std::vector<double> Pull(int64_t id);
  // Push applies one push at `round`; false (changing nothing) when the table must refuse it.
  bool Push(const std::vector<int64_t>& ids, const std::vector<float>& grads, int64_t round);
  void EvictUnseen(int64_t round);

  std::set<int64_t> Ids() const;
  int64_t Count(int64_t id) const;
  int64_t admitted() const { return admitted_; }
  int64_t evicted() const { return evicted_; }

 private:
  struct Row {
    std::vector<double> w, a, b;
    int64_t steps = 0, used = 0, pushed = 0;
  };
  std::vector<double> Initial(int64_t id) const;
  void Step(Row& row, const std::vector<double>& grad) const;

  const EmbeddingTable& table_;
  const TableConfig c_;
  std::map<int64_t, Row> rows_;
  std::map<int64_t, int64_t> counts_;
  int64_t clock_ = 0, admitted_ = 0, evicted_ = 0;
};

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_TABLE_REFERENCE_H_
