#include "server/role_daemon.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/advertise.h"
#include "common/job_auth.h"
#include "common/status_macros.h"
#include "common/stop_signals.h"
#include "server/grpc/kvserver_daemon.h"
#include "server/scheduler/scheduler_daemon.h"

namespace kvstore {
namespace {

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" ||
         absl::StartsWith(host, "127.");
}

// Security returns the secret and TLS files from the environment, refusing what a daemon's
// flags would refuse without --insecure.
absl::StatusOr<SecurityOptions> Security(const JobEnvironment& env, const std::string& bind,
                                         const std::string& role) {
  SecurityOptions security;
  if (env.secret_file.has_value()) {
    ASSIGN_OR_RETURN(security.secret, ReadSecretFile(*env.secret_file));
  }
  security.tls.ca_file = env.tls_ca.value_or("");
  security.tls.cert_file = env.tls_cert.value_or("");
  security.tls.key_file = env.tls_key.value_or("");
  if (env.insecure) {
    spdlog::warn("{}: KV_INSECURE=1: the daemon accepts {}", role,
                 security.secret.empty() ? "calls without a job secret" : "plaintext off loopback");
    return security;
  }
  if (security.secret.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", role, " of this job has no job secret: set KV_SECRET_FILE to a file only you "
        "can read, the same on every node (deploy/launch.py makes one), or KV_INSECURE=1"));
  }
  if (!IsLoopbackHost(bind) && security.tls.cert_file.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", role, " would serve ", bind, " without TLS: set KV_TLS_CA, KV_TLS_CERT and "
        "KV_TLS_KEY (deploy/make-certs.sh), or KV_INSECURE=1"));
  }
  return security;
}

// ServeUntilEnd waits for `daemon`, stopping it on SIGTERM / SIGINT with `stop`.
template <typename Daemon, typename Stop>
absl::Status ServeUntilEnd(Daemon* daemon, const std::string& role, Stop stop) {
  ASSIGN_OR_RETURN(auto signals, StopSignals::Install(
                                     [daemon, stop](int signal) { stop(daemon, signal); }));
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
  SchedulerDaemonOptions options;
  options.host = env.bind_host.value_or(env.scheduler_host.value_or("127.0.0.1"));
  options.port = *env.scheduler_port;
  options.advertise_host = env.scheduler_host.value_or(options.host);
  options.job.num_servers = env.num_servers.value_or(1);
  options.job.num_workers = env.num_workers.value_or(1);
  options.job.elastic = env.elastic.value_or(false);
  options.job.replicas = env.replicas.value_or(1);
  ASSIGN_OR_RETURN(options.security, Security(env, options.host, "scheduler"));
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
  const std::string scheduler_host = env.scheduler_host.value_or("127.0.0.1");
  KVServerOptions options;
  options.scheduler_address = FormatHostPort(scheduler_host, *env.scheduler_port);
  if (env.bind_host.has_value()) {
    options.host = *env.bind_host;
  } else if (env.node_host.has_value() || env.interface.has_value()) {
    ASSIGN_OR_RETURN(options.host, ChooseAdvertiseHost("", "", env));
  } else {
    options.host = IsLoopbackHost(scheduler_host) ? "127.0.0.1" : "0.0.0.0";
  }
  ASSIGN_OR_RETURN(options.advertise_host, ChooseAdvertiseHost("", options.host, env));
  options.requested_rank = env.rank.value_or(-1);
  options.custom_controller = std::move(controller);
  ASSIGN_OR_RETURN(options.security, Security(env, options.host, "server"));
  ASSIGN_OR_RETURN(auto daemon, KVServerDaemon::Start(std::move(options)));
  return ServeUntilEnd(daemon.get(), "kvserver",
                       [](KVServerDaemon* d, int) { d->Shutdown(); });
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
