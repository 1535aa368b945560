// ServerEngine: checkpoints - Snapshot and Restore of the stored parts - and the updater's
// state (SaveUpdaterState, LoadUpdaterState).
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/core/server_engine.h"

namespace kvstore {

absl::StatusOr<EngineSnapshot> ServerEngine::Snapshot() const {
  absl::MutexLock lock(&mu_);
  if (open_rounds_ > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(open_rounds_,
                     " dist_sync rounds are open (waiting for other workers' pushes); "
                     "checkpoint between rounds, e.g. after WaitAll and Barrier on every worker"));
  }
  EngineSnapshot snapshot;
  for (const auto& [key, part] : parts_.all()) {
    StoredPart stored;
    stored.layout = part->layout;
    const size_t element = DTypeSize(part->layout.dtype);
    stored.data = Tensor::Zeros(part->layout.dtype, {part->layout.count});
    for (const auto& chunk : part->chunks) {
      ChunkLock chunk_lock(*chunk);
      std::memcpy(static_cast<uint8_t*>(stored.data.data()) +
                      static_cast<size_t>(chunk->offset - part->layout.offset) * element,
                  chunk->stored.data(), chunk->stored.byte_size());
      stored.chunk_rounds.push_back(chunk->rounds_done);
    }
    snapshot.parts.push_back(std::move(stored));
  }
  snapshot.updater_state = updater_.current()->SaveState();
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
  for (const StoredPart& part : parts) {
    Part& restored = *parts_.Get(part.layout.key);
    restored.restored = true;
    if (part.chunk_rounds.size() != restored.chunks.size()) continue;
    for (size_t c = 0; c < restored.chunks.size(); ++c) {
      restored.chunks[c]->rounds_done = part.chunk_rounds[c];
    }
  }
  return absl::OkStatus();
}

std::vector<AppliedRequests> ServerEngine::Applied() const { return applied_.Export(); }

void ServerEngine::LoadApplied(absl::Span<const AppliedRequests> applied) {
  applied_.Load(applied);
}

absl::StatusOr<UpdaterStateData> ServerEngine::SaveUpdaterState() const {
  absl::MutexLock lock(&mu_);
  if (open_rounds_ > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        open_rounds_, " dist_sync rounds are open; save optimizer states between rounds"));
  }
  return updater_.current()->SaveState();
}

absl::Status ServerEngine::LoadUpdaterState(const UpdaterStateData& state) {
  absl::MutexLock lock(&mu_);
  for (const PartStateData& part : state.parts) {
    const Part* found = parts_.Get(part.key);
    if (found == nullptr) continue;
    const Part& held = *found;
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
  return updater_.current()->LoadState(state, [this](const PartStateData& part) {
    mu_.AssertHeld();
    const Part* held = parts_.Get(part.key);
    if (held == nullptr) return false;
    const ValueSlice& layout = held->layout;
    return part.offset >= layout.offset &&
           part.offset < layout.offset + std::max<int64_t>(1, layout.count);
  });
}

void ServerEngine::SetRoundsDone(int64_t round) {
  absl::MutexLock lock(&mu_);
  for (auto& [key, part] : parts_.all()) {
    for (auto& chunk : part->chunks) chunk->rounds_done = round;
  }
}

}  // namespace kvstore
