#include "server/core/table_engine.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/proto_convert.h"
#include "common/status_macros.h"
#include "common/table_wire.h"

namespace kvstore {

TableEngine::TableEngine(TableEngineOptions options, const JobWorkers* workers,
                         std::function<int64_t()> held_elsewhere, const ViewFloor* floor)
    : options_(options),
      workers_(workers),
      held_elsewhere_(std::move(held_elsewhere)),
      floor_(floor),
      applied_(options.dedup_window) {}

TableEngine::~TableEngine() = default;

absl::Status TableEngine::Init(uint64_t node_id, const Key& key, const proto::TableSpec& spec) {
  RETURN_IF_ERROR(workers_->CheckSender(node_id));
  const std::string name = absl::StrCat("key ", key.Quoted());
  if (spec.dim() > kMaxTableDim) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": rows of ", spec.dim(),
                                                   " elements are wider than the limit of ",
                                                   kMaxTableDim, " (kMaxTableDim)"));
  }
  if (spec.dim() * static_cast<int64_t>(sizeof(float)) > options_.max_value_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name, ": a row of ", spec.dim() * sizeof(float),
                     " bytes is bigger than the value limit of ", options_.max_value_bytes,
                     " bytes (max_value_bytes)"));
  }
  ASSIGN_OR_RETURN(TableConfig config, TableConfigFromProto(spec, name));
  absl::MutexLock lock(&mu_);
  auto found = tables_.find(key);
  if (found != tables_.end()) {
    if (SameTableSpec(found->second->spec, spec)) return absl::OkStatus();
    return absl::AlreadyExistsError(absl::StrCat(
        name, " is a table already, made with another spec (",
        found->second->spec.ShortDebugString(), ") than this one (", spec.ShortDebugString(), ")"));
  }
  auto table = std::make_unique<Table>();
  table->spec = spec;
  ASSIGN_OR_RETURN(table->rows, EmbeddingTable::Create(std::move(config)));
  tables_.emplace(key, std::move(table));
  return absl::OkStatus();
}

absl::StatusOr<TableEngine::Table*> TableEngine::Find(const Key& key,
                                                      absl::string_view what) const {
  absl::MutexLock lock(&mu_);
  auto found = tables_.find(key);
  if (found == tables_.end()) {
    return absl::NotFoundError(
        absl::StrCat("key ", key.Quoted(), ": no table to ", what, " (InitTable makes one)"));
  }
  return found->second.get();
}

absl::Status TableEngine::Apply(Table* table, const Key& key, absl::Span<const int64_t> ids,
                                absl::Span<const float> grads, int64_t round) {
  if (options_.memory_budget_bytes != std::numeric_limits<int64_t>::max()) {
    const int64_t new_rows = table->rows->NewRows(ids);
    if (new_rows > 0) {
      const int64_t held = (held_elsewhere_ ? held_elsewhere_() : 0) + bytes();
      const int64_t more = new_rows * table->rows->BytesPerRow();
      if (held + more > options_.memory_budget_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "key ", key.Quoted(), ": ", new_rows, " new rows (", more,
            " bytes) would take this server's held bytes from ", held, " over its budget of ",
            options_.memory_budget_bytes, " (memory_budget_bytes; max_rows bounds a table)"));
      }
    }
  }
  RETURN_IF_ERROR(table->rows->Push(ids, grads, round));
  table->rows->EvictStale(round, absl::Now());
  return absl::OkStatus();
}

void TableEngine::Push(uint64_t node_id, uint64_t request_id, const Key& key,
                       std::vector<int64_t> ids, std::vector<float> grads, Done done,
                       uint64_t view_epoch) {
  if (absl::Status sender = workers_->CheckSender(node_id); !sender.ok()) return done(sender);
  absl::StatusOr<Table*> found = Find(key, "push to");
  if (!found.ok()) return done(found.status());
  Table* table = *found;
  const int64_t dim = table->spec.dim();
  if (grads.size() != ids.size() * static_cast<size_t>(dim)) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("key ", key.Quoted(), ": pushing ", ids.size(), " rows of ", dim,
                     " elements with ", grads.size(), " elements")));
  }
  Answers answers;
  {
    absl::MutexLock lock(&table->mu);
    // Under the lock a round records its request ids under: a retry of an applied push is
    // acknowledged, never queued again.
    if (applied_.Contains(node_id, request_id)) {
      answers.emplace_back(std::move(done), absl::OkStatus());
    } else if (floor_ != nullptr) {
      if (absl::Status stale = floor_->Check(view_epoch, /*write=*/true); !stale.ok()) {
        answers.emplace_back(std::move(done), std::move(stale));
      }
    }
    if (!answers.empty()) {
      // Answered already: applied before, or routed by a view older than the floor.
    } else if (!options_.sync) {
      const absl::Status status = Apply(table, key, ids, grads, table->round + 1);
      if (status.ok()) {
        ++table->round;
        applied_.Record(node_id, request_id);
      }
      answers.emplace_back(std::move(done), status);
    } else {
      std::deque<Waiting>& mine = table->waiting[node_id];
      auto retry = std::find_if(mine.begin(), mine.end(), [request_id](const Waiting& w) {
        return w.request_id == request_id;
      });
      if (retry != mine.end()) {
        retry->dones.push_back(std::move(done));
      } else {
        Waiting waiting;
        waiting.request_id = request_id;
        waiting.ids = std::move(ids);
        waiting.grads = std::move(grads);
        waiting.dones.push_back(std::move(done));
        mine.push_back(std::move(waiting));
        CompleteRounds(table, key, &answers);
      }
    }
  }
  for (auto& [answer, status] : answers) answer(status);
}

