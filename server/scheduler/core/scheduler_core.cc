#include "server/scheduler/core/scheduler_core.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/scheduler/core/server_failover.h"
#include "server/scheduler/core/server_scaling.h"
#include "server/scheduler/core/worker_liveness.h"
#include "spdlog/spdlog.h"

namespace kvstore {
namespace {

absl::string_view RoleName(NodeRole role) {
  return role == NodeRole::kServer ? "server" : "worker";
}

std::string GroupName(int group) {
  std::vector<std::string> parts;
  if (group & kGroupServers) parts.push_back("servers");
  if (group & kGroupWorkers) parts.push_back("workers");
  return parts.empty() ? "no nodes" : absl::StrJoin(parts, " and ");
}

std::string Plural(int n, absl::string_view noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

}  // namespace

SchedulerCore::SchedulerCore(const SchedulerOptions& options)
    : options_(options),
      nodes_(options.num_servers, options.num_workers),
      barriers_(options.num_servers, options.num_workers),
      job_id_(options.job_id),
      failover_(std::make_unique<ServerFailover>(this)),
      liveness_(std::make_unique<WorkerLiveness>(this)),
      scaling_(std::make_unique<ServerScaling>(this)),
      num_servers_(options.num_servers) {}

SchedulerCore::~SchedulerCore() = default;

absl::StatusOr<std::unique_ptr<SchedulerCore>> SchedulerCore::Create(
    const SchedulerOptions& options) {
  if (options.num_servers < 1 || options.num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job needs at least one server and one worker, got ", options.num_servers,
                     " servers and ", options.num_workers, " workers"));
  }
  if (options.register_timeout <= absl::ZeroDuration() ||
      options.barrier_timeout <= absl::ZeroDuration() ||
      options.workers_lost_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeouts must be positive");
  }
  if (options.replicas < 1 || options.replicas > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas must be 1 or 2, not ", options.replicas));
  }
  if (options.replicas == 2 && options.num_servers < 2) {
    return absl::InvalidArgumentError(
        "replicas 2 needs at least 2 servers: a shard's backup lives on another server");
  }
  if (options.big_value_bound < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("big value bound must be positive, got ", options.big_value_bound));
  }
  if (options.chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk size must be positive, got ", options.chunk_bytes, " bytes"));
  }
  SchedulerOptions named = options;
  if (named.job_id.empty()) {
    absl::BitGen random;
    named.job_id = absl::StrCat(absl::Hex(absl::Uniform<uint64_t>(random), absl::kZeroPad16));
  }
  return std::unique_ptr<SchedulerCore>(new SchedulerCore(named));
}

void SchedulerCore::SetStandby(std::string why) {
  absl::MutexLock lock(&mu_);
  standby_ = std::move(why);
}

bool SchedulerCore::standby() const {
  absl::ReaderMutexLock lock(&mu_);
  return !standby_.empty();
}

std::string SchedulerCore::job_id() const {
  absl::ReaderMutexLock lock(&mu_);
  return job_id_;
}

absl::Status SchedulerCore::UnknownNodeLocked(uint64_t node_id, absl::string_view what) const {
  if (!complete_) {
    return absl::UnavailableError(absl::StrCat(
        what, " from node ", node_id, ", which this scheduler does not know yet: ",
        claims_.empty() ? "it has just started (a node of a running job registers again first)"
                        : absl::StrCat("it is re-forming job ", job_id_, " from its servers (",
                                       MissingFromReformLocked(), ")")));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " from node id ", node_id, ", never issued by this scheduler"));
}

std::vector<uint64_t> SchedulerCore::finished_worker_ids() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<uint64_t> ids;
  for (const auto& [id, node] : nodes_) {
    if (node.role == NodeRole::kWorker && node.finished) ids.push_back(id);
  }
  return ids;
}

bool SchedulerCore::InGroup(NodeRole role, int group) {
  return (group & (role == NodeRole::kServer ? kGroupServers : kGroupWorkers)) != 0;
}

