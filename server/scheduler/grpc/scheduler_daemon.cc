#include "server/scheduler/grpc/scheduler_daemon.h"

#include <grpcpp/server_builder.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/advertise.h"
#include "common/grpc_channel.h"
#include "common/named_thread.h"
#include "common/status_macros.h"
#include "server/scheduler/core/worker_liveness.h"
namespace kvstore {

absl::StatusOr<std::unique_ptr<SchedulerDaemon>> SchedulerDaemon::Start(
    SchedulerDaemonOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", options.port, " is not in 0..65535"));
  }
  if (options.max_request_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_request_bytes must be positive, not ", options.max_request_bytes));
  }
  if (options.advertise_host.empty()) options.advertise_host = options.host;
  if (IsWildcardHost(options.advertise_host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the scheduler would advertise the wildcard address ", options.advertise_host,
                     ", which no node can connect to: set --advertise_host (or DMLC_NODE_HOST, "
                     "DMLC_INTERFACE)"));
  }
  std::unique_ptr<SchedulerDaemon> daemon(new SchedulerDaemon(std::move(options)));
  ASSIGN_OR_RETURN(daemon->core_, SchedulerCore::Create(daemon->options_.job));
  if (!daemon->options_.standby.empty()) daemon->core_->SetStandby(daemon->options_.standby);
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> to_servers,
                   ChannelCredentialsFor(daemon->options_.security.tls));
  daemon->service_ =
      std::make_unique<SchedulerService>(daemon->core_.get(), daemon->options_.command_timeout,
                                         daemon->options_.security.secret, std::move(to_servers));
  daemon->MakeCoordinators();
  RETURN_IF_ERROR(daemon->Listen());
  // The scheduler serves registrations as soon as it listens.
  daemon->health_thread_ =
      NamedThread("kv-health", [d = daemon.get()] { d->health_->Serve(d->health_cq_.get()); });
  daemon->health_->SetServing(true);
  daemon->health_->Set(kJobHealthService, false);
  if (daemon->options_.metrics_port >= 0) {
    daemon->AddCollectors();
    ASSIGN_OR_RETURN(daemon->metrics_http_,
                     MetricsHttpServer::Start(daemon->options_.host, daemon->options_.metrics_port,
                                              &daemon->registry_));
    spdlog::info("scheduler metrics on http://{}:{}/metrics", daemon->options_.host,
                 daemon->metrics_http_->port());
  }
  const std::string bound = FormatHostPort(daemon->options_.host, daemon->port_);
  if (bound != daemon->address()) {
    spdlog::info("scheduler advertised to the job as {}", daemon->address());
  }
  spdlog::info("scheduler listening on {} ({}) for {} servers and {} workers", bound,
               daemon->options_.security.tls.transport(), daemon->options_.job.num_servers,
               daemon->options_.job.num_workers);
  daemon->ticker_ = std::thread([d = daemon.get()] { d->RunTicker(); });
  return daemon;
}

void SchedulerDaemon::MakeCoordinators() {
  const CheckpointCoordinatorOptions& checkpoints = options_.checkpoints;
  SchedulerCore* core = core_.get();
  CommandFanOut* commands = service_->commands();
  coordinator_ = std::make_unique<CheckpointCoordinator>(
      checkpoints,
      [commands](int rank, int head, const std::string& body) {
        return commands->CallServer(rank, head, body);
      },
      [core] { return core->view(); }, [core] { return !core->shutdown_requested(); });
  coordinator_->SetResumed([core] { return core->TakeResumedCheckpoints(); });
  // A checkpoint or join under way when the last worker finishes ends before the servers exit.
  CheckpointCoordinator* busy = coordinator_.get();
  std::atomic<bool>* stop_holding = &stop_holding_servers_;
  core->SetServersBusy([busy, stop_holding] { return !stop_holding->load() && busy->busy(); });
  service_->SetCheckpointCoordinator(coordinator_.get());
  // A replacement server's join cuts servers too: it runs between checkpoints.
  joiner_ = std::make_unique<ServerJoiner>(
      core,
      [commands](int shard, int head, const std::string& body) {
        return commands->CallServer(shard, head, body);
      },
      [commands](const std::string& address, bool backup, int head, const std::string& body) {
        return commands->CallAddress(address, backup, head, body);
      },
      [commands](bool pause) { commands->Pause(pause); }, checkpoints.cut_timeout);
  CheckpointCoordinator* coordinator = coordinator_.get();
  ServerJoiner* joiner = joiner_.get();
  service_->SetJoinHandler([coordinator, joiner](Registration registration, std::string address) {
    coordinator->RunExclusive(
        [joiner, registration = std::move(registration), address = std::move(address)] {
          joiner->Join(registration, address).IgnoreError();
        });
  });
  // Servers added and drained while the job runs: between checkpoints and joins too.
  rescaler_ = std::make_unique<ServerRescaler>(
      core,
      [commands](const std::string& address, bool backup, int head, const std::string& body) {
        return commands->CallAddress(address, backup, head, body);
      },
      [commands](bool pause) { commands->Pause(pause); }, checkpoints.cut_timeout);
  ServerRescaler* rescaler = rescaler_.get();
  service_->SetRescaleHandler(
      [coordinator, rescaler](RescalePlan plan, SchedulerService::RescaleDone done) {
        coordinator->RunExclusive([rescaler, plan = std::move(plan), done = std::move(done)] {
          const absl::Status status = rescaler->Run(plan);
          if (done) done(status);
        });
      });
}

