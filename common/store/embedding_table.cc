#include "common/store/embedding_table.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace kvstore {
namespace {

// SplitMix64: the stream of ids, elements and seeds mixed into uniform 64-bit values.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform returns a value in [0, 1) drawn from (seed, id, draw) alone.
double Uniform(uint64_t seed, int64_t id, uint64_t draw) {
  const uint64_t bits = Mix(Mix(seed ^ Mix(static_cast<uint64_t>(id))) + draw);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

absl::Status Invalid(const TableConfig& config, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("table ", config.name, ": ", what));
}

}  // namespace

absl::StatusOr<std::unique_ptr<EmbeddingTable>> EmbeddingTable::Create(TableConfig config) {
  if (config.dim < 1) return Invalid(config, absl::StrCat("dim ", config.dim, " is below 1"));
  if (config.admit_after < 1) {
    return Invalid(config, absl::StrCat("admit_after ", config.admit_after, " is below 1"));
  }
  if (config.evict_unseen_rounds < 0 || config.max_rows < 0 || config.max_bytes < 0 ||
      !(config.evict_unseen_seconds >= 0)) {
    return Invalid(config, absl::StrCat("evict_unseen_rounds (", config.evict_unseen_rounds,
                                        "), max_rows (", config.max_rows, "), max_bytes (",
                                        config.max_bytes, ") and evict_unseen_seconds (",
                                        config.evict_unseen_seconds, ") cannot be negative"));
  }
  const RowInitializer& init = config.initializer;
  if (init.kind == RowInitializer::Kind::kUniform && !(init.a <= init.b)) {
    return Invalid(config, absl::StrCat("uniform(", init.a, ", ", init.b, ") is an empty range"));
  }
  if (init.kind == RowInitializer::Kind::kNormal && !(init.b >= 0)) {
    return Invalid(config, absl::StrCat("normal's standard deviation ", init.b, " is negative"));
  }
  const RowOptimizer& opt = config.optimizer;
  if (!(opt.lr >= 0) || !(opt.epsilon >= 0)) {
    return Invalid(config, absl::StrCat("lr (", opt.lr, ") and epsilon (", opt.epsilon,
                                        ") must be 0 or more"));
  }
  if (!(opt.beta1 >= 0 && opt.beta1 < 1 && opt.beta2 >= 0 && opt.beta2 < 1)) {
    return Invalid(config, absl::StrCat("beta1 (", opt.beta1, ") and beta2 (", opt.beta2,
                                        ") must lie in [0, 1)"));
  }
  return std::unique_ptr<EmbeddingTable>(new EmbeddingTable(std::move(config)));
}

EmbeddingTable::EmbeddingTable(TableConfig config)
    : config_(std::move(config)),
      state_vectors_(config_.optimizer.kind == RowOptimizer::Kind::kSgd       ? 0
                     : config_.optimizer.kind == RowOptimizer::Kind::kAdagrad ? 1
                                                                              : 2),
      stride_(config_.dim * (1 + state_vectors_)) {
  const int64_t by_bytes =
      config_.max_bytes > 0 ? std::max<int64_t>(1, config_.max_bytes / BytesPerRow()) : 0;
  max_rows_ = config_.max_rows == 0 ? by_bytes
              : by_bytes == 0       ? config_.max_rows
                                    : std::min(config_.max_rows, by_bytes);
}

void EmbeddingTable::InitialRow(int64_t id, float* out) const {
  const RowInitializer& init = config_.initializer;
  for (int64_t j = 0; j < config_.dim; ++j) {
    double v = 0;
    switch (init.kind) {
      case RowInitializer::Kind::kZeros:
        break;
      case RowInitializer::Kind::kUniform:
        v = init.a + (init.b - init.a) * Uniform(init.seed, id, static_cast<uint64_t>(j));
        break;
      case RowInitializer::Kind::kNormal: {
        // Box-Muller over two draws of the element's own.
        const double u1 = 1.0 - Uniform(init.seed, id, 2 * static_cast<uint64_t>(j));
        const double u2 = Uniform(init.seed, id, 2 * static_cast<uint64_t>(j) + 1);
        v = init.a + init.b * std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
        break;
      }
    }
    out[j] = static_cast<float>(v);
  }
}

