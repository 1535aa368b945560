// ServerEngine: key groups - registration, group pushes and pulls - and the arenas that hold
// the values of a group's small members back to back.
#include "server/core/key_groups.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/core/engine_cuts.h"
#include "server/core/server_engine_internal.h"

namespace kvstore {
namespace {

using server_engine_internal::SubRange;

// Members of a key group bigger than this keep buffers of their own.
constexpr size_t kArenaMemberMaxBytes = 64 << 10;

}  // namespace

absl::Status KeyGroups::Register(uint64_t node_id, uint64_t group_id,
                                 absl::Span<const ValueSlice> members) {
  RETURN_IF_ERROR(engine_.workers_.CheckSender(node_id));
  auto group = std::make_shared<Group>();
  group->keys.reserve(members.size());
  group->chunks.reserve(members.size());
  group->offsets.reserve(members.size() + 1);
  size_t offset = 0;
  absl::MutexLock lock(&engine_.mu_);
  absl::flat_hash_set<Chunk*> seen;
  seen.reserve(members.size());
  for (const ValueSlice& member : members) {
    ASSIGN_OR_RETURN(Chunk * chunk, engine_.parts_.FindChunk(member, "grouped"));
    if (!seen.insert(chunk).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", member.key.Quoted(), ": elements [", member.offset, ", ",
                       member.offset + member.count, ") appear twice in key group ", group_id));
    }
    group->keys.push_back(member.key);
    group->chunks.push_back(chunk);
    group->offsets.push_back(offset);
    offset += static_cast<size_t>(member.count) * DTypeSize(member.dtype);
  }
  group->offsets.push_back(offset);
  // The members' list, and the buffer a pull of the group packs them into.
  group->held_bytes =
      static_cast<int64_t>(members.size()) * ServerEngine::kGroupMemberOverheadBytes +
      static_cast<int64_t>(offset);
  const int64_t freed = groups_.HeldBytes(node_id, group_id);  // A group of the same id.
  RETURN_IF_ERROR(engine_.budget_.Check(group->held_bytes - freed,
                                        absl::StrCat("key group ", group_id, " of ", members.size(),
                                                     " keys (", offset, " bytes packed)")));
  engine_.budget_.Add(group->held_bytes - freed);
  PlaceInArena(group.get(), members);
  engine_.budget_.Add(-groups_.Put(node_id, group_id, std::move(group)));
  return absl::OkStatus();
}

void KeyGroups::PlaceInArena(Group* group, absl::Span<const ValueSlice> members) {
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
      absl::StatusOr<Tensor> view =
          arena->buffer.View(group->offsets[i], members[i].dtype, group->chunks[i]->stored.shape());
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
  group->group_rounds = true;
  for (size_t i = 0; i < n; ++i) {
    if (group->offsets[i + 1] == group->offsets[i]) group->group_rounds = false;
  }
}

bool KeyGroups::InArena(uint64_t node_id, uint64_t group_id) const {
  absl::ReaderMutexLock lock(&engine_.mu_);
  absl::StatusOr<std::shared_ptr<const Group>> group = Find(node_id, group_id);
  return group.ok() && (*group)->arena != nullptr;
}

absl::StatusOr<std::shared_ptr<const engine::Group>> KeyGroups::Find(uint64_t node_id,
                                                                     uint64_t group_id) const {
  if (std::shared_ptr<const Group> group = groups_.Find(node_id, group_id)) return group;
  return absl::FailedPreconditionError(
      absl::StrCat("node ", node_id, " has no key group ", group_id,
                   " on this server (a group is registered by sending its members with it)"));
}

absl::Status KeyGroups::FindPushed(uint64_t node_id, uint64_t group_id, const ByteChunks& bytes,
                                   std::shared_ptr<const Group>* group) const {
  RETURN_IF_ERROR(engine_.workers_.CheckSender(node_id));
  absl::ReaderMutexLock lock(&engine_.mu_);
  ASSIGN_OR_RETURN(*group, Find(node_id, group_id));
  size_t received = 0;
  for (const auto& chunk : bytes) received += chunk.size();
  if (received != (*group)->offsets.back()) {
    return absl::InvalidArgumentError(absl::StrCat(received, " bytes received for key group ",
                                                   group_id, " of ", (*group)->chunks.size(),
                                                   " keys (", (*group)->offsets.back(), " bytes)"));
  }
  return absl::OkStatus();
}

