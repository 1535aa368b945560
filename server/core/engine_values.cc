// The engine's values (engine_values.h): a chunk's lock, merging pushes into a chunk - summing
// a dist_sync round's pushes, decoding compressed pushes, applying the updater to the stored
// value (copy on write while a pull holds it) - and a key group's update in place.
#include "server/core/engine_values.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/reduce.h"
#include "common/status_macros.h"
#include "server/core/server_engine_internal.h"

namespace kvstore::engine {
namespace {

using server_engine_internal::SubRange;
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

ChunkLock::ChunkLock(const Chunk& chunk) : mu_(chunk.mu.load()) {
  mu_->Lock();
  // The lock moves once, into an arena, while the old one is held: follow it.
  for (absl::Mutex* now = chunk.mu.load(); now != mu_; now = chunk.mu.load()) {
    mu_->Unlock();
    mu_ = now;
    mu_->Lock();
  }
}

Tensor& Chunk::Writable() {
  // Arena memory is never held outside the engine: update it in place.
  if (arena != nullptr || !stored.shared()) return stored;
  // A pull reply is still being sent from the stored buffer: update a copy instead.
  Tensor next = spare.TakeIfFree();
  if (!next.defined()) next = Tensor::Zeros(stored.dtype(), stored.shape());
  std::memcpy(next.data(), stored.data(), stored.byte_size());
  spare.Keep(std::move(stored));
  stored = std::move(next);
  return stored;
}

absl::Status Chunk::Apply(const Key& key, const Tensor& received, Updater* updater) {
  Tensor& target = Writable();
  if (arena == nullptr) return updater->UpdateAt(key, offset, received, &target);
  // An updater may replace the handle instead of writing through it; the arena keeps the bytes.
  Tensor updated = target;
  RETURN_IF_ERROR(updater->UpdateAt(key, offset, received, &updated));
  if (updated.data() != target.data()) {
    if (updated.dtype() != target.dtype() || updated.byte_size() != target.byte_size() ||
        !updated.device().is_cpu()) {
      return absl::InternalError(absl::StrCat("key ", key.Quoted(), ": updater \"", updater->name(),
                                              "\" replaced ", target.Description(), " by ",
                                              updated.Description()));
    }
    std::memcpy(target.data(), updated.data(), target.byte_size());
  }
  return absl::OkStatus();
}

Tensor& Chunk::Buffer(Tensor* t, DType dtype) const {
  if (!t->defined()) *t = Tensor::Zeros(dtype, stored.shape());
  return *t;
}

bool Chunk::Arrive(const MergeRule& rule) {
  if (++arrived + excused < rule.workers) return false;
  arrived = 0;
  excused = rule.dropped;
  completing = true;
  return true;
}

namespace {
std::vector<const ByteChunks*> ChainsOf(const std::vector<ByteChunks>& held) {
  std::vector<const ByteChunks*> chains;
  chains.reserve(held.size());
  for (const ByteChunks& bytes : held) chains.push_back(&bytes);
  return chains;
}
}  // namespace

void Chunk::SettleHeld() {
  if (held.empty()) return;
  const DType dtype = stored.dtype();
  auto* summed = static_cast<uint8_t*>(Buffer(&sum, dtype).data());
  const size_t element = DTypeSize(dtype);
  const std::vector<const ByteChunks*> chains = ChainsOf(held);
  ForEachCommonPiece(chains, element, [&](int64_t e, const void* const* pieces, int64_t n) {
    SumRaw(dtype, pieces, chains.size(), summed + static_cast<size_t>(e) * element, n,
           /*accumulate=*/false);
  });
  held.clear();
}

absl::Status Chunk::MergeHeld(const Key& key, Updater* updater) {
  if (!updater->piecewise() || !updater->sums_in_place()) {
    SettleHeld();
    return Apply(key, sum, updater);
  }
  const DType dtype = stored.dtype();
  const size_t element = DTypeSize(dtype);
  auto* base = static_cast<uint8_t*>(Writable().data());
  const std::vector<const ByteChunks*> chains = ChainsOf(held);
  absl::Status status;
  ForEachCommonPiece(chains, element, [&](int64_t e, const void* const* pieces, int64_t n) {
    if (!status.ok()) return;
    status =
        updater->UpdateSpanOfSum(key, offset + e, dtype, absl::MakeConstSpan(pieces, chains.size()),
                                 base + static_cast<size_t>(e) * element, n);
  });
  held.clear();
  return status;
}

absl::StatusOr<bool> Chunk::Merge(const Key& key, const ByteChunks& bytes,
                                  const CompressionParams& compression, Updater* updater,
                                  const MergeRule& rule, bool bytes_outlive_call) {
  ChunkLock lock(*this);
  if (compression.enabled()) {
    SettleHeld();
    return MergeCompressed(key, bytes, compression, updater, rule);
  }
  const DType dtype = stored.dtype();
  if (rule.at_once) {
    if (!updater->piecewise()) {
      Tensor& gathered = Buffer(&gather, dtype);
      GatherBytes(bytes, gathered.data());
      RETURN_IF_ERROR(Apply(key, gathered, updater));
      return true;
    }
    // Straight from the received pieces into the stored elements, without a tensor per piece.
    Tensor& target = Writable();
    const size_t element = DTypeSize(dtype);
    auto* base = static_cast<uint8_t*>(target.data());
    absl::Status status;
    ForEachPiece(bytes, element, [&](int64_t e, const void* piece, int64_t n) {
      if (!status.ok()) return;
      status = updater->UpdateSpan(key, offset + e, dtype, piece,
                                   base + static_cast<size_t>(e) * element, n);
    });
    RETURN_IF_ERROR(status);
    return true;
  }
  if (bytes_outlive_call && arena == nullptr && (arrived == 0 || !held.empty())) {
    held.push_back(bytes);
    if (!Arrive(rule)) return false;
    RETURN_IF_ERROR(MergeHeld(key, updater));
    return true;
  }
  SettleHeld();
  Tensor& summed = Buffer(&sum, dtype);
  if (arrived == 0) {
    GatherBytes(bytes, summed.data());
  } else {
    RETURN_IF_ERROR(ForEachPieceInto(
        bytes, summed,
        [](int64_t, const Tensor& received, Tensor* into) { return AddInto(received, into); }));
  }
  if (!Arrive(rule)) return false;
  RETURN_IF_ERROR(Apply(key, summed, updater));
  return true;
}

absl::StatusOr<bool> Chunk::MergeCompressed(const Key& key, const ByteChunks& bytes,
                                            const CompressionParams& compression, Updater* updater,
                                            const MergeRule& rule) {
  // The codes are 1/16 or 1/32 of the value: gathering them when they arrived split is cheap.
  const uint8_t* codes = bytes.empty() ? nullptr : bytes.front().data();
  std::vector<uint8_t> gathered;
  if (bytes.size() > 1) {
    gathered.resize(CompressedBytes(compression.type, count));
    GatherBytes(bytes, gathered.data());
    codes = gathered.data();
  }
  if (rule.at_once) {
    Tensor& decoded = Buffer(&gather, DType::kFloat32);
    Dequantize(compression, codes, count, decoded.data_as<float>());
    RETURN_IF_ERROR(Apply(key, decoded, updater));
    return true;
  }
  Tensor& summed = Buffer(&sum, DType::kFloat32);
  if (arrived == 0) {
    Dequantize(compression, codes, count, summed.data_as<float>());
  } else {
    DequantizeAdd(compression, codes, count, summed.data_as<float>());
  }
  if (!Arrive(rule)) return false;
  RETURN_IF_ERROR(Apply(key, summed, updater));
  return true;
}

absl::StatusOr<bool> Chunk::MergeSpan(const Key& key, const void* data, Updater* updater,
                                      const MergeRule& rule) {
  ChunkLock lock(*this);
  SettleHeld();
  const DType dtype = stored.dtype();
  if (rule.at_once) {
    if (updater->piecewise()) {
      RETURN_IF_ERROR(updater->UpdateSpan(key, offset, dtype, data, Writable().data(), count));
    } else {
      Tensor& gathered = Buffer(&gather, dtype);
      std::memcpy(gathered.data(), data, gathered.byte_size());
      RETURN_IF_ERROR(Apply(key, gathered, updater));
    }
    return true;
  }
  Tensor& summed = Buffer(&sum, dtype);
  if (arrived == 0) {
    std::memcpy(summed.data(), data, summed.byte_size());
  } else {
    AddRaw(dtype, data, summed.data(), count);
  }
  if (!Arrive(rule)) return false;
  if (updater->piecewise()) {
    RETURN_IF_ERROR(
        updater->UpdateSpan(key, offset, dtype, summed.data(), Writable().data(), count));
  } else {
    RETURN_IF_ERROR(Apply(key, summed, updater));
  }
  return true;
}

absl::Status Group::ApplyInPlace(const ByteChunks& bytes, Updater* updater) const {
  // One update per run of one dtype, straight from the received slices into the arena.
  absl::Status error;
  auto* base = static_cast<uint8_t*>(arena->buffer.data()) + arena_base;
  for (const Run& run : runs) {
    const size_t element = DTypeSize(run.dtype);
    ForEachPiece(SubRange(bytes, run.begin, run.end), element,
                 [&](int64_t e, const void* piece, int64_t n) {
                   if (!error.ok()) return;
                   uint8_t* target = base + run.begin + static_cast<size_t>(e) * element;
                   error = updater->UpdateSpan(keys[0], 0, run.dtype, piece, target, n);
                 });
  }
  return error;
}

}  // namespace kvstore::engine
