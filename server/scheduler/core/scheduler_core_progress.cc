// SchedulerCore::Progress: the scheduler's progress lines while the job waits (registration,
// barriers), logged every few seconds by the scheduler daemon.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/scheduler/core/scheduler_core.h"
#include "server/scheduler/core/server_failover.h"

namespace kvstore {
namespace {

std::string Counted(int n, const char* noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

}  // namespace

std::vector<std::string> SchedulerCore::Progress() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::string> lines;
  if (!complete_ && !registration_failed_ && !nodes_.empty()) {
    std::vector<std::string> waiting;
    for (NodeRole role : {NodeRole::kServer, NodeRole::kWorker}) {
      const int size = role == NodeRole::kServer ? num_servers_ : options_.num_workers;
      const char* name = role == NodeRole::kServer ? "server" : "worker";
      int registered = 0, anonymous = 0;
      std::set<int> taken;
      for (const auto& [id, node] : nodes_) {
        if (node.role != role) continue;
        ++registered;
        const int rank = nodes_.requested_rank(id);
        if (rank >= 0) {
          taken.insert(rank);
        } else {
          ++anonymous;
        }
      }
      if (registered == size) continue;
      if (anonymous == 0 && registered > 0) {
        // Every node so far asked for its rank: the missing ranks are known.
        std::vector<std::string> ranks;
        for (int r = 0; r < size; ++r) {
          if (taken.count(r) == 0) ranks.push_back(absl::StrCat(r));
        }
        waiting.push_back(absl::StrCat(name, " rank", ranks.size() == 1 ? " " : "s ",
                                       absl::StrJoin(ranks, ", ")));
      } else {
        waiting.push_back(Counted(size - registered, name));
      }
    }
    int servers = 0, workers = 0;
    for (const auto& [id, node] : nodes_) ++(node.role == NodeRole::kServer ? servers : workers);
    lines.push_back(absl::StrCat("registered ", servers, " of ", Counted(num_servers_, "server"),
                                 " and ", workers, " of ", Counted(options_.num_workers, "worker"),
                                 "; waiting for ", absl::StrJoin(waiting, " and ")));
  }
  for (const auto& [group, entered] : barriers_.Open()) {
    std::vector<std::string> missing;
    for (const auto& [id, node] : nodes_) {
      if (!InGroup(node.role, group) || node.left) continue;
      if (std::find(entered.begin(), entered.end(), id) != entered.end()) continue;
      missing.push_back(absl::StrCat(node.role == NodeRole::kServer ? "server " : "worker ",
                                     node.rank, " on ",
                                     node.hostname.empty() ? node.address : node.hostname));
    }
    const char* members = group == kGroupServers   ? "servers"
                          : group == kGroupWorkers ? "workers"
                                                   : "nodes";
    lines.push_back(absl::StrCat("barrier: ", barriers_.Entered(entered), " of ",
                                 barriers_.Living(group), " ", members, "; waiting for ",
                                 absl::StrJoin(missing, ", ")));
  }
  failover_->ProgressLines(&lines);
  return lines;
}

}  // namespace kvstore
