// SchedulerCore: elastic jobs - workers that die or fail leave the job, which goes on with the
// others (SchedulerOptions::elastic, docs/reliability.md).
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/scheduler/core/scheduler_core.h"
#include "spdlog/spdlog.h"

namespace kvstore {

int SchedulerCore::Remaining() const {
  int remaining = 0;
  for (const auto& [id, node] : nodes_) {
    remaining += node.role == NodeRole::kWorker && !node.left && !node.failed;
  }
  return remaining;
}

void SchedulerCore::LeaveLocked(NodeInfo* node, const std::string& why,
                                std::vector<BarrierDone>* released) {
  node->left = true;
  node->failure = why;
  ++left_workers_;
  if (!node->finished) ++departed_workers_;
  // Barriers that waited only for it pass now.
  for (Barriers::Passed& passed : barriers_.Left(node->node_id)) {
    spdlog::info(
        "barrier over {} nodes passed: worker {} left the job and every other node "
        "has entered",
        passed.entered, node->rank);
    for (BarrierDone& done : passed.done) released->push_back(std::move(done));
  }
}

std::vector<std::string> SchedulerCore::DropDeadWorkers(absl::Time now) {
  std::vector<std::string> lines;
  std::vector<BarrierDone> released;
  {
    absl::MutexLock lock(&mu_);
    if (!options_.elastic || !complete_ || ShutdownLocked() ||
        options_.heartbeat_timeout == absl::InfiniteDuration()) {
      return lines;
    }
    std::vector<NodeInfo*> dead;
    for (auto& [id, node] : nodes_) {
      if (node.role != NodeRole::kWorker || node.finished || node.left || node.failed) continue;
      if (now - node.last_heartbeat > options_.heartbeat_timeout) dead.push_back(&node);
    }
    // With none left that could finish the job, it fails as in the default mode: DeadWorkers
    // names them and the scheduler fails the job.
    if (dead.empty() || Remaining() == static_cast<int>(dead.size())) return lines;
    for (NodeInfo* node : dead) {
      const std::string quiet =
          absl::FormatDuration(absl::Trunc(now - node->last_heartbeat, absl::Milliseconds(100)));
      LeaveLocked(node, absl::StrCat("died: no heartbeat for ", quiet), &released);
      lines.push_back(
          absl::StrCat("worker ", node->rank, " (node ", node->node_id, " on ", node->hostname,
                       ") has sent no heartbeat for ", quiet, " (heartbeat timeout ",
                       absl::FormatDuration(options_.heartbeat_timeout),
                       "): it is dead and has left the job, which goes on with the ", Remaining(),
                       " of ", options_.num_workers, " workers that remain (elastic)"));
    }
  }
  for (BarrierDone& release : released) release(absl::OkStatus());
  return lines;
}

std::vector<uint64_t> SchedulerCore::left_worker_ids() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::pair<int, uint64_t>> left;
  for (const auto& [id, node] : nodes_) {
    if (node.left) left.emplace_back(node.rank, id);
  }
  std::sort(left.begin(), left.end());
  std::vector<uint64_t> ids;
  for (const auto& [rank, id] : left) ids.push_back(id);
  return ids;
}

std::string SchedulerCore::left_reason(uint64_t node_id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || !it->second.left) return "";
  const NodeInfo& node = it->second;
  return absl::StrCat("worker ", node.rank, " (node ", node_id, " on ", node.hostname,
                      ") has left the job (", node.failure,
                      "); the job goes on without it (elastic)");
}

}  // namespace kvstore
