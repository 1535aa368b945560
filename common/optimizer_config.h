// OptimizerConfig: which optimizer a store's updater runs, with its hyper-parameters - typed
// fields, never code (MXNet pickles an optimizer object and unpickles it on the servers).
//
// The formulas are MXNet's (python/mxnet/optimizer/*.py) and are written out in
// docs/optimizers.md; common/store/optimizer.h implements them. Hyper-parameters keep MXNet's
// names and defaults; a field that the chosen optimizer does not take is refused.
#ifndef KVSTORE_COMMON_OPTIMIZER_CONFIG_H_
#define KVSTORE_COMMON_OPTIMIZER_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvstore {

// LrScheduleConfig: MXNet's lr_scheduler, applied to the optimizer's learning rate (its
// base_lr) as a function of num_update, the largest update count of any key (1 at the first
// update).
struct LrScheduleConfig {
  // "" (none), "factor", "multifactor", "poly" or "cosine".
  std::string type;
  int64_t step = 1;              // factor: decay every `step` updates.
  std::vector<int64_t> steps;    // multifactor: decay after each of these (increasing) updates.
  double factor = 1.0;           // factor, multifactor.
  double stop_factor_lr = 1e-8;  // factor: lower bound.
  int64_t max_update = 0;        // poly, cosine: the update at which final_lr is reached.
  double final_lr = 0.0;         // poly, cosine.
  double pwr = 2.0;              // poly.
  // Warm-up (every type): during the first warmup_steps updates the rate goes from
  // warmup_begin_lr towards base_lr ("linear") or stays at warmup_begin_lr ("constant").
  int64_t warmup_steps = 0;
  double warmup_begin_lr = 0.0;
  std::string warmup_mode = "linear";
};

struct OptimizerConfig {
  // "sgd", "nag", "adam", "adamw", "adagrad", "rmsprop", "adadelta", "adamax", "nadam", "ftrl",
  // "signum", "lamb", "lars" or "test"; or PyTorch's forms of three of them, "torch_sgd",
  // "torch_adam" and "torch_adamw" (torch.optim's formulas, docs/optimizers.md), which
  // kvstore.torch maps a torch optimizer to when it runs on the servers.
  std::string name = "sgd";
  // Unset: the optimizer's MXNet default (e.g. 0.1 for sgd, 0.001 for adam).
  std::optional<double> learning_rate;
  double wd = 0.0;
  double rescale_grad = 1.0;
  // Gradients are clipped to [-clip_gradient, clip_gradient] after rescaling when positive.
  double clip_gradient = -1.0;
  // Hyper-parameters by MXNet's names; unset ones take the optimizer's defaults.
  std::optional<double> momentum;      // sgd, nag, rmsprop (centered), signum, lars
  std::optional<double> beta1;         // adam, adamw, adamax, nadam, lamb
  std::optional<double> beta2;         // adam, adamw, adamax, nadam, lamb
  std::optional<double> epsilon;       // adam, adamw, adagrad, rmsprop, adadelta, nadam, lamb, lars
  std::optional<double> rho;           // rmsprop, adadelta
  std::optional<bool> centered;        // rmsprop
  std::optional<double> clip_weights;  // rmsprop
  std::optional<double> schedule_decay;  // nadam
  std::optional<double> lamda1;          // ftrl
  std::optional<double> beta;            // ftrl
  std::optional<double> wd_lh;           // signum
  std::optional<double> eta;             // lars
  std::optional<double> lower_bound;     // lamb
  std::optional<double> upper_bound;     // lamb
  std::optional<bool> bias_correction;   // lamb; adamw's correct_bias
  std::optional<bool> nesterov;          // torch_sgd
  // float16 / bfloat16 weights are always updated through a float32 master copy with float32
  // state (MXNet's multi_precision); the flag is accepted for compatibility.
  bool multi_precision = true;
  LrScheduleConfig lr_scheduler;

  // Per-key multipliers (MXNet's set_lr_mult / set_wd_mult), by the key's text (a string key
  // as it is, an int key in decimal): a key's learning rate is the scheduled rate times its
  // lr_mult, its wd the wd times its wd_mult; 1 for keys not listed.
  std::map<std::string, double> lr_mult;
  std::map<std::string, double> wd_mult;
  // When not empty, the optimizer updates only the string keys that begin with key_prefix;
  // every other key stores what it receives (ASSIGN: a dist_sync round's sum), as it would
  // without an optimizer. kvstore.torch keeps its broadcasts and sums beside the weights the
  // servers optimise this way.
  std::string key_prefix;
  // SetOptimizer with keep_state carries the running optimizer's state (moments, update
  // counts, master weights) over to the new hyper-parameters instead of starting afresh: a
  // learning-rate change in the middle of training. The running optimizer must have the same
  // name (FailedPrecondition naming both otherwise).
  bool keep_state = false;
};

// OptimizerNames lists the supported names.
const std::vector<std::string>& OptimizerNames();

// ValidateOptimizerConfig returns InvalidArgument naming the field when the name is unknown, a
// hyper-parameter is set that the optimizer does not take, or a value cannot give a number: a
// NaN or infinite value, beta1 or beta2 of exactly 1 (the bias correction divides by
// 1 - beta^t), a schedule without its steps, ... As MXNet, it checks no other range: a
// negative learning rate (MXNet's tests add with sgd and learning_rate=-1), a momentum of 1 or
// a negative epsilon are taken as given.
absl::Status ValidateOptimizerConfig(const OptimizerConfig& config);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_OPTIMIZER_CONFIG_H_
