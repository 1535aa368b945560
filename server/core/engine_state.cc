#include "server/core/engine_state.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvstore {

absl::StatusOr<EngineSnapshot> EngineState::Snapshot() const { return Take(/*with_data=*/true); }

absl::StatusOr<EngineSnapshot> EngineState::Describe() const { return Take(/*with_data=*/false); }

absl::StatusOr<EngineSnapshot> EngineState::Take(bool with_data) const {
  absl::MutexLock lock(&engine_.mu_);
  if (engine_.open_rounds_ > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(engine_.open_rounds_,
                     " dist_sync rounds are open (waiting for other workers' pushes); "
                     "checkpoint between rounds, e.g. after WaitAll and Barrier on every worker"));
  }
  EngineSnapshot snapshot;
  for (const auto& [key, part] : engine_.parts_.all()) {
    StoredPart stored;
    stored.layout = part->layout;
    const size_t element = DTypeSize(part->layout.dtype);
    if (with_data) stored.data = Tensor::Zeros(part->layout.dtype, {part->layout.count});
    for (const auto& chunk : part->chunks) {
      if (with_data) {
        engine::ChunkLock chunk_lock(*chunk);
        std::memcpy(static_cast<uint8_t*>(stored.data.data()) +
                        static_cast<size_t>(chunk->offset - part->layout.offset) * element,
                    chunk->stored.data(), chunk->stored.byte_size());
      }
      stored.chunk_rounds.push_back(chunk->rounds_done);
    }
    snapshot.parts.push_back(std::move(stored));
  }
  snapshot.updater_state = engine_.updater_.current()->SaveState();
  return snapshot;
}

absl::Status EngineState::ReadStretch(const ValueSlice& layout, int64_t begin, int64_t end,
                                      void* out) const {
  absl::ReaderMutexLock lock(&engine_.mu_);
  const engine::Part* part = engine_.parts_.Get(layout.key);
  if (part == nullptr || part->layout.dtype != layout.dtype || part->layout.shape != layout.shape ||
      part->layout.offset != layout.offset || part->layout.count != layout.count) {
    return absl::FailedPreconditionError(
        absl::StrCat("key ", layout.key.Quoted(), " is no longer stored as the ",
                     DTypeName(layout.dtype), ShapeToString(layout.shape), " part [", layout.offset,
                     ", ", layout.offset + layout.count, ") it was"));
  }
  if (begin < layout.offset || end < begin || end > layout.offset + layout.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", layout.key.Quoted(), ": elements [", begin, ", ", end,
                     ") are not within [", layout.offset, ", ", layout.offset + layout.count, ")"));
  }
  const size_t element = DTypeSize(layout.dtype);
  for (const auto& chunk : part->chunks) {
    const int64_t from = std::max(begin, chunk->offset);
    const int64_t to = std::min(end, chunk->offset + chunk->count);
    if (from >= to) continue;
    engine::ChunkLock chunk_lock(*chunk);
    std::memcpy(static_cast<uint8_t*>(out) + static_cast<size_t>(from - begin) * element,
                static_cast<const uint8_t*>(chunk->stored.data()) +
                    static_cast<size_t>(from - chunk->offset) * element,
                static_cast<size_t>(to - from) * element);
  }
  return absl::OkStatus();
}

absl::Status EngineState::Restore(absl::Span<const StoredPart> parts) {
  std::vector<IncomingValue> values;
  for (const StoredPart& part : parts) {
    IncomingValue value;
    value.slice = part.layout;
    value.bytes = {absl::Span<const uint8_t>(static_cast<const uint8_t*>(part.data.data()),
                                             part.data.byte_size())};
    values.push_back(std::move(value));
  }
  RETURN_IF_ERROR(engine_.Init(kSchedulerNodeId, values));
  return MarkRestored(parts);
}

absl::Status EngineState::InitUnset(absl::Span<const IncomingValue> values) {
  return engine_.InitParts(kSchedulerNodeId, values, PartTable::Fill::kUnset);
}

absl::Status EngineState::MarkRestored(absl::Span<const StoredPart> parts) {
  absl::MutexLock lock(&engine_.mu_);
  for (const StoredPart& part : parts) {
    if (engine_.parts_.Get(part.layout.key) == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("key ", part.layout.key.Quoted(), " is not stored on this server"));
    }
  }
  for (const StoredPart& part : parts) {
    engine::Part& restored = *engine_.parts_.Get(part.layout.key);
    restored.restored = true;
    restored.filling_node.reset();
    restored.filled.clear();
    restored.unfilled = 0;
    if (part.chunk_rounds.size() != restored.chunks.size()) continue;
    for (size_t c = 0; c < restored.chunks.size(); ++c) {
      restored.chunks[c]->rounds_done = part.chunk_rounds[c];
    }
  }
  return absl::OkStatus();
}

size_t EngineState::DropUnrestored(absl::Span<const Key> keys) {
  absl::MutexLock lock(&engine_.mu_);
  size_t dropped = 0;
  for (const Key& key : keys) {
    const engine::Part* part = engine_.parts_.Get(key);
    if (part == nullptr || part->restored) continue;
    engine_.budget_.Add(-engine_.parts_.HeldBytes(part->layout));
    engine_.parts_.Remove(key);
    ++dropped;
  }
  return dropped;
}

std::vector<AppliedRequests> EngineState::Applied() const { return engine_.applied_.Export(); }

void EngineState::LoadApplied(absl::Span<const AppliedRequests> applied) {
  engine_.applied_.Load(applied);
}

absl::StatusOr<UpdaterStateData> EngineState::SaveUpdaterState() const {
  absl::MutexLock lock(&engine_.mu_);
  if (engine_.open_rounds_ > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        engine_.open_rounds_, " dist_sync rounds are open; save optimizer states between rounds"));
  }
  return engine_.updater_.current()->SaveState();
}

absl::Status EngineState::LoadUpdaterState(const UpdaterStateData& state) {
  absl::MutexLock lock(&engine_.mu_);
  for (const PartStateData& part : state.parts) {
    const engine::Part* found = engine_.parts_.Get(part.key);
    if (found == nullptr) continue;
    const engine::Part& held = *found;
    if (part.offset < held.layout.offset) continue;  // Another server's.
    const int64_t relative = part.offset - held.layout.offset;
    if (relative >= std::max<int64_t>(1, held.layout.count)) continue;  // Another server's.
    if (relative % held.chunk_elements != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "saved optimizer state of key ", part.key.Quoted(), " starts at element ", part.offset,
          ", which is not a chunk of this server's part [", held.layout.offset, ", ",
          held.layout.offset + held.layout.count, ") in chunks of ", held.chunk_elements,
          " elements (saved with another number of servers or chunk size?)"));
    }
  }
  return engine_.updater_.current()->LoadState(state, [this](const PartStateData& part) {
    engine_.mu_.AssertHeld();
    const engine::Part* held = engine_.parts_.Get(part.key);
    if (held == nullptr) return false;
    const ValueSlice& layout = held->layout;
    return part.offset >= layout.offset &&
           part.offset < layout.offset + std::max<int64_t>(1, layout.count);
  });
}

void EngineState::SetRoundsDone(int64_t round) {
  absl::MutexLock lock(&engine_.mu_);
  for (auto& [key, part] : engine_.parts_.all()) {
    for (auto& chunk : part->chunks) chunk->rounds_done = round;
  }
}

}  // namespace kvstore