void SchedulerCore::Register(NodeRole role, int requested_rank, std::string address,
                             std::string hostname, absl::Time now, RegisterDone done,
                             std::string mode, bool join) {
  std::vector<PendingRegistration> completed;
  std::optional<absl::StatusOr<Registration>> answer;
  {
    absl::MutexLock lock(&mu_);
    if (!standby_.empty()) {
      answer = absl::UnavailableError(standby_);
    } else if (join && role == NodeRole::kServer) {
      answer = scaling_->TakeJoin(address, hostname, now);
    } else if (!failover_->TakeRunningJobRank(role, requested_rank, address, hostname, now, &done,
                                              &answer)) {
      const absl::Status error = CheckRegistration(role, requested_rank, address, hostname, mode);
      if (error.ok()) {
        AddNode(role, requested_rank, std::move(address), std::move(hostname), std::move(mode), now,
                std::move(done), &completed);
      } else {
        answer = error;
      }
    }
  }
  // Outside the lock: `done` may call back.
  if (answer.has_value()) {
    if (done) done(*std::move(answer));
    return;
  }
  if (completed.empty()) return;
  const ClusterView cluster = view().value();
  for (PendingRegistration& pending : completed) {
    int rank;
    {
      absl::ReaderMutexLock lock(&mu_);
      rank = nodes_.Find(pending.node_id)->rank;
    }
    pending.done(Registration{pending.node_id, rank, cluster});
  }
}

absl::Status SchedulerCore::CheckRegistration(NodeRole role, int requested_rank,
                                              const std::string& address,
                                              const std::string& hostname,
                                              const std::string& mode) const {
  const int group_size = role == NodeRole::kServer ? num_servers_ : options_.num_workers;
  const int registered = nodes_.Count(role);
  if (registration_failed_) {
    return absl::DeadlineExceededError(
        "the job's registration window has closed (some nodes never came); restart the job");
  }
  if (registered >= group_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the job already has all its ", Plural(group_size, std::string(RoleName(role))), "; a ",
        RoleName(role), " from ", hostname.empty() ? "an unnamed host" : hostname, " cannot join"));
  }
  if (requested_rank < -1 || requested_rank >= group_size) {
    return absl::InvalidArgumentError(absl::StrCat(RoleName(role), " asked for rank ",
                                                   requested_rank, " but ranks are 0..",
                                                   group_size - 1, " (or -1 for any)"));
  }
  if (role == NodeRole::kServer && address.empty()) {
    return absl::InvalidArgumentError("a server must register the address it serves on");
  }
  if (role == NodeRole::kWorker && !mode.empty() && !mode_.empty() && mode != mode_) {
    return absl::FailedPreconditionError(
        absl::StrCat("a worker from ", hostname.empty() ? "an unnamed host" : hostname,
                     " asked for ", mode, " but the job runs ", mode_));
  }
  if (const NodeInfo* holder = nodes_.RankHolder(role, requested_rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        RoleName(role), " rank ", requested_rank, " is already taken by node ", holder->node_id,
        " at ", holder->address.empty() ? holder->hostname : holder->address));
  }
  return absl::OkStatus();
}

void SchedulerCore::AddNode(NodeRole role, int requested_rank, std::string address,
                            std::string hostname, std::string mode, absl::Time now,
                            RegisterDone done, std::vector<PendingRegistration>* completed) {
  const NodeInfo& added =
      nodes_.Add(role, requested_rank, std::move(address), std::move(hostname), now);
  const uint64_t id = added.node_id;
  if (role == NodeRole::kWorker && mode_.empty()) mode_ = std::move(mode);
  if (first_registration_ == absl::InfiniteFuture()) first_registration_ = now;
  pending_registrations_.push_back(PendingRegistration{id, std::move(done)});
  spdlog::info("registered {} (node {}, {}{}, rank {}); {}", std::string(RoleName(role)), id,
               added.hostname.empty() ? "unnamed host" : added.hostname,
               added.address.empty() ? "" : " at " + added.address,
               requested_rank >= 0 ? absl::StrCat(requested_rank) : "any", nodes_.Missing());
  if (!nodes_.full()) return;
  nodes_.AssignRanks();
  complete_ = true;
  // A node heartbeats only once its registration is answered, which is now: the time it waited
  // for the others is not silence.
  for (auto& [node_id, node] : nodes_) node.last_heartbeat = std::max(node.last_heartbeat, now);
  completed->swap(pending_registrations_);
  spdlog::info("the job is assembled: {} and {}, {}", Plural(num_servers_, "server"),
               Plural(options_.num_workers, "worker"), mode_.empty() ? "dist_sync" : mode_);
}

