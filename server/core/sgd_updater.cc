#include "server/core/sgd_updater.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/core/optimizer.h"

namespace kvstore {

absl::StatusOr<SgdConfig> ParseSgdConfig(absl::string_view config) {
  SgdConfig parsed;
  for (absl::string_view field :
       absl::StrSplit(config, absl::ByAnyChar(" ,"), absl::SkipWhitespace())) {
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(field, '=');
    double value;
    if (!absl::SimpleAtod(kv.second, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sgd config field \"", field, "\" is not name=number"));
    }
    if (kv.first == "lr") {
      parsed.lr = value;
    } else if (kv.first == "momentum") {
      parsed.momentum = value;
    } else if (kv.first == "wd") {
      parsed.wd = value;
    } else if (kv.first == "rescale_grad") {
      parsed.rescale_grad = value;
    } else if (kv.first == "clip_gradient") {
      parsed.clip_gradient = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "sgd config has no field \"", kv.first,
          "\" (known: lr, momentum, wd, rescale_grad, clip_gradient)"));
    }
  }
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
