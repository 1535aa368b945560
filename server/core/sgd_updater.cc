#include "server/core/sgd_updater.h"

#include "absl/strings/str_cat.h"
#include "common/key_value_config.h"
#include "common/status_macros.h"
#include "server/core/optimizer.h"

namespace kvstore {

absl::StatusOr<SgdConfig> ParseSgdConfig(absl::string_view config) {
  SgdConfig parsed;
  RETURN_IF_ERROR(KeyValueFields("sgd config")
                      .Number("lr", &parsed.lr)
                      .Number("momentum", &parsed.momentum)
                      .Number("wd", &parsed.wd)
                      .Number("rescale_grad", &parsed.rescale_grad)
                      .Number("clip_gradient", &parsed.clip_gradient)
                      .Parse(config));
  if (parsed.momentum < 0 || parsed.momentum >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sgd momentum must be in [0, 1), got ", parsed.momentum));
  }
  return parsed;
}

absl::StatusOr<std::unique_ptr<Updater>> MakeSgdUpdater(const SgdConfig& config) {
  OptimizerConfig optimizer;
  optimizer.name = "sgd";
  optimizer.learning_rate = config.lr;
  optimizer.momentum = config.momentum;
  optimizer.wd = config.wd;
  optimizer.rescale_grad = config.rescale_grad;
  optimizer.clip_gradient = config.clip_gradient;
  return MakeOptimizer(optimizer);
}

absl::Status RegisterSgdUpdater(UpdaterRegistry* registry) {
  return registry->Register(
      "sgd", [](absl::string_view config) -> absl::StatusOr<std::unique_ptr<Updater>> {
        absl::StatusOr<SgdConfig> parsed = ParseSgdConfig(config);
        if (!parsed.ok()) return parsed.status();
        return MakeSgdUpdater(*parsed);
      });
}

}  // namespace kvstore