float* EmbeddingTable::Row(uint32_t slot) {
  return blocks_[slot / kRowsPerBlock].get() + (slot % kRowsPerBlock) * stride_;
}

uint32_t EmbeddingTable::NewSlot(int64_t id, int64_t round) {
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = meta_.Add();
    if (slot % kRowsPerBlock == 0) {
      // Not zeroed: every row is written whole when its slot is taken, so a block's pages are
      // touched only as rows fill it.
      blocks_.push_back(
          std::unique_ptr<float[]>(new float[static_cast<size_t>(kRowsPerBlock * stride_)]));
    }
  }
  meta_[slot] = Slot{id, round, 0, kNone, kNone};
  float* row = Row(slot);
  InitialRow(id, row);
  std::fill(row + config_.dim, row + stride_, 0.0f);
  slots_[id] = slot;
  MakeRecent(slot);
  ++admitted_;
  return slot;
}

void EmbeddingTable::Unlink(uint32_t slot) {
  Slot& s = meta_[slot];
  if (s.prev != kNone) meta_[s.prev].next = s.next;
  if (s.next != kNone) meta_[s.next].prev = s.prev;
  if (most_recent_ == slot) most_recent_ = s.next;
  if (least_recent_ == slot) least_recent_ = s.prev;
  s.prev = s.next = kNone;
}

void EmbeddingTable::MakeRecent(uint32_t slot) {
  if (most_recent_ == slot) return;
  Unlink(slot);
  Slot& s = meta_[slot];
  s.next = most_recent_;
  if (most_recent_ != kNone) meta_[most_recent_].prev = slot;
  most_recent_ = slot;
  if (least_recent_ == kNone) least_recent_ = slot;
}

void EmbeddingTable::Remove(uint32_t slot) {
  Unlink(slot);
  slots_.erase(meta_[slot].id);
  free_.push_back(slot);
  ++evicted_;
}

void EmbeddingTable::Step(uint32_t slot, const double* grad) {
  const RowOptimizer& o = config_.optimizer;
  float* w = Row(slot);
  const int64_t n = config_.dim;
  const int64_t t = ++meta_[slot].steps;
  const float lr = static_cast<float>(o.lr), wd = static_cast<float>(o.wd);
  auto pre = [&](int64_t i) {
    float g = static_cast<float>(grad[i]) * static_cast<float>(o.rescale_grad);
    if (o.clip_gradient >= 0) {
      const float c = static_cast<float>(o.clip_gradient);
      g = std::min(std::max(g, -c), c);
    }
    return g + wd * w[i];
  };
  switch (o.kind) {
    case RowOptimizer::Kind::kSgd:
      for (int64_t i = 0; i < n; ++i) w[i] -= lr * pre(i);
      break;
    case RowOptimizer::Kind::kAdagrad: {
      float* history = w + n;
      const float eps = static_cast<float>(o.epsilon);
      for (int64_t i = 0; i < n; ++i) {
        const float g = pre(i);
        history[i] += g * g;
        w[i] -= lr * g / (std::sqrt(history[i]) + eps);
      }
      break;
    }
    case RowOptimizer::Kind::kAdam: {
      float* mean = w + n;
      float* var = w + 2 * n;
      const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
      const float c1 = static_cast<float>(1.0 - o.beta1), c2 = static_cast<float>(1.0 - o.beta2);
      const float eps = static_cast<float>(o.epsilon);
      const float step = static_cast<float>(o.lr * std::sqrt(1.0 - std::pow(o.beta2, t)) /
                                            (1.0 - std::pow(o.beta1, t)));
      for (int64_t i = 0; i < n; ++i) {
        const float g = pre(i);
        mean[i] = b1 * mean[i] + c1 * g;
        var[i] = b2 * var[i] + c2 * g * g;
        w[i] -= step * mean[i] / (std::sqrt(var[i]) + eps);
      }
      break;
    }
  }
}

