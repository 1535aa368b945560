#include "server/role_daemon.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <utility>

#include "common/status_macros.h"
#include "common/stop_signals.h"
#include "server/daemon_options.h"
#include "server/grpc/kvserver_daemon.h"
#include "server/scheduler/grpc/scheduler_daemon.h"

namespace kvstore {
namespace {

// ServeUntilEnd waits for `daemon`, stopping it on SIGTERM / SIGINT with `stop`.
template <typename Daemon, typename Stop>
absl::Status ServeUntilEnd(Daemon* daemon, const std::string& role, Stop stop) {
  ASSIGN_OR_RETURN(auto signals,
                   StopSignals::Install([daemon, stop](int signal) { stop(daemon, signal); }));
  const absl::Status status = daemon->Wait();
  if (const int signal = signals->received(); signal != 0) {
    spdlog::info("{}: got {}; stopped serving, exiting", role, StopSignals::Name(signal));
    return absl::OkStatus();
  }
  return status;
}

absl::Status RunScheduler(const JobEnvironment& env) {
  if (!env.scheduler_port.has_value()) {
    return absl::InvalidArgumentError(
        "the scheduler needs its port: set DMLC_PS_ROOT_PORT (and DMLC_PS_ROOT_URI)");
  }
  ASSIGN_OR_RETURN(SchedulerDaemonOptions options, SchedulerOptionsFrom(env, {}));
  ASSIGN_OR_RETURN(auto daemon, SchedulerDaemon::Start(std::move(options)));
  return ServeUntilEnd(daemon.get(), "scheduler", [](SchedulerDaemon* d, int signal) {
    d->EndJob(StopSignals::Name(signal));
  });
}

absl::Status RunServer(const JobEnvironment& env, CustomController controller) {
  if (!env.scheduler_port.has_value()) {
    return absl::InvalidArgumentError(
        "a server needs the scheduler's address: set DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT");
  }
  ASSIGN_OR_RETURN(KVServerOptions options, KVServerOptionsFrom(env, {}));
  options.custom_controller = std::move(controller);
  ASSIGN_OR_RETURN(auto daemon, KVServerDaemon::Start(std::move(options)));
  return ServeUntilEnd(daemon.get(), "kvserver", [](KVServerDaemon* d, int) { d->Shutdown(); });
}

}  // namespace

absl::Status RunRoleDaemon(const JobEnvironment& env, CustomController controller) {
  const std::string role = env.role.value_or("worker");
  if (role == "scheduler") return RunScheduler(env);
  if (role == "server") return RunServer(env, std::move(controller));
  return absl::FailedPreconditionError(
      "this process is a worker (DMLC_ROLE is worker or unset): only server and scheduler "
      "processes run as daemons");
}

}  // namespace kvstore
