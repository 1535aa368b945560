#include "server/core/server_engine.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/reduce.h"
#include "common/row_sparse.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

// CopyBytes copies bytes [offset, offset + n) of `bytes` into `dst`.
void CopyBytes(const ByteChunks& bytes, size_t offset, size_t n, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  for (const absl::Span<const uint8_t>& chunk : bytes) {
    if (n == 0) return;
    if (offset >= chunk.size()) {
      offset -= chunk.size();
      continue;
    }
    const size_t take = std::min(chunk.size() - offset, n);
    std::memcpy(out, chunk.data() + offset, take);
    out += take;
    n -= take;
    offset = 0;
  }
}

Tensor View(const void* data, DType dtype, int64_t elements) {
  return Tensor::Borrow(const_cast<void*>(data), dtype, Shape{elements});
}

// ForEachPieceInto calls fn(first_element, received_piece, matching_piece_of_dst) for the
// pieces of `bytes` (see ForEachPiece), stopping at the first error.
absl::Status ForEachPieceInto(
    const ByteChunks& bytes, const Tensor& dst,
    const std::function<absl::Status(int64_t, const Tensor&, Tensor*)>& fn) {
  const DType dtype = dst.dtype();
  const size_t element = DTypeSize(dtype);
  auto* base = static_cast<uint8_t*>(dst.data());
  absl::Status status;
  ForEachPiece(bytes, element, [&](int64_t e, const void* piece, int64_t n) {
    if (!status.ok()) return;
    Tensor target = View(base + static_cast<size_t>(e) * element, dtype, n);
    status = fn(e, View(piece, dtype, n), &target);
  });
  return status;
}

// SubRange returns the parts of `bytes` that hold its bytes [begin, end).
ByteChunks SubRange(const ByteChunks& bytes, size_t begin, size_t end) {
  ByteChunks out;
  size_t start = 0;
  for (const absl::Span<const uint8_t>& chunk : bytes) {
    const size_t stop = start + chunk.size();
    if (stop > begin && start < end) {
      const size_t from = std::max(begin, start) - start;
      out.push_back(chunk.subspan(from, std::min(end, stop) - start - from));
    }
    start = stop;
  }
  return out;
}

// Members of a key group bigger than this keep buffers of their own.
constexpr size_t kArenaMemberMaxBytes = 64 << 10;

int64_t NumElementsOf(const Shape& shape) {
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  return total;
}

}  // namespace

void GatherBytes(const ByteChunks& bytes, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  for (const absl::Span<const uint8_t>& chunk : bytes) {
    if (chunk.empty()) continue;
    std::memcpy(out, chunk.data(), chunk.size());
    out += chunk.size();
  }
}

void ForEachPiece(const ByteChunks& bytes, size_t element_size,
                  const std::function<void(int64_t, const void*, int64_t)>& fn) {
  int64_t element = 0;
  uint8_t carry[16];
  size_t carried = 0;
  for (const absl::Span<const uint8_t>& chunk : bytes) {
    const uint8_t* p = chunk.data();
    size_t n = chunk.size();
    if (carried > 0) {
      const size_t take = std::min(element_size - carried, n);
      std::memcpy(carry + carried, p, take);
      carried += take;
      p += take;
      n -= take;
      if (carried == element_size) {
        fn(element++, carry, 1);
        carried = 0;
      }
    }
    const size_t whole = n / element_size;
    if (whole > 0) {
      fn(element, p, static_cast<int64_t>(whole));
      element += static_cast<int64_t>(whole);
      p += whole * element_size;
      n -= whole * element_size;
    }
    if (n > 0) {
      std::memcpy(carry, p, n);
      carried = n;
    }
  }
}

absl::StatusOr<std::unique_ptr<ServerEngine>> ServerEngine::Create(
    ServerEngineOptions options, std::unique_ptr<Updater> updater) {
  if (options.worker_node_ids.empty()) {
    return absl::InvalidArgumentError("a server engine needs the job's worker node ids");
  }
  if (options.chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk size must be positive, got ", options.chunk_bytes));
  }
  if (updater == nullptr) updater = MakeAssignUpdater();
  return std::unique_ptr<ServerEngine>(new ServerEngine(std::move(options), std::move(updater)));
}

ServerEngine::ServerEngine(ServerEngineOptions options, std::unique_ptr<Updater> updater)
    : options_(std::move(options)), updater_(std::move(updater)) {
  senders_.insert(options_.worker_node_ids.begin(), options_.worker_node_ids.end());
  senders_.insert(kSchedulerNodeId);
}

void ServerEngine::SetUpdater(std::unique_ptr<Updater> updater) {
  absl::MutexLock lock(&mu_);
  pending_updater_ = std::move(updater);
  SwapUpdaterIfIdle();
}

void ServerEngine::SwapUpdaterIfIdle() {
  if (pending_updater_ == nullptr || open_rounds_ > 0) return;
  absl::MutexLock lock(&updater_mu_);
  updater_ = std::move(pending_updater_);
}

std::shared_ptr<Updater> ServerEngine::updater() const {
  absl::MutexLock lock(&updater_mu_);
  return updater_;
}

std::string ServerEngine::updater_name() const { return std::string(updater()->name()); }

ShardStore::Stats ServerEngine::stats() const {
  absl::ReaderMutexLock lock(&mu_);
  return ShardStore::Stats{static_cast<int64_t>(parts_.size()), num_bytes_};
}

absl::Status ServerEngine::CheckSender(uint64_t node_id) const {
  if (senders_.contains(node_id)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "node id ", node_id, " is not a worker of this job (the scheduler never issued it)"));
}

