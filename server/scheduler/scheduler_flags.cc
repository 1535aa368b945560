#include "server/scheduler/scheduler_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/daemon_flags.h"
#include "common/security_flags.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, host, "",
          "Address to bind (0.0.0.0 or :: for every interface); see --advertise_host. Empty: "
          "KV_HOST, else DMLC_PS_ROOT_URI, else 127.0.0.1.");
ABSL_FLAG(std::string, advertise_host, "",
          "The address the job's nodes reach the scheduler at (logged; what DMLC_PS_ROOT_URI "
          "should say); empty: DMLC_PS_ROOT_URI, else DMLC_NODE_HOST, else the address of the "
          "interface DMLC_INTERFACE names, else --host unless it is a wildcard, else this host's "
          "name resolved.");
ABSL_FLAG(int, port, -1, "Port to listen on; 0 lets the OS choose; -1: DMLC_PS_ROOT_PORT, else 0.");
ABSL_FLAG(std::string, port_file, "", "If set, the bound port is written to this file.");
ABSL_FLAG(int, num_servers, 0, "Number of kvservers; 0: DMLC_NUM_SERVER, else 1.");
ABSL_FLAG(int, num_workers, 0, "Number of workers; 0: DMLC_NUM_WORKER, else 1.");
ABSL_FLAG(int64_t, big_value_bound, 1000000,
          "Values with more elements are split over all servers.");
ABSL_FLAG(int64_t, chunk_bytes, kvstore::kDefaultChunkBytes,
          "A server's part of a value bigger than this many bytes moves and is updated in chunks "
          "of this size.");
ABSL_FLAG(absl::Duration, register_timeout, absl::Seconds(120),
          "How long the job may take to assemble.");
ABSL_FLAG(absl::Duration, barrier_timeout, absl::Seconds(600),
          "How long a barrier waits for its last node.");
ABSL_FLAG(absl::Duration, workers_lost_timeout, absl::Minutes(5),
          "End the job (the servers exit, the scheduler exits 1) once every worker that has not "
          "finished has sent no heartbeat for this long; inf: never.");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1), "Heartbeat period of every node.");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(10),
          "A worker that has not finished and has sent no heartbeat for this long is dead: the "
          "job fails, naming it (the servers fail the pushes waiting for it, every daemon exits "
          "non-zero); inf: never.");
ABSL_FLAG(bool, signed_payloads, false,
          "With a job secret: every request to a kvserver is signed over all its bytes, payloads "
          "included, not only its header, so that an altered payload is refused; costs each side "
          "a pass over every pushed byte (docs/security.md, \"Signed requests\"). TLS protects "
          "payloads and replies alike.");
ABSL_FLAG(int, replicas, 0,
          "Copies of each shard: 1, or 2 (each shard also on the next rank's kvserver; a push is "
          "acknowledged once both hold it, and a dead kvserver's shard is served by its backup "
          "without losing an acknowledged update; docs/reliability.md). 2 needs 2 servers or "
          "more. 0: KV_REPLICAS, else 1.");
ABSL_FLAG(bool, elastic, false,
          "Elastic dist_sync: a worker declared dead (--heartbeat_timeout) or finished as failed "
          "leaves the job, which goes on with the workers that remain (barriers and the "
          "servers' rounds stop waiting for it); the job fails only when no worker is left. "
          "KV_ELASTIC=1 sets it too. False: the job fails, naming the worker "
          "(docs/reliability.md).");
ABSL_FLAG(int64_t, max_request_bytes, kvstore::SchedulerDaemonOptions::kDefaultMaxRequestBytes,
          "The largest request the scheduler accepts, in bytes; a bigger one is refused with "
          "RESOURCE_EXHAUSTED. Raise it when workers load optimizer states bigger than this "
          "(LoadOptimizerStates sends them through the scheduler).");
ABSL_FLAG(std::string, checkpoint_every, "",
          "Periodic checkpoints: N (every N dist_sync rounds) or a duration (30s, 5m); empty: "
          "none. Each is one cut of every server, into --checkpoint_prefix/ckpt-NNNNNN below "
          "each kvserver's --checkpoint_root (docs/reliability.md).");
ABSL_FLAG(std::string, checkpoint_prefix, "checkpoints",
          "Directory, below each kvserver's checkpoint root, of the periodic checkpoints.");
