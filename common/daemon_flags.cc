#include "common/daemon_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(int, metrics_port, -1,
          "Serve Prometheus metrics at http://HOST:PORT/metrics on this port (HOST: --host); 0: "
          "a port the OS chooses (logged); -1: no metrics.");
ABSL_FLAG(std::string, log_level, "",
          "trace, debug, info, warn, error or off; empty: KV_LOG_LEVEL, else PS_VERBOSE (1: "
          "debug, 2: trace), else info.");

namespace kvstore {

int MetricsPortFlag() { return absl::GetFlag(FLAGS_metrics_port); }
std::string LogLevelFlag() { return absl::GetFlag(FLAGS_log_level); }

}  // namespace kvstore
