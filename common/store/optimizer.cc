#include "common/store/optimizer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/half.h"
#include "common/key_value_config.h"
#include "common/status_macros.h"
#include "common/store/optimizer_steps.h"

namespace kvstore {
namespace {

using optimizer_internal::Hyper;
using optimizer_internal::PartState;
using optimizer_internal::StepFunctions;

constexpr double kPi = 3.14159265358979323846;

Hyper Resolve(const OptimizerConfig& c) {
  Hyper h;
  h.name = c.name;
  h.lr = c.learning_rate.value_or(DefaultLearningRate(c.name));
  h.wd = c.wd;
  h.rescale = c.rescale_grad;
  h.clip = c.clip_gradient;
  const std::string& n = c.name;
  h.momentum = c.momentum.value_or(n == "nag" || n == "rmsprop" || n == "signum" ? 0.9 : 0.0);
  h.beta1 = c.beta1.value_or(0.9);
  h.beta2 = c.beta2.value_or(0.999);
  double eps = 1e-8;
  if (n == "adamw" || n == "lamb" || n == "adagrad" || n == "adadelta") eps = 1e-6;
  h.epsilon = c.epsilon.value_or(eps);
  h.rho = c.rho.value_or(0.9);
  h.centered = c.centered.value_or(false);
  h.bias_correction = c.bias_correction.value_or(true);
  h.nesterov = c.nesterov.value_or(false);
  h.clip_weights = c.clip_weights.value_or(-1);
  h.schedule_decay = c.schedule_decay.value_or(0.004);
  h.lamda1 = c.lamda1.value_or(0.01);
  h.beta = c.beta.value_or(1.0);
  h.wd_lh = c.wd_lh.value_or(0.0);
  h.eta = c.eta.value_or(0.001);
  h.lower_bound = c.lower_bound;
  h.upper_bound = c.upper_bound;
  h.schedule = c.lr_scheduler;
  return h;
}

class Optimizer final : public Updater {
 public:
  // The step rule is chosen here, once (optimizer_steps.h).
  Optimizer(Hyper h, StepFunctions steps, const OptimizerConfig& config)
      : h_(std::move(h)),
        steps_(steps),
        lr_mult_(config.lr_mult),
        wd_mult_(config.wd_mult),
        key_prefix_(config.key_prefix) {}

  absl::Status Update(const Key& key, const Tensor& received, Tensor* stored) override {
    return UpdateAt(key, 0, received, stored);
  }

