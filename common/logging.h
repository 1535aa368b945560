// Logging setup for the KVStore binaries, on spdlog.
//
// Binaries call InitLogging once from main(); libraries log through spdlog's default logger and
// never configure it.
#ifndef KVSTORE_COMMON_LOGGING_H_
#define KVSTORE_COMMON_LOGGING_H_

#include <string>

#include "absl/status/status.h"

namespace kvstore {

struct LogOptions {
  // Shown in every line, e.g. "kvserver[1]".
  std::string name = "kvstore";
  // One of trace, debug, info, warn, error, critical, off.
  std::string level = "info";
};

// InitLogging makes spdlog's default logger write to stderr as
// "[2026-01-01 12:00:00.000] [name] [info] message". InvalidArgument for an unknown level.
absl::Status InitLogging(const LogOptions& options);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_LOGGING_H_
