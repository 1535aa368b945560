// RunRoleDaemon: a program of any role becomes the job's scheduler or one of its kvservers, as
// MXNet's launcher expects (one command for every role, DMLC_ROLE decides). The SDK's
// KVStore::RunServer calls it in processes started with DMLC_ROLE=server or scheduler.
//
// Everything comes from the launch environment (common/environment.h), through the same mapping
// the kvserver and scheduler programs use when no flag says otherwise
// (server/daemon_options.h): one environment gives the same daemon either way. Both need the
// job secret (KV_SECRET_FILE) and, off loopback, TLS (KV_TLS_*), unless KV_INSECURE=1 - the
// same rule as the daemons' --insecure (docs/security.md).
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
