// ServerEngine: dist_sync rounds of whole key groups.
//
// With several workers in dist_sync, a push of a group member by member costs, per member, a
// round check, a contributor and a call entry, a lock, a merge into the member's own sum and a
// completion. When every worker pushes the same group whole - the same members, back to back in
// one arena, in the same order (each worker registers its own group id for the same list) - the
// round is kept once for the group instead (GroupRound): each push is added to one buffer of
// the group's size (one AddRaw per run of one dtype), arrivals are counted once, and the push
// that completes the round applies the updater over the sum - UpdateSpan per run for a
// piecewise updater, UpdateAt per member otherwise - and finishes every push of the round.
//
// What the group round cannot do goes member by member, as before:
// - a group not in an arena, or with an empty member (group->group_rounds is false);
// - a group push whose members already have rounds of their own open (a Push of some member, or
//   a group laid out otherwise, arrived first in this round), or that overlaps another group's
//   open round;
// - a push of some member on its own (Push, row-sparse, compressed, or another group) while a
//   group round holding it is open: BeginPush first splits that round into rounds per member
//   (SplitGroupRounds), carrying over the sum, the arrivals, the contributors and the pushes
//   waiting, so that the round completes exactly as if it had gone member by member all along.
//
// The values, rounds, acknowledgements, errors and request ids are those of the per-member
// path: sums are added in arrival order with the same kernel (AddRaw), the same push is refused
// as a second push in one round (naming the group's first key), a retried push waits for its
// round or is acknowledged once applied, and Snapshot and SetUpdater see the round as open.
//
// Locks: the round's bookkeeping (contributors, calls) is guarded by the engine's engine_.mu_, its
// data (sum, arrived) by the arena's lock; `split` is written under both and read under either. As
// elsewhere, engine_.mu_ is taken before an arena's lock, never while holding one.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/reduce.h"
#include "server/core/engine_cuts.h"
#include "server/core/key_groups.h"
#include "server/core/server_engine_internal.h"

namespace kvstore {

using server_engine_internal::SubRange;

struct engine::GroupRound {
  size_t base = 0;  // The group's first byte in the arena, and its size in bytes.
  size_t size = 0;
  // Guarded by the engine's engine_.mu_:
  std::shared_ptr<const Group> group;  // A group of this layout (the round's members).
  std::vector<uint64_t> contributors;
  std::vector<std::shared_ptr<PushCall>> calls;
  absl::Time started;  // When the round's first push arrived (metrics: the round's wait).
  // Set (under engine_.mu_ and the arena's lock) when the round went member by member.
  bool split = false;
  // Guarded by the arena's lock: the pushes summed so far, in `sum`. The sum starts at the same
  // alignment modulo 16 as the group in the arena, so every member is aligned for its dtype.
  size_t arrived = 0;
  Tensor sum;
  uint8_t* SumData() {
    if (!sum.defined()) sum = Tensor::Zeros(DType::kInt32, {static_cast<int64_t>(size / 4 + 5)});
    return static_cast<uint8_t*>(sum.data()) + base % 16;
  }
  bool Holds(const Chunk& chunk) const {
    return chunk.count > 0 && chunk.arena_offset >= base && chunk.arena_offset < base + size;
  }
  // Add sums a push of `group` (laid out as this round's) into `sum`, under the arena's lock;
  // true when it was the last of the `workers` pushes of the round (arrivals start over).
  bool Add(const Group& group, const ByteChunks& bytes, size_t workers);
  // ApplySum runs the updater over the round's `sum` into the members' stored values: once per
  // run of one dtype for a piecewise updater, once per member otherwise. Under the arena's lock.
  static absl::Status ApplySum(const Group& members, const uint8_t* sum, Updater* updater);
};

int64_t KeyGroups::rounds_done() const {
  absl::ReaderMutexLock lock(&engine_.mu_);
  return rounds_done_;
}

absl::Status KeyGroups::CheckRound(const Key& key, const Chunk& chunk, uint64_t node_id) const {
  engine_.mu_.AssertReaderHeld();
  for (const auto& [layout, round] : chunk.arena->group_rounds) {
    if (round->contributors.empty() || !round->Holds(chunk)) continue;
    if (std::find(round->contributors.begin(), round->contributors.end(), node_id) !=
        round->contributors.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "key ", key.Quoted(), ": node ", node_id,
          " pushed twice in one dist_sync round (the round still waits for other workers)"));
    }
  }
  return absl::OkStatus();
}

void KeyGroups::SplitRounds(absl::Span<Chunk* const> chunks) {
  engine_.mu_.AssertHeld();
  const size_t workers = engine_.options_.worker_node_ids.size();
  for (Chunk* chunk : chunks) {
    if (chunk->arena == nullptr || chunk->arena->open_group_rounds == 0) continue;
    Arena& arena = *chunk->arena;
    for (auto it = arena.group_rounds.begin(); it != arena.group_rounds.end();) {
      GroupRound& round = *it->second;
      // A round every worker has joined is completing with its own data: it stays whole (only
      // a node outside the workers, the scheduler, can push then, and it opens a new round).
      if (round.contributors.empty() || round.contributors.size() >= workers ||
          !round.Holds(*chunk)) {
        ++it;
        continue;
      }
      const Group& group = *round.group;
      const size_t n = group.chunks.size();
      {
        absl::MutexLock arena_lock(&arena.mu);
        const uint8_t* sum = round.arrived > 0 ? round.SumData() : nullptr;
        for (size_t i = 0; i < n; ++i) {
          Chunk* member = group.chunks[i];
          if (sum != nullptr) {
            if (!member->sum.defined()) {
              member->sum = Tensor::Zeros(member->stored.dtype(), member->stored.shape());
            }
            std::memcpy(member->sum.data(), sum + group.offsets[i], member->sum.byte_size());
          }
          member->arrived = round.arrived;
          member->excused = 0;  // A group round waits for every worker (PushGroupRound).
          member->contributors = round.contributors;
          member->calls = round.calls;
          member->round_started = round.started;
        }
        round.arrived = 0;
        round.split = true;
      }
      for (auto& call : round.calls) call->remaining += static_cast<int>(n) - 1;
      engine_.open_rounds_ += static_cast<int64_t>(n) - 1;
      --open_rounds_;
      --arena.open_group_rounds;
      // Pushes of this round still on their way hold it and see `split`; the next round of the
      // group starts afresh.
      arena.group_rounds.erase(it++);
    }
  }
}

void KeyGroups::SplitAllRounds() {
  engine_.mu_.AssertHeld();
  if (open_rounds_ == 0) return;
  std::vector<Chunk*> grouped;
  for (const auto& [key, part] : engine_.parts_.all()) {
    for (const auto& chunk : part->chunks) {
      if (chunk->arena != nullptr && chunk->arena->open_group_rounds > 0) {
        grouped.push_back(chunk.get());
      }
    }
  }
  SplitRounds(grouped);
}

int64_t KeyGroups::open_rounds() const {
  engine_.mu_.AssertReaderHeld();
  return open_rounds_;
}

int64_t KeyGroups::MaxRoundStarted() const {
  engine_.mu_.AssertReaderHeld();
  int64_t started = 0;
  if (open_rounds_ == 0) return started;
  for (const auto& [key, part] : engine_.parts_.all()) {
    for (const auto& chunk : part->chunks) {
      if (chunk->arena == nullptr || chunk->arena->open_group_rounds == 0) continue;
      for (const auto& [layout, round] : chunk->arena->group_rounds) {
        if (!round->contributors.empty() && round->Holds(*chunk)) {
          started = std::max(started, chunk->rounds_done + 1);
        }
      }
    }
  }
  return started;
}

bool KeyGroups::PushRound(uint64_t node_id, uint64_t request_id,
                          const std::shared_ptr<const Group>& group, const ByteChunks& bytes,
                          const std::shared_ptr<Updater>& updater, Done* done) {
  std::shared_ptr<GroupRound> round;
  std::shared_ptr<PushCall> call;
  absl::Status error;
  Done refused;  // Run at once, outside the lock: an error, or a retry of an applied push.
  {
    absl::MutexLock lock(&engine_.mu_);
    if (!JoinRound(node_id, request_id, group, done, &round, &call, &error)) return false;
    if (call == nullptr) {
      refused = std::move(*done);
      *done = nullptr;
    }
  }
  if (call == nullptr) {
    if (refused) refused(error);
    return true;
  }
  bool split = false, complete = false;
  {
    absl::MutexLock arena_lock(&group->arena->mu);
    split = round->split;
    if (!split && round->Add(*group, bytes, engine_.options_.worker_node_ids.size())) {
      complete = true;
      error = GroupRound::ApplySum(*group, round->SumData(), updater.get());
    }
  }
  if (split) {
    // The round went member by member while this push was on its way: so does this push.
    std::vector<uint8_t> gathered(group->offsets.back());
    GatherBytes(bytes, gathered.data());
    std::vector<Chunk*> completed;
    for (size_t i = 0; i < group->chunks.size(); ++i) {
      absl::StatusOr<bool> merged = group->chunks[i]->MergeSpan(
          group->keys[i], gathered.data() + group->offsets[i], updater.get(), engine_.merge_rule());
      if (!merged.ok() && error.ok()) error = merged.status();
      if (!merged.ok() || *merged) completed.push_back(group->chunks[i]);
    }
    engine_.EndPush(call, false, completed, error);
    return true;
  }
  if (complete) CloseRound(round, *group, error);
  return true;
}

