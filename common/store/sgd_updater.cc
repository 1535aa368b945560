#include "common/store/sgd_updater.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/key_value_config.h"
#include "common/status_macros.h"
#include "common/store/optimizer.h"

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
  // As MXNet, no range is checked (a negative lr or a momentum of 1 are legal); a value that
  // cannot give a number is refused, naming the field.
  for (const auto& [field, value] : {std::pair<const char*, double>{"lr", parsed.lr},
                                     {"momentum", parsed.momentum},
                                     {"wd", parsed.wd},
                                     {"rescale_grad", parsed.rescale_grad},
                                     {"clip_gradient", parsed.clip_gradient}}) {
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sgd config: ", field, " must be finite, got ", value));
    }
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