// Not analysed for locks: an in-place push takes its arena's lock either by TryLock under the
// engine's lock (ordered acknowledgement) or after it, and releases it once applied - a
// hand-off the analysis cannot follow across the two scopes. The arena's lock is asserted held
// where the bytes are applied.
void KeyGroups::Push(uint64_t node_id, uint64_t request_id, uint64_t group_id,
                     const ByteChunks& bytes, Done done, Ack ack) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const std::shared_ptr<Updater> current = engine_.updater_.current();
  std::shared_ptr<const Group> group;
  absl::Status error = FindPushed(node_id, group_id, bytes, &group);
  // dist_sync with several workers: a group in an arena takes its group's round when it can
  // (server_engine_group_rounds.cc); otherwise its members go one by one, below.
  if (error.ok() && engine_.rounds() && group->arena != nullptr &&
      PushRound(node_id, request_id, group, bytes, current, &done)) {
    return;
  }
  std::shared_ptr<PushCall> call;
  // In place: applied straight into the group's arena. With Ack::kOrdered and an arena that
  // is free, its lock is taken here and the call finished (its `done`s taken) before the update.
  bool in_place = false;
  bool arena_locked = false;
  std::vector<Done> acked;
  {
    absl::MutexLock lock(&engine_.mu_);
    for (size_t i = 0; engine_.rounds() && error.ok() && i < group->chunks.size(); ++i) {
      error = engine_.CheckRound(group->keys[i], *group->chunks[i], node_id);
    }
    if (error.ok() && group != nullptr && !group->keys.empty()) {
      error = engine_.updater_.CheckChosen(group->keys[0]);
    }
    if (error.ok() && !engine_.failed_reason_.empty()) {
      error = absl::AbortedError(absl::StrCat("the job failed: ", engine_.failed_reason_));
    }
    // Dropped since the check above: it must not join a round that no longer waits for it.
    if (error.ok() && engine_.workers_.any_dropped()) error = engine_.workers_.CheckSender(node_id);
    if (group != nullptr && error.ok() && engine_.cuts_->Holds(group->chunks)) {
      engine_.cuts_->HoldGroup(node_id, request_id, group_id, bytes, std::move(done), ack);
      return;
    }
    if (group != nullptr)
      call = engine_.BeginPush(node_id, request_id, group->chunks, &done, &error);
    in_place =
        call != nullptr && group->arena != nullptr && !engine_.rounds() && current->piecewise();
    // The engine's lock is taken before an arena's (RegisterGroup): only a TryLock here.
    if (in_place && ack == Ack::kOrdered && group->arena->mu.TryLock()) {
      arena_locked = true;
      engine_.FinishCall(call.get(), &acked);
    }
  }
  if (call == nullptr) {
    if (done) done(error);
    return;
  }
  for (Done& d : acked) d(absl::OkStatus());

  if (in_place) {
    if (!arena_locked) group->arena->mu.Lock();
    group->arena->mu.AssertHeld();
    error = group->ApplyInPlace(bytes, current.get());
    group->arena->mu.Unlock();
    if (!arena_locked) {
      engine_.EndPush(call, false, {}, error);
    } else if (!error.ok()) {
      spdlog::error(
          "key group {} of node {}: the updater \"{}\" failed after the push was "
          "acknowledged: {}",
          group_id, node_id, std::string(current->name()), error.ToString());
    }
    return;
  }
  std::vector<Chunk*> completed;
  error = MergeMembers(*group, bytes, current, &completed);
  engine_.EndPush(call, group->chunks.empty(), completed, error);
}

absl::Status KeyGroups::MergeMembers(const Group& group, const ByteChunks& bytes,
                                     const std::shared_ptr<Updater>& updater,
                                     std::vector<Chunk*>* completed) {
  // Walk the received slices once; a member split between two slices is gathered first.
  absl::Status error;
  std::vector<uint8_t> straddling;
  size_t slice = 0, slice_start = 0;
  for (size_t i = 0; i < group.chunks.size(); ++i) {
    const size_t begin = group.offsets[i], size = group.offsets[i + 1] - begin;
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
    absl::StatusOr<bool> merged =
        group.chunks[i]->MergeSpan(group.keys[i], data, updater.get(), engine_.merge_rule());
    if (!merged.ok() && error.ok()) error = merged.status();
    if (!merged.ok() || *merged) completed->push_back(group.chunks[i]);
  }
  return error;
}

absl::StatusOr<PackedGroup> KeyGroups::Pull(uint64_t node_id, uint64_t group_id) const {
  RETURN_IF_ERROR(engine_.workers_.CheckSender(node_id));
  std::shared_ptr<const Group> group;
  {
    absl::ReaderMutexLock lock(&engine_.mu_);
    ASSIGN_OR_RETURN(group, Find(node_id, group_id));
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

}  // namespace kvstore