bool KeyGroups::JoinRound(uint64_t node_id, uint64_t request_id,
                          const std::shared_ptr<const Group>& group, Done* done,
                          std::shared_ptr<GroupRound>* round, std::shared_ptr<PushCall>* call,
                          absl::Status* error) {
  // A checkpoint's cut, a failed job and an elastic job that lost a worker work on rounds
  // member by member (server_engine_cut.cc, server_engine_drop.cc): so does every group push
  // meanwhile. Group rounds thus always wait for every worker of the job.
  if (!group->group_rounds || engine_.cuts_->active_locked() || !engine_.failed_reason_.empty() ||
      engine_.workers_.any_dropped()) {
    return false;
  }
  Arena& arena = *group->arena;
  const size_t size = group->offsets.back();
  const auto layout = std::make_tuple(group->arena_base, size, group->chunks.size());
  auto it = arena.group_rounds.find(layout);
  if (it != arena.group_rounds.end() && !it->second->contributors.empty()) {
    const auto& contributors = it->second->contributors;
    if (std::find(contributors.begin(), contributors.end(), node_id) != contributors.end()) {
      *error = absl::FailedPreconditionError(absl::StrCat(
          "key ", group->keys[0].Quoted(), ": node ", node_id,
          " pushed twice in one dist_sync round (the round still waits for other workers)"));
    }
  } else {
    // A new round: no member may be in another round already.
    for (const auto& [other, open] : arena.group_rounds) {
      if (!open->contributors.empty() && open->base < group->arena_base + size &&
          group->arena_base < open->base + open->size) {
        return false;
      }
    }
    if (engine_.open_rounds_ > open_rounds_) {
      for (const Chunk* chunk : group->chunks) {
        if (!chunk->contributors.empty()) return false;
      }
    }
  }
  *call = engine_.BeginPush(node_id, request_id, {}, done, error);
  if (*call == nullptr) return true;
  (*call)->remaining = 1;
  if (it == arena.group_rounds.end()) {
    auto fresh = std::make_shared<GroupRound>();
    fresh->base = group->arena_base;
    fresh->size = size;
    it = arena.group_rounds.emplace(layout, std::move(fresh)).first;
  }
  *round = it->second;
  if ((*round)->contributors.empty()) {
    (*round)->group = group;
    (*round)->started = absl::Now();
    ++engine_.open_rounds_;
    ++open_rounds_;
    ++arena.open_group_rounds;
  }
  (*round)->contributors.push_back(node_id);
  (*round)->calls.push_back(*call);
  return true;
}

bool engine::GroupRound::Add(const Group& group, const ByteChunks& bytes, size_t workers) {
  uint8_t* sum = SumData();
  if (arrived == 0) {
    GatherBytes(bytes, sum);
  } else {
    for (const Group::Run& run : group.runs) {
      const size_t element = DTypeSize(run.dtype);
      ForEachPiece(SubRange(bytes, run.begin, run.end), element,
                   [&](int64_t e, const void* piece, int64_t count) {
                     AddRaw(run.dtype, piece, sum + run.begin + static_cast<size_t>(e) * element,
                            count);
                   });
    }
  }
  if (++arrived < workers) return false;
  arrived = 0;
  return true;
}

absl::Status engine::GroupRound::ApplySum(const Group& members, const uint8_t* sum,
                                          Updater* updater) {
  absl::Status error;
  if (updater->piecewise()) {
    auto* base = static_cast<uint8_t*>(members.arena->buffer.data()) + members.arena_base;
    for (const Group::Run& run : members.runs) {
      if (!error.ok()) break;
      const size_t element = DTypeSize(run.dtype);
      error = updater->UpdateSpan(members.keys[0], 0, run.dtype, sum + run.begin, base + run.begin,
                                  static_cast<int64_t>((run.end - run.begin) / element));
    }
    return error;
  }
  for (size_t i = 0; i < members.chunks.size() && error.ok(); ++i) {
    Chunk* chunk = members.chunks[i];
    const Tensor received = Tensor::Borrow(const_cast<uint8_t*>(sum) + members.offsets[i],
                                           chunk->stored.dtype(), chunk->stored.shape());
    error = chunk->Apply(members.keys[i], received, updater);
  }
  return error;
}

void KeyGroups::CloseRound(const std::shared_ptr<GroupRound>& round, const Group& group,
                           const absl::Status& error) {
  std::vector<Done> finished;
  {
    absl::MutexLock lock(&engine_.mu_);
    for (auto& waiting : round->calls) {
      if (--waiting->remaining == 0) engine_.FinishCall(waiting.get(), &finished);
    }
    // Every member completed this round, as a round of its own would have.
    for (Chunk* chunk : group.chunks) ++chunk->rounds_done;
    if (engine_.options_.round_observer) {
      engine_.options_.round_observer->RoundCompleted(round->contributors.back(),
                                                      absl::Now() - round->started);
    }
    round->contributors.clear();
    round->calls.clear();
    round->group = nullptr;
    --engine_.open_rounds_;
    --open_rounds_;
    --group.arena->open_group_rounds;
    ++rounds_done_;
    engine_.SwapUpdaterIfIdle();
  }
  for (Done& d : finished) d(error);
}

}  // namespace kvstore
