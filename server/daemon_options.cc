#include "server/daemon_options.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/advertise.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

// HostOf returns the host of "host:port" ("[v6]:port" too).
std::string HostOf(const std::string& address) {
  absl::string_view host = address;
  if (absl::ConsumePrefix(&host, "[")) {
    const size_t end = host.find(']');
    return std::string(host.substr(0, end));
  }
  const size_t colon = host.rfind(':');
  return std::string(colon == absl::string_view::npos ? host : host.substr(0, colon));
}

}  // namespace

absl::StatusOr<KVServerOptions> KVServerOptionsFrom(const JobEnvironment& env,
                                                    const DaemonCommandLine& given) {
  KVServerOptions options;
  options.scheduler_address = given.scheduler;
  options.etcd_endpoints = !given.etcd.empty() ? given.etcd : env.etcd_endpoints.value_or("");
  options.job = !given.job.empty() ? given.job : env.job.value_or("");
  if (options.etcd_endpoints.empty() != options.job.empty()) {
    return absl::InvalidArgumentError(
        "--etcd and --job go together (or KV_ETCD_ENDPOINTS and KV_JOB)");
  }
  if (options.scheduler_address.empty() && env.scheduler_port.has_value()) {
    options.scheduler_address =
        FormatHostPort(env.scheduler_host.value_or("127.0.0.1"), *env.scheduler_port);
  }
  if (options.scheduler_address.empty() && options.etcd_endpoints.empty()) {
    return absl::InvalidArgumentError(
        "no scheduler address: pass --scheduler=HOST:PORT or set DMLC_PS_ROOT_URI and "
        "DMLC_PS_ROOT_PORT (or find it through etcd: --etcd and --job)");
  }
  if (!options.etcd_endpoints.empty()) options.scheduler_address.clear();
  if (!given.host.empty()) {
    options.host = given.host;
  } else if (env.bind_host.has_value()) {
    options.host = *env.bind_host;
  } else if (env.node_host.has_value() || env.interface.has_value()) {
    ASSIGN_OR_RETURN(options.host, ChooseAdvertiseHost("", "", env));
  } else {
    // On loopback when the scheduler is, or etcd which names it.
    absl::string_view peer = options.scheduler_address;
    if (!options.etcd_endpoints.empty()) {
      peer = absl::string_view(options.etcd_endpoints).substr(0, options.etcd_endpoints.find(','));
      absl::ConsumePrefix(&peer, "http://");
    }
    options.host = IsLoopback(HostOf(std::string(peer))) ? "127.0.0.1" : "0.0.0.0";
  }
  if (given.port >= 0) options.port = given.port;
  ASSIGN_OR_RETURN(options.advertise_host,
                   ChooseAdvertiseHost(given.advertise_host, options.host, env));
  options.requested_rank = given.rank != -1 ? given.rank : env.rank.value_or(-1);
  options.trace_file = env.trace_file.value_or("");
  options.name_log_lines = true;
  ASSIGN_OR_RETURN(options.security,
                   ResolveSecurity(env, given.security, SecurityRole{true, options.host}));
  return options;
}

absl::StatusOr<SchedulerDaemonOptions> SchedulerOptionsFrom(const JobEnvironment& env,
                                                            const DaemonCommandLine& given) {
  SchedulerDaemonOptions options;
  options.host = !given.host.empty()         ? given.host
                 : env.bind_host.has_value() ? *env.bind_host
                                             : env.scheduler_host.value_or("127.0.0.1");
  options.port = given.port >= 0 ? given.port : env.scheduler_port.value_or(0);
  if (!given.advertise_host.empty()) {
    options.advertise_host = given.advertise_host;
  } else if (env.scheduler_host.has_value()) {
    options.advertise_host = *env.scheduler_host;
  } else {
    ASSIGN_OR_RETURN(options.advertise_host, ChooseAdvertiseHost("", options.host, env));
  }
  options.job.num_servers = given.num_servers > 0 ? given.num_servers : env.num_servers.value_or(1);
  options.job.num_workers = given.num_workers > 0 ? given.num_workers : env.num_workers.value_or(1);
  options.job.replicas = given.replicas > 0 ? given.replicas : env.replicas.value_or(1);
  options.job.elastic = given.elastic || env.elastic.value_or(false);
  ASSIGN_OR_RETURN(options.security,
                   ResolveSecurity(env, given.security, SecurityRole{true, options.host}));
  return options;
}

}  // namespace kvstore
