// The kvserver program as a library: build a kvserver with your own updaters and controllers.
//
// //server:kvserver is `int main(int argc, char** argv) { return kvstore::KVServerMain(argc,
// argv); }`. A program of your own links //server:kvserver_lib and passes a customizer that
// registers C++ updaters (selectable with --updater=NAME or SendCommandToServers(0, "NAME
// CONFIG")) and a controller for command heads >= 16 - no code ever travels over the wire:
//
//   int main(int argc, char** argv) {
//     return kvstore::KVServerMain(argc, argv, [](kvstore::KVServerOptions* options) {
//       return options->registry.Register("clipped_sum", MakeClippedSumFactory());
//     });
//   }
//
// examples/custom_kvserver.cc is a complete one, run by tests/integration/cluster_test.
//
// Flags (all optional; unset ones come from the launch environment, DMLC_PS_ROOT_URI/PORT,
// DMLC_SERVER_ID or their KV_ names, see common/environment.h): --host, --advertise_host
// (docs/cluster.md), --port, --scheduler,
// --rank, --updater, --updater_config, --checkpoint_root, --restore, --register_timeout,
// --scheduler_lost_timeout, --serving_threads, --serving_poll, --join (one more server for a
// running job, docs/state.md), --local_socket_dir (the
// shared-memory path for workers on the same host, docs/colocated.md), --metrics_port (Prometheus
// metrics, docs/operations.md), --log_level (or KV_LOG_LEVEL, PS_VERBOSE); `--help` lists them
// with their defaults, `--version` prints the version. The process exits 0 when the job is
// over, or when SIGTERM / SIGINT stopped it; non-zero with a one-line reason otherwise.
#ifndef KVSTORE_SERVER_KVSERVER_LIB_H_
#define KVSTORE_SERVER_KVSERVER_LIB_H_

#include <functional>

#include "absl/status/status.h"
#include "server/daemon_options.h"
#include "server/grpc/kvserver_daemon.h"

namespace kvstore {

// KVServerCustomizer adjusts the options after the flags are read and before the server
// starts; an error stops the program with that message.
using KVServerCustomizer = std::function<absl::Status(KVServerOptions* options)>;

// KVServerCommandLineFromFlags returns what the flags gave of the settings the environment also
// decides (server/daemon_options.h); flags left at their defaults are not given.
DaemonCommandLine KVServerCommandLineFromFlags();

// KVServerMain parses the flags, starts a kvserver and returns the process exit code.
int KVServerMain(int argc, char** argv, const KVServerCustomizer& customize = nullptr);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_KVSERVER_LIB_H_
