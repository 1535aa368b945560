#include "tests/table_reference.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace kvstore::testing {

Zipf::Zipf(int64_t n, double s) {
  double total = 0;
  for (int64_t k = 1; k <= n; ++k) cdf_.push_back(total += std::pow(static_cast<double>(k), -s));
  for (double& c : cdf_) c /= total;
}

int64_t Zipf::Draw(std::mt19937_64& engine) const {
  const double u = std::uniform_real_distribution<double>(0, 1)(engine);
  const int64_t k = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
  return static_cast<int64_t>((static_cast<uint64_t>(k) + 1) * 0x9e3779b97f4a7c15ULL);
}

std::vector<double> TableReference::Pull(int64_t id) {
  auto found = rows_.find(id);
  if (found == rows_.end()) return Initial(id);
  found->second.used = ++clock_;
  return found->second.w;
}

bool TableReference::Push(const std::vector<int64_t>& ids, const std::vector<float>& grads,
                          int64_t round) {
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

void TableReference::EvictUnseen(int64_t round) {
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

std::set<int64_t> TableReference::Ids() const {
  std::set<int64_t> ids;
  for (const auto& [id, row] : rows_) ids.insert(id);
  return ids;
}

int64_t TableReference::Count(int64_t id) const {
  auto found = counts_.find(id);
  return found == counts_.end() ? 0 : found->second;
}

std::vector<double> TableReference::Initial(int64_t id) const {
  std::vector<float> row(c_.dim);
  table_.InitialRow(id, row.data());
  return std::vector<double>(row.begin(), row.end());
}

void TableReference::Step(Row& row, const std::vector<double>& grad) const {
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
        const double lr_t = o.lr * std::sqrt(1 - std::pow(o.beta2, t)) / (1 - std::pow(o.beta1, t));
        row.w[i] -= lr_t * row.a[i] / (std::sqrt(row.b[i]) + o.epsilon);
        break;
      }
    }
  }
}

}  // namespace kvstore::testing