  absl::Status UpdateAt(const Key& key, int64_t offset, const Tensor& received,
                        Tensor* stored) override {
    if (!Optimizes(key)) {
      std::memcpy(stored->data(), received.data(), stored->byte_size());
      return absl::OkStatus();
    }
    if (!IsFloatingPoint(stored->dtype())) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer ", h_.name, " updates float values only; key ", key.Quoted(),
                       " holds ", DTypeName(stored->dtype())));
    }
    const int64_t n = stored->num_elements();
    PartState& state = State(key, offset);
    const int64_t t = ++state.count;
    int64_t seen = num_update_.load();
    while (t > seen && !num_update_.compare_exchange_weak(seen, t)) {
    }
    const std::string text = lr_mult_.empty() && wd_mult_.empty() ? std::string() : key.ToString();
    const double lr =
        ScheduledLearningRate(h_.schedule, h_.lr, std::max(t, seen)) * Multiplier(lr_mult_, text);
    std::optional<Hyper> scaled;  // h_ with the key's wd, when it has a wd_mult.
    if (const auto it = wd_mult_.find(text); it != wd_mult_.end()) {
      scaled = h_;
      scaled->wd *= it->second;
    }
    const Hyper& h = scaled ? *scaled : h_;
    const bool skip_lars = key.is_string() && (absl::EndsWith(key.str_key(), "gamma") ||
                                               absl::EndsWith(key.str_key(), "beta") ||
                                               absl::EndsWith(key.str_key(), "bias"));
    switch (stored->dtype()) {
      case DType::kFloat32:
        steps_.f32(h, &state, t, lr, skip_lars, received.data_as<const float>(),
                   stored->data_as<float>(), n);
        break;
      case DType::kFloat64:
        steps_.f64(h, &state, t, lr, skip_lars, received.data_as<const double>(),
                   stored->data_as<double>(), n);
        break;
      default: {
        // Half weights: the float32 master copy is updated and rounded into the stored value.
        if (state.master.size() != static_cast<size_t>(n)) {
          state.master.resize(n);
          for (int64_t i = 0; i < n; ++i) state.master[i] = stored->GetAsDouble(i);
        }
        std::vector<float> grad(n);
        const bool bf16 = stored->dtype() == DType::kBFloat16;
        const auto* g = received.data_as<const uint16_t>();
        for (int64_t i = 0; i < n; ++i) grad[i] = bf16 ? BFloat16ToFloat(g[i]) : HalfToFloat(g[i]);
        steps_.f32(h, &state, t, lr, skip_lars, grad.data(), state.master.data(), n);
        auto* w = stored->data_as<uint16_t>();
        for (int64_t i = 0; i < n; ++i) {
          w[i] = bf16 ? FloatToBFloat16(state.master[i]) : FloatToHalf(state.master[i]);
        }
      }
    }
    return absl::OkStatus();
  }

  absl::string_view name() const override { return h_.name; }

  UpdaterStateData SaveState() const override {
    UpdaterStateData out;
    out.optimizer = h_.name;
    out.num_update = num_update_.load();
    absl::MutexLock lock(&mu_);
    for (const auto& [part, state] : states_) {
      PartStateData data;
      data.key = part.first;
      data.offset = part.second;
      data.updates = state.count;
      data.m_schedule = state.m_schedule;
      const bool f64 = !state.d.a.empty() || !state.d.b.empty() || !state.d.c.empty();
      data.dtype = f64 ? DType::kFloat64 : DType::kFloat32;
      auto bytes = [](const auto& v) {
        return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(v[0]));
      };
      if (f64) {
        data.buffers = {bytes(state.d.a), bytes(state.d.b), bytes(state.d.c)};
      } else {
        data.buffers = {bytes(state.f.a), bytes(state.f.b), bytes(state.f.c)};
      }
      data.master = bytes(state.master);
      const size_t element = DTypeSize(data.dtype);
      size_t longest = state.master.size();
      for (const std::string& b : data.buffers) longest = std::max(longest, b.size() / element);
      data.count = static_cast<int64_t>(longest);
      out.parts.push_back(std::move(data));
    }
    return out;
  }

  absl::Status LoadState(const UpdaterStateData& state,
                         const std::function<bool(const PartStateData&)>& keep) override {
    if (state.optimizer != h_.name) {
      return absl::InvalidArgumentError(absl::StrCat("the saved state is of optimizer \"",
                                                     state.optimizer, "\" but the optimizer is \"",
                                                     h_.name, "\""));
    }
    absl::node_hash_map<std::pair<Key, int64_t>, PartState> loaded;
    for (const PartStateData& part : state.parts) {
      if (keep && !keep(part)) continue;
      if (part.dtype != DType::kFloat32 && part.dtype != DType::kFloat64) {
        return absl::InvalidArgumentError(absl::StrCat("saved state of key ", part.key.Quoted(),
                                                       " has buffers of ", DTypeName(part.dtype)));
      }
      const size_t element = DTypeSize(part.dtype);
      for (const std::string& b : part.buffers) {
        if (!b.empty() && b.size() != static_cast<size_t>(part.count) * element) {
          return absl::InvalidArgumentError(
              absl::StrCat("saved state of key ", part.key.Quoted(), " at element ", part.offset,
                           ": a buffer of ", b.size(), " bytes for ", part.count, " ",
                           DTypeName(part.dtype), " elements"));
        }
      }
      if (part.buffers.size() > 3 ||
          (!part.master.empty() && part.master.size() != static_cast<size_t>(part.count) * 4)) {
        return absl::InvalidArgumentError(
            absl::StrCat("saved state of key ", part.key.Quoted(), " at element ", part.offset,
                         " does not have the layout of optimizer state"));
      }
      PartState& s = loaded[{part.key, part.offset}];
      s.count = part.updates;
      s.m_schedule = part.m_schedule;
      auto fill = [&](auto* v, const std::string& b) {
        v->resize(b.size() / sizeof((*v)[0]));
        if (!b.empty()) std::memcpy(v->data(), b.data(), b.size());
      };
      for (size_t i = 0; i < part.buffers.size(); ++i) {
        if (part.dtype == DType::kFloat64) {
          fill(i == 0 ? &s.d.a : i == 1 ? &s.d.b : &s.d.c, part.buffers[i]);
        } else {
          fill(i == 0 ? &s.f.a : i == 1 ? &s.f.b : &s.f.c, part.buffers[i]);
        }
      }
      fill(&s.master, part.master);
    }
    absl::MutexLock lock(&mu_);
    states_ = std::move(loaded);
    num_update_.store(state.num_update);
    return absl::OkStatus();
  }

  // TakeState moves the state of a running optimizer of the same name (SetOptimizer with
  // keep_state); another updater's state through SaveState and LoadState.
  absl::Status TakeState(Updater* previous) override {
    auto* same = dynamic_cast<Optimizer*>(previous);
    if (same == nullptr || same->h_.name != h_.name) return Updater::TakeState(previous);
    absl::MutexLock theirs(&same->mu_);
    absl::MutexLock ours(&mu_);
    states_ = std::move(same->states_);
    same->states_.clear();
    num_update_.store(same->num_update_.load());
    return absl::OkStatus();
  }

 private:
  bool Optimizes(const Key& key) const {
    return key_prefix_.empty() || (key.is_string() && absl::StartsWith(key.str_key(), key_prefix_));
  }
  static double Multiplier(const std::map<std::string, double>& multipliers,
                           const std::string& text) {
    const auto it = multipliers.find(text);
    return it == multipliers.end() ? 1.0 : it->second;
  }

  // State returns the state of (key, offset); calls for different parts may run concurrently
  // (node_hash_map keeps each state where it is).
  PartState& State(const Key& key, int64_t offset) {
    absl::MutexLock lock(&mu_);
    return states_[{key, offset}];
  }

  const Hyper h_;
  const StepFunctions steps_;
  const std::map<std::string, double> lr_mult_, wd_mult_;
  const std::string key_prefix_;
  std::atomic<int64_t> num_update_{0};
  mutable absl::Mutex mu_;
  absl::node_hash_map<std::pair<Key, int64_t>, PartState> states_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::Status CheckKeepsState(const OptimizerConfig& config, absl::string_view running) {
  if (!config.keep_state || running == config.name) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("SetOptimizer with keep_state: the running updater is \"", running,
                   "\", not the optimizer \"", config.name, "\"; set it without keep_state first"));
}

