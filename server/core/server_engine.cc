// ServerEngine: creation, the updater, Init and InitFill, the push path (validation, request
// ids, dist_sync rounds, acknowledgements) and Pull. The parts and the request checks are in
// part_table.cc, merging pushes into chunks in engine_values.cc, row-sparse values in
// server_engine_row_sparse.cc, key groups in server_engine_groups.cc, snapshots and updater state
// in server_engine_snapshot.cc.
#include "server/core/server_engine.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/core/engine_cuts.h"
#include "server/core/engine_state.h"
#include "server/core/key_groups.h"
#include "server/core/server_engine_internal.h"

namespace kvstore {
namespace {

using server_engine_internal::CopyBytes;
using server_engine_internal::ElementRange;
using server_engine_internal::NumElementsOf;
using server_engine_internal::SaturatingAdd;

}  // namespace

absl::StatusOr<std::unique_ptr<ServerEngine>> ServerEngine::Create(
    ServerEngineOptions options, std::unique_ptr<Updater> updater) {
  if (options.worker_node_ids.empty()) {
    return absl::InvalidArgumentError("a server engine needs the job's worker node ids");
  }
  if (options.chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk size must be positive, got ", options.chunk_bytes));
  }
  if (options.max_value_bytes < 1 || options.memory_budget_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the largest value and the memory budget must be positive, got ",
                     options.max_value_bytes, " and ", options.memory_budget_bytes, " bytes"));
  }
  if (updater == nullptr) updater = MakeAssignUpdater();
  return std::unique_ptr<ServerEngine>(new ServerEngine(std::move(options), std::move(updater)));
}

ServerEngine::ServerEngine(ServerEngineOptions options, std::unique_ptr<Updater> updater)
    : options_(std::move(options)),
      workers_(options_.worker_node_ids),
      applied_(options_.dedup_window),
      budget_(options_.memory_budget_bytes),
      updater_(std::move(updater), options_.updater_chosen || options_.sync),
      parts_(options_.max_value_bytes, options_.chunk_bytes),
      groups_(std::make_unique<KeyGroups>(this)),
      cuts_(std::make_unique<EngineCuts>(this)),
      state_(std::make_unique<EngineState>(this)) {}

ServerEngine::~ServerEngine() = default;

void ServerEngine::SetUpdater(std::unique_ptr<Updater> updater, bool keep_state) {
  absl::MutexLock lock(&mu_);
  updater_.Queue(std::move(updater), keep_state);
  SwapUpdaterIfIdle();
}

void ServerEngine::EndRound(Chunk* chunk) {
  if (!chunk->contributors.empty()) {
    --open_rounds_;
    ++chunk->rounds_done;
    if (options_.round_observer) {
      options_.round_observer->RoundCompleted(chunk->contributors.back(),
                                              absl::Now() - chunk->round_started);
    }
  }
  chunk->contributors.clear();
  chunk->calls.clear();
}

void ServerEngine::SwapUpdaterIfIdle() {
  updater_.InstallIfIdle(open_rounds_ > 0, pushes_in_flight_ > 0);
}

engine::MergeRule ServerEngine::merge_rule() const {
  const size_t workers = options_.worker_node_ids.size();
  return engine::MergeRule{!options_.sync || workers == 1, workers, workers_.dropped()};
}

ShardStore::Stats ServerEngine::stats() const {
  absl::ReaderMutexLock lock(&mu_);
  return ShardStore::Stats{static_cast<int64_t>(parts_.all().size()), parts_.num_bytes()};
}

int64_t ServerEngine::held_bytes() const { return budget_.held(); }

absl::Status ServerEngine::Init(uint64_t node_id, absl::Span<const IncomingValue> values,
                                bool deferred) {
  return InitParts(node_id, values, deferred ? PartTable::Fill::kZeros : PartTable::Fill::kNone);
}