absl::Status EmbeddingTable::Pull(absl::Span<const int64_t> ids, absl::Span<float> out) {
  const int64_t dim = config_.dim;
  if (out.size() != ids.size() * static_cast<size_t>(dim)) {
    return Invalid(config_, absl::StrCat("pulling ", ids.size(), " rows of ", dim,
                                         " elements into ", out.size(), " elements"));
  }
  absl::MutexLock lock(&mu_);
  for (size_t r = 0; r < ids.size(); ++r) {
    float* into = out.data() + r * dim;
    auto found = slots_.find(ids[r]);
    if (found == slots_.end()) {
      InitialRow(ids[r], into);
      continue;
    }
    std::copy_n(Row(found->second), dim, into);
    MakeRecent(found->second);
  }
  return absl::OkStatus();
}

int64_t EmbeddingTable::NewRows(absl::Span<const int64_t> ids) const {
  absl::flat_hash_set<int64_t> seen;
  int64_t new_rows = 0;
  absl::MutexLock lock(&mu_);
  for (const int64_t id : ids) {
    if (slots_.contains(id) || !seen.insert(id).second) continue;
    auto counted = counts_.find(id);
    if ((counted == counts_.end() ? 0 : counted->second) + 1 >= config_.admit_after) ++new_rows;
  }
  return new_rows;
}

absl::Status EmbeddingTable::Push(absl::Span<const int64_t> ids, absl::Span<const float> grads,
                                  int64_t round) {
  const int64_t dim = config_.dim;
  if (grads.size() != ids.size() * static_cast<size_t>(dim)) {
    return Invalid(config_, absl::StrCat("pushing ", ids.size(), " rows of ", dim,
                                         " elements with ", grads.size(), " elements"));
  }
  // The distinct ids, in first-appearance order, with their gradients summed.
  absl::flat_hash_map<int64_t, size_t> index;
  std::vector<int64_t> order;
  std::vector<double> sums;
  index.reserve(ids.size());
  order.reserve(ids.size());
  sums.reserve(ids.size() * static_cast<size_t>(dim));
  for (size_t r = 0; r < ids.size(); ++r) {
    auto [it, added] = index.try_emplace(ids[r], order.size());
    if (added) {
      order.push_back(ids[r]);
      sums.resize(sums.size() + dim, 0.0);
    }
    double* sum = sums.data() + it->second * dim;
    const float* g = grads.data() + r * dim;
    for (int64_t j = 0; j < dim; ++j) sum[j] += g[j];
  }
  absl::MutexLock lock(&mu_);
  // Which ids this push admits, and whether the rows fit, before anything changes.
  std::vector<bool> admits(order.size(), false);
  int64_t new_rows = 0, touched = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (slots_.contains(order[i])) {
      ++touched;
      continue;
    }
    auto counted = counts_.find(order[i]);
    const int64_t count = (counted == counts_.end() ? 0 : counted->second) + 1;
    if (count >= config_.admit_after) {
      admits[i] = true;
      ++new_rows;
    }
  }
  const int64_t rows = static_cast<int64_t>(slots_.size());
  if (max_rows_ > 0 && rows + new_rows > max_rows_) {
    if (!config_.evict_over_budget) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "table ", config_.name, ": ", new_rows, " new rows would make ", rows + new_rows,
          " rows, over its limit of ", max_rows_, LimitName(), ", with eviction off"));
    }
    // The rows evicted are never ones this push touches: they all fit.
    if (touched + new_rows > max_rows_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("table ", config_.name, ": one push touches ", touched + new_rows,
                       " rows, more than its limit of ", max_rows_, LimitName()));
    }
  }
  // The rows this push touches are the most recent: evicted last.
  for (size_t i = 0; i < order.size(); ++i) {
    auto found = slots_.find(order[i]);
    if (found != slots_.end()) MakeRecent(found->second);
  }
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t id = order[i];
    auto found = slots_.find(id);
    uint32_t slot;
    if (found != slots_.end()) {
      slot = found->second;
    } else if (!admits[i]) {
      ++counts_[id];
      continue;
    } else {
      counts_.erase(id);
      if (max_rows_ > 0 && static_cast<int64_t>(slots_.size()) >= max_rows_) {
        Remove(least_recent_);
      }
      slot = NewSlot(id, round);
    }
    meta_[slot].last_pushed = round;
    MakeRecent(slot);
    Step(slot, sums.data() + i * dim);
  }
  return absl::OkStatus();
}

