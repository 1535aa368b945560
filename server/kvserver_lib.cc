#include "server/kvserver_lib.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/advertise.h"
#include "common/daemon_flags.h"
#include "common/environment.h"
#include "common/flags_usage.h"
#include "common/logging.h"
#include "common/security_flags.h"
#include "common/status_macros.h"
#include "common/stop_signals.h"
#include "server/daemon_options.h"
#include "server/grpc/kvserver_daemon.h"

ABSL_FLAG(std::string, host, "",
          "Address to bind (0.0.0.0 or :: for every interface); see --advertise_host. Empty: "
          "KV_HOST, else the address DMLC_NODE_HOST or DMLC_INTERFACE names, else 127.0.0.1 when "
          "the scheduler is on loopback and 0.0.0.0 when it is not (server/daemon_options.h).");
ABSL_FLAG(int, port, 0, "Port to listen on; 0 lets the OS choose.");
ABSL_FLAG(std::string, advertise_host, "",
          "The address registered with the scheduler, which workers connect to; empty: "
          "DMLC_NODE_HOST, else the address of the interface DMLC_INTERFACE names, else --host "
          "unless it is a wildcard, else this host's name resolved. Never 0.0.0.0 or ::.");
ABSL_FLAG(std::string, scheduler, "",
          "The scheduler's host:port; empty: DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT.");
ABSL_FLAG(std::string, etcd, "",
          "etcd endpoints (HOST:PORT,...) holding the address of the job's leading scheduler "
          "(with --job), instead of --scheduler; empty: KV_ETCD_ENDPOINTS.");
ABSL_FLAG(std::string, job, "", "The job's name in etcd (with --etcd); empty: KV_JOB.");
ABSL_FLAG(int, rank, -1,
          "Requested server rank; -1: KV_RANK / DMLC_SERVER_ID, else registration order.");
ABSL_FLAG(std::string, updater, "",
          "Updater applied to pushes until a worker sets another: assign, sum, sgd or an "
          "optimizer. Empty: none - dist_sync assigns (MXNet's default), dist_async refuses "
          "pushes with FAILED_PRECONDITION until a worker sets an updater or optimizer.");
ABSL_FLAG(std::string, updater_config, "", "Configuration of --updater, e.g. \"lr=0.1\".");
ABSL_FLAG(absl::Duration, register_timeout, absl::Seconds(120),
          "How long to wait for the scheduler and the rest of the job.");
ABSL_FLAG(absl::Duration, scheduler_lost_timeout, absl::Seconds(30),
          "How long the scheduler may be unreachable before the server exits; meanwhile it "
          "serves on and registers again with a scheduler restarted in place.");
ABSL_FLAG(std::string, checkpoint_root, "",
          "Checkpoints are written under this directory and restored from it only: the DIR of "
          "`kvctl checkpoint DIR`, the SDK's Checkpoint(dir) and --restore is relative to it "
          "(or absolute below its canonical path), and one that leaves it (absolute elsewhere, "
          "'..', a symbolic link) is refused. Created when "
          "missing; empty: the working directory at start.");
ABSL_FLAG(std::string, restore, "",
          "Resume from the checkpoint in this directory below --checkpoint_root (written by "
          "`kvctl checkpoint DIR` or the SDK's Checkpoint): ROOT/DIR/server-RANK.ckpt.");
ABSL_FLAG(int, serving_threads, 0,
          "Threads that read, run and answer requests, each with its own completion queue; 0: one "
          "per 4 cores, at least one.");
ABSL_FLAG(absl::Duration, serving_poll, absl::Microseconds(250),
          "After answering a call with a reply of under 64 KB (any push, a small pull), a "
          "serving thread polls for the next "
          "one this long before it sleeps (spares a wake-up on machines whose idle CPUs halt); "
          "0: never.");
ABSL_FLAG(bool, join, false,
          "Join a running dist_sync job as one more server: the scheduler "
          "moves the keys the new placement gives it into it and publishes it "
          "(docs/state.md, \"Adding and draining servers while a job runs\").");
ABSL_FLAG(std::string, local_socket_dir, "/tmp",
          "Workers on this host reach the kvserver through shared memory, over a Unix socket "
          "made in this directory (removed at exit); empty: only over TCP.");