absl::Status ServerEngine::InitParts(uint64_t node_id, absl::Span<const IncomingValue> values,
                                     PartTable::Fill fill) {
  const bool deferred = fill != PartTable::Fill::kNone;
  RETURN_IF_ERROR(workers_.CheckSender(node_id));
  absl::MutexLock lock(&mu_);
  absl::flat_hash_set<Key> seen;
  std::vector<bool> fresh;  // New parts; the others were restored and stand.
  int64_t needed = 0;       // What the new parts count against the memory budget.
  for (const IncomingValue& value : values) {
    const Key& key = value.slice.key;
    ASSIGN_OR_RETURN(const bool is_new,
                     parts_.CheckInit(value, deferred, values.front().slice.key));
    if (!seen.insert(key).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("key ", key.Quoted(), " is already initialised"));
    }
    fresh.push_back(is_new);
    if (!is_new) continue;
    needed = SaturatingAdd(needed, parts_.HeldBytes(value.slice));
    RETURN_IF_ERROR(budget_.Check(
        needed, absl::StrCat("key ", key.Quoted(), ": a ", DTypeName(value.slice.dtype),
                             ShapeToString(value.slice.shape), " part of ", value.slice.count,
                             " elements (with the call's other values, ", needed, " bytes)")));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (!fresh[i]) continue;
    parts_.Add(values[i], fill, node_id);
    budget_.Add(parts_.HeldBytes(values[i].slice));
  }
  return absl::OkStatus();
}

absl::Status ServerEngine::InitFill(uint64_t node_id, absl::Span<const IncomingValue> values) {
  RETURN_IF_ERROR(workers_.CheckSender(node_id));
  absl::MutexLock lock(&mu_);
  std::vector<Part*> parts;
  for (const IncomingValue& value : values) {
    const ValueSlice& s = value.slice;
    Part* found = parts_.Get(s.key);
    if (found == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("key ", s.key.Quoted(), " is not initialised on this server"));
    }
    Part& part = *found;
    const ValueSlice& layout = part.layout;
    if (value.compression.enabled() || value.row_sparse) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", s.key.Quoted(), ": Init values are dense and never compressed"));
    }
    if (s.dtype != layout.dtype || s.shape != layout.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", s.key.Quoted(), ": filled as ", DTypeName(s.dtype), ShapeToString(s.shape),
          " but initialised as ", DTypeName(layout.dtype), ShapeToString(layout.shape)));
    }
    if (s.offset < layout.offset || s.count < 0 ||
        s.count > layout.offset + layout.count - s.offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", s.key.Quoted(), ": stretch ", ElementRange(s.offset, s.count),
                       " lies outside this server's part [", layout.offset, ", ",
                       layout.offset + layout.count, ")"));
    }
    RETURN_IF_ERROR(parts_.CheckBytes(value));
    if (part.restored) {
      parts.push_back(nullptr);  // The checkpoint's value stands.
      continue;
    }
    if (part.filling_node != node_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          "key ", s.key.Quoted(), " is not waiting for initial bytes from node ", node_id,
          part.filling_node ? " (another node initialised it)"
                            : " (it was initialised whole, or is complete)"));
    }
    parts.push_back(&part);
  }
  for (size_t v = 0; v < values.size(); ++v) {
    Part* part = parts[v];
    if (part == nullptr) continue;
    const ValueSlice& s = values[v].slice;
    const size_t element = DTypeSize(s.dtype);
    for (size_t i = 0; i < part->chunks.size(); ++i) {
      Chunk& chunk = *part->chunks[i];
      const int64_t begin = std::max(chunk.offset, s.offset);
      const int64_t end = std::min(chunk.offset + chunk.count, s.offset + s.count);
      if (begin >= end) continue;
      ChunkLock chunk_lock(chunk);
      Tensor& stored = chunk.Writable();
      CopyBytes(values[v].bytes, static_cast<size_t>(begin - s.offset) * element,
                static_cast<size_t>(end - begin) * element,
                static_cast<uint8_t*>(stored.data()) +
                    static_cast<size_t>(begin - chunk.offset) * element);
      if (begin == chunk.offset && end == chunk.offset + chunk.count && !part->filled[i]) {
        part->filled[i] = true;
        --part->unfilled;
      }
    }
    if (part->unfilled == 0) {
      part->filling_node.reset();
      part->filled.clear();
    }
  }
  return absl::OkStatus();
}

