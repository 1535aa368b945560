// The one mapping from a launch environment (and what a command line gave) to a daemon's
// options, for each daemon. Both ways of starting a daemon use it: the `kvserver` and
// `scheduler` programs with their flags (server/kvserver_lib.cc, server/scheduler/
// scheduler_main.cc), and a program of any role that the SDK makes a daemon from DMLC_ROLE
// (server/role_daemon.h), which passes an empty command line. One environment therefore gives
// the same daemon either way (server/daemon_options_test.cc).
//
// What the environment decides, when the command line did not:
//   kvserver   scheduler address   DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT (127.0.0.1 for the host)
//              bound host          KV_HOST; else the address DMLC_NODE_HOST / DMLC_INTERFACE
//                                  name; else 127.0.0.1 when the scheduler is on loopback, and
//                                  0.0.0.0 (every interface) when it is not
//              advertised host     common/advertise.h's choice for the bound host
//              rank                KV_RANK / DMLC_SERVER_ID
//              trace file          KV_TRACE_FILE
//   scheduler  bound host          KV_HOST; else DMLC_PS_ROOT_URI (the address the job reaches
//                                  it at); else 127.0.0.1
//              advertised host     DMLC_PS_ROOT_URI; else common/advertise.h's choice
//              port                DMLC_PS_ROOT_PORT; else 0 (the OS chooses)
//              servers, workers    DMLC_NUM_SERVER, DMLC_NUM_WORKER; else 1
//              replicas, elastic   KV_REPLICAS, KV_ELASTIC
//   both       security            KV_SECRET_FILE, KV_TLS_*, KV_INSECURE (common/daemon_security.h)
// Everything else (updaters, limits, timeouts) has no environment variable: it stays as the
// options' defaults, or as the flags set it afterwards.
#ifndef KVSTORE_SERVER_DAEMON_OPTIONS_H_
#define KVSTORE_SERVER_DAEMON_OPTIONS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/daemon_security.h"
#include "common/environment.h"
#include "server/grpc/kvserver_daemon.h"
#include "server/scheduler/grpc/scheduler_daemon.h"

namespace kvstore {

// DaemonCommandLine: what a daemon's command line gave; an empty string or -1 (0 for the
// counts) means "not given": the environment decides.
struct DaemonCommandLine {
  std::string host;
  std::string advertise_host;
  int port = -1;
  // kvserver: the scheduler's "host:port", and the requested rank; or, instead of the address,
  // etcd's endpoints and the job's name there (its leading scheduler's address).
  std::string scheduler;
  int rank = -1;
  std::string etcd;
  std::string job;
  // scheduler: the job's size, and its shape.
  int num_servers = 0;
  int num_workers = 0;
  int replicas = 0;
  bool elastic = false;
  SecuritySettings security;
};

// KVServerOptionsFrom returns a kvserver's options for `env` and `given`. InvalidArgument when
// no scheduler address is known; ChooseAdvertiseHost's and ResolveSecurity's errors.
absl::StatusOr<KVServerOptions> KVServerOptionsFrom(const JobEnvironment& env,
                                                    const DaemonCommandLine& given);

// SchedulerOptionsFrom returns a scheduler's options for `env` and `given`; errors as
// KVServerOptionsFrom's.
absl::StatusOr<SchedulerDaemonOptions> SchedulerOptionsFrom(const JobEnvironment& env,
                                                            const DaemonCommandLine& given);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_DAEMON_OPTIONS_H_