double DefaultLearningRate(absl::string_view name) {
  if (name == "sgd" || name == "nag" || name == "ftrl" || name == "lars") return 0.1;
  if (name == "adam" || name == "adamw" || name == "rmsprop" || name == "nadam" || name == "lamb" ||
      name == "torch_adam" || name == "torch_adamw") {
    return 0.001;
  }
  if (name == "adamax") return 0.002;
  if (name == "adadelta") return 1.0;
  return 0.01;  // adagrad, signum, test
}

double ScheduledLearningRate(const LrScheduleConfig& s, double base_lr, int64_t num_update) {
  if (s.type.empty()) return base_lr;
  if (num_update < s.warmup_steps) {
    if (s.warmup_mode == "constant") return s.warmup_begin_lr;
    return s.warmup_begin_lr + (base_lr - s.warmup_begin_lr) * static_cast<double>(num_update) /
                                   static_cast<double>(s.warmup_steps);
  }
  if (s.type == "factor") {
    // MXNet multiplies once per `step` updates past the first `step`, clamping each time.
    double lr = base_lr;
    for (int64_t count = 0; num_update > count + s.step; count += s.step) {
      lr *= s.factor;
      if (lr < s.stop_factor_lr) lr = s.stop_factor_lr;
    }
    return lr;
  }
  if (s.type == "multifactor") {
    double lr = base_lr;
    for (int64_t step : s.steps) {
      if (num_update > step) lr *= s.factor;
    }
    return lr;
  }
  const int64_t u = std::min(num_update, s.max_update);
  const double progress =
      static_cast<double>(u - s.warmup_steps) / static_cast<double>(s.max_update - s.warmup_steps);
  if (s.type == "poly") {
    return s.final_lr + (base_lr - s.final_lr) * std::pow(1.0 - progress, s.pwr);
  }
  return s.final_lr + (base_lr - s.final_lr) * (1.0 + std::cos(kPi * progress)) / 2.0;
}

absl::StatusOr<OptimizerConfig> ParseOptimizerText(absl::string_view name, absl::string_view text) {
  OptimizerConfig c;
  c.name = std::string(name);
  KeyValueFields fields(absl::StrCat(name, " config"));
  fields.Number("learning_rate", &c.learning_rate)
      .Number("lr", &c.learning_rate)
      .Number("wd", &c.wd)
      .Number("rescale_grad", &c.rescale_grad)
      .Number("clip_gradient", &c.clip_gradient)
      .Number("momentum", &c.momentum)
      .Number("beta1", &c.beta1)
      .Number("beta2", &c.beta2)
      .Number("epsilon", &c.epsilon)
      .Number("rho", &c.rho)
      .Flag("centered", &c.centered)
      .Number("clip_weights", &c.clip_weights)
      .Number("schedule_decay", &c.schedule_decay)
      .Number("lamda1", &c.lamda1)
      .Number("beta", &c.beta)
      .Number("wd_lh", &c.wd_lh)
      .Number("eta", &c.eta)
      .Number("lower_bound", &c.lower_bound)
      .Number("upper_bound", &c.upper_bound)
      .Flag("bias_correction", &c.bias_correction)
      .Flag("nesterov", &c.nesterov);
  RETURN_IF_ERROR(fields.Parse(text));
  RETURN_IF_ERROR(ValidateOptimizerConfig(c));
  return c;
}

absl::Status RegisterOptimizers(UpdaterRegistry* registry) {
  const std::vector<std::string> present = registry->Names();
  for (const std::string& name : OptimizerNames()) {
    if (std::find(present.begin(), present.end(), name) != present.end()) continue;
    absl::Status s = registry->Register(
        name, [name](absl::string_view text) -> absl::StatusOr<std::unique_ptr<Updater>> {
          absl::StatusOr<OptimizerConfig> config = ParseOptimizerText(name, text);
          if (!config.ok()) return config.status();
          return MakeOptimizer(*config);
        });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Updater>> MakeOptimizer(const OptimizerConfig& config) {
  RETURN_IF_ERROR(ValidateOptimizerConfig(config));
  absl::StatusOr<StepFunctions> steps = optimizer_internal::StepsFor(config.name);
  if (!steps.ok()) return steps.status();
  return std::unique_ptr<Updater>(new Optimizer(Resolve(config), *steps, config));
}

}  // namespace kvstore