absl::Status ServerEngine::CheckSlice(const ValueSlice& s) {
  for (int64_t d : s.shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", s.key.Quoted(), ": negative dimension in shape ",
                       ShapeToString(s.shape)));
    }
  }
  const int64_t total = NumElementsOf(s.shape);
  if (s.offset < 0 || s.count < 0 || s.offset > total || s.count > total - s.offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", s.key.Quoted(), ": slice [", s.offset, ", ", s.offset + s.count,
        ") lies outside a value of shape ", ShapeToString(s.shape)));
  }
  return absl::OkStatus();
}

absl::Status ServerEngine::CheckBytes(const IncomingValue& value) {
  const ValueSlice& s = value.slice;
  RETURN_IF_ERROR(CheckSlice(s));
  size_t received = 0;
  for (const auto& chunk : value.bytes) received += chunk.size();
  size_t expected = static_cast<size_t>(s.count) * DTypeSize(s.dtype);
  std::string encoding;
  if (value.compression.enabled()) {
    if (s.dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", s.key.Quoted(), ": ", CompressionName(value.compression.type),
          " compression applies to float32 values, not ", DTypeName(s.dtype)));
    }
    expected = CompressedBytes(value.compression.type, s.count);
    encoding = absl::StrCat(" compressed with ", CompressionName(value.compression.type));
  }
  if (received != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", s.key.Quoted(), ": ", received, " bytes received for ", s.count, " ",
        DTypeName(s.dtype), " elements", encoding, " (", expected, " bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const ServerEngine::Part*> ServerEngine::FindPart(const ValueSlice& slice,
                                                                 absl::string_view verb) const {
  auto it = parts_.find(slice.key);
  if (it == parts_.end()) {
    return absl::NotFoundError(
        absl::StrCat("key ", slice.key.Quoted(), " was never initialised on this server"));
  }
  const ValueSlice& stored = it->second->layout;
  if (slice.dtype != stored.dtype || slice.shape != stored.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", slice.key.Quoted(), ": ", verb, " ", DTypeName(slice.dtype),
        ShapeToString(slice.shape), " but the stored value is ", DTypeName(stored.dtype),
        ShapeToString(stored.shape)));
  }
  return it->second.get();
}

absl::StatusOr<ServerEngine::Chunk*> ServerEngine::FindChunk(const ValueSlice& slice,
                                                             absl::string_view verb) const {
  ASSIGN_OR_RETURN(const Part* found, FindPart(slice, verb));
  const Part& part = *found;
  const ValueSlice& stored = part.layout;
  const int64_t relative = slice.offset - stored.offset;
  if (relative >= 0 && relative % part.chunk_elements == 0) {
    const size_t index = static_cast<size_t>(relative / part.chunk_elements);
    if (index < part.chunks.size() && part.chunks[index]->count == slice.count) {
      return part.chunks[index].get();
    }
  }
  std::string chunks;
  if (part.chunks.size() > 1) {
    chunks = absl::StrCat(" in chunks of ", part.chunk_elements, " elements");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "key ", slice.key.Quoted(), ": ", verb, " elements [", slice.offset, ", ",
      slice.offset + slice.count, ") but this server holds [", stored.offset, ", ",
      stored.offset + stored.count, ")", chunks));
}

absl::Status ServerEngine::Init(uint64_t node_id, absl::Span<const IncomingValue> values,
                                bool deferred) {
  RETURN_IF_ERROR(CheckSender(node_id));
  absl::MutexLock lock(&mu_);
  absl::flat_hash_set<Key> seen;
  for (const IncomingValue& value : values) {
    const Key& key = value.slice.key;
    if (value.compression.enabled()) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", key.Quoted(), ": Init values are never compressed"));
    }
    if (deferred) {
      RETURN_IF_ERROR(CheckSlice(value.slice));
      size_t received = 0;
      for (const auto& bytes : value.bytes) received += bytes.size();
      if (received != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "key ", key.Quoted(), ": a deferred Init carries no bytes (they follow in fills), got ",
            received));
      }
    } else {
      RETURN_IF_ERROR(CheckBytes(value));
    }
    const bool int_key = key.is_int();
    const bool expected = int_keys_.value_or(values.front().slice.key.is_int());
    if (int_key != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", key.Quoted(), " is a ", key.KindName(), " key but this server holds ",
          expected ? "int" : "string", " keys; int and string keys cannot be mixed"));
    }
    if (auto it = parts_.find(key); it != parts_.end() && it->second->restored) {
      const ValueSlice& stored = it->second->layout;
      const ValueSlice& given = value.slice;
      if (stored.dtype != given.dtype || stored.shape != given.shape ||
          stored.offset != given.offset || stored.count != given.count) {
        return absl::InvalidArgumentError(absl::StrCat(
            "key ", key.Quoted(), ": initialised as ", DTypeName(given.dtype),
            ShapeToString(given.shape), " but restored from the checkpoint as ",
            DTypeName(stored.dtype), ShapeToString(stored.shape)));
      }
      if (!seen.insert(key).second) {
        return absl::AlreadyExistsError(
            absl::StrCat("key ", key.Quoted(), " is already initialised"));
      }
      continue;
    }
    if (parts_.contains(key) || !seen.insert(key).second) {
      return absl::AlreadyExistsError(absl::StrCat("key ", key.Quoted(), " is already initialised"));
    }
  }
  for (const IncomingValue& value : values) {
    const ValueSlice& slice = value.slice;
    if (auto it = parts_.find(slice.key); it != parts_.end() && it->second->restored) {
      continue;  // The checkpoint's value stands.
    }
    auto part = std::make_unique<Part>();
    part->layout = slice;
    const size_t element = DTypeSize(slice.dtype);
    part->chunk_elements = ChunkElements(element, options_.chunk_bytes);
    const bool whole = slice.offset == 0 && slice.count == NumElementsOf(slice.shape);
    for (const Slice& c : ChunkSlice(Slice{0, slice.offset, slice.count}, element,
                                     options_.chunk_bytes)) {
      auto chunk = std::make_unique<Chunk>();
      chunk->offset = c.offset;
      chunk->count = c.count;
      ChunkLock chunk_lock(*chunk);
      chunk->stored = Tensor::Zeros(
          slice.dtype, whole && c.count == slice.count ? slice.shape : Shape{c.count});
      if (!deferred) {
        CopyBytes(value.bytes, static_cast<size_t>(c.offset - slice.offset) * element,
                  chunk->stored.byte_size(), chunk->stored.data());
      }
      part->chunks.push_back(std::move(chunk));
    }
    if (deferred && !part->chunks.empty()) {
      part->filling_node = node_id;
      part->filled.assign(part->chunks.size(), false);
      part->unfilled = part->chunks.size();
    }
    num_bytes_ += static_cast<int64_t>(static_cast<size_t>(slice.count) * element);
    parts_.emplace(slice.key, std::move(part));
  }
  if (!values.empty()) int_keys_ = values.front().slice.key.is_int();
  return absl::OkStatus();
}