absl::Status SchedulerDaemon::Listen() {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   ServerCredentialsFor(options_.security.tls));
  grpc::ServerBuilder builder;
  ServerLimits limits = ServerLimits::ForRequests(options_.max_request_bytes);
  limits.max_concurrent_calls = SchedulerDaemonOptions::kMaxCallsPerConnection;
  ConfigureServer(&builder, limits);
  const std::string listen = FormatHostPort(options_.host, options_.port);
  builder.AddListeningPort(listen, credentials, &port_);
  builder.RegisterService(service_.get());
  health_ = std::make_unique<DaemonHealth>("kvstore.proto.Scheduler");
  health_->AddTo(&builder);
  health_cq_ = builder.AddCompletionQueue();
  if (options_.metrics_port >= 0) {
    service_->SetBarrierWait(registry_.AddHistogram(
        "kvstore_scheduler_barrier_wait_seconds",
        "Time a node waited in a barrier, from its entry to the release.", {}, LatencyBounds()));
  }
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("scheduler cannot listen on ", listen));
  }
  return absl::OkStatus();
}

void SchedulerDaemon::RunTicker() {
  const absl::Status status = Tick();
  // Stopped by its owner (Cancelled): nothing to explain, and the owner may be exiting (a
  // daemon in static storage outlives spdlog's logger), so nothing is logged.
  if (status.ok()) {
    spdlog::info("scheduler: the job ended: {}", core_->shutdown_reason());
  } else if (!absl::IsCancelled(status)) {
    spdlog::error("scheduler: the job failed: {}", status.ToString());
  }
  health_->Stopping();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  status_ = status;
  done_.Notify();
}

SchedulerDaemon::~SchedulerDaemon() {
  Shutdown();
  if (ticker_.joinable()) ticker_.join();
  // The server first (the ticker did, unless Start failed), then the health service's queue.
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  if (health_ != nullptr) health_->StopServing();
  if (health_cq_ != nullptr) {
    health_cq_->Shutdown();
    if (health_thread_.joinable()) {
      health_thread_.join();
    } else {
      void* tag;
      bool ok;
      while (health_cq_->Next(&tag, &ok)) {
      }
    }
  }
  if (core_ != nullptr) core_->SetServersBusy(nullptr);
  coordinator_.reset();
}

std::string SchedulerDaemon::address() const {
  return FormatHostPort(options_.advertise_host, port_);
}

absl::Status SchedulerDaemon::Wait() {
  done_.WaitForNotification();
  absl::MutexLock lock(&abandon_mu_);
  if (!abandoned_.empty()) return absl::AbortedError(abandoned_);
  return status_;
}

void SchedulerDaemon::EndJob(const std::string& reason) { core_->RequestShutdown(reason); }

void SchedulerDaemon::Lead() { core_->SetStandby(""); }

void SchedulerDaemon::Abandon(const std::string& why) {
  {
    absl::MutexLock lock(&abandon_mu_);
    if (abandoned_.empty()) abandoned_ = why;
  }
  Shutdown();
}

void SchedulerDaemon::Shutdown() {
  if (health_ != nullptr) health_->Stopping();
  if (!stop_.HasBeenNotified()) stop_.Notify();
}

int SchedulerDaemon::metrics_port() const {
  return metrics_http_ == nullptr ? 0 : metrics_http_->port();
}

absl::Duration SchedulerDaemon::DeadAfter() const {
  return std::max(absl::Seconds(5), options_.job.heartbeat_interval * 3);
}

