// WorkerLiveness (worker_liveness.h): dead and lost workers, and elastic jobs - workers that
// die or fail leave the job, which goes on with the others (SchedulerOptions::elastic,
// docs/reliability.md).
#include "server/scheduler/core/worker_liveness.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace kvstore {

int WorkerLiveness::Remaining() const {
  core_.mu_.AssertReaderHeld();
  int remaining = 0;
  for (const auto& [id, node] : core_.nodes_) {
    remaining += node.role == NodeRole::kWorker && !node.left && !node.failed;
  }
  return remaining;
}

void WorkerLiveness::Leave(NodeInfo* node, const std::string& why,
                           std::vector<BarrierDone>* released) {
  core_.mu_.AssertHeld();
  node->left = true;
  node->failure = why;
  ++left_workers_;
  if (!node->finished) ++departed_workers_;
  // Barriers that waited only for it pass now.
  for (Barriers::Passed& passed : core_.barriers_.Left(node->node_id)) {
    spdlog::info(
        "barrier over {} nodes passed: worker {} left the job and every other node "
        "has entered",
        passed.entered, node->rank);
    for (BarrierDone& done : passed.done) released->push_back(std::move(done));
  }
}

std::vector<std::string> WorkerLiveness::DropDeadWorkers(absl::Time now) {
  std::vector<std::string> lines;
  std::vector<BarrierDone> released;
  {
    absl::MutexLock lock(&core_.mu_);
    if (!core_.options_.elastic || !core_.complete_ || core_.ShutdownLocked() ||
        core_.options_.heartbeat_timeout == absl::InfiniteDuration()) {
      return lines;
    }
    std::vector<NodeInfo*> dead;
    for (auto& [id, node] : core_.nodes_) {
      if (node.role != NodeRole::kWorker || node.finished || node.left || node.failed) continue;
      if (now - node.last_heartbeat > core_.options_.heartbeat_timeout) dead.push_back(&node);
    }
    // With none left that could finish the job, it fails as in the default mode: DeadWorkers
    // names them and the scheduler fails the job.
    if (dead.empty() || Remaining() == static_cast<int>(dead.size())) return lines;
    for (NodeInfo* node : dead) {
      const std::string quiet =
          absl::FormatDuration(absl::Trunc(now - node->last_heartbeat, absl::Milliseconds(100)));
      Leave(node, absl::StrCat("died: no heartbeat for ", quiet), &released);
      lines.push_back(
          absl::StrCat("worker ", node->rank, " (node ", node->node_id, " on ", node->hostname,
                       ") has sent no heartbeat for ", quiet, " (heartbeat timeout ",
                       absl::FormatDuration(core_.options_.heartbeat_timeout),
                       "): it is dead and has left the job, which goes on with the ", Remaining(),
                       " of ", core_.options_.num_workers, " workers that remain (elastic)"));
    }
  }
  for (BarrierDone& release : released) release(absl::OkStatus());
  return lines;
}

std::vector<uint64_t> WorkerLiveness::left_worker_ids() const {
  absl::ReaderMutexLock lock(&core_.mu_);
  std::vector<std::pair<int, uint64_t>> left;
  for (const auto& [id, node] : core_.nodes_) {
    if (node.left) left.emplace_back(node.rank, id);
  }
  std::sort(left.begin(), left.end());
  std::vector<uint64_t> ids;
  for (const auto& [rank, id] : left) ids.push_back(id);
  return ids;
}

std::string WorkerLiveness::left_reason(uint64_t node_id) const {
  absl::ReaderMutexLock lock(&core_.mu_);
  auto it = core_.nodes_.find(node_id);
  if (it == core_.nodes_.end() || !it->second.left) return "";
  const NodeInfo& node = it->second;
  return absl::StrCat("worker ", node.rank, " (node ", node_id, " on ", node.hostname,
                      ") has left the job (", node.failure,
                      "); the job goes on without it (elastic)");
}

absl::Status WorkerLiveness::DeadWorkers(absl::Time now) const {
  absl::ReaderMutexLock lock(&core_.mu_);
  if (!core_.complete_ || core_.ShutdownLocked() ||
      core_.options_.heartbeat_timeout == absl::InfiniteDuration()) {
    return absl::OkStatus();
  }
  std::vector<std::string> dead;
  for (const auto& [id, node] : core_.nodes_) {
    if (node.role != NodeRole::kWorker || node.finished || node.left) continue;
    const absl::Duration quiet = now - node.last_heartbeat;
    if (quiet <= core_.options_.heartbeat_timeout) continue;
    dead.push_back(absl::StrCat(
        "worker ", node.rank, " (node ", id, " on ", node.hostname, ") has sent no heartbeat for ",
        absl::FormatDuration(absl::Trunc(quiet, absl::Milliseconds(100))), " (heartbeat timeout ",
        absl::FormatDuration(core_.options_.heartbeat_timeout), "): it is dead"));
  }
  if (dead.empty()) return absl::OkStatus();
  if (core_.options_.elastic && left_workers_ > 0) {
    dead.push_back(
        absl::StrCat("no other worker is left (", left_workers_, " left the elastic job before)"));
  }
  return absl::AbortedError(absl::StrJoin(dead, "; "));
}

int WorkerLiveness::NumDeadNodes(int group, absl::Duration timeout, absl::Time now) const {
  absl::ReaderMutexLock lock(&core_.mu_);
  int dead = 0;
  int registered_in_group = 0;
  for (const auto& [id, node] : core_.nodes_) {
    if (!SchedulerCore::InGroup(node.role, group)) continue;
    ++registered_in_group;
    // A node whose registration is still pending has no id to heartbeat with: it is waiting on
    // us, so it is alive.
    if (core_.complete_ && !node.finished && now - node.last_heartbeat > timeout) ++dead;
  }
  if (!core_.complete_ && core_.first_registration_ != absl::InfiniteFuture() &&
      now - core_.first_registration_ > timeout) {
    dead += core_.barriers_.Size(group) - registered_in_group;
  }
  return dead;
}

absl::Status WorkerLiveness::WorkersLost(absl::Time now) const {
  absl::ReaderMutexLock lock(&core_.mu_);
  if (!core_.complete_ || core_.ShutdownLocked()) return absl::OkStatus();
  std::vector<std::string> silent;
  for (const auto& [id, node] : core_.nodes_) {
    if (node.role != NodeRole::kWorker || node.finished || node.left) continue;
    const absl::Duration quiet = now - node.last_heartbeat;
    if (quiet <= core_.options_.workers_lost_timeout) return absl::OkStatus();
    silent.push_back(
        absl::StrCat("worker ", node.rank, " (node ", id, " on ", node.hostname, ") last heard ",
                     absl::FormatDuration(absl::Trunc(quiet, absl::Seconds(1))), " ago"));
  }
  if (silent.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("the job is abandoned: no unfinished worker has sent a heartbeat for ",
                   absl::FormatDuration(core_.options_.workers_lost_timeout), ": ",
                   absl::StrJoin(silent, "; ")));
}

int WorkerLiveness::left() const {
  core_.mu_.AssertReaderHeld();
  return left_workers_;
}

int WorkerLiveness::departed() const {
  core_.mu_.AssertReaderHeld();
  return departed_workers_;
}

}  // namespace kvstore
