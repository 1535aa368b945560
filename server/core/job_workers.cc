#include "server/core/job_workers.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvstore {

JobWorkers::JobWorkers(std::vector<uint64_t> worker_node_ids) : ids_(std::move(worker_node_ids)) {
  senders_.insert(ids_.begin(), ids_.end());
  senders_.insert(kSchedulerNodeId);
}

absl::Status JobWorkers::CheckSender(uint64_t node_id) const {
  if (senders_.contains(node_id)) {
    if (!any_dropped_.load()) return absl::OkStatus();
    absl::ReaderMutexLock lock(&mu_);
    if (!dropped_.contains(node_id)) return absl::OkStatus();
    const size_t rank = std::find(ids_.begin(), ids_.end(), node_id) - ids_.begin();
    return absl::PermissionDeniedError(absl::StrCat(
        "node id ", node_id, " (worker ", rank,
        ") has left the job: the scheduler dropped it (it died or failed) and the job goes on "
        "without it (elastic); its requests are refused"));
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "node id ", node_id, " is not a worker of this job (the scheduler never issued it)"));
}

std::vector<uint64_t> JobWorkers::Dropping(absl::Span<const uint64_t> node_ids) const {
  std::vector<uint64_t> dropping;
  absl::ReaderMutexLock lock(&mu_);
  for (uint64_t id : node_ids) {
    if (std::find(ids_.begin(), ids_.end(), id) == ids_.end()) continue;
    if (!dropped_.contains(id) &&
        std::find(dropping.begin(), dropping.end(), id) == dropping.end()) {
      dropping.push_back(id);
    }
  }
  return dropping;
}

size_t JobWorkers::MarkDropped(absl::Span<const uint64_t> node_ids) {
  size_t dropped = 0;
  {
    absl::MutexLock lock(&mu_);
    for (uint64_t id : node_ids) {
      if (senders_.contains(id) && id != kSchedulerNodeId) dropped_.insert(id);
    }
    dropped = dropped_.size();
  }
  dropped_count_.store(dropped);
  if (dropped > 0) any_dropped_.store(true);
  return dropped;
}

}  // namespace kvstore
