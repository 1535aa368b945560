// scheduler: the job coordinator daemon.
//
//   scheduler --num_servers=2 --num_workers=2 --port=9091
//
// Flags left unset are taken from the launch environment (DMLC_PS_ROOT_URI/PORT,
// DMLC_NUM_SERVER, DMLC_NUM_WORKER or their KV_ names; see common/environment.h). --port=0 lets
// the OS choose; --port_file then tells launchers which port was bound. --metrics_port serves
// Prometheus metrics (docs/operations.md). `--help` lists the
// flags, `--version` prints the version. Exits 0 when the job is over, non-zero with a one-line
// reason otherwise.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
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
#include "server/scheduler/grpc/scheduler_daemon.h"
#include "server/scheduler/scheduler_flags.h"

namespace kvstore {
namespace {

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << port << "\n";
    if (!out.good()) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::Status Run() {
  ASSIGN_OR_RETURN(const JobEnvironment env, ReadJobEnvironment());
  ASSIGN_OR_RETURN(const SchedulerDaemonOptions options, SchedulerOptionsFromFlags(env));
  ASSIGN_OR_RETURN(auto daemon, SchedulerDaemon::Start(options));
  // SIGTERM / SIGINT: end the job (heartbeats tell every node), stop serving once the servers
  // have heard it (at most 10 s), exit 0.
  ASSIGN_OR_RETURN(auto signals, StopSignals::Install([d = daemon.get()](int signal) {
                     d->EndJob(StopSignals::Name(signal));
                   }));
  if (const std::string port_file = SchedulerPortFileFlag(); !port_file.empty()) {
    RETURN_IF_ERROR(WritePortFile(port_file, daemon->port()));
  }
  const absl::Status status = daemon->Wait();
  if (const int signal = signals->received(); signal != 0) {
    spdlog::info("scheduler: got {}; ended the job and stopped serving, exiting",
                 StopSignals::Name(signal));
    return absl::OkStatus();
  }
  return status;
}

}  // namespace
}  // namespace kvstore

int main(int argc, char** argv) {
  kvstore::InitFlags(argc, argv,
                     "coordinates a KVStore job; exits 0 when the job is over.\n"
                     "Flags left unset come from the launch environment (DMLC_PS_ROOT_URI/PORT,\n"
                     "DMLC_NUM_SERVER, DMLC_NUM_WORKER or their KV_ names).\n\n"
                     "  scheduler --num_servers=2 --num_workers=2 --port=9091",
                     kvstore::kSchedulerFlagsFile);
  // A kvserver holds a lock per chunk; Abseil's debug-build deadlock detection would track each
  // one in a global graph (measured: 10% of the CPU of a 100,000-key push).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const absl::StatusOr<kvstore::JobEnvironment> env = kvstore::ReadJobEnvironment();
  const absl::Status logging = kvstore::InitLogging(
      {"scheduler",
       kvstore::ChooseLogLevel(kvstore::LogLevelFlag(), env.ok() ? env->log_level : std::nullopt)});
  if (!logging.ok()) {
    std::fprintf(stderr, "scheduler: %s\n", std::string(logging.message()).c_str());
    return 2;
  }
  const absl::Status status = kvstore::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "scheduler: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