void SchedulerDaemon::Watch(absl::Time now) {
  const bool running = core_->view().ok() && !core_->shutdown_requested();
  if (running != job_running_) {
    job_running_ = running;
    health_->Set(kJobHealthService, running);
  }
  const absl::Duration dead_after = DeadAfter();
  if (core_->view().ok()) {
    for (const NodeInfo& node : core_->Nodes()) {
      const bool dead = !node.finished && now - node.last_heartbeat > dead_after;
      bool& was_dead = dead_[node.node_id];
      if (dead && !was_dead) {
        spdlog::warn(
            "scheduler: {} {} (node {}, {}) is dead: no heartbeat for {}",
            node.role == NodeRole::kServer ? "server" : "worker", node.rank, node.node_id,
            node.address.empty() ? node.hostname : node.address,
            absl::FormatDuration(absl::Trunc(now - node.last_heartbeat, absl::Milliseconds(100))));
      } else if (!dead && was_dead) {
        spdlog::info("scheduler: {} {} (node {}) is alive again",
                     node.role == NodeRole::kServer ? "server" : "worker", node.rank, node.node_id);
      }
      was_dead = dead;
    }
  }
  // Once the job is over nothing is awaited any more: no progress lines.
  if (core_->shutdown_requested() || now - last_progress_ < options_.progress_interval) return;
  const std::vector<std::string> lines = core_->Progress();
  if (lines.empty()) return;
  last_progress_ = now;
  for (const std::string& line : lines) spdlog::info("scheduler: {}", line);
}

void SchedulerDaemon::AddCollectors() {
  AddProcessCollector(&registry_);
  registry_.AddCollector([this](MetricsWriter* out) {
    const absl::Time now = absl::Now();
    const absl::Duration dead_after = DeadAfter();
    const std::vector<NodeInfo> nodes = core_->Nodes();
    const bool assembled = core_->view().ok();
    // Nodes by role and state: alive, dead, finished, and the expected ones not registered.
    std::map<std::pair<std::string, std::string>, int> counts;
    for (const char* role : {"server", "worker"}) {
      for (const char* state : {"registering", "alive", "dead", "finished", "missing", "left"}) {
        counts[{role, state}] = 0;
      }
    }
    int servers = 0, workers = 0;
    for (const NodeInfo& node : nodes) {
      const std::string role = node.role == NodeRole::kServer ? "server" : "worker";
      ++(node.role == NodeRole::kServer ? servers : workers);
      const char* state = !assembled                                            ? "registering"
                          : node.left                                           ? "left"
                          : node.finished                                       ? "finished"
                          : node.dead || now - node.last_heartbeat > dead_after ? "dead"
                                                                                : "alive";
      ++counts[{role, state}];
    }
    counts[{"server", "missing"}] = options_.job.num_servers - servers;
    counts[{"worker", "missing"}] = options_.job.num_workers - workers;
    out->Family("kvstore_scheduler_nodes",
                "Nodes of the job by role and state (registering: waiting for the rest of the "
                "job; missing: expected, not registered; left: workers gone from an elastic job).",
                MetricsWriter::Type::kGauge);
    for (const auto& [key, n] : counts) {
      out->Sample("kvstore_scheduler_nodes", {{"role", key.first}, {"state", key.second}}, n);
    }
    out->Family("kvstore_scheduler_heartbeat_age_seconds",
                "Seconds since each node's last heartbeat (or registration).",
                MetricsWriter::Type::kGauge);
    for (const NodeInfo& node : nodes) {
      out->Sample("kvstore_scheduler_heartbeat_age_seconds",
                  {{"role", node.role == NodeRole::kServer ? "server" : "worker"},
                   {"rank", absl::StrCat(node.rank)},
                   {"host", node.hostname}},
                  absl::ToDoubleSeconds(now - node.last_heartbeat));
    }
    out->Family("kvstore_scheduler_server_keys", "Keys each server reported in its heartbeat.",
                MetricsWriter::Type::kGauge);
    for (const NodeInfo& node : nodes) {
      if (node.role != NodeRole::kServer) continue;
      out->Sample("kvstore_scheduler_server_keys", {{"rank", absl::StrCat(node.rank)}},
                  static_cast<double>(node.num_keys));
    }
    out->Family("kvstore_scheduler_server_held_bytes",
                "Bytes each server reported holding in its heartbeat.",
                MetricsWriter::Type::kGauge);
    for (const NodeInfo& node : nodes) {
      if (node.role != NodeRole::kServer) continue;
      out->Sample("kvstore_scheduler_server_held_bytes", {{"rank", absl::StrCat(node.rank)}},
                  static_cast<double>(node.num_bytes));
    }
    out->Family("kvstore_scheduler_job_assembled", "1 once every node has registered.",
                MetricsWriter::Type::kGauge);
    out->Sample("kvstore_scheduler_job_assembled", {}, assembled ? 1 : 0);
    out->Family("kvstore_scheduler_job_over", "1 once the job is over.",
                MetricsWriter::Type::kGauge);
    out->Sample("kvstore_scheduler_job_over", {}, core_->shutdown_requested() ? 1 : 0);
  });
}

