// JobEnvironment: the one place where launch environment variables are read.
//
// Launchers (MXNet's tools/launch.py, BytePS's, this project's deploy/launch.py, Slurm and
// Kubernetes scripts) describe a job through environment variables. ReadJobEnvironment maps
// both MXNet's names and the project's own onto one struct; binaries and the SDK's
// DistOptions::FromEnvironment() call it once and no library reads the environment elsewhere.
//
//   project name        MXNet / ps-lite name     meaning
//   KV_ROLE             DMLC_ROLE                scheduler, server or worker
//   KV_SCHEDULER_HOST   DMLC_PS_ROOT_URI         the scheduler's host
//   KV_SCHEDULER_PORT   DMLC_PS_ROOT_PORT        the scheduler's port
//   KV_NUM_SERVERS      DMLC_NUM_SERVER          servers in the job
//   KV_NUM_WORKERS      DMLC_NUM_WORKER          workers in the job (a worker also reads
//                                                torchrun's WORLD_SIZE, last)
//   KV_RANK             DMLC_SERVER_ID / DMLC_WORKER_ID   requested rank of this node (a
//                                                worker also reads torchrun's RANK, last)
//   KV_SECRET_FILE      -                        the job secret's file (common/job_auth.h)
//   KV_TLS_CA           -                        TLS: the job's CA certificate (PEM file)
//   KV_TLS_CERT         -                        TLS: this node's certificate (PEM file)
//   KV_TLS_KEY          -                        TLS: this node's private key (PEM file)
//   KV_NODE_HOST        DMLC_NODE_HOST           the address this node advertises
//   KV_INTERFACE        DMLC_INTERFACE           advertise this network interface's address
//   KV_HOST             -                        the address a daemon run by the SDK binds
//   KV_INSECURE         -                        "1": a daemon run by the SDK may run without a
//                                                secret or TLS off loopback (--insecure)
//   KV_LOG_LEVEL        PS_VERBOSE               log level: trace, debug, info, warn, error,
//                                                off; PS_VERBOSE=1 is debug, 2 trace, 0 info
//   KV_TRACE_FILE       -                        write a Chrome trace of this node's operations
//                                                to this file (docs/operations.md)
//   KV_METRICS_PORT     -                        a worker serves its metrics on this port
//   KV_ELASTIC          -                        "1": the scheduler runs an elastic job (a
//                                                worker that dies or fails leaves it and the
//                                                others go on; docs/reliability.md)
//   KV_REPLICAS         -                        copies of each shard, 1 or 2: the scheduler's
//                                                --replicas when the SDK runs it
//   KV_LOCAL            -                        "0": a worker reaches the kvservers on its
//                                                host over TCP too (default 1: shared memory)
//
// The project's name wins when both are set.
#ifndef KVSTORE_COMMON_ENVIRONMENT_H_
#define KVSTORE_COMMON_ENVIRONMENT_H_

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kvstore {

struct JobEnvironment {
  std::optional<std::string> role;
  std::optional<std::string> scheduler_host;
  std::optional<int> scheduler_port;
  std::optional<int> num_servers;
  std::optional<int> num_workers;
  std::optional<int> rank;
  std::optional<std::string> secret_file;
  std::optional<std::string> tls_ca;
  std::optional<std::string> tls_cert;
  std::optional<std::string> tls_key;
  std::optional<std::string> node_host;
  std::optional<std::string> interface;
  std::optional<std::string> bind_host;
  bool insecure = false;
  // One of trace, debug, info, warn, error, off (PS_VERBOSE mapped onto them).
  std::optional<std::string> log_level;
  std::optional<std::string> trace_file;
  std::optional<int> metrics_port;
  // KV_ELASTIC: whether the scheduler runs an elastic job (its --elastic also makes it one).
  std::optional<bool> elastic;
  // KV_LOCAL: whether a worker reaches the kvservers on its host through shared memory
  // (DistOptions::local_transport; default 1).
  std::optional<bool> local_transport;
  // KV_REPLICAS: copies of each shard (1 or 2), for a scheduler the SDK runs (its --replicas
  // otherwise).
  std::optional<int> replicas;
  // KV_ETCD_ENDPOINTS and KV_JOB: find the job's scheduler through etcd (its leader, among a
  // standby or two; server/scheduler/scheduler_election.h) instead of at one address.
  std::optional<std::string> etcd_endpoints;
  std::optional<std::string> job;
};

// Getenv returns the value of a variable, or nullptr when it is unset.
using Getenv = std::function<const char*(const char* name)>;

// ReadJobEnvironment reads the variables above through `getenv` (the process environment when
// omitted). InvalidArgument naming the variable and its value when a number does not parse, a
// port is outside 1..65535 or a role is unknown.
absl::StatusOr<JobEnvironment> ReadJobEnvironment(const Getenv& getenv = nullptr);

// SetEnvironmentVariables sets each variable in this process's environment (MXNet's
// KVStore::InitPSEnv), replacing values already set, before any store is created. Not
// thread-safe with respect to other readers of the environment. InvalidArgument naming the
// variable when a name is empty or contains '='; nothing is set then.
absl::Status SetEnvironmentVariables(
    const std::vector<std::pair<std::string, std::string>>& variables);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_ENVIRONMENT_H_