absl::StatusOr<ClusterView> SchedulerCore::view() const {
  absl::ReaderMutexLock lock(&mu_);
  if (!complete_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job is not complete yet: ", nodes_.Missing()));
  }
  return ViewLocked();
}

ClusterView SchedulerCore::ViewLocked() const {
  ClusterView cluster;
  cluster.num_servers = num_servers_;
  cluster.num_workers = options_.num_workers;
  cluster.big_value_bound = options_.big_value_bound;
  cluster.chunk_bytes = options_.chunk_bytes;
  cluster.mode = mode_.empty() ? "dist_sync" : mode_;
  cluster.job_id = job_id_;
  cluster.heartbeat_interval = options_.heartbeat_interval;
  cluster.replicas = options_.replicas;
  cluster.signed_payloads = options_.signed_payloads;
  nodes_.FillView(&cluster);
  return cluster;
}

void SchedulerCore::Barrier(uint64_t node_id, int group, absl::Time now, BarrierDone done,
                            uint64_t sequence) {
  std::vector<BarrierDone> released;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(node_id);
    if (it == nodes_.end()) {
      error = UnknownNodeLocked(node_id, "a barrier");
    } else if (!complete_) {
      error = absl::FailedPreconditionError(
          absl::StrCat("barrier before the job is complete: ", nodes_.Missing()));
    } else if ((group & ~kGroupAll) != 0 || !InGroup(it->second.role, group)) {
      error = absl::InvalidArgumentError(
          absl::StrCat(RoleName(it->second.role), " ", it->second.rank,
                       " cannot enter a barrier over group ", group, " (", GroupName(group), ")"));
    } else if (it->second.left) {
      error = absl::FailedPreconditionError(
          absl::StrCat("worker ", it->second.rank, " (node ", node_id,
                       ") has left the job and cannot enter a barrier: ", it->second.failure));
    } else {
      std::vector<BarrierDone> passed_before;
      absl::StatusOr<std::optional<Barriers::Passed>> passed = barriers_.Enter(
          group, node_id, now, options_.barrier_timeout, &done, sequence, &passed_before);
      if (!passed_before.empty()) {
        spdlog::info(
            "barrier over the {}: {} {} entered its barrier {}, which shows that {} "
            "entr{} retried after this scheduler started had passed before it",
            GroupName(group), std::string(RoleName(it->second.role)), it->second.rank, sequence,
            passed_before.size(), passed_before.size() == 1 ? "y" : "ies");
        for (BarrierDone& release : passed_before) released.push_back(std::move(release));
      }
      if (!passed.ok()) {
        error = absl::InvalidArgumentError(absl::StrCat(
            RoleName(it->second.role), " ", it->second.rank, " is already in this barrier"));
      } else if (passed->has_value()) {
        Barriers::Passed& barrier = **passed;
        spdlog::info(
            "barrier over the {} passed: {} nodes; the last to enter was {} {} after "
            "{}",
            GroupName(group), barrier.entered, std::string(RoleName(it->second.role)),
            it->second.rank,
            absl::FormatDuration(absl::Trunc(barrier.waited, absl::Milliseconds(1))));
        released.swap(barrier.done);
      }
    }
  }
  if (!error.ok()) {
    done(error);
    return;
  }
  for (BarrierDone& release : released) release(absl::OkStatus());
}