int64_t TableEngine::CompleteRounds(Table* table, const Key& key, Answers* answers) {
  int64_t completed = 0;
  for (;;) {
    // The round is complete once every worker still in the job has a push waiting.
    std::vector<uint64_t> pushers;
    for (const uint64_t worker : workers_->ids()) {
      if (!workers_->CheckSender(worker).ok()) continue;  // Left the job.
      auto mine = table->waiting.find(worker);
      if (mine == table->waiting.end() || mine->second.empty()) return completed;
      pushers.push_back(worker);
    }
    if (pushers.empty()) return completed;
    std::vector<int64_t> ids;
    std::vector<float> grads;
    std::vector<Waiting> round;
    for (const uint64_t worker : pushers) {  // In worker rank order.
      std::deque<Waiting>& mine = table->waiting[worker];
      round.push_back(std::move(mine.front()));
      mine.pop_front();
      ids.insert(ids.end(), round.back().ids.begin(), round.back().ids.end());
      grads.insert(grads.end(), round.back().grads.begin(), round.back().grads.end());
    }
    const absl::Status status = Apply(table, key, ids, grads, table->round + 1);
    if (status.ok()) ++table->round;
    for (size_t i = 0; i < round.size(); ++i) {
      if (status.ok()) applied_.Record(pushers[i], round[i].request_id);
      for (Done& done : round[i].dones) answers->emplace_back(std::move(done), status);
    }
    ++completed;
  }
}

absl::StatusOr<Tensor> TableEngine::Pull(uint64_t node_id, const Key& key,
                                         absl::Span<const int64_t> ids) {
  RETURN_IF_ERROR(workers_->CheckSender(node_id));
  ASSIGN_OR_RETURN(Table * table, Find(key, "pull from"));
  const int64_t dim = table->spec.dim();
  const uint64_t bytes = ids.size() * static_cast<uint64_t>(dim) * sizeof(float);
  if (bytes > static_cast<uint64_t>(options_.max_value_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "key ", key.Quoted(), ": pulling ", ids.size(), " rows of ", dim, " elements (", bytes,
        " bytes) exceeds the value limit of ", options_.max_value_bytes,
        " bytes (max_value_bytes); pull fewer ids at a time"));
  }
  // Not zeroed: Pull writes every element.
  const size_t n = ids.size() * static_cast<size_t>(dim);
  float* data = new float[std::max<size_t>(n, 1)];
  Tensor rows = Tensor::Adopt(data, DType::kFloat32, {static_cast<int64_t>(n)}, Device::CPU(),
                              [data] { delete[] data; });
  RETURN_IF_ERROR(table->rows->Pull(ids, absl::MakeSpan(data, n)));
  return rows;
}

int64_t TableEngine::DropWorkers() {
  int64_t completed = 0;
  for (const auto& [key, table] : AllTables()) {
    Answers answers;
    {
      absl::MutexLock lock(&table->mu);
      // A dropped worker's waiting pushes are refused (it is gone), the rest may now complete.
      for (const uint64_t worker : workers_->ids()) {
        const absl::Status left = workers_->CheckSender(worker);
        if (left.ok()) continue;
        auto mine = table->waiting.find(worker);
        if (mine == table->waiting.end()) continue;
        for (Waiting& waiting : mine->second) {
          for (Done& done : waiting.dones) answers.emplace_back(std::move(done), left);
        }
        table->waiting.erase(mine);
      }
      completed += CompleteRounds(table, key, &answers);
    }
    for (auto& [answer, status] : answers) answer(status);
  }
  return completed;
}

