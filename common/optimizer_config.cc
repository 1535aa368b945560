#include "common/optimizer_config.h"

#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvstore {
namespace {

// The hyper-parameters each optimizer takes (besides learning_rate, wd, rescale_grad,
// clip_gradient, multi_precision and lr_scheduler, which all take).
const std::map<std::string, std::set<std::string>>& Accepted() {
  static const auto* accepted = new std::map<std::string, std::set<std::string>>{
      {"sgd", {"momentum"}},
      {"nag", {"momentum"}},
      {"adam", {"beta1", "beta2", "epsilon"}},
      {"adamw", {"beta1", "beta2", "epsilon", "bias_correction"}},
      {"adagrad", {"epsilon"}},
      {"rmsprop", {"rho", "momentum", "epsilon", "centered", "clip_weights"}},
      {"adadelta", {"rho", "epsilon"}},
      {"adamax", {"beta1", "beta2"}},
      {"nadam", {"beta1", "beta2", "epsilon", "schedule_decay"}},
      {"ftrl", {"lamda1", "beta"}},
      {"signum", {"momentum", "wd_lh"}},
      {"lamb", {"beta1", "beta2", "epsilon", "lower_bound", "upper_bound", "bias_correction"}},
      {"lars", {"momentum", "eta", "epsilon"}},
      {"test", {}},
      {"torch_sgd", {"momentum", "nesterov"}},
      {"torch_adam", {"beta1", "beta2", "epsilon"}},
      {"torch_adamw", {"beta1", "beta2", "epsilon"}},
  };
  return *accepted;
}

bool Finite(double v) { return std::isfinite(v); }

}  // namespace

const std::vector<std::string>& OptimizerNames() {
  static const auto* names = [] {
    auto* list = new std::vector<std::string>;
    for (const auto& [name, fields] : Accepted()) list->push_back(name);
    return list;
  }();
  return *names;
}

namespace {

// ValidateSchedule checks a learning-rate schedule (none when its type is empty).
absl::Status ValidateSchedule(const LrScheduleConfig& s) {
  if (s.type.empty()) return absl::OkStatus();
  if (s.warmup_steps < 0 || (s.warmup_mode != "linear" && s.warmup_mode != "constant")) {
    return absl::InvalidArgumentError(
        "lr_scheduler: warmup_steps must be >= 0 and warmup_mode \"linear\" or \"constant\"");
  }
  if (s.type == "factor") {
    if (s.step < 1 || s.factor > 1 || s.factor <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("lr_scheduler factor: step must be >= 1 and factor in (0, 1], got step ",
                       s.step, " factor ", s.factor));
    }
  } else if (s.type == "multifactor") {
    if (s.steps.empty() || s.factor > 1 || s.factor <= 0) {
      return absl::InvalidArgumentError(
          "lr_scheduler multifactor: needs steps and a factor in (0, 1]");
    }
    for (size_t i = 0; i < s.steps.size(); ++i) {
      if (s.steps[i] < 1 || (i > 0 && s.steps[i] <= s.steps[i - 1])) {
        return absl::InvalidArgumentError(
            "lr_scheduler multifactor: steps must be increasing and >= 1");
      }
    }
  } else if (s.type == "poly" || s.type == "cosine") {
    if (s.max_update <= s.warmup_steps) {
      return absl::InvalidArgumentError(absl::StrCat("lr_scheduler ", s.type, ": max_update (",
                                                     s.max_update, ") must exceed warmup_steps (",
                                                     s.warmup_steps, ")"));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown lr_scheduler \"", s.type,
                                                   "\"; known: factor, multifactor, poly, cosine"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateOptimizerConfig(const OptimizerConfig& c) {
  auto it = Accepted().find(c.name);
  if (it == Accepted().end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown optimizer \"", c.name, "\"; known: ", absl::StrJoin(OptimizerNames(), ", ")));
  }
  const std::set<std::string>& accepted = it->second;
  // Which hyper-parameters are set, with their values (bools as 0/1).
  const std::vector<std::pair<const char*, std::optional<double>>> set = {
      {"momentum", c.momentum},
      {"beta1", c.beta1},
      {"beta2", c.beta2},
      {"epsilon", c.epsilon},
      {"rho", c.rho},
      {"centered", c.centered ? std::optional<double>(*c.centered) : std::nullopt},
      {"clip_weights", c.clip_weights},
      {"schedule_decay", c.schedule_decay},
      {"lamda1", c.lamda1},
      {"beta", c.beta},
      {"wd_lh", c.wd_lh},
      {"eta", c.eta},
      {"lower_bound", c.lower_bound},
      {"upper_bound", c.upper_bound},
      {"bias_correction",
       c.bias_correction ? std::optional<double>(*c.bias_correction) : std::nullopt},
      {"nesterov", c.nesterov ? std::optional<double>(*c.nesterov) : std::nullopt},
  };
  for (const auto& [field, value] : set) {
    if (!value.has_value()) continue;
    if (!accepted.count(field)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer ", c.name, " has no parameter ", field,
          " (it takes: ", accepted.empty() ? "none" : absl::StrJoin(accepted, ", "), ")"));
    }
    if (!Finite(*value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer ", c.name, ": ", field, " must be finite, got ", *value));
    }
  }
  // MXNet checks no range: a negative learning rate, a momentum of 1 or a negative epsilon
  // are legal (MXNet's own tests add with sgd and learning_rate=-1). Refused is only what
  // cannot give a number: a non-finite value (above and below), and a beta of exactly 1
  // where the update divides by 1 - beta^t.
  for (const auto& [field, value] : std::vector<std::pair<const char*, std::optional<double>>>{
           {"beta1", c.beta1}, {"beta2", c.beta2}}) {
    if (value && *value == 1.0) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer ", c.name, ": ", field,
                                                     " = 1 divides the bias correction by 1 - ",
                                                     field, "^t = 0; use a value other than 1"));
    }
  }
  if (c.learning_rate && !Finite(*c.learning_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer ", c.name, ": learning_rate must be finite, got ", *c.learning_rate));
  }
  for (const auto& [field, value] : std::vector<std::pair<const char*, double>>{
           {"wd", c.wd}, {"rescale_grad", c.rescale_grad}, {"clip_gradient", c.clip_gradient}}) {
    if (!Finite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer ", c.name, ": ", field, " must be finite, got ", value));
    }
  }
  for (const auto& [field, multipliers] :
       std::vector<std::pair<const char*, const std::map<std::string, double>*>>{
           {"lr_mult", &c.lr_mult}, {"wd_mult", &c.wd_mult}}) {
    for (const auto& [key, value] : *multipliers) {
      if (!Finite(value)) {
        return absl::InvalidArgumentError(absl::StrCat("optimizer ", c.name, ": ", field,
                                                       " of key \"", key, "\" must be finite, got ",
                                                       value));
      }
    }
  }
  if (c.nesterov.value_or(false) && c.momentum.value_or(0.0) == 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer ", c.name, ": nesterov needs a momentum other than 0"));
  }
  return ValidateSchedule(c.lr_scheduler);
}

}  // namespace kvstore