std::string SchedulerCore::MissingFromBarrier(int group,
                                              const std::vector<uint64_t>& entered) const {
  std::vector<std::string> missing;
  for (const auto& [id, node] : nodes_) {
    if (!InGroup(node.role, group) || node.left) continue;
    if (std::find(entered.begin(), entered.end(), id) != entered.end()) continue;
    missing.push_back(absl::StrCat(RoleName(node.role), " ", node.rank, " (node ", id, ", ",
                                   node.address.empty() ? node.hostname : node.address, ")"));
  }
  return absl::StrJoin(missing, ", ");
}

absl::StatusOr<bool> SchedulerCore::Heartbeat(uint64_t node_id, absl::Time now, ServerLoad load,
                                              const WorkerReport& report) {
  std::vector<BarrierDone> released;
  absl::StatusOr<bool> over = HeartbeatLocked(node_id, now, std::move(load), report, &released);
  for (BarrierDone& release : released) release(absl::OkStatus());
  return over;
}

absl::StatusOr<bool> SchedulerCore::HeartbeatLocked(uint64_t node_id, absl::Time now,
                                                    ServerLoad load, const WorkerReport& report,
                                                    std::vector<BarrierDone>* released) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) {
    // A server joining the running job, or one drained from it.
    if (const std::optional<bool> over = scaling_->HeartbeatLocked(node_id, now)) return *over;
    return UnknownNodeLocked(node_id, "a heartbeat");
  }
  if (it->second.hostname.empty()) it->second.hostname = report.hostname;
  if (it->second.role == NodeRole::kWorker && report.barriers_passed > 0) {
    *released = barriers_.Through(kGroupWorkers, node_id, report.barriers_passed);
    if (!released->empty()) {
      spdlog::info(
          "barrier over the workers: worker {} got through {} barriers, so {} entr{} retried "
          "after this scheduler started had passed before it",
          it->second.rank, report.barriers_passed, released->size(),
          released->size() == 1 ? "y" : "ies");
    }
  }
  it->second.last_heartbeat = std::max(it->second.last_heartbeat, now);
  if (it->second.role == NodeRole::kServer) {
    NodeInfo& node = it->second;
    node.num_keys = load.num_keys;
    node.num_bytes = load.num_bytes;
    node.tables = std::move(load.tables);
    node.max_round = std::max(node.max_round, load.max_round);
    if (!node.replaced_address.empty() && node.restored_round == -1) {
      // The first heartbeat of a server that replaced a dead one says what it restored.
      node.restored_round = std::max<int64_t>(load.restored_round, 0);
      LostUpdates loss;
      loss.rank = node.rank;
      loss.server = absl::StrCat("server ", node.rank, " (was ", node.replaced_address, ", now ",
                                 node.address, ", node ", node_id, ")");
      loss.restored =
          load.restored_round >= 0
              ? absl::StrCat("restarted from checkpoint ", load.restored_checkpoint, " at round ",
                             load.restored_round)
              : std::string("restarted without a checkpoint (every value it held is lost)");
      loss.restored_round = node.restored_round;
      loss.reported_round = std::max<int64_t>(node.replaced_round, 0);
      spdlog::error("{} (the workers name the rounds it had acknowledged to them)",
                    Describe(loss, 0, false));
      failover_->RecordLoss(std::move(loss));
    }
  }
  bool over = ShutdownLocked();
  // When every worker finished, a server hears it once the scheduler's work on the servers is
  // done (every round is complete: a cut completes). A job ended otherwise - failed, shut down
  // by kvctl - may have rounds that never complete: its servers hear it at once.
  if (over && it->second.role == NodeRole::kServer && shutdown_reason_.empty() &&
      failure_.empty() && servers_busy_ && servers_busy_()) {
    over = false;
  }
  if (over) it->second.released = true;
  return over;
}

void SchedulerCore::SetServersBusy(std::function<bool()> busy) {
  absl::MutexLock lock(&mu_);
  servers_busy_ = std::move(busy);
}

