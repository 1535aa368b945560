// SchedulerCore: re-forming a running job from its nodes' registrations, when this scheduler
// was restarted in place or took over (scheduler_core.h, the top).
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/scheduler/core/scheduler_core.h"
#include "server/scheduler/core/server_failover.h"
#include "server/scheduler/core/worker_liveness.h"
#include "spdlog/spdlog.h"

namespace kvstore {
namespace {

std::string NodeName(const RejoinClaim& claim) {
  return absl::StrCat(claim.role == NodeRole::kServer ? "server " : "worker ", claim.rank,
                      " (node ", claim.node_id, ")");
}

// ServersOf: the servers of a claim - those a heartbeat last published, else its view's.
const std::vector<ServerEntry>& ServersOf(const RejoinClaim& claim) {
  return claim.view_epoch > 0 && !claim.servers.empty() ? claim.servers : claim.view.servers;
}

}  // namespace

void SchedulerCore::Rejoin(RejoinClaim claim, absl::Time now, RegisterDone done) {
  std::optional<absl::StatusOr<Registration>> answer;
  std::vector<PendingRegistration> completed;
  absl::Status reform_error;
  {
    absl::MutexLock lock(&mu_);
    const NodeInfo* known = nodes_.Find(claim.node_id);
    if (!standby_.empty()) {
      answer = absl::UnavailableError(standby_);
    } else if (complete_) {
      if (known != nullptr && known->role == claim.role && known->rank == claim.rank &&
          (claim.view.job_id.empty() || claim.view.job_id == job_id_)) {
        // Heartbeats failed for a while, but this scheduler knows the node: nothing to re-form.
        nodes_.Find(claim.node_id)->last_heartbeat = std::max(known->last_heartbeat, now);
        Registration known_node{claim.node_id, claim.rank, ViewLocked()};
        known_node.known = true;
        answer = std::move(known_node);
      } else {
        answer = absl::FailedPreconditionError(absl::StrCat(
            NodeName(claim), " of job ", claim.view.job_id.empty() ? "?" : claim.view.job_id,
            " is not a node of the job this scheduler runs (job ", job_id_, ")"));
      }
    } else if (!nodes_.empty() || registration_failed_) {
      answer = absl::FailedPreconditionError(
          absl::StrCat("this scheduler is forming a new job (", nodes_.Missing(), "); ",
                       NodeName(claim), " of a running job cannot register again with it"));
    } else if (claim.view.job_id.empty()) {
      answer = absl::InvalidArgumentError(
          absl::StrCat(NodeName(claim), " registers again without naming its job"));
    } else if (!claims_.empty() && claim.view.job_id != job_id_) {
      answer = absl::FailedPreconditionError(
          absl::StrCat(NodeName(claim), " belongs to job ", claim.view.job_id,
                       ", but this scheduler is re-forming job ", job_id_));
    } else if (claim.role == NodeRole::kServer &&
               (claim.view.servers.empty() || claim.view.num_workers != options_.num_workers)) {
      // (The servers may differ from --num_servers: servers joined or drained while the job
      // ran. The newest view the claims present says which.)
      answer = absl::InvalidArgumentError(absl::StrCat(
          NodeName(claim), " presents a view of ", claim.view.num_servers, " servers and ",
          claim.view.num_workers, " workers (", claim.view.servers.size(),
          " listed); this scheduler runs a job of ", options_.num_workers, " workers"));
    } else {
      if (claims_.empty() && pending_rejoins_.empty()) {
        job_id_ = claim.view.job_id;
        first_rejoin_ = now;
      }
      const std::string name = NodeName(claim);
      const uint64_t node_id = claim.node_id;
      if (claim.role == NodeRole::kServer) claims_[node_id] = std::move(claim);
      pending_rejoins_.push_back(PendingRegistration{node_id, std::move(done)});
      if (ReformReadyLocked()) {
        reform_error = ReformLocked(now, &completed);
      } else {
        spdlog::info("re-forming job {}: {} registered again; {}", job_id_, name,
                     MissingFromReformLocked());
      }
    }
  }
  if (answer.has_value()) {
    if (done) done(*std::move(answer));
    return;
  }
  AnswerRejoins(std::move(completed), reform_error);
}

void SchedulerCore::AnswerRejoins(std::vector<PendingRegistration> completed,
                                  const absl::Status& reform_error) {
  for (PendingRegistration& pending : completed) {
    if (!reform_error.ok()) {
      pending.done(reform_error);
      continue;
    }
    absl::StatusOr<Registration> registration;
    {
      absl::ReaderMutexLock lock(&mu_);
      const NodeInfo* node = nodes_.Find(pending.node_id);
      if (node == nullptr) {
        registration = absl::FailedPreconditionError(absl::StrCat("node ", pending.node_id,
                                                                  " is not a node of job ", job_id_,
                                                                  " as its servers know it"));
      } else {
        registration = Registration{node->node_id, node->rank, ViewLocked()};
      }
    }
    pending.done(std::move(registration));
  }
}

std::vector<ServerEntry> SchedulerCore::ReformMissing(absl::Time now, absl::Duration after) const {
  absl::ReaderMutexLock lock(&mu_);
  if (complete_ || options_.replicas < 2 || now - first_rejoin_ < after) return {};
  return AwaitedLocked(nullptr);
}

absl::Status SchedulerCore::ReformWithout(int rank, std::string reason, absl::Time now) {
  std::vector<PendingRegistration> completed;
  absl::Status reform_error;
  {
    absl::MutexLock lock(&mu_);
    if (complete_ || claims_.empty()) {
      return absl::FailedPreconditionError("no job is being re-formed");
    }
    if (options_.replicas < 2) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", rank, " is missing and the job has no replicas: it cannot go on without it"));
    }
    const int servers = options_.num_servers;
    const std::set<int> dead = DeadInNewestLocked();
    for (const int neighbour : {(rank + 1) % servers, (rank + servers - 1) % servers}) {
      if (neighbour != rank && dead.count(neighbour) > 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "server ", rank, " is missing and server ", neighbour,
            ", which holds the other copy of one of its shards, is dead: the job cannot go on"));
      }
    }
    spdlog::warn("re-forming job {}: server {} is dead: {}", job_id_, rank, reason);
    reform_dead_[rank] = std::move(reason);
    if (ReformReadyLocked()) {
      reform_error = ReformLocked(now, &completed);
    } else {
      spdlog::info("re-forming job {}: {}", job_id_, MissingFromReformLocked());
    }
  }
  AnswerRejoins(std::move(completed), reform_error);
  return absl::OkStatus();
}

