#include "common/logging.h"

#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace kvstore {
namespace {

std::string Pattern(const std::string& node) {
  // '%' in a node name would start a flag.
  return absl::StrCat("[%Y-%m-%dT%H:%M:%S.%eZ] [", absl::StrReplaceAll(node, {{"%", "%%"}}),
                      "] [%l] %v");
}

// Whether SdkLogger created the SDK's logger (and may therefore change its pattern).
std::mutex sdk_mu;
bool sdk_logger_ours = false;

}  // namespace

absl::Status InitLogging(const LogOptions& options) {
  const spdlog::level::level_enum level = spdlog::level::from_str(options.level);
  if (level == spdlog::level::off && options.level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown log level \"", options.level,
                     "\"; expected trace, debug, info, warn, error, critical or off"));
  }
  auto logger = std::make_shared<spdlog::logger>(options.name,
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern(Pattern(options.name), spdlog::pattern_time_type::utc);
  logger->set_level(level);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

void SetLogNode(const std::string& node) {
  spdlog::default_logger()->set_pattern(Pattern(node), spdlog::pattern_time_type::utc);
}

std::string ChooseLogLevel(const std::string& flag, const std::optional<std::string>& env) {
  if (!flag.empty()) return flag;
  return env.value_or("info");
}

std::shared_ptr<spdlog::logger> SdkLogger() {
  std::lock_guard<std::mutex> lock(sdk_mu);
  if (auto existing = spdlog::get(kSdkLoggerName)) return existing;
  auto logger = std::make_shared<spdlog::logger>(kSdkLoggerName,
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern(Pattern("worker"), spdlog::pattern_time_type::utc);
  logger->set_level(spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  try {
    spdlog::register_logger(logger);
  } catch (const spdlog::spdlog_ex&) {
    return spdlog::get(kSdkLoggerName);  // The host program registered one meanwhile.
  }
  sdk_logger_ours = true;
  return logger;
}

void SetSdkLogNode(const std::string& node) {
  std::shared_ptr<spdlog::logger> logger = SdkLogger();
  std::lock_guard<std::mutex> lock(sdk_mu);
  if (sdk_logger_ours) logger->set_pattern(Pattern(node), spdlog::pattern_time_type::utc);
}

}  // namespace kvstore