void ServerEngine::Push(uint64_t node_id, uint64_t request_id,
                        absl::Span<const IncomingValue> original, Done done) {
  // Row-sparse values become dense values per chunk; `storage` holds their bytes until the
  // data has moved (the end of this call).
  std::vector<IncomingValue> expanded;
  std::vector<std::vector<uint8_t>> storage;
  absl::Span<const IncomingValue> values = original;
  if (std::any_of(original.begin(), original.end(),
                  [](const IncomingValue& v) { return v.row_sparse; })) {
    absl::Status status = workers_.CheckSender(node_id);
    if (status.ok()) status = ExpandRowSparse(original, &expanded, &storage);
    if (!status.ok()) {
      done(status);
      return;
    }
    values = expanded;
  }
  const absl::Status sender = workers_.CheckSender(node_id);
  absl::Status error = sender;
  std::vector<Chunk*> chunks;
  std::shared_ptr<PushCall> call;
  {
    absl::MutexLock lock(&mu_);
    // Validate everything before changing anything.
    absl::flat_hash_set<Chunk*> seen;
    for (const IncomingValue& value : values) {
      if (!error.ok()) break;
      error = parts_.CheckBytes(value);
      if (!error.ok()) break;
      absl::StatusOr<Chunk*> chunk = parts_.FindChunk(value.slice, "pushed");
      error = chunk.status();
      if (!error.ok()) break;
      if (!seen.insert(*chunk).second) {
        error = absl::InvalidArgumentError(absl::StrCat(
            "key ", value.slice.key.Quoted(), ": elements [", value.slice.offset, ", ",
            value.slice.offset + value.slice.count, ") appear twice in one push request"));
      } else {
        error = CheckRound(value.slice.key, **chunk, node_id);
      }
      if (error.ok()) error = updater_.CheckChosen(value.slice.key);
      chunks.push_back(*chunk);
    }
    if (error.ok() && !failed_reason_.empty()) {
      error = absl::AbortedError(absl::StrCat("the job failed: ", failed_reason_));
    }
    // Dropped since the check above: it must not join a round that no longer waits for it.
    if (error.ok() && workers_.any_dropped()) error = workers_.CheckSender(node_id);
    if (sender.ok() && error.ok() && cuts_->Holds(chunks)) {
      cuts_->Hold(node_id, request_id, values, std::move(done));
      return;
    }
    if (sender.ok()) call = BeginPush(node_id, request_id, chunks, &done, &error);
  }
  if (call == nullptr) {
    if (done) done(error);
    return;
  }

  // Move the data, chunk by chunk, under each chunk's own lock.
  const std::shared_ptr<Updater> current = updater_.current();
  std::vector<Chunk*> completed;
  for (size_t i = 0; i < values.size(); ++i) {
    absl::StatusOr<bool> merged =
        chunks[i]->Merge(values[i].slice.key, values[i].bytes, values[i].compression, current.get(),
                         merge_rule(), values[i].bytes_outlive_call);
    if (!merged.ok() && error.ok()) error = merged.status();
    if (!merged.ok() || *merged) completed.push_back(chunks[i]);
  }
  EndPush(call, chunks.empty(), completed, error);
}

