#include "common/environment.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

// Lookup returns the first set variable among `names` with the name it came from.
std::optional<std::pair<std::string, std::string>> Lookup(
    const Getenv& getenv, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* value = getenv(name);
    if (value != nullptr && value[0] != '\0') return std::make_pair(std::string(name), value);
  }
  return std::nullopt;
}

absl::Status ReadInt(const Getenv& getenv, std::initializer_list<const char*> names, int min,
                     int max, std::optional<int>* out) {
  const auto found = Lookup(getenv, names);
  if (!found) return absl::OkStatus();
  int value;
  if (!absl::SimpleAtoi(found->second, &value) || value < min || value > max) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", found->first, "=\"",
                                                   found->second, "\" is not an integer in ", min,
                                                   "..", max));
  }
  *out = value;
  return absl::OkStatus();
}

}  // namespace

namespace {

// ReadNumbers reads the scheduler's port, the job's size, this node's rank (a worker started by
// torchrun has RANK and WORLD_SIZE instead of MXNet's names), the replicas and the metrics port.
absl::Status ReadNumbers(const Getenv& getenv, JobEnvironment* env) {
  constexpr int kMaxCount = 1 << 16;
  RETURN_IF_ERROR(
      ReadInt(getenv, {"KV_SCHEDULER_PORT", "DMLC_PS_ROOT_PORT"}, 1, 65535, &env->scheduler_port));
  RETURN_IF_ERROR(
      ReadInt(getenv, {"KV_NUM_SERVERS", "DMLC_NUM_SERVER"}, 1, kMaxCount, &env->num_servers));
  const bool worker = !env->role.has_value() || *env->role == "worker";
  if (worker) {
    RETURN_IF_ERROR(ReadInt(getenv, {"KV_NUM_WORKERS", "DMLC_NUM_WORKER", "WORLD_SIZE"}, 1,
                            kMaxCount, &env->num_workers));
    RETURN_IF_ERROR(
        ReadInt(getenv, {"KV_RANK", "DMLC_WORKER_ID", "RANK"}, 0, kMaxCount, &env->rank));
  } else {
    RETURN_IF_ERROR(
        ReadInt(getenv, {"KV_NUM_WORKERS", "DMLC_NUM_WORKER"}, 1, kMaxCount, &env->num_workers));
    RETURN_IF_ERROR(
        ReadInt(getenv, {"KV_RANK", *env->role == "server" ? "DMLC_SERVER_ID" : "DMLC_WORKER_ID"},
                0, kMaxCount, &env->rank));
  }
  RETURN_IF_ERROR(ReadInt(getenv, {"KV_REPLICAS"}, 1, 2, &env->replicas));
  return ReadInt(getenv, {"KV_METRICS_PORT"}, 0, 65535, &env->metrics_port);
}

// ReadLogLevel reads KV_LOG_LEVEL, or ps-lite's PS_VERBOSE (0 quiet, 1 connection and control
// messages, 2 every message).
absl::Status ReadLogLevel(const Getenv& getenv, JobEnvironment* env) {
  if (const auto level = Lookup(getenv, {"KV_LOG_LEVEL"})) {
    static constexpr const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
    if (std::find(std::begin(kLevels), std::end(kLevels), level->second) == std::end(kLevels)) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable KV_LOG_LEVEL=\"", level->second,
                       "\" is not trace, debug, info, warn, error or off"));
    }
    env->log_level = level->second;
    return absl::OkStatus();
  }
  const auto verbose = Lookup(getenv, {"PS_VERBOSE"});
  if (!verbose.has_value()) return absl::OkStatus();
  static constexpr std::pair<const char*, const char*> kVerbose[] = {
      {"0", "info"}, {"1", "debug"}, {"2", "trace"}};
  for (const auto& [value, level] : kVerbose) {
    if (verbose->second == value) {
      env->log_level = level;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("environment variable PS_VERBOSE=\"", verbose->second, "\" is not 0, 1 or 2"));
}

// ReadSwitch reads a variable that is 0 or 1 into `*out` (left as it is when unset).
template <typename Out>
absl::Status ReadSwitch(const Getenv& getenv, const char* name, Out* out) {
  const auto value = Lookup(getenv, {name});
  if (!value.has_value()) return absl::OkStatus();
  if (value->second != "0" && value->second != "1") {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "=\"", value->second, "\" is not 0 or 1"));
  }
  *out = value->second == "1";
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobEnvironment> ReadJobEnvironment(const Getenv& getenv_or_null) {
  const Getenv getenv =
      getenv_or_null ? getenv_or_null : [](const char* name) { return std::getenv(name); };
  JobEnvironment env;
  if (const auto role = Lookup(getenv, {"KV_ROLE", "DMLC_ROLE"})) {
    if (role->second != "scheduler" && role->second != "server" && role->second != "worker") {
      return absl::InvalidArgumentError(absl::StrCat("environment variable ", role->first, "=\"",
                                                     role->second,
                                                     "\" is not scheduler, server or worker"));
    }
    env.role = role->second;
  }
  if (const auto host = Lookup(getenv, {"KV_SCHEDULER_HOST", "DMLC_PS_ROOT_URI"})) {
    env.scheduler_host = host->second;
  }
  RETURN_IF_ERROR(ReadNumbers(getenv, &env));
  RETURN_IF_ERROR(ReadLogLevel(getenv, &env));
  if (const auto value = Lookup(getenv, {"KV_NODE_HOST", "DMLC_NODE_HOST"})) {
    env.node_host = value->second;
  }
  if (const auto value = Lookup(getenv, {"KV_INTERFACE", "DMLC_INTERFACE"})) {
    env.interface = value->second;
  }
  if (const auto value = Lookup(getenv, {"KV_HOST"})) env.bind_host = value->second;
  RETURN_IF_ERROR(ReadSwitch(getenv, "KV_INSECURE", &env.insecure));
  RETURN_IF_ERROR(ReadSwitch(getenv, "KV_ELASTIC", &env.elastic));
  RETURN_IF_ERROR(ReadSwitch(getenv, "KV_LOCAL", &env.local_transport));
  const std::pair<const char*, std::optional<std::string>*> paths[] = {
      {"KV_SECRET_FILE", &env.secret_file},
      {"KV_TLS_CA", &env.tls_ca},
      {"KV_TLS_CERT", &env.tls_cert},
      {"KV_TLS_KEY", &env.tls_key},
      {"KV_TRACE_FILE", &env.trace_file},
      {"KV_ETCD_ENDPOINTS", &env.etcd_endpoints},
      {"KV_JOB", &env.job}};
  for (const auto& [name, field] : paths) {
    if (const auto value = Lookup(getenv, {name})) *field = value->second;
  }
  return env;
}

absl::Status SetEnvironmentVariables(
    const std::vector<std::pair<std::string, std::string>>& variables) {
  for (const auto& [name, value] : variables) {
    if (name.empty() || name.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", name, "\" is not an environment variable name"));
    }
  }
  for (const auto& [name, value] : variables) {
    if (setenv(name.c_str(), value.c_str(), /*overwrite=*/1) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot set ", name));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvstore
