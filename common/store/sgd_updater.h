// The "sgd" updater: MXNet's SGD with momentum and weight decay, run on the servers.
//
// For each key, with g = rescale_grad * received (clipped to [-clip_gradient, clip_gradient]
// when clip_gradient > 0):
//   momentum == 0:  stored -= lr * (g + wd * stored)
//   otherwise:      mom = momentum * mom - lr * (g + wd * stored);  stored += mom
// which is MXNet's `sgd_update` / `sgd_mom_update`, run by the "sgd" optimizer of
// common/store/optimizer.h (state per key and chunk, created at the key's first update). This
// is the text form of the controller's set-updater command; SetOptimizer is the typed one.
// Configuration: "lr=0.1 momentum=0.9 wd=0.0001 rescale_grad=0.25 clip_gradient=0" (blanks or
// commas between the fields; every field optional; lr defaults to 0.01).
// Float types only: float32 and float64 are updated in their own precision, float16 and
// bfloat16 through float32; integer values are refused with InvalidArgument.
#ifndef KVSTORE_COMMON_STORE_SGD_UPDATER_H_
#define KVSTORE_COMMON_STORE_SGD_UPDATER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/store/updater.h"

namespace kvstore {

struct SgdConfig {
  double lr = 0.01;
  double momentum = 0.0;
  double wd = 0.0;
  double rescale_grad = 1.0;
  double clip_gradient = 0.0;
};

// ParseSgdConfig parses the configuration string; InvalidArgument naming the field on error.
absl::StatusOr<SgdConfig> ParseSgdConfig(absl::string_view config);

// MakeSgdUpdater returns the "sgd" optimizer of common/store/optimizer.h with these settings.
absl::StatusOr<std::unique_ptr<Updater>> MakeSgdUpdater(const SgdConfig& config);

// RegisterSgdUpdater adds "sgd" to `registry`.
absl::Status RegisterSgdUpdater(UpdaterRegistry* registry);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_STORE_SGD_UPDATER_H_
