// ServerEngine: elastic jobs - dropping the workers that left the job from the dist_sync
// rounds (DropWorkers).
//
// A chunk's round completes when arrived + excused reaches the job's number of workers:
// `excused` counts the dropped workers whose push the round does not wait for. A round that
// opens after a drop excuses every dropped worker (a dropped worker's pushes are refused); a
// round open at the drop excuses the dropped workers that have not pushed to it, and keeps
// the push of one that has. The data side (arrived, sum) is under the chunk's lock and the
// bookkeeping (contributors, calls) under mu_; DropWorkers holds both, so exactly one of a
// push's Merge and DropWorkers completes a round:
// - a round whose data a push has completed but whose bookkeeping is still pending
//   (`completing`, until EndPush) starts its next round with every dropped worker excused;
// - a round whose every registered push has arrived, and that now waits for no remaining
//   worker, is completed here: the updater runs on its sum and its pushes are answered;
// - otherwise a registered push is still on its way (Merge completes the round with the new
//   count) or a remaining worker has not pushed yet.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/core/cut_gate.h"
#include "server/core/engine_cuts.h"
#include "server/core/key_groups.h"
#include "server/core/server_engine.h"
#include "server/core/server_engine_internal.h"

namespace kvstore {

using server_engine_internal::ElementRange;

int64_t ServerEngine::DropWorkers(absl::Span<const uint64_t> node_ids) {
  std::vector<Done> finished;
  absl::Status error;
  int64_t completed = 0;
  {
    absl::MutexLock lock(&mu_);
    const std::vector<uint64_t>& workers = workers_.ids();
    const std::vector<uint64_t> dropping = workers_.Dropping(node_ids);
    if (dropping.empty()) return 0;
    // Open rounds of whole groups wait for every worker: they go member by member now (those
    // every worker has joined complete with their own pushes), and no new one opens.
    if (rounds()) groups_->SplitAllRounds();
    const size_t dropped = workers_.MarkDropped(dropping);
    if (!rounds()) return 0;
    const std::shared_ptr<Updater> current = updater_.current();
    for (auto& [key, part] : parts_.all()) {
      for (const auto& owned : part->chunks) {
        Chunk* chunk = owned.get();
        {
          ChunkLock chunk_lock(*chunk);
          if (chunk->contributors.empty() || chunk->completing) {
            chunk->excused = dropped;  // The next round waits only for the remaining workers.
            continue;
          }
          for (uint64_t id : dropping) {
            if (std::find(chunk->contributors.begin(), chunk->contributors.end(), id) ==
                chunk->contributors.end()) {
              ++chunk->excused;
            }
          }
          if (chunk->arrived == 0 || chunk->arrived + chunk->excused < workers.size()) continue;
          // Every remaining worker's push is in the sum (and every registered one arrived).
          chunk->arrived = 0;
          chunk->excused = dropped;
          chunk->SettleHeld();
          const absl::Status applied = chunk->Apply(key, chunk->sum, current.get());
          if (error.ok()) error = applied;
        }
        ++completed;
        for (auto& waiting : chunk->calls) {
          if (--waiting->remaining == 0) FinishCall(waiting.get(), &finished);
        }
        EndRound(chunk);
      }
    }
    SwapUpdaterIfIdle();
  }
  for (Done& done : finished) done(error);
  return completed;
}

void ServerEngine::FailRounds(const std::string& reason) {
  std::vector<std::pair<Done, absl::Status>> failed;
  std::vector<CutGate::Held> held;
  {
    absl::MutexLock lock(&mu_);
    failed_reason_ = reason;
    held = cuts_->TakeHeld();
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
          chunk->held.clear();  // Their pushes fail below: their bytes are not read again.
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

}  // namespace kvstore
