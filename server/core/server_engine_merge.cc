// ServerEngine: merging received chunks into stored values - summing a dist_sync round's
// pushes, decoding compressed pushes, and applying the updater to a chunk's stored value
// (copy on write while a pull holds it).
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/reduce.h"
#include "common/status_macros.h"
#include "server/core/server_engine.h"
#include "server/core/server_engine_internal.h"

namespace kvstore {
namespace {

using server_engine_internal::View;

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

}  // namespace

int64_t ServerEngine::SpareBytesHeld() { return SpareBuffer::BytesHeld(); }

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
      return absl::InternalError(absl::StrCat("key ", key.Quoted(), ": updater \"", updater->name(),
                                              "\" replaced ", stored.Description(), " by ",
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
  if (++chunk->arrived + chunk->excused < workers) return false;
  chunk->arrived = 0;
  chunk->excused = workers_.dropped();
  chunk->completing = true;
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
  if (++chunk->arrived + chunk->excused < options_.worker_node_ids.size()) return false;
  chunk->arrived = 0;
  chunk->excused = workers_.dropped();
  chunk->completing = true;
  RETURN_IF_ERROR(Apply(key, chunk, sum, updater));
  return true;
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
  if (++chunk->arrived + chunk->excused < workers) return false;
  chunk->arrived = 0;
  chunk->excused = workers_.dropped();
  chunk->completing = true;
  if (updater->piecewise()) {
    Tensor& stored = Writable(chunk);
    RETURN_IF_ERROR(
        updater->UpdateSpan(key, chunk->offset, dtype, sum.data(), stored.data(), chunk->count));
  } else {
    RETURN_IF_ERROR(Apply(key, chunk, sum, updater.get()));
  }
  return true;
}

}  // namespace kvstore