absl::Status ServerEngine::InitFill(uint64_t node_id, absl::Span<const IncomingValue> values) {
  RETURN_IF_ERROR(CheckSender(node_id));
  absl::MutexLock lock(&mu_);
  std::vector<Part*> parts;
  for (const IncomingValue& value : values) {
    const ValueSlice& s = value.slice;
    auto it = parts_.find(s.key);
    if (it == parts_.end()) {
      return absl::NotFoundError(
          absl::StrCat("key ", s.key.Quoted(), " is not initialised on this server"));
    }
    Part& part = *it->second;
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
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", s.key.Quoted(), ": stretch [", s.offset, ", ", s.offset + s.count,
          ") lies outside this server's part [", layout.offset, ", ",
          layout.offset + layout.count, ")"));
    }
    RETURN_IF_ERROR(CheckBytes(value));
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
      Tensor& stored = Writable(&chunk);
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

absl::StatusOr<EngineSnapshot> ServerEngine::Snapshot() const {
  absl::MutexLock lock(&mu_);
  if (open_rounds_ > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        open_rounds_, " dist_sync rounds are open (waiting for other workers' pushes); "
        "checkpoint between rounds, e.g. after WaitAll and Barrier on every worker"));
  }
  EngineSnapshot snapshot;
  for (const auto& [key, part] : parts_) {
    StoredPart stored;
    stored.layout = part->layout;
    const size_t element = DTypeSize(part->layout.dtype);
    stored.data = Tensor::Zeros(part->layout.dtype, {part->layout.count});
    for (const auto& chunk : part->chunks) {
      ChunkLock chunk_lock(*chunk);
      std::memcpy(static_cast<uint8_t*>(stored.data.data()) +
                      static_cast<size_t>(chunk->offset - part->layout.offset) * element,
                  chunk->stored.data(), chunk->stored.byte_size());
    }
    snapshot.parts.push_back(std::move(stored));
  }
  snapshot.updater_state = updater()->SaveState();
  return snapshot;
}

absl::Status ServerEngine::Restore(absl::Span<const StoredPart> parts) {
  std::vector<IncomingValue> values;
  for (const StoredPart& part : parts) {
    IncomingValue value;
    value.slice = part.layout;
    value.bytes = {absl::Span<const uint8_t>(static_cast<const uint8_t*>(part.data.data()),
                                             part.data.byte_size())};
    values.push_back(std::move(value));
  }
  RETURN_IF_ERROR(Init(kSchedulerNodeId, values));
  absl::MutexLock lock(&mu_);
  for (const StoredPart& part : parts) parts_.at(part.layout.key)->restored = true;
  return absl::OkStatus();
}

absl::StatusOr<UpdaterStateData> ServerEngine::SaveUpdaterState() const {
  absl::MutexLock lock(&mu_);
  if (open_rounds_ > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        open_rounds_, " dist_sync rounds are open; save optimizer states between rounds"));
  }
  return updater()->SaveState();
}

absl::Status ServerEngine::LoadUpdaterState(const UpdaterStateData& state) {
  absl::MutexLock lock(&mu_);
  for (const PartStateData& part : state.parts) {
    auto it = parts_.find(part.key);
    if (it == parts_.end()) continue;
    const Part& held = *it->second;
    const int64_t relative = part.offset - held.layout.offset;
    if (relative < 0 || relative >= std::max<int64_t>(1, held.layout.count)) continue;  // Another server's.
    if (relative % held.chunk_elements != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "saved optimizer state of key ", part.key.Quoted(), " starts at element ", part.offset,
          ", which is not a chunk of this server's part [", held.layout.offset, ", ",
          held.layout.offset + held.layout.count, ") in chunks of ", held.chunk_elements,
          " elements (saved with another number of servers or chunk size?)"));
    }
  }
  return updater()->LoadState(state, [this](const PartStateData& part) {
    mu_.AssertHeld();
    auto it = parts_.find(part.key);
    if (it == parts_.end()) return false;
    const ValueSlice& layout = it->second->layout;
    return part.offset >= layout.offset &&
           part.offset < layout.offset + std::max<int64_t>(1, layout.count);
  });
}

void ServerEngine::RecordApplied(uint64_t node_id, uint64_t request_id) {
  NodeRequests& requests = requests_[node_id];
  requests.pending.erase(request_id);
  if (requests.applied.insert(request_id).second) {
    requests.applied_order.push_back(request_id);
    while (requests.applied_order.size() > options_.dedup_window) {
      requests.applied.erase(requests.applied_order.front());
      requests.applied_order.pop_front();
    }
  }
}

ServerEngine::ChunkLock::ChunkLock(const Chunk& chunk) : mu_(chunk.mu.load()) {
  mu_->Lock();
  // The lock moves once, into an arena, while the old one is held: follow it.
  for (absl::Mutex* now = chunk.mu.load(); now != mu_; now = chunk.mu.load()) {
    mu_->Unlock();
    mu_ = now;
    mu_->Lock();
  }
}