int64_t EmbeddingTable::EvictUnseen(int64_t round) {
  if (config_.evict_unseen_rounds == 0) return 0;
  absl::MutexLock lock(&mu_);
  std::vector<uint32_t> stale;
  for (const auto& [id, slot] : slots_) {
    if (round - meta_[slot].last_pushed > config_.evict_unseen_rounds) stale.push_back(slot);
  }
  for (uint32_t slot : stale) Remove(slot);
  return static_cast<int64_t>(stale.size());
}

TableContents EmbeddingTable::Export() const {
  absl::MutexLock lock(&mu_);
  TableContents contents;
  contents.row_floats = stride_;
  const size_t rows = slots_.size();
  contents.ids.reserve(rows);
  contents.values.reserve(rows * static_cast<size_t>(stride_));
  contents.last_pushed.reserve(rows);
  contents.steps.reserve(rows);
  for (uint32_t slot = least_recent_; slot != kNone; slot = meta_[slot].prev) {
    const Slot& s = meta_[slot];
    contents.ids.push_back(s.id);
    const float* row = blocks_[slot / kRowsPerBlock].get() + (slot % kRowsPerBlock) * stride_;
    contents.values.insert(contents.values.end(), row, row + stride_);
    contents.last_pushed.push_back(s.last_pushed);
    contents.steps.push_back(s.steps);
  }
  for (const auto& [id, count] : counts_) {
    contents.counted_ids.push_back(id);
    contents.counts.push_back(count);
  }
  contents.admitted = admitted_;
  contents.evicted = evicted_;
  return contents;
}

absl::Status EmbeddingTable::Load(const TableContents& c) {
  const size_t rows = c.ids.size();
  if (c.row_floats != stride_ || c.values.size() != rows * static_cast<size_t>(stride_) ||
      c.last_pushed.size() != rows || c.steps.size() != rows ||
      c.counted_ids.size() != c.counts.size()) {
    return absl::DataLossError(
        absl::StrCat("table ", config_.name, ": the saved table does not fit this one: ", rows,
                     " rows of ", c.row_floats, " floats with ", c.values.size(), " values, ",
                     c.last_pushed.size(), " rounds and ", c.steps.size(), " update counts, ",
                     c.counted_ids.size(), " ids counted and ", c.counts.size(),
                     " counts, for rows of ", stride_, " floats (dim and optimizer)"));
  }
  if (max_rows_ > 0 && static_cast<int64_t>(rows) > max_rows_) {
    return absl::InvalidArgumentError(absl::StrCat("table ", config_.name, ": ", rows,
                                                   " saved rows exceed its limit of ", max_rows_,
                                                   LimitName()));
  }
  absl::MutexLock lock(&mu_);
  if (!slots_.empty() || !counts_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("table ", config_.name, ": loading into a table that holds rows"));
  }
  for (size_t r = 0; r < rows; ++r) {
    if (slots_.contains(c.ids[r])) {
      // Undo: the table is left empty, as it was.
      for (const auto& [id, slot] : slots_) free_.push_back(slot);
      slots_.clear();
      most_recent_ = least_recent_ = kNone;
      return absl::DataLossError(
          absl::StrCat("table ", config_.name, ": the saved table repeats id ", c.ids[r]));
    }
    const uint32_t slot = NewSlot(c.ids[r], c.last_pushed[r]);  // The most recent so far.
    std::copy_n(c.values.data() + r * stride_, stride_, Row(slot));
    meta_[slot].steps = c.steps[r];
  }
  for (size_t i = 0; i < c.counted_ids.size(); ++i) counts_[c.counted_ids[i]] = c.counts[i];
  admitted_ = c.admitted;
  evicted_ = c.evicted;
  return absl::OkStatus();
}