bool SchedulerCore::ShutdownLocked() const {
  return !shutdown_reason_.empty() ||
         (complete_ && finished_workers_ + liveness_->departed() == options_.num_workers);
}

void SchedulerCore::RequestShutdown(std::string reason) {
  std::vector<RegisterDone> registrations;
  std::vector<BarrierDone> barriers;
  absl::Status over;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_reason_.empty()) {
      shutdown_reason_ = reason.empty() ? std::string("shutdown requested") : std::move(reason);
    }
    // Calls held for the job to assemble or a barrier to fill are answered now: nothing will
    // complete them any more, and a server shutting down waits for every call it holds.
    over = absl::AbortedError(absl::StrCat("the job is over: ", shutdown_reason_));
    for (PendingRegistration& pending : pending_registrations_) {
      registrations.push_back(std::move(pending.done));
    }
    pending_registrations_.clear();
    for (PendingRegistration& pending : pending_rejoins_) {
      registrations.push_back(std::move(pending.done));
    }
    pending_rejoins_.clear();
    for (RegisterDone& done : failover_->TakePending()) registrations.push_back(std::move(done));
    for (BarrierDone& done : barriers_.TakeAll()) barriers.push_back(std::move(done));
  }
  for (RegisterDone& done : registrations) done(over);
  for (BarrierDone& done : barriers) done(over);
}

std::string SchedulerCore::shutdown_reason() const {
  absl::ReaderMutexLock lock(&mu_);
  if (!shutdown_reason_.empty()) return shutdown_reason_;
  if (!ShutdownLocked()) return "";
  if (liveness_->left() > 0) {
    return absl::StrCat("every remaining worker finished (", Plural(liveness_->left(), "worker"),
                        " left the elastic job)");
  }
  return "every worker finished";
}

bool SchedulerCore::all_servers_released() const {
  absl::ReaderMutexLock lock(&mu_);
  int released = 0;
  for (const auto& [id, node] : nodes_) {
    released += node.role == NodeRole::kServer && node.released;
  }
  return released == num_servers_;
}

bool SchedulerCore::servers_released_or_gone(absl::Time now, absl::Duration gone_after) const {
  absl::ReaderMutexLock lock(&mu_);
  int done = 0;
  for (const auto& [id, node] : nodes_) {
    done +=
        node.role == NodeRole::kServer && (node.released || now - node.last_heartbeat > gone_after);
  }
  return done == num_servers_;
}

bool SchedulerCore::workers_released_or_gone(absl::Time now, absl::Duration gone_after) const {
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [id, node] : nodes_) {
    if (node.role == NodeRole::kWorker && !node.finished && !node.released &&
        now - node.last_heartbeat <= gone_after) {
      return false;
    }
  }
  return true;
}

absl::Status SchedulerCore::Finish(uint64_t node_id, absl::Time now, std::string failure) {
  std::vector<BarrierDone> released;
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(node_id);
    if (it == nodes_.end()) return UnknownNodeLocked(node_id, "finish");
    if (it->second.role != NodeRole::kWorker) {
      return absl::InvalidArgumentError(
          absl::StrCat("only workers finish the job; node ", node_id, " is a server"));
    }
    NodeInfo& node = it->second;
    node.last_heartbeat = std::max(node.last_heartbeat, now);
    if (!node.finished && !node.left) {
      // In an elastic job the others go on without a failed worker, while any is left that
      // could finish the job (they are told through heartbeats).
      const bool leaves =
          !failure.empty() && options_.elastic && !ShutdownLocked() && liveness_->Remaining() > 1;
      node.finished = true;
      ++finished_workers_;
      if (leaves) {
        liveness_->Leave(&node, absl::StrCat("finished as failed: ", failure), &released);
      } else if (!failure.empty()) {
        node.failed = true;
        node.failure = failure;
        if (failure_.empty()) {
          failure_ = absl::StrCat("worker ", node.rank, " (node ", node_id, " on ", node.hostname,
                                  ") failed: ", failure);
        }
        // The job cannot go on without it (no round would complete): it fails now, and the
        // workers still running hear why instead of waiting for their deadlines.
        if (shutdown_reason_.empty()) shutdown_reason_ = failure_;
      }
    }
  }
  for (BarrierDone& release : released) release(absl::OkStatus());
  return absl::OkStatus();
}