std::optional<std::vector<PublishedCheckpoint>> SchedulerCore::TakeResumedCheckpoints() {
  absl::MutexLock lock(&mu_);
  std::optional<std::vector<PublishedCheckpoint>> taken;
  taken.swap(resumed_checkpoints_);
  return taken;
}

std::set<int> SchedulerCore::DeadInNewestLocked() const {
  // Ranks declared dead, as the servers that heard the newest view know them: a rank declared
  // dead before a join that revived it is dead only to those that did not hear of the join.
  std::set<int> dead;
  for (const auto& [rank, reason] : reform_dead_) dead.insert(rank);
  const RejoinClaim* newest = NewestClaimLocked();
  if (newest == nullptr) return dead;
  for (const auto& [id, claim] : claims_) {
    if (claim.view_epoch == newest->view_epoch) {
      dead.insert(claim.dead_servers.begin(), claim.dead_servers.end());
    }
  }
  return dead;
}

const RejoinClaim* SchedulerCore::NewestClaimLocked() const {
  const RejoinClaim* newest = nullptr;
  for (const auto& [id, claim] : claims_) {
    if (newest == nullptr || claim.view_epoch > newest->view_epoch) newest = &claim;
  }
  return newest;
}

std::vector<ServerEntry> SchedulerCore::AwaitedLocked(int* expected) const {
  std::vector<ServerEntry> awaited;
  if (expected != nullptr) *expected = 0;
  const RejoinClaim* newest = NewestClaimLocked();
  if (newest == nullptr) return awaited;
  const std::set<int> dead = DeadInNewestLocked();
  for (const ServerEntry& server : ServersOf(*newest)) {
    if (dead.count(server.rank) > 0) continue;
    if (expected != nullptr) ++*expected;
    if (claims_.count(server.node_id) == 0) awaited.push_back(server);
  }
  return awaited;
}

bool SchedulerCore::ReformReadyLocked() const {
  return NewestClaimLocked() != nullptr && AwaitedLocked(nullptr).empty();
}

std::string SchedulerCore::MissingFromReformLocked() const {
  if (NewestClaimLocked() == nullptr) return "no server has registered again yet";
  int expected = 0;
  std::vector<std::string> missing;
  for (const ServerEntry& server : AwaitedLocked(&expected)) {
    missing.push_back(absl::StrCat("server ", server.rank, " (node ", server.node_id, " at ",
                                   server.address, ")"));
  }
  return absl::StrCat(expected - static_cast<int>(missing.size()), " of ", expected,
                      " servers registered again",
                      missing.empty() ? "" : "; waiting for " + absl::StrJoin(missing, ", "));
}

absl::Status SchedulerCore::ReformLocked(absl::Time now,
                                         std::vector<PendingRegistration>* completed) {
  completed->swap(pending_rejoins_);
  const RejoinClaim newest = *NewestClaimLocked();
  const std::set<int> dead = DeadInNewestLocked();
  std::set<uint64_t> left, finished;
  int64_t max_round = 0;
  // The highest epoch any server heard of, joined at or requires: a join the lost scheduler
  // may have published without every node hearing of it.
  uint64_t highest_epoch = 0;
  std::map<std::pair<std::string, std::string>, PublishedCheckpoint> published;
  for (const auto& [id, claim] : claims_) {
    for (const PublishedCheckpoint& set : claim.checkpoints) published[{set.id, set.dir}] = set;
    highest_epoch = std::max({highest_epoch, claim.view_epoch, claim.epoch_floor});
    left.insert(claim.left_workers.begin(), claim.left_workers.end());
    finished.insert(claim.finished_workers.begin(), claim.finished_workers.end());
    max_round = std::max(max_round, claim.max_round);
  }
  const std::vector<ServerEntry>& servers = ServersOf(newest);
  if (servers.empty() ||
      static_cast<int>(newest.view.worker_node_ids.size()) != options_.num_workers) {
    claims_.clear();
    reform_dead_.clear();
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id_, " has ", servers.size(), " servers and ",
        newest.view.worker_node_ids.size(), " workers; this scheduler was started for ",
        options_.num_workers, " workers"));
  }
  // Servers may have joined or drained while the job ran (server_scaling.h).
  num_servers_ = static_cast<int>(servers.size());
  nodes_.set_num_servers(num_servers_);
  barriers_.set_num_servers(num_servers_);
  for (const ServerEntry& server : servers) {
    NodeInfo node;
    node.node_id = server.node_id;
    node.role = NodeRole::kServer;
    node.rank = server.rank;
    node.address = server.address;
    node.last_heartbeat = now;
    if (auto it = claims_.find(server.node_id); it != claims_.end()) {
      node.hostname = it->second.hostname;
      node.max_round = it->second.max_round;
    }
    if (auto it = reform_dead_.find(server.rank); it != reform_dead_.end()) {
      node.dead = true;
      node.death = it->second;
    } else if (dead.count(server.rank) > 0) {
      node.dead = true;
      node.death = "declared dead before the scheduler restarted";
    }
    nodes_.Restore(std::move(node));
  }
  std::vector<BarrierDone> released;  // No barrier is open yet: stays empty.
  for (size_t rank = 0; rank < newest.view.worker_node_ids.size(); ++rank) {
    NodeInfo node;
    node.node_id = newest.view.worker_node_ids[rank];
    node.role = NodeRole::kWorker;
    node.rank = static_cast<int>(rank);
    node.last_heartbeat = now;
    NodeInfo& restored = nodes_.Restore(std::move(node));
    if (finished.count(restored.node_id) > 0) {
      restored.finished = true;
      ++finished_workers_;
    }
    if (left.count(restored.node_id) > 0) {
      liveness_->Leave(&restored, "left the job before the scheduler restarted", &released);
    }
  }
  // The re-formed view is published above every epoch a node may know, so that a worker which
  // heard of a join the servers present no more routes by this view, not that one.
  const uint64_t epoch = highest_epoch > newest.view_epoch ? highest_epoch + 1 : newest.view_epoch;
  failover_->RestoreEpoch(epoch);
  std::vector<PublishedCheckpoint> sets;
  for (auto& [key, set] : published) sets.push_back(std::move(set));
  std::stable_sort(
      sets.begin(), sets.end(),
      [](const PublishedCheckpoint& a, const PublishedCheckpoint& b) { return a.round < b.round; });
  resumed_checkpoints_ = std::move(sets);
  mode_ = newest.view.mode;
  complete_ = true;
  reformed_ = true;
  claims_.clear();
  reform_dead_.clear();
  first_rejoin_ = absl::InfiniteFuture();
  spdlog::info(
      "re-formed the running job {} from its servers: {} servers ({} dead), {} workers ({} "
      "finished, {} left), {}, view epoch {}, rounds started up to {}",
      job_id_, servers.size(), dead.size(), newest.view.worker_node_ids.size(), finished.size(),
      left.size(), mode_, epoch, max_round);
  return absl::OkStatus();
}

}  // namespace kvstore
