// ServerEngine: consistent cuts - the engine's part of a checkpoint of the whole job at one
// round (BeginCut, LimitCut, CutLagging, EndCut) and the pushes a cut holds meanwhile.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/core/key_groups.h"
#include "server/core/server_engine.h"
#include "server/core/server_engine_internal.h"

namespace kvstore {

using server_engine_internal::ElementRange;

bool ServerEngine::HoldForCut(absl::Span<Chunk* const> chunks) const {
  if (!cut_.active()) return false;
  // dist_async has no rounds: the cut is a point in time, every push waits for it.
  if (!options_.sync) return true;
  for (const Chunk* chunk : chunks) {
    if (cut_.Holds(!chunk->contributors.empty(), chunk->rounds_done)) return true;
  }
  return false;
}

void ServerEngine::HoldPush(uint64_t node_id, uint64_t request_id,
                            absl::Span<const IncomingValue> values, Done done) {
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
    held->values.push_back(std::move(copy));
  }
  cut_.Hold(
      [this, node_id, request_id, held, done = std::move(done)](absl::Status refusal) mutable {
        if (!refusal.ok()) return done(std::move(refusal));
        Push(node_id, request_id, held->values, std::move(done));
      });
}

void ServerEngine::HoldGroupPush(uint64_t node_id, uint64_t request_id, uint64_t group_id,
                                 const ByteChunks& bytes, Done done, Ack ack) {
  size_t size = 0;
  for (const auto& piece : bytes) size += piece.size();
  auto storage = std::make_shared<std::vector<uint8_t>>(size);
  if (size > 0) GatherBytes(bytes, storage->data());
  cut_.Hold([this, node_id, request_id, group_id, storage, ack,
             done = std::move(done)](absl::Status refusal) mutable {
    if (!refusal.ok()) return done(std::move(refusal));
    const ByteChunks copy = {absl::Span<const uint8_t>(storage->data(), storage->size())};
    groups_->Push(node_id, request_id, group_id, copy, std::move(done), ack);
  });
}

int64_t ServerEngine::MaxRoundStarted() const {
  absl::MutexLock lock(&mu_);
  return MaxRoundStartedLocked();
}

int64_t ServerEngine::MaxRoundStartedLocked() const {
  int64_t started = 0;
  for (const auto& [key, part] : parts_.all()) {
    for (const auto& chunk : part->chunks) started = std::max(started, chunk->rounds_started());
  }
  return started;
}

absl::StatusOr<int64_t> ServerEngine::BeginCut() {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(cut_.Begin());
  groups_->SplitAllRounds();
  return MaxRoundStartedLocked();
}

absl::Status ServerEngine::LimitCut(int64_t round) {
  std::vector<CutGate::Held> release;
  {
    absl::MutexLock lock(&mu_);
    if (!cut_.active()) {
      return absl::FailedPreconditionError("no checkpoint is being cut on this server");
    }
    if (options_.sync) {
      for (const auto& [key, part] : parts_.all()) {
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
    release = cut_.Limit(round, absl::Now(), /*release_held=*/options_.sync);
  }
  for (auto& push : release) push(absl::OkStatus());
  return absl::OkStatus();
}

std::string ServerEngine::CutLagging() const {
  absl::MutexLock lock(&mu_);
  if (cut_.phase() != CutGate::Phase::kLimited) return "the cut's round is not set yet";
  if (pushes_in_flight_ > 0) return absl::StrCat(pushes_in_flight_, " pushes being applied");
  // Rounds of whole key groups every worker has joined (BeginCut split the others).
  if (groups_->open_rounds() > 0) {
    return absl::StrCat(groups_->open_rounds(), " key group rounds completing");
  }
  if (!options_.sync) return std::string();
  // A key behind the cut's round catches up while its workers go on (its next round is below
  // the cut, so it is not held). One pushed less often than the others may never do so: after
  // kCutCatchUp it is cut at the last round it completed, which it then holds on restore.
  const bool catching_up = cut_.CatchingUp(absl::Now(), kCutCatchUp);
  for (const auto& [key, part] : parts_.all()) {
    for (const auto& chunk : part->chunks) {
      const bool open = !chunk->contributors.empty();
      const bool behind = chunk->rounds_done != 0 && chunk->rounds_done != cut_.round();
      if (open || (behind && catching_up)) {
        return absl::StrCat("key ", key.Quoted(), " elements ",
                            ElementRange(chunk->offset, chunk->count), " has completed round ",
                            chunk->rounds_done, open ? " (the next one open)" : "",
                            " of the cut's ", cut_.round());
      }
    }
  }
  return std::string();
}

void ServerEngine::EndCut(absl::Status refusal) {
  std::vector<CutGate::Held> release;
  {
    absl::MutexLock lock(&mu_);
    release = cut_.End();
  }
  for (auto& push : release) push(refusal);
}

bool ServerEngine::cut_active() const {
  absl::MutexLock lock(&mu_);
  return cut_.active();
}

void ServerEngine::FailRounds(const std::string& reason) {
  std::vector<std::pair<Done, absl::Status>> failed;
  std::vector<CutGate::Held> held;
  {
    absl::MutexLock lock(&mu_);
    failed_reason_ = reason;
    held = cut_.End();
    groups_->SplitAllRounds();  // Their waiting pushes fail below, member by member.
    absl::flat_hash_set<PushCall*> seen;
    for (auto& [key, part] : parts_.all()) {
      for (auto& chunk : part->chunks) {
        if (chunk->contributors.empty()) continue;
        const absl::Status status = absl::AbortedError(absl::StrCat(
            "key ", key.Quoted(), " elements ", ElementRange(chunk->offset, chunk->count),
            ": dist_sync round ", chunk->rounds_done + 1, " cannot complete (",
            chunk->contributors.size(), " of ", options_.worker_node_ids.size(),
            " workers pushed): the job failed: ", reason));
        for (auto& call : chunk->calls) {
          if (!seen.insert(call.get()).second) continue;
          for (Done& d : call->done) failed.emplace_back(std::move(d), status);
          call->done.clear();
          requests_[call->node_id].pending.erase(call->request_id);
        }
        {
          ChunkLock chunk_lock(*chunk);
          chunk->arrived = 0;
        }
        chunk->contributors.clear();
        chunk->calls.clear();
        --open_rounds_;
      }
    }
  }
  for (auto& [done, status] : failed) done(status);
  for (auto& push : held) push(absl::OkStatus());  // They fail at once now.
}

void ServerEngine::SetRoundsDone(int64_t round) {
  absl::MutexLock lock(&mu_);
  for (auto& [key, part] : parts_.all()) {
    for (auto& chunk : part->chunks) chunk->rounds_done = round;
  }
}

}  // namespace kvstore
