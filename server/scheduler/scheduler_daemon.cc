#include "server/scheduler/scheduler_daemon.h"

#include <grpcpp/server_builder.h>
#include <spdlog/spdlog.h>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/status_macros.h"

namespace kvstore {

absl::StatusOr<std::unique_ptr<SchedulerDaemon>> SchedulerDaemon::Start(
    SchedulerDaemonOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", options.port, " is not in 0..65535"));
  }
  if (options.max_request_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_request_bytes must be positive, not ",
                                                   options.max_request_bytes));
  }
  std::unique_ptr<SchedulerDaemon> daemon(new SchedulerDaemon(std::move(options)));
  ASSIGN_OR_RETURN(daemon->core_, SchedulerCore::Create(daemon->options_.job));
  const TlsOptions& tls = daemon->options_.security.tls;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> to_servers,
                   ChannelCredentialsFor(tls));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   ServerCredentialsFor(tls));
  daemon->service_ = std::make_unique<SchedulerService>(
      daemon->core_.get(), daemon->options_.command_timeout, daemon->options_.security.secret,
      std::move(to_servers));
  CheckpointCoordinatorOptions checkpoints = daemon->options_.checkpoints;
  if (checkpoints.job_id.empty()) {
    absl::BitGen random;
    checkpoints.job_id = absl::StrCat(
        absl::Hex(absl::Uniform<uint64_t>(random), absl::kZeroPad16));
  }
  SchedulerCore* core = daemon->core_.get();
  SchedulerService* service = daemon->service_.get();
  daemon->coordinator_ = std::make_unique<CheckpointCoordinator>(
      checkpoints,
      [service](int rank, int head, const std::string& body) {
        return service->CallServer(rank, head, body);
      },
      [core] { return core->view(); }, [core] { return !core->shutdown_requested(); });
  daemon->service_->SetCheckpointCoordinator(daemon->coordinator_.get());
  grpc::ServerBuilder builder;
  ServerLimits limits = ServerLimits::ForRequests(daemon->options_.max_request_bytes);
  limits.max_concurrent_calls = SchedulerDaemonOptions::kMaxCallsPerConnection;
  ConfigureServer(&builder, limits);
  const std::string listen = absl::StrCat(daemon->options_.host, ":", daemon->options_.port);
  builder.AddListeningPort(listen, credentials, &daemon->port_);
  builder.RegisterService(daemon->service_.get());
  daemon->server_ = builder.BuildAndStart();
  if (daemon->server_ == nullptr || daemon->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("scheduler cannot listen on ", listen));
  }
  spdlog::info("scheduler listening on {} ({}) for {} servers and {} workers",
               daemon->address(), tls.transport(), daemon->options_.job.num_servers,
               daemon->options_.job.num_workers);
  daemon->ticker_ = std::thread([d = daemon.get()] {
    const absl::Status status = d->Tick();
    d->server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    d->status_ = status;
    d->done_.Notify();
  });
  return daemon;
}

SchedulerDaemon::~SchedulerDaemon() {
  Shutdown();
  if (ticker_.joinable()) ticker_.join();
  coordinator_.reset();
}

std::string SchedulerDaemon::address() const {
  return absl::StrCat(options_.host, ":", port_);
}

absl::Status SchedulerDaemon::Wait() {
  done_.WaitForNotification();
  return status_;
}

void SchedulerDaemon::Shutdown() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
}

absl::Status SchedulerDaemon::Tick() {
  absl::Time over_since = absl::InfiniteFuture();
  absl::Time failed_since = absl::InfiniteFuture();
  const absl::Duration linger = options_.job.heartbeat_interval * 2 + absl::Milliseconds(200);
  const absl::Time started = absl::Now();
  bool assembled = false;
  absl::Status outcome;  // Not OK when the scheduler ended the job itself.
  while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
    const absl::Time now = absl::Now();
    core_->ExpireDeadlines(now);
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
    if (const absl::Status lost = core_->WorkersLost(now); !lost.ok()) {
      spdlog::error("scheduler: {}", std::string(lost.message()));
      core_->FailJob(std::string(lost.message()), now);
      outcome = lost;
    }
    // A dead worker fails the job within the heartbeat timeout, naming it: a dist_sync round
    // cannot complete without it (docs/reliability.md).
    if (const absl::Status dead = core_->DeadWorkers(now); !dead.ok()) {
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
    // Leave time for workers still heartbeating to hear it too, and, when the job failed, for
    // `kvctl status` to show who failed.
    const absl::Duration stay =
        core_->job_failure().empty() ? linger : std::max(linger, absl::Seconds(3));
    if (core_->all_servers_released() && now - over_since > stay) return outcome;
    if (now - over_since > options_.shutdown_grace) {
      spdlog::warn("scheduler: servers did not all hear the end within {}; exiting",
                   absl::FormatDuration(options_.shutdown_grace));
      return outcome;
    }
  }
  return absl::CancelledError("scheduler stopped by its owner");
}

}  // namespace kvstore