void SchedulerCore::FailJob(std::string reason, absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (auto& [id, node] : nodes_) {
    if (node.role != NodeRole::kWorker || node.finished || node.failed || node.left) continue;
    const absl::Duration quiet = now - node.last_heartbeat;
    if (options_.heartbeat_timeout != absl::InfiniteDuration() &&
        quiet > options_.heartbeat_timeout) {
      node.failed = true;
      node.failure =
          absl::StrCat("died: no heartbeat for ",
                       absl::FormatDuration(absl::Trunc(quiet, absl::Milliseconds(100))));
    }
  }
  if (failure_.empty()) failure_ = reason;
  if (shutdown_reason_.empty()) shutdown_reason_ = std::move(reason);
}

std::string SchedulerCore::job_failure() const {
  absl::ReaderMutexLock lock(&mu_);
  return ShutdownLocked() ? failure_ : std::string();
}

void SchedulerCore::ExpireDeadlines(absl::Time now) {
  std::vector<std::pair<RegisterDone, Registration>> replacements;
  std::vector<std::pair<RegisterDone, absl::Status>> failed_registrations;
  std::vector<std::pair<BarrierDone, absl::Status>> failed_barriers;
  {
    absl::MutexLock lock(&mu_);
    if (!complete_ && !pending_registrations_.empty() &&
        now > first_registration_ + options_.register_timeout) {
      const absl::Status status = absl::DeadlineExceededError(
          absl::StrCat("waited ", absl::FormatDuration(options_.register_timeout),
                       " for the job's nodes to register: ", nodes_.Missing()));
      for (PendingRegistration& pending : pending_registrations_) {
        failed_registrations.emplace_back(std::move(pending.done), status);
      }
      pending_registrations_.clear();
      registration_failed_ = true;
      registration_error_ = status;
    }
    if (!complete_ && !pending_rejoins_.empty() &&
        now > first_rejoin_ + options_.register_timeout) {
      const absl::Status status = absl::DeadlineExceededError(absl::StrCat(
          "waited ", absl::FormatDuration(options_.register_timeout), " to re-form job ", job_id_,
          " from its servers: ", MissingFromReformLocked()));
      for (PendingRegistration& pending : pending_rejoins_) {
        failed_registrations.emplace_back(std::move(pending.done), status);
      }
      pending_rejoins_.clear();
      claims_.clear();
      reform_dead_.clear();
      first_rejoin_ = absl::InfiniteFuture();
    }
    for (Barriers::Expired& expired : barriers_.Expire(now)) {
      const absl::Status status = absl::DeadlineExceededError(
          absl::StrCat("barrier over ", GroupName(expired.group), " waited ",
                       absl::FormatDuration(options_.barrier_timeout),
                       "; still missing: ", MissingFromBarrier(expired.group, expired.entered)));
      for (BarrierDone& done : expired.done) failed_barriers.emplace_back(std::move(done), status);
    }
    failover_->RetryReplacements(now, &replacements, &failed_registrations);
  }
  for (auto& [done, registration] : replacements) done(std::move(registration));
  for (auto& [done, status] : failed_registrations) done(status);
  for (auto& [done, status] : failed_barriers) done(status);
}

std::vector<NodeInfo> SchedulerCore::Nodes() const {
  absl::ReaderMutexLock lock(&mu_);
  return nodes_.Sorted();
}

absl::Status SchedulerCore::registration_status() const {
  absl::ReaderMutexLock lock(&mu_);
  return registration_error_;
}

bool SchedulerCore::shutdown_requested() const {
  absl::ReaderMutexLock lock(&mu_);
  return ShutdownLocked();
}

}  // namespace kvstore
