// Logging setup for the KVStore binaries and the SDK, on spdlog.
//
// Every line reads "[2026-01-01T12:00:00.000Z] [kvserver 1] [info] message": a UTC timestamp,
// the node (role, and rank once the scheduler has assigned it), the level.
//
// Binaries call InitLogging once from main() and SetLogNode when their rank is known; their
// libraries log through spdlog's default logger and never configure it. The SDK, which runs
// inside a host program whose logging it must not take over, logs through its own named
// logger, SdkLogger() ("kvstore", registered with spdlog): the host silences or redirects it
// with spdlog::get("kvstore")->set_level(...) or by replacing its sinks.
#ifndef KVSTORE_COMMON_LOGGING_H_
#define KVSTORE_COMMON_LOGGING_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "spdlog/logger.h"

namespace kvstore {

struct LogOptions {
  // Shown in every line, e.g. "kvserver"; SetLogNode adds the rank.
  std::string name = "kvstore";
  // One of trace, debug, info, warn, error, critical, off.
  std::string level = "info";
};

// InitLogging makes spdlog's default logger write to stderr in the format above.
// InvalidArgument for an unknown level.
absl::Status InitLogging(const LogOptions& options);

// SetLogNode changes the node every later line of the default logger names (e.g. "kvserver
// 1"). Thread-safe.
void SetLogNode(const std::string& node);

// ChooseLogLevel returns the level to log at: `flag` when set (not empty), else the launch
// environment's (KV_LOG_LEVEL, or PS_VERBOSE mapped: JobEnvironment::log_level), else "info".
std::string ChooseLogLevel(const std::string& flag, const std::optional<std::string>& env);

// kSdkLoggerName is the name of the SDK's logger in spdlog's registry.
inline constexpr char kSdkLoggerName[] = "kvstore";

// SdkLogger returns the SDK's logger: the one registered under kSdkLoggerName (the host
// program may register its own first), else a new one writing to stderr in the format above
// at info. Thread-safe.
std::shared_ptr<spdlog::logger> SdkLogger();

// SetSdkLogNode names the worker in the SDK logger's lines ("worker 3"), unless the host
// program registered the logger itself.
void SetSdkLogNode(const std::string& node);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_LOGGING_H_
