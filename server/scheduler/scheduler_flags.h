// The scheduler program's flags (`scheduler --help` lists them), read into its options through
// the one mapping from environment to options (server/daemon_options.h).
#ifndef KVSTORE_SERVER_SCHEDULER_SCHEDULER_FLAGS_H_
#define KVSTORE_SERVER_SCHEDULER_SCHEDULER_FLAGS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/environment.h"
#include "server/daemon_options.h"
#include "server/scheduler/grpc/scheduler_daemon.h"

namespace kvstore {

// The file defining the flags, for InitFlags' --help (common/flags_usage.h).
extern const char kSchedulerFlagsFile[];

// SchedulerCommandLineFromFlags returns what the flags gave of the settings the environment
// also decides (flags left at their defaults: not given).
DaemonCommandLine SchedulerCommandLineFromFlags();

// SchedulerOptionsFromFlags returns the scheduler's options: SchedulerOptionsFrom(env, the
// flags' command line), then the settings only flags give. InvalidArgument naming a flag whose
// value cannot work.
absl::StatusOr<SchedulerDaemonOptions> SchedulerOptionsFromFlags(const JobEnvironment& env);

// --port_file.
std::string SchedulerPortFileFlag();

// --etcd, --job, --etcd_lease: the election among the job's schedulers
// (server/scheduler/scheduler_election.h), or nothing when neither endpoints nor a job is
// given (flags, else KV_ETCD_ENDPOINTS and KV_JOB). InvalidArgument when only one is.
struct SchedulerElectionFlags {
  std::string etcd;
  std::string job;
  absl::Duration lease;
};
absl::StatusOr<std::optional<SchedulerElectionFlags>> SchedulerElectionFromFlags(
    const JobEnvironment& env);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_SCHEDULER_FLAGS_H_
