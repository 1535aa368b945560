// RunRoleDaemon: a program of any role becomes the job's scheduler or one of its kvservers, as
// MXNet's launcher expects (one command for every role, DMLC_ROLE decides). The SDK's
// KVStore::RunServer calls it in processes started with DMLC_ROLE=server or scheduler.
//
// Everything comes from the launch environment (common/environment.h):
//   scheduler  binds KV_HOST, else DMLC_PS_ROOT_URI, on port DMLC_PS_ROOT_PORT; waits for
//              DMLC_NUM_SERVER servers and DMLC_NUM_WORKER workers (1 each when unset).
//   server     binds KV_HOST, else the address DMLC_NODE_HOST or DMLC_INTERFACE gives, else
//              127.0.0.1 when the scheduler is on loopback, else every interface (0.0.0.0); any
//              free port; advertises common/advertise.h's choice; rank DMLC_SERVER_ID when set.
// Both need the job secret (KV_SECRET_FILE) and, off loopback, TLS (KV_TLS_*), unless
// KV_INSECURE=1 - the same rule as the daemons' --insecure (docs/security.md).
#ifndef KVSTORE_SERVER_ROLE_DAEMON_H_
#define KVSTORE_SERVER_ROLE_DAEMON_H_

#include "absl/status/status.h"
#include "common/environment.h"
#include "server/core/controller.h"

namespace kvstore {

// RunRoleDaemon runs the daemon of `env.role` ("scheduler" or "server") until the job ends, and
// returns OK then - or when SIGTERM or SIGINT stopped it (one line is logged). `controller`
// (optional) serves command heads >= 16 on a server. Blocks. FailedPrecondition for a process
// whose role is a worker (or unset), or without a secret or TLS where one is needed;
// InvalidArgument for a missing scheduler port; the daemon's own errors otherwise (a job that
// did not assemble, a lost scheduler).
absl::Status RunRoleDaemon(const JobEnvironment& env, CustomController controller);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_ROLE_DAEMON_H_