ABSL_FLAG(int64_t, max_value_bytes, kvstore::kDefaultMaxValueBytes,
          "The largest value a worker may store, in bytes (the whole value, over every server); "
          "a bigger one is refused with RESOURCE_EXHAUSTED. A request may carry at most this "
          "plus 16 MiB (and at most 2 GiB).");
ABSL_FLAG(int64_t, memory_budget_bytes, 0,
          "The most bytes this server holds (values, plus a few hundred bytes per key and chunk, "
          "and key groups); an Init beyond it is refused with RESOURCE_EXHAUSTED. 0: half of the "
          "machine's physical memory.");

namespace kvstore {

DaemonCommandLine KVServerCommandLineFromFlags() {
  DaemonCommandLine given;
  given.host = absl::GetFlag(FLAGS_host);
  given.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  given.port = absl::GetFlag(FLAGS_port);
  given.scheduler = absl::GetFlag(FLAGS_scheduler);
  given.etcd = absl::GetFlag(FLAGS_etcd);
  given.job = absl::GetFlag(FLAGS_job);
  given.rank = absl::GetFlag(FLAGS_rank);
  given.security = SecuritySettingsFromFlags();
  return given;
}

namespace {

absl::Status Run(const KVServerCustomizer& customize) {
  ASSIGN_OR_RETURN(const JobEnvironment env, ReadJobEnvironment());
  ASSIGN_OR_RETURN(KVServerOptions options,
                   KVServerOptionsFrom(env, KVServerCommandLineFromFlags()));
  options.updater = absl::GetFlag(FLAGS_updater);
  options.updater_config = absl::GetFlag(FLAGS_updater_config);
  options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
  options.restore_dir = absl::GetFlag(FLAGS_restore);
  options.register_timeout = absl::GetFlag(FLAGS_register_timeout);
  options.scheduler_lost_timeout = absl::GetFlag(FLAGS_scheduler_lost_timeout);
  options.serving_threads = absl::GetFlag(FLAGS_serving_threads);
  options.serving_poll = absl::GetFlag(FLAGS_serving_poll);
  options.local_socket_dir = absl::GetFlag(FLAGS_local_socket_dir);
  options.join = absl::GetFlag(FLAGS_join);
  options.max_value_bytes = absl::GetFlag(FLAGS_max_value_bytes);
  options.memory_budget_bytes = absl::GetFlag(FLAGS_memory_budget_bytes);
  options.metrics_port = MetricsPortFlag();
  if (customize) RETURN_IF_ERROR(customize(&options));
  ASSIGN_OR_RETURN(auto daemon, KVServerDaemon::Start(std::move(options)));
  // SIGTERM / SIGINT: stop serving (calls still running get 2 s, then are cancelled), exit 0.
  ASSIGN_OR_RETURN(auto signals, StopSignals::Install([d = daemon.get()](int) { d->Shutdown(); }));
  const absl::Status status = daemon->Wait();
  if (const int signal = signals->received(); signal != 0) {
    spdlog::info("kvserver: got {}; stopped serving, exiting", StopSignals::Name(signal));
    return absl::OkStatus();
  }
  return status;
}

}  // namespace

int KVServerMain(int argc, char** argv, const KVServerCustomizer& customize) {
  InitFlags(argc, argv,
            "serves one shard of the keys of a KVStore job; exits 0 when the job is over.\n"
            "Flags left unset come from the launch environment (DMLC_PS_ROOT_URI/PORT,\n"
            "DMLC_SERVER_ID or their KV_ names).\n\n"
            "  kvserver --scheduler=HOST:PORT [--port=0] [--updater=NAME]\n"
            "           [--checkpoint_root=ROOT] [--restore=DIR]",
            __FILE__);
  // A kvserver holds a lock per chunk; Abseil's debug-build deadlock detection would track each
  // one in a global graph (measured: 10% of the CPU of a 100,000-key push).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const absl::StatusOr<JobEnvironment> env = ReadJobEnvironment();  // Run reports its error.
  const absl::Status logging = InitLogging(
      {"kvserver", ChooseLogLevel(LogLevelFlag(), env.ok() ? env->log_level : std::nullopt)});
  if (!logging.ok()) {
    std::fprintf(stderr, "kvserver: %s\n", std::string(logging.message()).c_str());
    return 2;
  }
  const absl::Status status = Run(customize);
  if (!status.ok()) {
    std::fprintf(stderr, "kvserver: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace kvstore
