// The flags both daemons share, defined once: --metrics_port and --log_level (the kvserver and
// the scheduler; `--help` lists them beside each program's own, common/flags_usage.h).
#ifndef KVSTORE_COMMON_DAEMON_FLAGS_H_
#define KVSTORE_COMMON_DAEMON_FLAGS_H_

#include <string>

namespace kvstore {

// MetricsPortFlag returns --metrics_port: the port Prometheus metrics are served on; 0: a port
// the OS chooses; -1 (the default): none.
int MetricsPortFlag();

// LogLevelFlag returns --log_level: trace, debug, info, warn, error or off; empty (the default):
// KV_LOG_LEVEL, else PS_VERBOSE, else info (common/logging.h ChooseLogLevel).
std::string LogLevelFlag();

}  // namespace kvstore

#endif  // KVSTORE_COMMON_DAEMON_FLAGS_H_