void TableEngine::FailRounds(const absl::Status& status) {
  for (const auto& [key, table] : AllTables()) {
    std::vector<Done> dones;
    {
      absl::MutexLock lock(&table->mu);
      for (auto& [node, waiting] : table->waiting) {
        for (Waiting& w : waiting) {
          for (Done& done : w.dones) dones.push_back(std::move(done));
        }
      }
      table->waiting.clear();
    }
    for (Done& done : dones) done(status);
  }
}

std::vector<std::pair<Key, TableEngine::Table*>> TableEngine::AllTables() const {
  std::vector<std::pair<Key, Table*>> tables;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, table] : tables_) tables.emplace_back(key, table.get());
  }
  std::sort(tables.begin(), tables.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return tables;
}

std::vector<proto::TableCheckpoint> TableEngine::Snapshot(size_t piece_bytes) const {
  std::vector<proto::TableCheckpoint> pieces;
  for (const auto& [key, table] : AllTables()) {
    TableContents contents;
    int64_t round = 0;
    {
      absl::MutexLock lock(&table->mu);  // No round completes meanwhile.
      contents = table->rows->Export();
      round = table->round;
    }
    proto::Key saved;
    KeyToProto(key, &saved);
    for (proto::TableCheckpoint& piece :
         TablePieces(saved, table->spec, round, contents, piece_bytes)) {
      pieces.push_back(std::move(piece));
    }
  }
  return pieces;
}

absl::Status TableEngine::Restore(
    const google::protobuf::RepeatedPtrField<proto::TableCheckpoint>& pieces) {
  int i = 0;
  while (i < pieces.size()) {
    const proto::TableCheckpoint& head = pieces[i];
    absl::StatusOr<Key> key = KeyFromProto(head.key());
    if (!key.ok())
      return absl::DataLossError(absl::StrCat("a saved table: ", key.status().message()));
    const std::string name = absl::StrCat("key ", key->Quoted());
    TableContents contents;
    contents.row_floats = head.row_floats();
    contents.counted_ids.assign(head.counted_ids().begin(), head.counted_ids().end());
    contents.counts.assign(head.counts().begin(), head.counts().end());
    contents.admitted = head.admitted();
    contents.evicted = head.evicted();
    for (;;) {
      const proto::TableCheckpoint& piece = pieces[i];
      if (piece.key().SerializeAsString() != head.key().SerializeAsString() ||
          piece.row_floats() != head.row_floats() ||
          piece.values().size() !=
              static_cast<size_t>(piece.ids_size()) * head.row_floats() * sizeof(float)) {
        return absl::DataLossError(absl::StrCat(
            name, ": a saved piece of the table does not fit (another key, another row size, or ",
            piece.values().size(), " bytes of values for ", piece.ids_size(), " rows)"));
      }
      contents.ids.insert(contents.ids.end(), piece.ids().begin(), piece.ids().end());
      contents.last_pushed.insert(contents.last_pushed.end(), piece.last_pushed().begin(),
                                  piece.last_pushed().end());
      contents.steps.insert(contents.steps.end(), piece.steps().begin(), piece.steps().end());
      const size_t at = contents.values.size();
      contents.values.resize(at + piece.values().size() / sizeof(float));
      std::memcpy(contents.values.data() + at, piece.values().data(), piece.values().size());
      ++i;
      if (!piece.continued()) break;
      if (i == pieces.size()) {
        return absl::DataLossError(absl::StrCat(name, ": the saved table ends inside a piece"));
      }
    }
    ASSIGN_OR_RETURN(TableConfig config, TableConfigFromProto(head.spec(), name));
    auto table = std::make_unique<Table>();
    table->spec = head.spec();
    table->round = head.round();
    ASSIGN_OR_RETURN(table->rows, EmbeddingTable::Create(std::move(config)));
    RETURN_IF_ERROR(table->rows->Load(contents));
    absl::MutexLock lock(&mu_);
    if (!tables_.emplace(*key, std::move(table)).second) {
      return absl::DataLossError(absl::StrCat(name, ": the saved tables hold it twice"));
    }
  }
  return absl::OkStatus();
}

std::vector<TableInfo> TableEngine::Tables() const {
  std::vector<TableInfo> infos;
  for (const auto& [key, table] : AllTables()) {
    TableInfo info;
    info.key = key;
    info.dim = table->spec.dim();
    {
      absl::MutexLock lock(&table->mu);  // Never under mu_: a push takes mu_ under it.
      info.round = table->round;
    }
    info.stats = table->rows->stats();
    infos.push_back(std::move(info));
  }
  return infos;
}

int64_t TableEngine::bytes() const {
  int64_t total = 0;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, table] : tables_) total += table->rows->stats().bytes;
  return total;
}

}  // namespace kvstore