std::string EmbeddingTable::LimitName() const {
  const int64_t by_bytes = config_.max_bytes > 0 ? config_.max_bytes / BytesPerRow() : 0;
  if (by_bytes > 0 && (config_.max_rows == 0 || by_bytes < config_.max_rows)) {
    return absl::StrCat(" (max_bytes ", config_.max_bytes, " at ", BytesPerRow(), " bytes a row)");
  }
  return " (max_rows)";
}

int64_t EmbeddingTable::EvictStale(int64_t round, absl::Time now) {
  int64_t evicted = EvictUnseen(round);
  if (config_.evict_unseen_seconds <= 0) return evicted;
  const absl::Time before = now - absl::Seconds(config_.evict_unseen_seconds);
  absl::MutexLock lock(&mu_);
  if (round_times_.empty() || round_times_.back().first < round) {
    round_times_.emplace_back(round, now);
  }
  // The newest round given at or before `before`: rows last pushed then or earlier are stale.
  int64_t stale_round = -1;
  while (!round_times_.empty() && round_times_.front().second <= before) {
    stale_round = round_times_.front().first;
    round_times_.pop_front();
  }
  if (stale_round < 0) return evicted;
  std::vector<uint32_t> stale;
  for (const auto& [id, slot] : slots_) {
    if (meta_[slot].last_pushed <= stale_round) stale.push_back(slot);
  }
  for (uint32_t slot : stale) Remove(slot);
  return evicted + static_cast<int64_t>(stale.size());
}

bool EmbeddingTable::Contains(int64_t id) const {
  absl::MutexLock lock(&mu_);
  return slots_.contains(id);
}

int64_t EmbeddingTable::Count(int64_t id) const {
  absl::MutexLock lock(&mu_);
  auto found = counts_.find(id);
  return found == counts_.end() ? 0 : found->second;
}

std::vector<int64_t> EmbeddingTable::Ids() const {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> ids;
  ids.reserve(slots_.size());
  for (const auto& [id, slot] : slots_) ids.push_back(id);
  return ids;
}

int64_t EmbeddingTable::BytesPerRow() const {
  // The elements; the index entry (id and slot, one control byte, at the map's lowest load
  // factor of 7/16 after it grows); the bookkeeping slot.
  const int64_t index = (sizeof(int64_t) + sizeof(uint32_t) + 4 + 1) * 16 / 7;
  return stride_ * static_cast<int64_t>(sizeof(float)) + index + static_cast<int64_t>(sizeof(Slot));
}

TableStats EmbeddingTable::stats() const {
  absl::MutexLock lock(&mu_);
  TableStats stats;
  stats.rows = static_cast<int64_t>(slots_.size());
  stats.counting = static_cast<int64_t>(counts_.size());
  stats.admitted = admitted_;
  stats.evicted = evicted_;
  // Rows as allocated (whole blocks), the bookkeeping of every slot, and both maps' capacity.
  stats.bytes = static_cast<int64_t>(blocks_.size()) * kRowsPerBlock * stride_ *
                    static_cast<int64_t>(sizeof(float)) +
                static_cast<int64_t>(meta_.capacity() * sizeof(Slot)) +
                static_cast<int64_t>(slots_.capacity() * (sizeof(int64_t) + 4 + 4 + 1)) +
                static_cast<int64_t>(counts_.capacity() * (2 * sizeof(int64_t) + 1));
  return stats;
}

}  // namespace kvstore