absl::Status ServerEngine::CheckRound(const Key& key, const Chunk& chunk, uint64_t node_id) const {
  if (rounds() && chunk.arena != nullptr && chunk.arena->open_group_rounds > 0) {
    RETURN_IF_ERROR(groups_->CheckRound(key, chunk, node_id));
  }
  if (rounds() && std::find(chunk.contributors.begin(), chunk.contributors.end(), node_id) !=
                      chunk.contributors.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "key ", key.Quoted(), ": node ", node_id,
        " pushed twice in one dist_sync round (the round still waits for other workers)"));
  }
  return absl::OkStatus();
}

std::shared_ptr<ServerEngine::PushCall> ServerEngine::BeginPush(uint64_t node_id,
                                                                uint64_t request_id,
                                                                absl::Span<Chunk* const> chunks,
                                                                Done* done, absl::Status* error) {
  NodeRequests& requests = requests_[node_id];
  if (applied_.Contains(node_id, request_id)) {
    *error = absl::OkStatus();  // A retry of an applied push.
    return nullptr;
  }
  if (auto it = requests.pending.find(request_id); it != requests.pending.end()) {
    it->second->done.push_back(std::move(*done));  // A retry of a push waiting for its round.
    *done = nullptr;
    return nullptr;
  }
  if (!error->ok()) return nullptr;
  auto call = std::make_shared<PushCall>();
  call->node_id = node_id;
  call->request_id = request_id;
  call->remaining = static_cast<int>(chunks.size());
  call->done.push_back(std::move(*done));
  *done = nullptr;
  requests.pending[request_id] = call;
  if (!rounds()) {
    ++pushes_in_flight_;
    for (Chunk* chunk : chunks) ++chunk->rounds_done;
  }
  if (rounds()) {
    groups_->SplitRounds(chunks);
    for (Chunk* chunk : chunks) {
      if (chunk->contributors.empty()) {
        ++open_rounds_;
        if (options_.round_observer) chunk->round_started = absl::Now();
      }
      chunk->contributors.push_back(node_id);
      chunk->calls.push_back(call);
    }
  }
  return call;
}

void ServerEngine::EndPush(const std::shared_ptr<PushCall>& call, bool empty,
                           absl::Span<Chunk* const> completed, const absl::Status& error) {
  std::vector<Done> finished_done;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::shared_ptr<PushCall>> finished;
    if (!rounds()) {
      finished.push_back(call);
    } else {
      if (empty) finished.push_back(call);
      for (Chunk* chunk : completed) {
        for (auto& waiting : chunk->calls) {
          if (--waiting->remaining == 0) finished.push_back(waiting);
        }
        chunk->completing = false;
        EndRound(chunk);
      }
    }
    for (auto& f : finished) FinishCall(f.get(), &finished_done);
    SwapUpdaterIfIdle();
  }
  for (Done& d : finished_done) d(error);
}

void ServerEngine::FinishCall(PushCall* call, std::vector<Done>* finished) {
  if (!rounds()) --pushes_in_flight_;
  requests_[call->node_id].pending.erase(call->request_id);
  applied_.Record(call->node_id, call->request_id);
  for (Done& d : call->done) finished->push_back(std::move(d));
  call->done.clear();
}

absl::StatusOr<std::vector<Tensor>> ServerEngine::Pull(uint64_t node_id,
                                                       absl::Span<const ValueSlice> slices) const {
  RETURN_IF_ERROR(workers_.CheckSender(node_id));
  std::vector<Chunk*> chunks;
  chunks.reserve(slices.size());
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const ValueSlice& slice : slices) {
      ASSIGN_OR_RETURN(Chunk * chunk, parts_.FindChunk(slice, "pulled"));
      chunks.push_back(chunk);
    }
  }
  std::vector<Tensor> outs;
  outs.reserve(chunks.size());
  for (Chunk* chunk : chunks) {
    ChunkLock lock(*chunk);
    // Arena members are updated in place: they leave as a copy.
    outs.push_back(chunk->arena != nullptr ? chunk->stored.Clone() : chunk->stored);
  }
  return outs;
}

}  // namespace kvstore
