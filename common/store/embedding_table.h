// EmbeddingTable: a table of float32 rows keyed by arbitrary 64-bit ids that grows with the data
// and forgets ids nobody sees any more - one server's part of a table value (docs/tables.md).
//
// - A row that is not stored reads as its initializer's value: zeros, uniform(a, b) or
//   normal(mean, std), drawn from the id, the element and the seed alone, so that every run, every
//   server and every replica makes the same row (InitialRow).
// - Admission: a pushed id is counted once per Push; it gets a row once it has been counted
//   `admit_after` times (1: at its first push). Until then a push of it changes nothing but its
//   count, and a pull reads the initializer's value. The row is created with the initializer's
//   value and then updated by the push that admitted it.
// - The row optimizer's state lives with the row: sgd (none), adagrad (the squared-gradient
//   history), adam (mean, variance and the row's own update count for the bias correction).
//   Each follows MXNet's update operator of the same name with its lazy-update meaning: only the
//   rows of a push move, with the gradients of an id's duplicates summed first; rescale_grad,
//   clip_gradient and wd (coupled, added to the gradient) as MXNet applies them.
// - Eviction: a row not pushed for `evict_unseen_rounds` rounds is removed by EvictUnseen; a
//   push that would store more than `max_rows` rows (or than `max_bytes` hold) evicts the least
//   recently used ones (pulled
//   or pushed) first - or, with `evict_over_budget` false, is refused with ResourceExhausted
//   naming the limit, changing nothing. An evicted id starts again from its admission count 0.
// Bad input (gradients or an output of the wrong size) is refused before anything changes,
// naming the table and the sizes; a budget exceeded names the table and the limit.
//
// Memory: a stored row costs its elements (dim, plus dim per state vector) in blocks of
// kRowsPerBlock rows, plus about 60 bytes of index and bookkeeping (BytesPerRow); ids counted
// for admission cost about 24 bytes each until admitted.
//
// Threading: thread-safe; every call holds the table's lock.
#ifndef KVSTORE_COMMON_STORE_EMBEDDING_TABLE_H_
#define KVSTORE_COMMON_STORE_EMBEDDING_TABLE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace kvstore {

struct RowInitializer {
  enum class Kind { kZeros, kUniform, kNormal };
  Kind kind = Kind::kZeros;
  double a = 0;  // uniform: the low end; normal: the mean.
  double b = 0;  // uniform: the high end; normal: the standard deviation.
  uint64_t seed = 0;
};

struct RowOptimizer {
  enum class Kind { kSgd, kAdagrad, kAdam };
  Kind kind = Kind::kSgd;
  double lr = 0.01;
  double wd = 0;
  double rescale_grad = 1;
  double clip_gradient = -1;  // Negative: no clipping.
  double beta1 = 0.9, beta2 = 0.999;
  double epsilon = 1e-8;  // MXNet's adagrad default is 1e-7: set it so.
};

struct TableConfig {
  std::string name = "table";  // Named in errors (the key).
  int64_t dim = 0;
  RowInitializer initializer;
  RowOptimizer optimizer;
  int64_t admit_after = 1;
  int64_t evict_unseen_rounds = 0;  // 0: never.
  int64_t max_rows = 0;             // 0: no limit.
  // The most bytes the rows may take (BytesPerRow each), as a row limit: the smaller of the
  // two applies. 0: no limit.
  int64_t max_bytes = 0;
  // Rows not pushed for this long are removed by EvictStale (0: never). Measured from the
  // times EvictStale is given: a restored table's clock starts at its first call.
  double evict_unseen_seconds = 0;
  bool evict_over_budget = true;
};

// TableStats: what a table holds and has done.
struct TableStats {
  int64_t rows = 0;
  int64_t counting = 0;  // Ids counted, not admitted yet.
  int64_t admitted = 0;  // Rows created, in all.
  int64_t evicted = 0;   // Rows removed, in all (unseen or over the budget).
  int64_t bytes = 0;     // What the rows and the counts take.
};

// TableContents: what a table holds, for a checkpoint or a copy (EmbeddingTable::Export and
// Load): its stored rows from the least to the most recently used, each with its elements and
// its optimizer state (row_floats = dim x (1 + state vectors) floats), the round of its last
// push and its update count; the ids counted but not admitted, with their counts; the counters.
struct TableContents {
  int64_t row_floats = 0;
  std::vector<int64_t> ids;
  std::vector<float> values;  // ids.size() x row_floats.
  std::vector<int64_t> last_pushed;
  std::vector<int64_t> steps;
  std::vector<int64_t> counted_ids;
  std::vector<int64_t> counts;
  int64_t admitted = 0;
  int64_t evicted = 0;
};

class EmbeddingTable {
 public:
  static constexpr int64_t kRowsPerBlock = 1024;

  // Create checks `config`: InvalidArgument naming the field for a dim below 1, admit_after
  // below 1, negative evict_unseen_rounds or max_rows, a uniform range with a > b, a negative
  // standard deviation, a learning rate or epsilon below 0, betas outside [0, 1).
  static absl::StatusOr<std::unique_ptr<EmbeddingTable>> Create(TableConfig config);

  const TableConfig& config() const { return config_; }