ABSL_FLAG(int, checkpoint_keep, 3, "Periodic checkpoints kept (older ones are removed); 0: all.");
ABSL_FLAG(absl::Duration, checkpoint_timeout, absl::Seconds(60),
          "How long a checkpoint may wait for every key to reach the cut's round.");
ABSL_FLAG(std::string, etcd, "",
          "etcd endpoints (HOST:PORT,...): elect the job's scheduler among this one and its "
          "standbys, and publish the leader's address there (with --job); empty: "
          "KV_ETCD_ENDPOINTS, else no election.");
ABSL_FLAG(std::string, job, "", "The job's name in etcd (with --etcd); empty: KV_JOB.");
ABSL_FLAG(absl::Duration, etcd_lease, absl::Seconds(1),
          "The leader's etcd lease: a standby takes over this long after the leader's last "
          "keep-alive (etcd may raise it to its minimum, about 2 s).");

namespace kvstore {

const char kSchedulerFlagsFile[] = __FILE__;

DaemonCommandLine SchedulerCommandLineFromFlags() {
  DaemonCommandLine given;
  given.host = absl::GetFlag(FLAGS_host);
  given.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  given.port = absl::GetFlag(FLAGS_port);
  given.num_servers = absl::GetFlag(FLAGS_num_servers);
  given.num_workers = absl::GetFlag(FLAGS_num_workers);
  given.replicas = absl::GetFlag(FLAGS_replicas);
  given.elastic = absl::GetFlag(FLAGS_elastic);
  given.security = SecuritySettingsFromFlags();
  return given;
}

absl::StatusOr<SchedulerDaemonOptions> SchedulerOptionsFromFlags(const JobEnvironment& env) {
  ASSIGN_OR_RETURN(SchedulerDaemonOptions options,
                   SchedulerOptionsFrom(env, SchedulerCommandLineFromFlags()));
  options.job.big_value_bound = absl::GetFlag(FLAGS_big_value_bound);
  options.job.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  options.job.register_timeout = absl::GetFlag(FLAGS_register_timeout);
  options.job.barrier_timeout = absl::GetFlag(FLAGS_barrier_timeout);
  options.job.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  options.job.workers_lost_timeout = absl::GetFlag(FLAGS_workers_lost_timeout);
  options.job.heartbeat_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  options.job.signed_payloads = absl::GetFlag(FLAGS_signed_payloads);
  options.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  options.metrics_port = MetricsPortFlag();
  const std::string every = absl::GetFlag(FLAGS_checkpoint_every);
  if (!every.empty() && !absl::SimpleAtoi(every, &options.checkpoints.every_rounds) &&
      !absl::ParseDuration(every, &options.checkpoints.every_time)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_every=", every, " is neither a number of rounds nor a duration"));
  }
  if (options.checkpoints.every_rounds < 0 ||
      options.checkpoints.every_time < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--checkpoint_every must not be negative");
  }
  options.checkpoints.prefix = absl::GetFlag(FLAGS_checkpoint_prefix);
  options.checkpoints.keep = absl::GetFlag(FLAGS_checkpoint_keep);
  options.checkpoints.cut_timeout = absl::GetFlag(FLAGS_checkpoint_timeout);
  if (options.job.heartbeat_interval < absl::Milliseconds(10)) {
    return absl::InvalidArgumentError("--heartbeat_interval must be at least 10ms");
  }
  return options;
}

std::string SchedulerPortFileFlag() { return absl::GetFlag(FLAGS_port_file); }

absl::StatusOr<std::optional<SchedulerElectionFlags>> SchedulerElectionFromFlags(
    const JobEnvironment& env) {
  SchedulerElectionFlags flags;
  flags.etcd = absl::GetFlag(FLAGS_etcd);
  if (flags.etcd.empty()) flags.etcd = env.etcd_endpoints.value_or("");
  flags.job = absl::GetFlag(FLAGS_job);
  if (flags.job.empty()) flags.job = env.job.value_or("");
  flags.lease = absl::GetFlag(FLAGS_etcd_lease);
  if (flags.etcd.empty() && flags.job.empty()) return std::nullopt;
  if (flags.etcd.empty() || flags.job.empty()) {
    return absl::InvalidArgumentError(
        "--etcd and --job go together (or KV_ETCD_ENDPOINTS and KV_JOB)");
  }
  if (flags.lease < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--etcd_lease must be 1s or more, not ", absl::FormatDuration(flags.lease)));
  }
  return flags;
}

}  // namespace kvstore