absl::Status SchedulerDaemon::Tick() {
  absl::Time over_since = absl::InfiniteFuture();
  absl::Time failed_since = absl::InfiniteFuture();
  const absl::Duration linger = options_.job.heartbeat_interval * 2 + absl::Milliseconds(200);
  absl::Time started = absl::Now();
  bool assembled = false;
  absl::Status outcome;  // Not OK when the scheduler ended the job itself.
  while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
    const absl::Time now = absl::Now();
    // A standby's registration window opens when it leads.
    if (core_->standby()) started = now;
    core_->ExpireDeadlines(now);
    // Re-forming a running job with replicas: a server that does not register again and does
    // not answer at its address died while the scheduler was away.
    service_->CheckMissingServers(2 * options_.job.heartbeat_interval + absl::Milliseconds(300));
    Watch(now);
    if (!assembled) {
      // A job nobody joins must end too: the registration window also runs from the start.
      const absl::Status view = core_->view().status();
      assembled = view.ok();
      if (!assembled && now - started > options_.job.register_timeout + absl::Seconds(1)) {
        return absl::DeadlineExceededError(
            absl::StrCat("waited ", absl::FormatDuration(options_.job.register_timeout),
                         " for the job's nodes to register: ", view.message()));
      }
    }
    const absl::Status registration = core_->registration_status();
    if (!registration.ok()) {
      // Give the refused nodes a moment to receive their answer, then stop.
      if (failed_since == absl::InfiniteFuture()) failed_since = now;
      if (now - failed_since > absl::Seconds(1)) return registration;
      continue;
    }
    if (const absl::Status lost = core_->liveness().WorkersLost(now); !lost.ok()) {
      spdlog::error("scheduler: {}", std::string(lost.message()));
      core_->FailJob(std::string(lost.message()), now);
      outcome = lost;
    }
    // In an elastic job a dead worker leaves it and the others go on: the servers hear it in
    // their heartbeats and stop waiting for it.
    for (const std::string& line : core_->liveness().DropDeadWorkers(now)) {
      spdlog::warn("scheduler: {}", line);
    }
    // A dead worker fails the job within the heartbeat timeout, naming it: a dist_sync round
    // cannot complete without it (docs/reliability.md).
    if (const absl::Status dead = core_->liveness().DeadWorkers(now); !dead.ok()) {
      spdlog::error("scheduler: the job failed: {}", std::string(dead.message()));
      core_->FailJob(std::string(dead.message()), now);
      outcome = dead;
    }
    if (outcome.ok() && !core_->job_failure().empty()) {
      outcome = absl::AbortedError(absl::StrCat("the job failed: ", core_->job_failure()));
    }
    if (!core_->shutdown_requested()) continue;
    if (over_since == absl::InfiniteFuture()) {
      over_since = now;
      spdlog::info("scheduler: the job is over ({})", core_->shutdown_reason());
    }
    // Leave time for workers still heartbeating to hear it too - every one that has not
    // finished, unless silent for the heartbeat timeout (dead; all of it bounded by the grace
    // below): one that had not heard it when the scheduler left would take it for a scheduler
    // restarting and wait for it - and, when the job failed, for `kvctl status` to show who
    // failed.
    const absl::Duration stay =
        core_->job_failure().empty() ? linger : std::max(linger, absl::Seconds(3));
    if (now - over_since > options_.shutdown_grace / 2) stop_holding_servers_ = true;
    if (core_->servers_released_or_gone(now, linger) &&
        core_->workers_released_or_gone(now, options_.job.heartbeat_timeout) &&
        now - over_since > stay) {
      return outcome;
    }
    if (now - over_since > options_.shutdown_grace) {
      spdlog::warn("scheduler: nodes did not all hear the end within {}; exiting",
                   absl::FormatDuration(options_.shutdown_grace));
      return outcome;
    }
  }
  return absl::CancelledError("scheduler stopped by its owner");
}

}  // namespace kvstore
