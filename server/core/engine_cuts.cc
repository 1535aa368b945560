#include "server/core/engine_cuts.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/core/key_groups.h"
#include "server/core/server_engine_internal.h"

namespace kvstore {

using server_engine_internal::ElementRange;

bool EngineCuts::Holds(absl::Span<engine::Chunk* const> chunks) const {
  engine_.mu_.AssertReaderHeld();
  if (!gate_.active()) return false;
  // dist_async has no rounds: the cut is a point in time, every push waits for it.
  if (!engine_.options_.sync) return true;
  for (const engine::Chunk* chunk : chunks) {
    if (gate_.Holds(!chunk->contributors.empty(), chunk->rounds_done)) return true;
  }
  return false;
}

void EngineCuts::Hold(uint64_t node_id, uint64_t request_id, absl::Span<const IncomingValue> values,
                      Done done) {
  engine_.mu_.AssertHeld();
  // The transport's bytes live only during the call: keep a copy of them.
  struct Held {
    std::vector<IncomingValue> values;
    std::vector<std::vector<uint8_t>> storage;
  };
  auto held = std::make_shared<Held>();
  held->storage.reserve(values.size());
  for (const IncomingValue& value : values) {
    IncomingValue copy = value;
    size_t size = 0;
    for (const auto& piece : value.bytes) size += piece.size();
    held->storage.emplace_back(size);
    if (size > 0) GatherBytes(value.bytes, held->storage.back().data());
    copy.bytes = {absl::Span<const uint8_t>(held->storage.back().data(), size)};
    copy.bytes_outlive_call = false;  // The copy lives while the replay's call runs.
    held->values.push_back(std::move(copy));
  }
  gate_.Hold(
      [this, node_id, request_id, held, done = std::move(done)](absl::Status refusal) mutable {
        if (!refusal.ok()) return done(std::move(refusal));
        engine_.Push(node_id, request_id, held->values, std::move(done));
      });
}

void EngineCuts::HoldGroup(uint64_t node_id, uint64_t request_id, uint64_t group_id,
                           const ByteChunks& bytes, Done done, GroupAck ack) {
  engine_.mu_.AssertHeld();
  size_t size = 0;
  for (const auto& piece : bytes) size += piece.size();
  auto storage = std::make_shared<std::vector<uint8_t>>(size);
  if (size > 0) GatherBytes(bytes, storage->data());
  gate_.Hold([this, node_id, request_id, group_id, storage, ack,
              done = std::move(done)](absl::Status refusal) mutable {
    if (!refusal.ok()) return done(std::move(refusal));
    const ByteChunks copy = {absl::Span<const uint8_t>(storage->data(), storage->size())};
    engine_.groups_->Push(node_id, request_id, group_id, copy, std::move(done), ack);
  });
}

int64_t EngineCuts::MaxRoundStarted() const {
  absl::MutexLock lock(&engine_.mu_);
  return MaxRoundStartedLocked();
}

int64_t EngineCuts::MaxRoundStartedLocked() const {
  // A group round every worker has joined completes whole, after this: count it as started.
  int64_t started = engine_.groups_->MaxRoundStarted();
  for (const auto& [key, part] : engine_.parts_.all()) {
    for (const auto& chunk : part->chunks) started = std::max(started, chunk->rounds_started());
  }
  return started;
}

absl::StatusOr<int64_t> EngineCuts::Begin() {
  absl::MutexLock lock(&engine_.mu_);
  RETURN_IF_ERROR(gate_.Begin());
  engine_.groups_->SplitAllRounds();
  return MaxRoundStartedLocked();
}

absl::Status EngineCuts::Limit(int64_t round) {
  std::vector<CutGate::Held> release;
  {
    absl::MutexLock lock(&engine_.mu_);
    if (!gate_.active()) {
      return absl::FailedPreconditionError("no checkpoint is being cut on this server");
    }
    if (engine_.options_.sync) {
      for (const auto& [key, part] : engine_.parts_.all()) {
        for (const auto& chunk : part->chunks) {
          const int64_t started = chunk->rounds_started();
          if (started > round) {
            return absl::FailedPreconditionError(absl::StrCat(
                "key ", key.Quoted(), " elements ", ElementRange(chunk->offset, chunk->count),
                " has started round ", started, ", past the cut's round ", round));
          }
        }
      }
    }
    // dist_sync runs the held pushes again: those below the cut go on.
    release = gate_.Limit(round, absl::Now(), /*release_held=*/engine_.options_.sync);
  }
  for (auto& push : release) push(absl::OkStatus());
  return absl::OkStatus();
}

std::string EngineCuts::Lagging() const {
  absl::MutexLock lock(&engine_.mu_);
  if (gate_.phase() != CutGate::Phase::kLimited) return "the cut's round is not set yet";
  if (engine_.pushes_in_flight_ > 0)
    return absl::StrCat(engine_.pushes_in_flight_, " pushes being applied");
  // Rounds of whole key groups every worker has joined (BeginCut split the others).
  if (engine_.groups_->open_rounds() > 0) {
    return absl::StrCat(engine_.groups_->open_rounds(), " key group rounds completing");
  }
  if (!engine_.options_.sync) return std::string();
  // A key behind the cut's round catches up while its workers go on (its next round is below
  // the cut, so it is not held). One pushed less often than the others may never do so: after
  // kCatchUp it is cut at the last round it completed, which it then holds on restore.
  const bool catching_up = gate_.CatchingUp(absl::Now(), kCatchUp);
  for (const auto& [key, part] : engine_.parts_.all()) {
    for (const auto& chunk : part->chunks) {
      const bool open = !chunk->contributors.empty();
      const bool behind = chunk->rounds_done != 0 && chunk->rounds_done != gate_.round();
      if (open || (behind && catching_up)) {
        return absl::StrCat("key ", key.Quoted(), " elements ",
                            ElementRange(chunk->offset, chunk->count), " has completed round ",
                            chunk->rounds_done, open ? " (the next one open)" : "",
                            " of the cut's ", gate_.round());
      }
    }
  }
  return std::string();
}

std::vector<CutGate::Held> EngineCuts::TakeHeld() {
  engine_.mu_.AssertHeld();
  return gate_.End();
}

bool EngineCuts::active_locked() const {
  engine_.mu_.AssertReaderHeld();
  return gate_.active();
}

void EngineCuts::End(absl::Status refusal) {
  std::vector<CutGate::Held> release;
  {
    absl::MutexLock lock(&engine_.mu_);
    release = gate_.End();
  }
  for (auto& push : release) push(refusal);
}

bool EngineCuts::active() const {
  absl::MutexLock lock(&engine_.mu_);
  return gate_.active();
}

}  // namespace kvstore
