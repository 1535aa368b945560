// scheduler: the job coordinator daemon.
//
//   scheduler --num_servers=2 --num_workers=2 --port=9091
//
// Flags left unset are taken from the launch environment (DMLC_PS_ROOT_URI/PORT,
// DMLC_NUM_SERVER, DMLC_NUM_WORKER or their KV_ names; see common/environment.h). --port=0 lets
// the OS choose; --port_file then tells launchers which port was bound. --metrics_port serves
// Prometheus metrics (docs/operations.md). `--help` lists the
// flags, `--version` prints the version. Exits 0 when the job is over, non-zero with a one-line
// reason otherwise. With --etcd and --job it is one of the job's schedulers - a leader and its
// standbys - elected through etcd (server/scheduler/scheduler_election.h): a standby serves
// nothing until the leader's lease lapses.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/advertise.h"
#include "common/daemon_flags.h"
#include "common/environment.h"
#include "common/etcd_client.h"
#include "common/flags_usage.h"
#include "common/logging.h"
#include "common/security_flags.h"
#include "common/status_macros.h"
#include "common/stop_signals.h"
#include "server/scheduler/grpc/scheduler_daemon.h"
#include "server/scheduler/scheduler_election.h"
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
  ASSIGN_OR_RETURN(SchedulerDaemonOptions options, SchedulerOptionsFromFlags(env));
  ASSIGN_OR_RETURN(const std::optional<SchedulerElectionFlags> elected,
                   SchedulerElectionFromFlags(env));
  std::unique_ptr<SchedulerElection> election;
  if (elected.has_value()) {
    ASSIGN_OR_RETURN(EtcdClient etcd, EtcdClient::Create(elected->etcd));
    election = std::make_unique<SchedulerElection>(
        std::move(etcd), SchedulerElection::Options{elected->job, elected->lease});
    options.standby = absl::StrCat("this scheduler is a standby of job ", elected->job,
                                   ": its leader's address is in etcd at ", elected->etcd);
  }
  ASSIGN_OR_RETURN(auto daemon, SchedulerDaemon::Start(options));
  absl::Notification stop_campaign;
  // SIGTERM / SIGINT: end the job (heartbeats tell every node), stop serving once the servers
  // have heard it (at most 10 s), exit 0; a standby just stops.
  ASSIGN_OR_RETURN(auto signals,
                   StopSignals::Install([d = daemon.get(), &stop_campaign](int signal) {
                     if (!stop_campaign.HasBeenNotified()) stop_campaign.Notify();
                     d->EndJob(StopSignals::Name(signal));
                   }));
  if (const std::string port_file = SchedulerPortFileFlag(); !port_file.empty()) {
    RETURN_IF_ERROR(WritePortFile(port_file, daemon->port()));
  }
  if (election != nullptr) {
    // A standby serves nothing until it leads; a leader that loses its lease stops.
    if (const absl::Status led = election->Campaign(daemon->address(), &stop_campaign); !led.ok()) {
      // Stopped, or the job is over: a standby has nothing to do.
      daemon->Shutdown();
      daemon->Wait().IgnoreError();
      return absl::OkStatus();
    }
    daemon->Lead();
    election->KeepLeading([d = daemon.get()](const std::string& why) {
      spdlog::error("scheduler: {}", why);
      d->Abandon(why);
    });
  }
  const absl::Status status = daemon->Wait();
  if (election != nullptr && status.ok()) {
    // The job ended well: its standbys stop too.
    if (const absl::Status finished = election->Finish(); !finished.ok()) {
      spdlog::warn("scheduler: telling the standbys through etcd that the job is over: {}",
                   finished.ToString());
    }
  }
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