  // InitialRow writes the initializer's row of `id` (dim elements) into `out`.
  void InitialRow(int64_t id, float* out) const;

  // Pull writes the rows of `ids` (any order, duplicates allowed) into `out`, ids.size() x dim
  // elements, row-major: the stored row, or the initializer's. Stored rows count as used.
  // InvalidArgument (nothing written) when `out` has another size.
  absl::Status Pull(absl::Span<const int64_t> ids, absl::Span<float> out);

  // Push applies `grads` (ids.size() x dim, row-major) at round `round`: counts each distinct
  // id once, admits those counted admit_after times, and runs the optimizer on the rows of the
  // admitted ids with the sum of their gradients. InvalidArgument when `grads` has another
  // size; ResourceExhausted when the new rows would exceed max_rows and eviction is off. On an
  // error nothing changes.
  absl::Status Push(absl::Span<const int64_t> ids, absl::Span<const float> grads, int64_t round);

  // NewRows returns how many rows a Push of `ids` would create now: its distinct ids without a
  // row whose count would reach admit_after (for a caller that checks a memory budget first).
  int64_t NewRows(absl::Span<const int64_t> ids) const;

  // EvictUnseen removes the rows not pushed since `round` - evict_unseen_rounds (none when
  // evict_unseen_rounds is 0) and returns how many.
  int64_t EvictUnseen(int64_t round);
  // EvictStale runs after a push of `round` made at `now`: EvictUnseen(round), and, with
  // evict_unseen_seconds, removes the rows whose last push was in a round that ended at least
  // evict_unseen_seconds before `now` (it remembers when each round was given). Returns how many
  // rows it removed.
  int64_t EvictStale(int64_t round, absl::Time now);

  // max_rows returns the limit on rows that applies: max_rows, or max_bytes over BytesPerRow,
  // the smaller (0: none).
  int64_t max_rows() const { return max_rows_; }

  // Export returns what the table holds; Load puts `contents` into this table, which must be
  // empty: DataLoss naming the table for contents whose sizes do not agree, another row width
  // or optimizer (row_floats), a repeated id; InvalidArgument for more rows than max_rows.
  TableContents Export() const;
  absl::Status Load(const TableContents& contents);

  // Contains says whether `id` has a row; Count how many times it has been counted while not
  // admitted (0 once it has a row).
  bool Contains(int64_t id) const;
  int64_t Count(int64_t id) const;
  // Ids returns the ids with a row, in no order.
  std::vector<int64_t> Ids() const;
  TableStats stats() const;

  // BytesPerRow: a stored row's elements and its share of the index and bookkeeping.
  int64_t BytesPerRow() const;

 private:
  explicit EmbeddingTable(TableConfig config);

  // Slot: a stored row's bookkeeping; its elements are at Row(slot).
  struct Slot {
    int64_t id = 0;
    int64_t last_pushed = 0;              // The round of its last push.
    int64_t steps = 0;                    // Optimizer steps taken (adam's bias correction).
    uint32_t prev = kNone, next = kNone;  // Recency list, most recent first.
  };
  static constexpr uint32_t kNone = ~uint32_t{0};

  float* Row(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LimitName names the row limit that applies, for errors.
  std::string LimitName() const;
  uint32_t NewSlot(int64_t id, int64_t round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Remove(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unlink(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MakeRecent(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Step(uint32_t slot, const double* grad) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TableConfig config_;
  int64_t max_rows_ = 0;         // See max_rows().
  const int64_t state_vectors_;  // Per row: 0 (sgd), 1 (adagrad), 2 (adam).
  const int64_t stride_;         // Floats per row: dim * (1 + state_vectors).
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, uint32_t> slots_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, int64_t> counts_ ABSL_GUARDED_BY(mu_);
  // Slots in blocks of kRowsPerBlock, as the rows: a table that grows never moves them (a
  // vector grown a block at a time would copy every slot at every block).
  class SlotBlocks {
   public:
    Slot& operator[](uint32_t slot) { return blocks_[slot / kRowsPerBlock][slot % kRowsPerBlock]; }
    const Slot& operator[](uint32_t slot) const {
      return blocks_[slot / kRowsPerBlock][slot % kRowsPerBlock];
    }
    uint32_t size() const { return size_; }
    size_t capacity() const { return blocks_.size() * static_cast<size_t>(kRowsPerBlock); }
    // Add takes the next slot, adding a block when the last is full.
    uint32_t Add() {
      if (size_ == capacity()) blocks_.push_back(std::make_unique<Slot[]>(kRowsPerBlock));
      return size_++;
    }

   private:
    std::vector<std::unique_ptr<Slot[]>> blocks_;
    uint32_t size_ = 0;
  };
  SlotBlocks meta_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<float[]>> blocks_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_ ABSL_GUARDED_BY(mu_);
  uint32_t most_recent_ ABSL_GUARDED_BY(mu_) = kNone;
  uint32_t least_recent_ ABSL_GUARDED_BY(mu_) = kNone;
  int64_t admitted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
  // EvictStale's clock: when each round (the newest last) was given, oldest first.
  std::deque<std::pair<int64_t, absl::Time>> round_times_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_STORE_EMBEDDING_TABLE_H_