namespace {
// Bytes held by every chunk's SpareBuffer in the process.
std::atomic<int64_t> spare_bytes{0};
}  // namespace

int64_t ServerEngine::SpareBytesHeld() { return spare_bytes.load(); }

Tensor ServerEngine::SpareBuffer::TakeIfFree() {
  if (!buffer_.defined() || buffer_.shared()) return Tensor();
  Tensor taken = std::move(buffer_);
  buffer_ = Tensor();
  spare_bytes.fetch_sub(static_cast<int64_t>(taken.byte_size()));
  return taken;
}

void ServerEngine::SpareBuffer::Keep(Tensor buffer) {
  if (buffer_.defined()) return;
  const auto bytes = static_cast<int64_t>(buffer.byte_size());
  if (spare_bytes.fetch_add(bytes) + bytes > kSpareBytes) {
    spare_bytes.fetch_sub(bytes);
    return;
  }
  buffer_ = std::move(buffer);
}

void ServerEngine::SpareBuffer::Reset() {
  if (!buffer_.defined()) return;
  spare_bytes.fetch_sub(static_cast<int64_t>(buffer_.byte_size()));
  buffer_ = Tensor();
}

Tensor& ServerEngine::Writable(Chunk* chunk) {
  // Arena memory is never held outside the engine: update it in place.
  if (chunk->arena != nullptr || !chunk->stored.shared()) return chunk->stored;
  // A pull reply is still being sent from the stored buffer: update a copy instead.
  Tensor next = chunk->spare.TakeIfFree();
  if (!next.defined()) next = Tensor::Zeros(chunk->stored.dtype(), chunk->stored.shape());
  std::memcpy(next.data(), chunk->stored.data(), chunk->stored.byte_size());
  chunk->spare.Keep(std::move(chunk->stored));
  chunk->stored = std::move(next);
  return chunk->stored;
}

absl::Status ServerEngine::Apply(const Key& key, Chunk* chunk, const Tensor& received,
                                 Updater* updater) {
  Tensor& stored = Writable(chunk);
  if (chunk->arena == nullptr) return updater->UpdateAt(key, chunk->offset, received, &stored);
  // An updater may replace the handle instead of writing through it; the arena keeps the bytes.
  Tensor updated = stored;
  RETURN_IF_ERROR(updater->UpdateAt(key, chunk->offset, received, &updated));
  if (updated.data() != stored.data()) {
    if (updated.dtype() != stored.dtype() || updated.byte_size() != stored.byte_size() ||
        !updated.device().is_cpu()) {
      return absl::InternalError(absl::StrCat("key ", key.Quoted(), ": updater \"",
                                              updater->name(), "\" replaced ",
                                              stored.Description(), " by ",
                                              updated.Description()));
    }
    std::memcpy(stored.data(), updated.data(), stored.byte_size());
  }
  return absl::OkStatus();
}

absl::Status ServerEngine::ApplyPieces(const Key& key, Chunk* chunk, const IncomingValue& value,
                                       Updater* updater) {
  // Straight from the received pieces into the stored elements, without a tensor per piece.
  Tensor& stored = Writable(chunk);
  const DType dtype = stored.dtype();
  const size_t element = DTypeSize(dtype);
  auto* base = static_cast<uint8_t*>(stored.data());
  absl::Status status;
  ForEachPiece(value.bytes, element, [&](int64_t e, const void* piece, int64_t count) {
    if (!status.ok()) return;
    status = updater->UpdateSpan(key, chunk->offset + e, dtype, piece,
                                 base + static_cast<size_t>(e) * element, count);
  });
  return status;
}

absl::StatusOr<bool> ServerEngine::Merge(const Key& key, Chunk* chunk, const IncomingValue& value,
                                         const std::shared_ptr<Updater>& updater) {
  ChunkLock lock(*chunk);
  const size_t workers = options_.worker_node_ids.size();
  const DType dtype = chunk->stored.dtype();
  auto buffer = [&](Tensor* t) -> Tensor& {
    if (!t->defined()) *t = Tensor::Zeros(dtype, chunk->stored.shape());
    return *t;
  };
  if (value.compression.enabled()) return MergeCompressed(key, chunk, value, updater.get());
  if (!options_.sync || workers == 1) {
    // The push is the round's whole value: apply it at once.
    if (updater->piecewise()) {
      RETURN_IF_ERROR(ApplyPieces(key, chunk, value, updater.get()));
    } else {
      Tensor& gathered = buffer(&chunk->gather);
      GatherBytes(value.bytes, gathered.data());
      RETURN_IF_ERROR(Apply(key, chunk, gathered, updater.get()));
    }
    return true;
  }
  Tensor& sum = buffer(&chunk->sum);
  if (chunk->arrived == 0) {
    GatherBytes(value.bytes, sum.data());
  } else {
    RETURN_IF_ERROR(ForEachPieceInto(
        value.bytes, sum,
        [](int64_t, const Tensor& received, Tensor* summed) { return AddInto(received, summed); }));
  }
  if (++chunk->arrived < workers) return false;
  chunk->arrived = 0;
  RETURN_IF_ERROR(Apply(key, chunk, sum, updater.get()));
  return true;
}

