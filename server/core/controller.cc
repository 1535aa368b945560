#include "server/core/controller.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/proto_convert.h"
#include "common/status_macros.h"
#include "server/core/optimizer.h"

namespace kvstore {

absl::StatusOr<std::string> Controller::Run(int head, absl::string_view body) {
  switch (head) {
    case kCommandSetUpdater: {
      body = absl::StripAsciiWhitespace(body);
      const size_t space = body.find(' ');
      const absl::string_view name = body.substr(0, space);
      const absl::string_view config =
          space == absl::string_view::npos ? absl::string_view() : body.substr(space + 1);
      ASSIGN_OR_RETURN(std::unique_ptr<Updater> updater, registry_->Create(name, config));
      engine_->SetUpdater(std::move(updater));
      return std::string(name);
    }
    case kCommandStats: {
      const ShardStore::Stats stats = engine_->stats();
      return absl::StrCat("keys=", stats.num_keys, " bytes=", stats.num_bytes,
                          " updater=", engine_->updater_name());
    }
    case kCommandPing:
      return absl::StrCat("server ", rank_, ": ", body);
    case kCommandSetOptimizer: {
      proto::OptimizerConfig config;
      if (!config.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
        return absl::InvalidArgumentError(
            "SetOptimizer: the body is not a serialized OptimizerConfig");
      }
      ASSIGN_OR_RETURN(std::unique_ptr<Updater> optimizer,
                       MakeOptimizer(OptimizerConfigFromProto(config)));
      const std::string name(optimizer->name());
      engine_->SetUpdater(std::move(optimizer));
      return name;
    }
    default:
      if (head >= kFirstCustomCommand && custom_) return custom_(head, body);
      return absl::InvalidArgumentError(absl::StrCat(
          "no controller for command head ", head,
          " (built in: 0 set updater, 1 stats, 2 ping, 3 set optimizer; ",
          kFirstCustomCommand, " and up need a custom controller)"));
  }
}

}  // namespace kvstore
