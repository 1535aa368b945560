#include "server/scheduler/core/server_scaling.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/scheduler/core/server_failover.h"

namespace kvstore {

std::string ServerScaling::RefusedLocked() const {
  core_.mu_.AssertHeld();
  if (!core_.complete_) return "the job has not assembled yet";
  if (core_.ShutdownLocked()) return "the job is over";
  for (const auto& [id, node] : core_.nodes_) {
    if (node.role == NodeRole::kServer && !node.tables.empty()) {
      // A table's round may complete on one server before its cut and be refused by another
      // after: sent again, it would be applied twice there.
      return absl::StrCat("server ", node.rank,
                          " holds embedding tables, and servers are added or drained only in a "
                          "job without");
    }
    if (node.role == NodeRole::kServer && (node.dead || node.joining)) {
      return absl::StrCat("server ", node.rank, " at ", node.address,
                          node.joining ? " is being replaced" : " is dead",
                          "; servers are added or drained while every shard has both its copies");
    }
  }
  if (!core_.mode_.empty() && core_.mode_ != "dist_sync") {
    return absl::StrCat("the job runs ", core_.mode_,
                        ", and servers are added or drained only in dist_sync");
  }
  if (active_.has_value()) return absl::StrCat("a rescale is under way (", active_->what, ")");
  return "";
}

absl::StatusOr<Registration> ServerScaling::TakeJoin(const std::string& address,
                                                     const std::string& hostname, absl::Time now) {
  core_.mu_.AssertHeld();
  if (const std::string refused = RefusedLocked(); !refused.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the server at ", address, " cannot join the running job: ", refused));
  }
  if (address.empty()) {
    return absl::InvalidArgumentError("a server must register the address it serves on");
  }
  RescalePlan plan;
  plan.before = core_.ViewLocked().servers;
  plan.replicas = core_.options_.replicas;
  plan.epoch = core_.failover_->NextEpochLocked();
  NodeInfo node;
  node.node_id = core_.nodes_.TakeId();
  node.role = NodeRole::kServer;
  node.rank = static_cast<int>(plan.before.size());
  node.address = address;
  node.hostname = hostname;
  node.last_heartbeat = now;
  node.joining = true;
  node.join_epoch = plan.epoch;
  plan.after = plan.before;
  plan.after.push_back(ServerEntry{node.rank, node.node_id, address});
  plan.joining = node.node_id;
  plan.what =
      absl::StrCat("the server at ", address, " (node ", node.node_id, ") joins as rank ",
                   node.rank, ": ", plan.before.size(), " -> ", plan.after.size(), " servers");
  Registration registration;
  registration.node_id = node.node_id;
  registration.rank = node.rank;
  registration.view = core_.ViewLocked();
  registration.view.num_servers = static_cast<int>(plan.after.size());
  registration.view.servers = plan.after;
  registration.join_epoch = plan.epoch;
  registration.scaling = true;
  spdlog::info("rescale at view epoch {}: {}", plan.epoch, plan.what);
  joiner_ = std::move(node);
  active_ = std::move(plan);
  return registration;
}

absl::StatusOr<RescalePlan> ServerScaling::Drain(int rank) {
  absl::MutexLock lock(&core_.mu_);
  if (const std::string refused = RefusedLocked(); !refused.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", rank, " cannot be drained: ", refused));
  }
  RescalePlan plan;
  plan.before = core_.ViewLocked().servers;
  plan.replicas = core_.options_.replicas;
  const int n = static_cast<int>(plan.before.size());
  if (rank < 0 || rank >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("no server of rank ", rank, ": the job's servers are 0..", n - 1));
  }
  if (n == 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", rank, " is the job's only server: it cannot be drained"));
  }
  if (core_.options_.replicas > n - 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", rank, " cannot be drained: a job with ", core_.options_.replicas,
                     " copies of each shard keeps at least ", core_.options_.replicas, " servers"));
  }
  plan.epoch = core_.failover_->NextEpochLocked();
  for (const ServerEntry& server : plan.before) {
    if (server.rank == rank) continue;
    plan.after.push_back(server);
    plan.after.back().rank = static_cast<int>(plan.after.size()) - 1;
  }
  plan.draining = plan.before[rank].node_id;
  plan.what = absl::StrCat("server ", rank, " at ", plan.before[rank].address, " (node ",
                           plan.draining, ") drains: ", n, " -> ", n - 1, " servers");
  spdlog::info("rescale at view epoch {}: {}", plan.epoch, plan.what);
  active_ = plan;
  return plan;
}

std::optional<RescalePlan> ServerScaling::active() const {
  absl::ReaderMutexLock lock(&core_.mu_);
  return active_;
}

absl::Status ServerScaling::Complete(const RescalePlan& plan, absl::Time now) {
  absl::MutexLock lock(&core_.mu_);
  if (!active_.has_value() || active_->epoch != plan.epoch) {
    return absl::FailedPreconditionError(
        absl::StrCat("the rescale at view epoch ", plan.epoch, " is not under way"));
  }
  if (core_.ShutdownLocked()) return absl::FailedPreconditionError("the job is over");
  if (plan.draining != 0) {
    core_.nodes_.Remove(plan.draining);
    drained_[plan.draining] = now;
  }
  if (plan.joining != 0 && joiner_.has_value()) {
    NodeInfo node = *std::move(joiner_);
    joiner_.reset();
    node.joining = false;
    node.last_heartbeat = std::max(node.last_heartbeat, now);
    core_.nodes_.Restore(std::move(node));
  }
  for (const ServerEntry& server : plan.after) core_.nodes_.Rerank(server.node_id, server.rank);
  core_.num_servers_ = static_cast<int>(plan.after.size());
  core_.nodes_.set_num_servers(core_.num_servers_);
  core_.barriers_.set_num_servers(core_.num_servers_);
  core_.failover_->PublishEpochLocked(plan.epoch);
  active_.reset();
  spdlog::info("rescale published at view epoch {}: {}", plan.epoch, plan.what);
  return absl::OkStatus();
}

void ServerScaling::Fail(const RescalePlan& plan, std::string reason) {
  absl::MutexLock lock(&core_.mu_);
  if (plan.joining != 0) failed_[plan.joining] = reason;
  if (joiner_.has_value() && joiner_->node_id == plan.joining) joiner_.reset();
  // The old servers refused writes routed by older views once cut: the view moves to the
  // plan's epoch as it is, so that their senders learn it and send them again.
  core_.failover_->PublishEpochLocked(plan.epoch);
  if (active_.has_value() && active_->epoch == plan.epoch) active_.reset();
  spdlog::error("rescale at view epoch {} failed ({}): {}; the job goes on with its {} servers",
                plan.epoch, plan.what, reason, plan.before.size());
}

std::string ServerScaling::join_failure(uint64_t node_id) const {
  absl::ReaderMutexLock lock(&core_.mu_);
  auto it = failed_.find(node_id);
  return it == failed_.end() ? std::string() : it->second;
}

std::optional<bool> ServerScaling::HeartbeatLocked(uint64_t node_id, absl::Time now) {
  core_.mu_.AssertHeld();
  if (joiner_.has_value() && joiner_->node_id == node_id) {
    joiner_->last_heartbeat = std::max(joiner_->last_heartbeat, now);
    return false;
  }
  if (failed_.count(node_id) > 0) return true;
  if (auto it = drained_.find(node_id); it != drained_.end()) {
    return now - it->second >= kLinger * core_.options_.heartbeat_interval;
  }
  return std::nullopt;
}

}  // namespace kvstore