absl::StatusOr<bool> ServerEngine::MergeCompressed(const Key& key, Chunk* chunk,
                                                   const IncomingValue& value, Updater* updater) {
  // The codes are 1/16 or 1/32 of the value: gathering them when they arrived split is cheap.
  const uint8_t* codes = value.bytes.empty() ? nullptr : value.bytes.front().data();
  std::vector<uint8_t> gathered;
  if (value.bytes.size() > 1) {
    gathered.resize(CompressedBytes(value.compression.type, chunk->count));
    GatherBytes(value.bytes, gathered.data());
    codes = gathered.data();
  }
  auto buffer = [&](Tensor* t) -> Tensor& {
    if (!t->defined()) *t = Tensor::Zeros(DType::kFloat32, chunk->stored.shape());
    return *t;
  };
  if (!options_.sync || options_.worker_node_ids.size() == 1) {
    Tensor& decoded = buffer(&chunk->gather);
    Dequantize(value.compression, codes, chunk->count, decoded.data_as<float>());
    RETURN_IF_ERROR(Apply(key, chunk, decoded, updater));
    return true;
  }
  Tensor& sum = buffer(&chunk->sum);
  if (chunk->arrived == 0) {
    Dequantize(value.compression, codes, chunk->count, sum.data_as<float>());
  } else {
    DequantizeAdd(value.compression, codes, chunk->count, sum.data_as<float>());
  }
  if (++chunk->arrived < options_.worker_node_ids.size()) return false;
  chunk->arrived = 0;
  RETURN_IF_ERROR(Apply(key, chunk, sum, updater));
  return true;
}

