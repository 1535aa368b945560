#include "common/table_wire.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

const char* InitializerName(RowInitializer::Kind kind) {
  switch (kind) {
    case RowInitializer::Kind::kUniform:
      return "uniform";
    case RowInitializer::Kind::kNormal:
      return "normal";
    case RowInitializer::Kind::kZeros:
      break;
  }
  return "zeros";
}

const char* OptimizerName(RowOptimizer::Kind kind) {
  switch (kind) {
    case RowOptimizer::Kind::kAdagrad:
      return "adagrad";
    case RowOptimizer::Kind::kAdam:
      return "adam";
    case RowOptimizer::Kind::kSgd:
      break;
  }
  return "sgd";
}

absl::StatusOr<RowInitializer::Kind> InitializerKind(absl::string_view name,
                                                     absl::string_view what) {
  for (const auto kind : {RowInitializer::Kind::kZeros, RowInitializer::Kind::kUniform,
                          RowInitializer::Kind::kNormal}) {
    if (name == InitializerName(kind)) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": unknown initializer \"", name, "\" (zeros, uniform or normal)"));
}

absl::StatusOr<RowOptimizer::Kind> OptimizerKind(absl::string_view name, absl::string_view what) {
  for (const auto kind :
       {RowOptimizer::Kind::kSgd, RowOptimizer::Kind::kAdagrad, RowOptimizer::Kind::kAdam}) {
    if (name == OptimizerName(kind)) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": unknown optimizer \"", name, "\" (sgd, adagrad or adam)"));
}

proto::TableSpec TableSpecToProto(const TableConfig& config) {
  proto::TableSpec spec;
  spec.set_dim(config.dim);
  spec.set_initializer(InitializerName(config.initializer.kind));
  spec.set_init_a(config.initializer.a);
  spec.set_init_b(config.initializer.b);
  spec.set_seed(config.initializer.seed);
  const RowOptimizer& o = config.optimizer;
  spec.set_optimizer(OptimizerName(o.kind));
  spec.set_lr(o.lr);
  spec.set_wd(o.wd);
  spec.set_rescale_grad(o.rescale_grad);
  spec.set_clip_gradient(o.clip_gradient);
  spec.set_beta1(o.beta1);
  spec.set_beta2(o.beta2);
  spec.set_epsilon(o.epsilon);
  spec.set_admit_after(config.admit_after);
  spec.set_evict_unseen_rounds(config.evict_unseen_rounds);
  spec.set_max_rows(config.max_rows);
  spec.set_evict_over_budget(config.evict_over_budget);
  spec.set_max_bytes(config.max_bytes);
  spec.set_evict_unseen_seconds(config.evict_unseen_seconds);
  return spec;
}

absl::StatusOr<TableConfig> TableConfigFromProto(const proto::TableSpec& spec,
                                                 const std::string& name) {
  TableConfig config;
  config.name = name;
  config.dim = spec.dim();
  ASSIGN_OR_RETURN(config.initializer.kind,
                   InitializerKind(spec.initializer(), absl::StrCat("table ", name)));
  config.initializer.a = spec.init_a();
  config.initializer.b = spec.init_b();
  config.initializer.seed = spec.seed();
  RowOptimizer& o = config.optimizer;
  ASSIGN_OR_RETURN(o.kind, OptimizerKind(spec.optimizer(), absl::StrCat("table ", name)));
  o.lr = spec.lr();
  o.wd = spec.wd();
  o.rescale_grad = spec.rescale_grad();
  o.clip_gradient = spec.clip_gradient();
  o.beta1 = spec.beta1();
  o.beta2 = spec.beta2();
  o.epsilon = spec.epsilon();
  config.admit_after = spec.admit_after();
  config.evict_unseen_rounds = spec.evict_unseen_rounds();
  config.max_rows = spec.max_rows();
  config.evict_over_budget = spec.evict_over_budget();
  config.max_bytes = spec.max_bytes();
  config.evict_unseen_seconds = spec.evict_unseen_seconds();
  // The table's own checks, on a table of no rows.
  RETURN_IF_ERROR(EmbeddingTable::Create(config).status());
  return config;
}

std::vector<proto::TableCheckpoint> TablePieces(const proto::Key& key, const proto::TableSpec& spec,
                                                int64_t round, const TableContents& contents,
                                                size_t piece_bytes) {
  const size_t rows = contents.ids.size();
  const size_t row_floats = static_cast<size_t>(contents.row_floats);
  const size_t row_bytes = row_floats * sizeof(float);
  const size_t rows_per_piece = std::max<size_t>(1, piece_bytes / std::max<size_t>(1, row_bytes));
  std::vector<proto::TableCheckpoint> pieces;
  size_t first = 0;
  do {
    const size_t end = std::min(rows, first + rows_per_piece);
    proto::TableCheckpoint& piece = pieces.emplace_back();
    *piece.mutable_key() = key;
    piece.set_row_floats(contents.row_floats);
    if (first == 0) {
      *piece.mutable_spec() = spec;
      piece.set_round(round);
      *piece.mutable_counted_ids() = {contents.counted_ids.begin(), contents.counted_ids.end()};
      *piece.mutable_counts() = {contents.counts.begin(), contents.counts.end()};
      piece.set_admitted(contents.admitted);
      piece.set_evicted(contents.evicted);
    }
    *piece.mutable_ids() = {contents.ids.begin() + first, contents.ids.begin() + end};
    *piece.mutable_last_pushed() = {contents.last_pushed.begin() + first,
                                    contents.last_pushed.begin() + end};
    *piece.mutable_steps() = {contents.steps.begin() + first, contents.steps.begin() + end};
    piece.set_values(reinterpret_cast<const char*>(contents.values.data() + first * row_floats),
                     (end - first) * row_bytes);
    piece.set_continued(end < rows);
    first = end;
  } while (first < rows);
  return pieces;
}

bool SameTableSpec(const proto::TableSpec& a, const proto::TableSpec& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

int TableServerOf(int64_t id, int num_servers) {
  if (num_servers <= 1) return 0;
  return static_cast<int>(Mix64(static_cast<uint64_t>(id)) % static_cast<uint64_t>(num_servers));
}

}  // namespace kvstore
