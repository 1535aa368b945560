// Optimizers as updaters: MXNet's optimizers, run where the values live (the servers of a
// distributed store, or the in-process store).
//
// MakeOptimizer returns an Updater that applies the optimizer of an OptimizerConfig
// (common/optimizer_config.h; the formulas are in docs/optimizers.md) to each pushed gradient:
// `stored` is the weight, `received` the (summed) gradient. State (momentum, moments, ...) is
// kept per (key, first element) - a kvserver updates big values chunk by chunk - and created
// as zeros at the first update; so is the update count t of bias corrections, which starts at
// 1. The learning-rate schedule sees num_update, the largest count of any key.
//
// dtypes: float32 and float64 weights are updated in their own precision with state of that
// type; float16 and bfloat16 weights through a float32 master copy with float32 state (MXNet's
// multi_precision): the stored weight is the master copy rounded. Integer values are refused
// with InvalidArgument naming the key, before anything changes.
//
// Deviations from MXNet, for a sharded server (docs/optimizers.md):
// - Nadam's momentum schedule is kept per key, not one product over every update of every key.
// - LAMB and LARS norms are those of the part of the value a call updates: the whole value in
//   an in-process store, a server's chunk of a big value in a distributed one (as MXNet's
//   servers apply optimizers to the slices of big arrays).
// - `test` is MXNet 1.x's test optimizer: w += rescale_grad * g.
//
// Kernels are element-wise loops the compiler vectorises (-O3, -fno-math-errno); values of at
// least 512 Ki elements are split over the machine's cores.
#ifndef KVSTORE_COMMON_STORE_OPTIMIZER_H_
#define KVSTORE_COMMON_STORE_OPTIMIZER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/optimizer_config.h"
#include "common/store/updater.h"

namespace kvstore {

// MakeOptimizer validates `config` (ValidateOptimizerConfig) and returns its updater, named
// after the optimizer.
absl::StatusOr<std::unique_ptr<Updater>> MakeOptimizer(const OptimizerConfig& config);

// ParseOptimizerText reads the text form "learning_rate=0.01 beta1=0.9 wd=1e-4" (blanks or
// commas between fields; `lr` is accepted for learning_rate; bools as true/false/1/0) of a
// configuration of optimizer `name`. Schedules are typed-only (SetOptimizer). InvalidArgument
// naming the field otherwise.
absl::StatusOr<OptimizerConfig> ParseOptimizerText(absl::string_view name, absl::string_view text);

// RegisterOptimizers adds every optimizer not yet in `registry` under its name, configured by
// ParseOptimizerText: `kvserver --updater=adam --updater_config="learning_rate=0.01"`.
absl::Status RegisterOptimizers(UpdaterRegistry* registry);

// ScheduledLearningRate returns the learning rate at update `num_update` (>= 1) for a base rate
// `base_lr` and `schedule` (the base rate itself without a schedule).
double ScheduledLearningRate(const LrScheduleConfig& schedule, double base_lr, int64_t num_update);

// CheckKeepsState returns FailedPrecondition naming both when `config` asks to keep the state
// of the running updater (keep_state) and that updater, named `running`, is another one; OK
// otherwise.
absl::Status CheckKeepsState(const OptimizerConfig& config, absl::string_view running);

// DefaultLearningRate returns MXNet's default learning rate of optimizer `name`.
double DefaultLearningRate(absl::string_view name);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_STORE_OPTIMIZER_H_