absl::StatusOr<const ServerEngine::Part*> ServerEngine::FindRowPart(
    const ValueSlice& slice, absl::string_view verb) const {
  ASSIGN_OR_RETURN(const Part* part, FindPart(slice, verb));
  const ValueSlice& stored = part->layout;
  if (stored.shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", slice.key.Quoted(), " holds a scalar, which has no rows"));
  }
  const int64_t row = RowElements(stored.shape);
  if (slice.offset != stored.offset || slice.count != stored.count ||
      (row > 0 && (stored.offset % row != 0 || stored.count % row != 0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", slice.key.Quoted(), ": ", verb, " rows of elements [", slice.offset, ", ",
        slice.offset + slice.count, ") but this server holds [", stored.offset, ", ",
        stored.offset + stored.count, ") in rows of ", row, " elements"));
  }
  return part;
}

namespace {

// RowRange returns the rows [first, end) a part of `layout` holds.
std::pair<int64_t, int64_t> RowRange(const ValueSlice& layout) {
  const int64_t row = std::max<int64_t>(1, RowElements(layout.shape));
  return {layout.offset / row, (layout.offset + layout.count) / row};
}

absl::Status CheckPartRows(const Key& key, absl::Span<const int64_t> ids,
                           const ValueSlice& layout) {
  const auto [first, end] = RowRange(layout);
  for (int64_t id : ids) {
    if (id < first || id >= end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", key.Quoted(), ": row id ", id, " is not held by this server (rows [", first,
          ", ", end, ") of ", layout.shape.empty() ? 0 : layout.shape[0], ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ServerEngine::ExpandRowSparse(absl::Span<const IncomingValue> values,
                                           std::vector<IncomingValue>* expanded,
                                           std::vector<std::vector<uint8_t>>* storage) const {
  for (const IncomingValue& value : values) {
    if (!value.row_sparse) {
      expanded->push_back(value);
      continue;
    }
    const ValueSlice& slice = value.slice;
    const Part* part;
    {
      absl::ReaderMutexLock lock(&mu_);
      ASSIGN_OR_RETURN(part, FindRowPart(slice, "pushed"));
    }
    if (value.compression.enabled()) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", slice.key.Quoted(), ": row-sparse pushes are never compressed"));
    }
    const int64_t row = RowElements(slice.shape);
    const size_t element = DTypeSize(slice.dtype);
    size_t received = 0;
    for (const auto& chunk : value.bytes) received += chunk.size();
    const size_t rows = static_cast<size_t>(std::max<int64_t>(0, value.num_rows));
    const size_t expected = rows * (sizeof(int64_t) + static_cast<size_t>(row) * element);
    if (value.num_rows < 0 || received != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", slice.key.Quoted(), ": ", received, " bytes received for ", value.num_rows,
          " row ids and rows of ", row, " ", DTypeName(slice.dtype), " elements (", expected,
          " bytes)"));
    }
    std::vector<uint8_t> payload(expected);
    GatherBytes(value.bytes, payload.data());
    std::vector<int64_t> ids(rows);
    if (rows > 0) std::memcpy(ids.data(), payload.data(), rows * sizeof(int64_t));
    RETURN_IF_ERROR(CheckPartRows(slice.key, ids, part->layout));
    const uint8_t* data = payload.data() + rows * sizeof(int64_t);
    for (const auto& chunk : part->chunks) {
      std::vector<uint8_t>& dense = storage->emplace_back(
          static_cast<size_t>(chunk->count) * element, 0);
      const int64_t lo = chunk->offset, hi = chunk->offset + chunk->count;
      for (size_t i = 0; i < rows; ++i) {
        const int64_t begin = std::max(lo, ids[i] * row);
        const int64_t end = std::min(hi, (ids[i] + 1) * row);
        if (begin >= end) continue;
        const Tensor src = View(data + (i * row + (begin - ids[i] * row)) * element,
                                slice.dtype, end - begin);
        Tensor dst = View(dense.data() + static_cast<size_t>(begin - lo) * element, slice.dtype,
                          end - begin);
        RETURN_IF_ERROR(AddInto(src, &dst));
      }
      IncomingValue& out = expanded->emplace_back();
      out.slice = slice;
      out.slice.offset = chunk->offset;
      out.slice.count = chunk->count;
      out.bytes = {absl::MakeConstSpan(dense)};
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ServerEngine::PullRows(uint64_t node_id, const ValueSlice& slice,
                                              absl::Span<const int64_t> row_ids) const {
  RETURN_IF_ERROR(CheckSender(node_id));
  const Part* part;
  {
    absl::ReaderMutexLock lock(&mu_);
    ASSIGN_OR_RETURN(part, FindRowPart(slice, "pulled"));
  }
  RETURN_IF_ERROR(CheckPartRows(slice.key, row_ids, part->layout));
  const int64_t row = RowElements(slice.shape);
  const size_t element = DTypeSize(slice.dtype);
  Tensor rows = Tensor::Zeros(slice.dtype, RowShape(slice.shape,
                                                    static_cast<int64_t>(row_ids.size())));
  auto* out = static_cast<uint8_t*>(rows.data());
  for (size_t i = 0; i < row_ids.size(); ++i) {
    // A row may span chunks: copy it piece by piece, each under its chunk's lock.
    int64_t e = row_ids[i] * row;
    const int64_t end = e + row;
    while (e < end) {
      const Chunk& chunk =
          *part->chunks[static_cast<size_t>((e - part->layout.offset) / part->chunk_elements)];
      const int64_t take = std::min(end, chunk.offset + chunk.count) - e;
      ChunkLock lock(chunk);
      std::memcpy(out, static_cast<const uint8_t*>(chunk.stored.data()) +
                           static_cast<size_t>(e - chunk.offset) * element,
                  static_cast<size_t>(take) * element);
      out += static_cast<size_t>(take) * element;
      e += take;
    }
  }
  return rows;
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
    absl::Status status = CheckSender(node_id);
    if (status.ok()) status = ExpandRowSparse(original, &expanded, &storage);
    if (!status.ok()) {
      done(status);
      return;
    }
    values = expanded;
  }
  const absl::Status sender = CheckSender(node_id);
  absl::Status error = sender;
  std::vector<Chunk*> chunks;
  std::shared_ptr<PushCall> call;
  {
    absl::MutexLock lock(&mu_);
    // Validate everything before changing anything.
    absl::flat_hash_set<Chunk*> seen;
    for (const IncomingValue& value : values) {
      if (!error.ok()) break;
      error = CheckBytes(value);
      if (!error.ok()) break;
      absl::StatusOr<Chunk*> chunk = FindChunk(value.slice, "pushed");
      error = chunk.status();
      if (!error.ok()) break;
      if (!seen.insert(*chunk).second) {
        error = absl::InvalidArgumentError(absl::StrCat(
            "key ", value.slice.key.Quoted(), ": elements [", value.slice.offset, ", ",
            value.slice.offset + value.slice.count, ") appear twice in one push request"));
      } else {
        error = CheckRound(value.slice.key, **chunk, node_id);
      }
      chunks.push_back(*chunk);
    }
    if (sender.ok()) call = BeginPush(node_id, request_id, chunks, &done, &error);
  }
  if (call == nullptr) {
    if (done) done(error);
    return;
  }

  // Move the data, chunk by chunk, under each chunk's own lock.
  const std::shared_ptr<Updater> current = updater();
  std::vector<Chunk*> completed;
  for (size_t i = 0; i < values.size(); ++i) {
    absl::StatusOr<bool> merged = Merge(values[i].slice.key, chunks[i], values[i], current);
    if (!merged.ok() && error.ok()) error = merged.status();
    if (!merged.ok() || *merged) completed.push_back(chunks[i]);
  }
  EndPush(call, chunks.empty(), completed, error);
}

absl::Status ServerEngine::CheckRound(const Key& key, const Chunk& chunk,
                                      uint64_t node_id) const {
  if (rounds() && std::find(chunk.contributors.begin(), chunk.contributors.end(),
                                 node_id) != chunk.contributors.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "key ", key.Quoted(), ": node ", node_id,
        " pushed twice in one dist_sync round (the round still waits for other workers)"));
  }
  return absl::OkStatus();
}

std::shared_ptr<ServerEngine::PushCall> ServerEngine::BeginPush(uint64_t node_id,
                                                                uint64_t request_id,
                                                                absl::Span<Chunk* const> chunks,
                                                                Done* done,
                                                                absl::Status* error) {
  NodeRequests& requests = requests_[node_id];
  if (requests.applied.contains(request_id)) {
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
  if (rounds()) {
    for (Chunk* chunk : chunks) {
      if (chunk->contributors.empty()) ++open_rounds_;
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
        if (!chunk->contributors.empty()) --open_rounds_;
        chunk->contributors.clear();
        chunk->calls.clear();
      }
      SwapUpdaterIfIdle();
    }
    for (auto& f : finished) FinishCall(f.get(), &finished_done);
  }
  for (Done& d : finished_done) d(error);
}

void ServerEngine::FinishCall(PushCall* call, std::vector<Done>* finished) {
  RecordApplied(call->node_id, call->request_id);
  for (Done& d : call->done) finished->push_back(std::move(d));
  call->done.clear();
}

// ---------------------------------------------------------------------------------------------
// Key groups

absl::Status ServerEngine::RegisterGroup(uint64_t node_id, uint64_t group_id,
                                         absl::Span<const ValueSlice> members) {
  RETURN_IF_ERROR(CheckSender(node_id));
  auto group = std::make_shared<Group>();
  group->keys.reserve(members.size());
  group->chunks.reserve(members.size());
  group->offsets.reserve(members.size() + 1);
  size_t offset = 0;
  absl::MutexLock lock(&mu_);
  absl::flat_hash_set<Chunk*> seen;
  seen.reserve(members.size());
  for (const ValueSlice& member : members) {
    ASSIGN_OR_RETURN(Chunk * chunk, FindChunk(member, "grouped"));
    if (!seen.insert(chunk).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", member.key.Quoted(), ": elements [", member.offset, ", ",
          member.offset + member.count, ") appear twice in key group ", group_id));
    }
    group->keys.push_back(member.key);
    group->chunks.push_back(chunk);
    group->offsets.push_back(offset);
    offset += static_cast<size_t>(member.count) * DTypeSize(member.dtype);
  }
  group->offsets.push_back(offset);
  PlaceInArena(group.get(), members);
  NodeRequests& requests = requests_[node_id];
  auto [it, inserted] = requests.groups.insert_or_assign(group_id, std::move(group));
  if (inserted) {
    requests.group_order.push_back(group_id);
    while (requests.group_order.size() > kMaxGroupsPerNode) {
      requests.groups.erase(requests.group_order.front());
      requests.group_order.pop_front();
    }
  }
  return absl::OkStatus();
}

void ServerEngine::PlaceInArena(Group* group, absl::Span<const ValueSlice> members) {
  const size_t n = group->chunks.size();
  if (n == 0) return;
  const std::shared_ptr<Arena> first = group->chunks[0]->arena;
  if (first != nullptr) {
    // Placed by an earlier group: usable when the members lie back to back in this order.
    const size_t base = group->chunks[0]->arena_offset;
    for (size_t i = 0; i < n; ++i) {
      const Chunk& chunk = *group->chunks[i];
      if (chunk.arena != first || chunk.arena_offset != base + group->offsets[i]) return;
    }
    group->arena = first;
    group->arena_base = base;
  } else {
    for (size_t i = 0; i < n; ++i) {
      const size_t size = group->offsets[i + 1] - group->offsets[i];
      if (group->chunks[i]->arena != nullptr || size > kArenaMemberMaxBytes ||
          group->offsets[i] % DTypeSize(members[i].dtype) != 0) {
        return;
      }
    }
    auto arena = std::make_shared<Arena>();
    const int64_t words = static_cast<int64_t>((group->offsets.back() + 3) / 4);
    arena->buffer = Tensor::Zeros(DType::kInt32, {std::max<int64_t>(words, 1)});
    std::vector<Tensor> views(n);
    for (size_t i = 0; i < n; ++i) {
      ChunkLock lock(*group->chunks[i]);
      absl::StatusOr<Tensor> view = arena->buffer.View(
          group->offsets[i], members[i].dtype, group->chunks[i]->stored.shape());
      if (!view.ok()) return;  // Not expected: the offsets were computed from these sizes.
      views[i] = *std::move(view);
    }
    for (size_t i = 0; i < n; ++i) {
      Chunk* chunk = group->chunks[i];
      ChunkLock lock(*chunk);
      std::memcpy(views[i].data(), chunk->stored.data(), chunk->stored.byte_size());
      chunk->stored = std::move(views[i]);
      chunk->spare.Reset();
      chunk->arena = arena;
      chunk->arena_offset = group->offsets[i];
      chunk->mu.store(&arena->mu);  // Waiters on the old lock follow (ChunkLock).
    }
    group->arena = std::move(arena);
  }
  for (size_t i = 0; i < n; ++i) {
    if (group->runs.empty() || group->runs.back().dtype != members[i].dtype) {
      group->runs.push_back(Group::Run{members[i].dtype, group->offsets[i], group->offsets[i]});
    }
    group->runs.back().end = group->offsets[i + 1];
  }
}

bool ServerEngine::GroupInArena(uint64_t node_id, uint64_t group_id) const {
  absl::ReaderMutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<const Group>> group = FindGroup(node_id, group_id);
  return group.ok() && (*group)->arena != nullptr;
}

absl::StatusOr<std::shared_ptr<const ServerEngine::Group>> ServerEngine::FindGroup(
    uint64_t node_id, uint64_t group_id) const {
  auto node = requests_.find(node_id);
  if (node != requests_.end()) {
    auto it = node->second.groups.find(group_id);
    if (it != node->second.groups.end()) return it->second;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "node ", node_id, " has no key group ", group_id,
      " on this server (a group is registered by sending its members with it)"));
}

absl::StatusOr<bool> ServerEngine::MergeSpan(const Key& key, Chunk* chunk, const void* data,
                                             const std::shared_ptr<Updater>& updater) {
  ChunkLock lock(*chunk);
  const size_t workers = options_.worker_node_ids.size();
  const DType dtype = chunk->stored.dtype();
  if (!options_.sync || workers == 1) {
    // The push is the round's whole value: apply it at once.
    if (updater->piecewise()) {
      Tensor& stored = Writable(chunk);
      RETURN_IF_ERROR(
          updater->UpdateSpan(key, chunk->offset, dtype, data, stored.data(), chunk->count));
    } else {
      if (!chunk->gather.defined()) chunk->gather = Tensor::Zeros(dtype, chunk->stored.shape());
      std::memcpy(chunk->gather.data(), data, chunk->gather.byte_size());
      RETURN_IF_ERROR(Apply(key, chunk, chunk->gather, updater.get()));
    }
    return true;
  }
  if (!chunk->sum.defined()) chunk->sum = Tensor::Zeros(dtype, chunk->stored.shape());
  Tensor& sum = chunk->sum;
  if (chunk->arrived == 0) {
    std::memcpy(sum.data(), data, sum.byte_size());
  } else {
    AddRaw(dtype, data, sum.data(), chunk->count);
  }
  if (++chunk->arrived < workers) return false;
  chunk->arrived = 0;
  if (updater->piecewise()) {
    Tensor& stored = Writable(chunk);
    RETURN_IF_ERROR(
        updater->UpdateSpan(key, chunk->offset, dtype, sum.data(), stored.data(), chunk->count));
  } else {
    RETURN_IF_ERROR(Apply(key, chunk, sum, updater.get()));
  }
  return true;
}

void ServerEngine::PushGroup(uint64_t node_id, uint64_t request_id, uint64_t group_id,
                             const ByteChunks& bytes, Done done, Ack ack) {
  const std::shared_ptr<Updater> current = updater();
  absl::Status error = CheckSender(node_id);
  std::shared_ptr<const Group> group;
  std::shared_ptr<PushCall> call;
  // In place: applied straight into the group's arena. With Ack::kOrdered and an arena that
  // is free, its lock is taken here and the call finished (its `done`s taken) before the update.
  bool in_place = false;
  bool arena_locked = false;
  std::vector<Done> acked;
  {
    absl::MutexLock lock(&mu_);
    if (error.ok()) {
      absl::StatusOr<std::shared_ptr<const Group>> found = FindGroup(node_id, group_id);
      error = found.status();
      if (found.ok()) group = *std::move(found);
    }
    if (error.ok()) {
      size_t received = 0;
      for (const auto& chunk : bytes) received += chunk.size();
      if (received != group->offsets.back()) {
        error = absl::InvalidArgumentError(absl::StrCat(
            received, " bytes received for key group ", group_id, " of ",
            group->chunks.size(), " keys (", group->offsets.back(), " bytes)"));
      }
    }
    for (size_t i = 0; rounds() && error.ok() && i < group->chunks.size(); ++i) {
      error = CheckRound(group->keys[i], *group->chunks[i], node_id);
    }
    if (group != nullptr) call = BeginPush(node_id, request_id, group->chunks, &done, &error);
    in_place = call != nullptr && group->arena != nullptr && !rounds() && current->piecewise();
    // The engine's lock is taken before an arena's (RegisterGroup): only a TryLock here.
    if (in_place && ack == Ack::kOrdered && group->arena->mu.TryLock()) {
      arena_locked = true;
      FinishCall(call.get(), &acked);
    }
  }
  if (call == nullptr) {
    if (done) done(error);
    return;
  }
  for (Done& d : acked) d(absl::OkStatus());

  if (in_place) {
    // Each push is applied as it arrives: one update per run of one dtype, straight from the
    // received slices into the arena.
    if (!arena_locked) group->arena->mu.Lock();
    auto* base = static_cast<uint8_t*>(group->arena->buffer.data()) + group->arena_base;
    for (const Group::Run& run : group->runs) {
      const size_t element = DTypeSize(run.dtype);
      ForEachPiece(SubRange(bytes, run.begin, run.end), element,
                   [&](int64_t e, const void* piece, int64_t count) {
                     if (!error.ok()) return;
                     uint8_t* stored = base + run.begin + static_cast<size_t>(e) * element;
                     error = current->UpdateSpan(group->keys[0], 0, run.dtype, piece, stored,
                                                 count);
                   });
    }
    group->arena->mu.Unlock();
    if (!arena_locked) {
      EndPush(call, false, {}, error);
    } else if (!error.ok()) {
      spdlog::error("key group {} of node {}: the updater \"{}\" failed after the push was "
                    "acknowledged: {}",
                    group_id, node_id, std::string(current->name()), error.ToString());
    }
    return;
  }
  // Walk the received slices once; a member split between two slices is gathered first.
  std::vector<Chunk*> completed;
  std::vector<uint8_t> straddling;
  size_t slice = 0, slice_start = 0;
  for (size_t i = 0; i < group->chunks.size(); ++i) {
    const size_t begin = group->offsets[i], size = group->offsets[i + 1] - begin;
    while (slice < bytes.size() && slice_start + bytes[slice].size() <= begin && size > 0) {
      slice_start += bytes[slice].size();
      ++slice;
    }
    const void* data = nullptr;
    if (size == 0) {
      data = straddling.data();
    } else if (begin + size <= slice_start + bytes[slice].size()) {
      data = bytes[slice].data() + (begin - slice_start);
    } else {
      straddling.resize(size);
      size_t copied = 0;
      for (size_t k = slice, start = slice_start; copied < size; start += bytes[k].size(), ++k) {
        const size_t from = begin + copied - start;
        const size_t take = std::min(bytes[k].size() - from, size - copied);
        std::memcpy(straddling.data() + copied, bytes[k].data() + from, take);
        copied += take;
      }
      data = straddling.data();
    }
    absl::StatusOr<bool> merged = MergeSpan(group->keys[i], group->chunks[i], data, current);
    if (!merged.ok() && error.ok()) error = merged.status();
    if (!merged.ok() || *merged) completed.push_back(group->chunks[i]);
  }
  EndPush(call, group->chunks.empty(), completed, error);
}

absl::StatusOr<ServerEngine::PackedGroup> ServerEngine::PullGroup(uint64_t node_id, uint64_t group_id) const {
  RETURN_IF_ERROR(CheckSender(node_id));
  std::shared_ptr<const Group> group;
  {
    absl::ReaderMutexLock lock(&mu_);
    ASSIGN_OR_RETURN(group, FindGroup(node_id, group_id));
  }
  absl::MutexLock lock(&group->reply_mu);
  const int64_t size = static_cast<int64_t>(group->offsets.back());
  // The last reply may still be on its way out: then this one gets a buffer of its own.
  if (!group->reply.defined() || group->reply.shared()) {
    group->reply = Tensor::Zeros(DType::kInt32, {(size + 3) / 4});
  }
  auto* out = static_cast<uint8_t*>(group->reply.data());
  if (group->arena != nullptr) {
    absl::MutexLock arena_lock(&group->arena->mu);
    std::memcpy(out, static_cast<const uint8_t*>(group->arena->buffer.data()) + group->arena_base,
                static_cast<size_t>(size));
    return PackedGroup{group->reply, static_cast<size_t>(size)};
  }
  for (size_t i = 0; i < group->chunks.size(); ++i) {
    const Chunk& chunk = *group->chunks[i];
    ChunkLock chunk_lock(chunk);
    std::memcpy(out + group->offsets[i], chunk.stored.data(),
                group->offsets[i + 1] - group->offsets[i]);
  }
  return PackedGroup{group->reply, static_cast<size_t>(size)};
}

absl::StatusOr<std::vector<Tensor>> ServerEngine::Pull(
    uint64_t node_id, absl::Span<const ValueSlice> slices) const {
  RETURN_IF_ERROR(CheckSender(node_id));
  std::vector<Chunk*> chunks;
  chunks.reserve(slices.size());
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const ValueSlice& slice : slices) {
      ASSIGN_OR_RETURN(Chunk * chunk, FindChunk(slice, "pulled"));
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
