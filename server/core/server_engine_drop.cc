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

#include "server/core/key_groups.h"
#include "server/core/server_engine.h"

namespace kvstore {

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

}  // namespace kvstore
