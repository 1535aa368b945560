#include "common/store/optimizer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/half.h"
#include "common/key_value_config.h"

namespace kvstore {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Hyper: the configuration with every default resolved.
struct Hyper {
  std::string name;
  double lr = 0.01;
  double wd = 0, rescale = 1, clip = -1;
  double momentum = 0, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8, rho = 0.9;
  bool centered = false, bias_correction = true;
  double clip_weights = -1, schedule_decay = 0.004, lamda1 = 0.01, beta = 1, wd_lh = 0;
  double eta = 0.001;
  std::optional<double> lower_bound, upper_bound;
  LrScheduleConfig schedule;
};

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

// ParallelFor runs fn(begin, end) over [0, n), split over the cores when n is large.
template <typename Fn>
void ParallelFor(int64_t n, Fn fn) {
  constexpr int64_t kSplitAbove = 1 << 19;
  const int64_t threads =
      n < kSplitAbove ? 1 : std::max<int64_t>(1, std::thread::hardware_concurrency());
  if (threads == 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t per = (n + threads - 1) / threads;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t begin = std::min(n, t * per), end = std::min(n, (t + 1) * per);
    pool.emplace_back([&fn, begin, end] { fn(begin, end); });
  }
  fn(int64_t{0}, std::min(n, per));
  for (std::thread& thread : pool) thread.join();
}

template <typename T>
T Sign(T v) {
  return static_cast<T>((v > 0) - (v < 0));
}

// State of one (key, first element): up to three vectors, the update count and Nadam's
// momentum schedule; for half weights, the float32 master copy.
template <typename T>
struct Buffers {
  std::vector<T> a, b, c;
};
struct PartState {
  int64_t count = 0;
  double m_schedule = 1.0;
  Buffers<float> f;
  Buffers<double> d;
  std::vector<float> master;
  template <typename T>
  Buffers<T>& buffers();
};
template <>
Buffers<float>& PartState::buffers<float>() { return f; }
template <>
Buffers<double>& PartState::buffers<double>() { return d; }

// TrustRatio is LAMB's and LARS's guard: 1 where the ratio r1 / r2 is 0, infinite or NaN.
double TrustRatio(double r1, double r2, double value) {
  const double ratio = r1 / r2;
  return (ratio == 0 || !std::isfinite(ratio)) ? 1.0 : value;
}

class Optimizer final : public Updater {
 public:
  explicit Optimizer(Hyper h) : h_(std::move(h)) {}

  absl::Status Update(const Key& key, const Tensor& received, Tensor* stored) override {
    return UpdateAt(key, 0, received, stored);
  }

  absl::Status UpdateAt(const Key& key, int64_t offset, const Tensor& received,
                        Tensor* stored) override {
    if (!IsFloatingPoint(stored->dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer ", h_.name, " updates float values only; key ", key.Quoted(), " holds ",
          DTypeName(stored->dtype())));
    }
    const int64_t n = stored->num_elements();
    PartState& state = State(key, offset);
    const int64_t t = ++state.count;
    int64_t seen = num_update_.load();
    while (t > seen && !num_update_.compare_exchange_weak(seen, t)) {
    }
    const double lr = ScheduledLearningRate(h_.schedule, h_.lr, std::max(t, seen));
    const bool skip_lars = key.is_string() && (absl::EndsWith(key.str_key(), "gamma") ||
                                               absl::EndsWith(key.str_key(), "beta") ||
                                               absl::EndsWith(key.str_key(), "bias"));
    switch (stored->dtype()) {
      case DType::kFloat32:
        Step<float>(&state, t, lr, skip_lars, received.data_as<const float>(),
                    stored->data_as<float>(), n);
        break;
      case DType::kFloat64:
        Step<double>(&state, t, lr, skip_lars, received.data_as<const double>(),
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
        Step<float>(&state, t, lr, skip_lars, grad.data(), state.master.data(), n);
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
        return std::string(reinterpret_cast<const char*>(v.data()),
                           v.size() * sizeof(v[0]));
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
      return absl::InvalidArgumentError(absl::StrCat(
          "the saved state is of optimizer \"", state.optimizer, "\" but the optimizer is \"",
          h_.name, "\""));
    }
    absl::node_hash_map<std::pair<Key, int64_t>, PartState> loaded;
    for (const PartStateData& part : state.parts) {
      if (keep && !keep(part)) continue;
      if (part.dtype != DType::kFloat32 && part.dtype != DType::kFloat64) {
        return absl::InvalidArgumentError(absl::StrCat(
            "saved state of key ", part.key.Quoted(), " has buffers of ", DTypeName(part.dtype)));
      }
      const size_t element = DTypeSize(part.dtype);
      for (const std::string& b : part.buffers) {
        if (!b.empty() && b.size() != static_cast<size_t>(part.count) * element) {
          return absl::InvalidArgumentError(absl::StrCat(
              "saved state of key ", part.key.Quoted(), " at element ", part.offset, ": a buffer of ",
              b.size(), " bytes for ", part.count, " ", DTypeName(part.dtype), " elements"));
        }
      }
      if (part.buffers.size() > 3 ||
          (!part.master.empty() && part.master.size() != static_cast<size_t>(part.count) * 4)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "saved state of key ", part.key.Quoted(), " at element ", part.offset,
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

 private:
  // State returns the state of (key, offset); calls for different parts may run concurrently
  // (node_hash_map keeps each state where it is).
  PartState& State(const Key& key, int64_t offset) {
    absl::MutexLock lock(&mu_);
    return states_[{key, offset}];
  }

  template <typename T>
  static std::vector<T>& Zeroed(std::vector<T>& v, int64_t n) {
    if (v.size() != static_cast<size_t>(n)) v.assign(n, T(0));
    return v;
  }

  template <typename T>
  void Step(PartState* state, int64_t t, double lr_now, bool skip_lars, const T* grad, T* w,
            int64_t n) {
    const Hyper& h = h_;
    const std::string& name = h.name;
    Buffers<T>& s = state->buffers<T>();
    const T rescale = static_cast<T>(h.rescale), clip = static_cast<T>(h.clip);
    const T wd = static_cast<T>(h.wd);
    const bool clipping = h.clip > 0;
    // Rescaled and clipped gradient; Pre adds wd * w (the optimizers whose wd is coupled).
    auto Raw = [=](int64_t i) {
      T g = rescale * grad[i];
      if (clipping) g = std::min(std::max(g, -clip), clip);
      return g;
    };
    auto Pre = [=](int64_t i) { return Raw(i) + wd * w[i]; };
    T lr = static_cast<T>(lr_now);

    if (name == "test") {
      ParallelFor(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) w[i] += rescale * grad[i];
      });
    } else if (name == "sgd" || name == "lars") {
      if (name == "lars" && !skip_lars) {
        double w2 = 0, g2 = 0;
        for (int64_t i = 0; i < n; ++i) {
          w2 += static_cast<double>(w[i]) * w[i];
          const double g = static_cast<double>(rescale * grad[i]);
          g2 += g * g;
        }
        const double wn = std::sqrt(w2), gn = std::sqrt(g2);
        lr = static_cast<T>(lr_now * TrustRatio(wn, gn, h.eta * wn / (gn + h.wd * wn + h.epsilon)));
      }
      const T m = static_cast<T>(h.momentum);
      if (h.momentum == 0) {
        ParallelFor(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) w[i] += -lr * Pre(i);
        });
      } else {
        T* mom = Zeroed(s.a, n).data();
        ParallelFor(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            mom[i] = mom[i] * m - lr * Pre(i);
            w[i] += mom[i];
          }
        });
      }
    } else if (name == "nag") {
      const T m = static_cast<T>(h.momentum);
      T* mom = Zeroed(s.a, n).data();
      ParallelFor(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const T g = Pre(i);
          mom[i] = mom[i] * m - lr * g;
          w[i] += m * mom[i] - lr * g;
        }
      });
    } else if (name == "adam" || name == "adamw") {
      const bool decoupled = name == "adamw";
      const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
      // Complements in double, then rounded once (as MXNet's Python computes 1 - beta).
      const T c1m = static_cast<T>(1.0 - h.beta1), c2m = static_cast<T>(1.0 - h.beta2);
      const T eps = static_cast<T>(h.epsilon);
      double lr_t = lr_now;
      if (!decoupled || h.bias_correction) {
        lr_t *= std::sqrt(1.0 - std::pow(h.beta2, t)) / (1.0 - std::pow(h.beta1, t));
      }
      const T step = static_cast<T>(lr_t);
      const T decay = static_cast<T>(lr_t * h.wd);
      T* mean = Zeroed(s.a, n).data();
      T* var = Zeroed(s.b, n).data();
      ParallelFor(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const T g = decoupled ? Raw(i) : Pre(i);
          mean[i] = b1 * mean[i] + c1m * g;
          var[i] = b2 * var[i] + c2m * g * g;
          w[i] -= step * mean[i] / (std::sqrt(var[i]) + eps);
          if (decoupled && h.wd > 0) w[i] -= decay * w[i];
        }
      });
    } else if (name == "adagrad") {
      const T eps = static_cast<T>(h.epsilon);
      T* history = Zeroed(s.a, n).data();
      ParallelFor(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const T g = Pre(i);
          history[i] += g * g;
          w[i] -= lr * g / (std::sqrt(history[i]) + eps);
        }
      });
    } else if (name == "rmsprop") {
      const T rho = static_cast<T>(h.rho), eps = static_cast<T>(h.epsilon);
      const T crho = static_cast<T>(1.0 - h.rho);
      const T m = static_cast<T>(h.momentum);
      const T cw = static_cast<T>(h.clip_weights);
      const bool clip_w = h.clip_weights > 0;
      T* var = Zeroed(s.a, n).data();
      if (!h.centered) {
        ParallelFor(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            const T g = Pre(i);
            var[i] = var[i] * rho + crho * (g * g);
            w[i] -= lr * g / (std::sqrt(var[i]) + eps);
            if (clip_w) w[i] = std::min(std::max(w[i], -cw), cw);
          }
        });
      } else {
        T* mean = Zeroed(s.b, n).data();
        T* mom = Zeroed(s.c, n).data();
        ParallelFor(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            const T g = Pre(i);
            mean[i] = mean[i] * rho + crho * g;
            var[i] = var[i] * rho + crho * (g * g);
            mom[i] = mom[i] * m - lr * g / std::sqrt(var[i] - mean[i] * mean[i] + eps);
            w[i] += mom[i];
            if (clip_w) w[i] = std::min(std::max(w[i], -cw), cw);
          }
        });
      }
    } else if (name == "adadelta") {
      const T rho = static_cast<T>(h.rho), eps = static_cast<T>(h.epsilon);
      const T crho = static_cast<T>(1.0 - h.rho);
      T* acc_g = Zeroed(s.a, n).data();
      T* acc_delta = Zeroed(s.b, n).data();
      ParallelFor(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const T g = Pre(i);
          acc_g[i] = acc_g[i] * rho + crho * (g * g);
          T delta = std::sqrt(acc_delta[i] + eps);
          delta /= std::sqrt(acc_g[i] + eps);
          delta *= g;
          acc_delta[i] = acc_delta[i] * rho + crho * (delta * delta);
          w[i] -= lr * delta;
        }
      });
    } else if (name == "adamax") {
      const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
      // Complements in double, then rounded once (as MXNet's Python computes 1 - beta).
      const T c1m = static_cast<T>(1.0 - h.beta1);
      const T step = static_cast<T>(lr_now / (1.0 - std::pow(h.beta1, t)));
      T* mean = Zeroed(s.a, n).data();
      T* u = Zeroed(s.b, n).data();
      ParallelFor(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const T g = Pre(i);
          mean[i] = b1 * mean[i] + c1m * g;
          u[i] = std::max(b2 * u[i], std::abs(g));
          w[i] -= step * mean[i] / u[i];
        }
      });
    } else if (name == "nadam") {
      const double mt = h.beta1 * (1.0 - 0.5 * std::pow(0.96, t * h.schedule_decay));
      const double mt1 = h.beta1 * (1.0 - 0.5 * std::pow(0.96, (t + 1) * h.schedule_decay));
      state->m_schedule *= mt;
      const double m_next = state->m_schedule * mt1;
      const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
      // Complements in double, then rounded once (as MXNet's Python computes 1 - beta).
      const T c1m = static_cast<T>(1.0 - h.beta1), c2m = static_cast<T>(1.0 - h.beta2);
      const T eps = static_cast<T>(h.epsilon);
      const T g_scale = static_cast<T>(1.0 / (1.0 - state->m_schedule));
      const T m_scale = static_cast<T>(1.0 / (1.0 - m_next));
      const T v_scale = static_cast<T>(1.0 / (1.0 - std::pow(h.beta2, t)));
      const T c1 = static_cast<T>(mt1), c2 = static_cast<T>(1.0 - mt);
      T* mean = Zeroed(s.a, n).data();
      T* var = Zeroed(s.b, n).data();
      ParallelFor(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const T g = Pre(i);
          mean[i] = mean[i] * b1 + c1m * g;
          var[i] = var[i] * b2 + c2m * (g * g);
          const T bar = c1 * (mean[i] * m_scale) + c2 * (g * g_scale);
          w[i] -= lr * bar / (std::sqrt(var[i] * v_scale) + eps);
        }
      });
    } else if (name == "ftrl") {
      const T l1 = static_cast<T>(h.lamda1), beta = static_cast<T>(h.beta);
      T* z = Zeroed(s.a, n).data();
      T* nn = Zeroed(s.b, n).data();
      ParallelFor(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const T g = Raw(i);
          T sigma = -std::sqrt(nn[i]);
          nn[i] += g * g;
          T denom = std::sqrt(nn[i]);
          sigma += denom;
          sigma /= lr;
          z[i] += g - sigma * w[i];
          denom += beta;
          denom /= lr;
          denom += wd;
          const T d = Sign(z[i]) * std::max(std::abs(z[i]) - l1, T(0));
          w[i] = -d / denom;
        }
      });
    } else if (name == "signum") {
      const T m = static_cast<T>(h.momentum), cm = static_cast<T>(1.0 - h.momentum);
      if (h.momentum == 0) {
        const T keep = static_cast<T>(1.0 - lr_now * (h.wd + h.wd_lh));
        ParallelFor(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            w[i] *= keep;
            w[i] -= lr * Sign(grad[i]);
          }
        });
      } else {
        const T keep = static_cast<T>(1.0 - lr_now * h.wd_lh);
        T* mom = Zeroed(s.a, n).data();
        ParallelFor(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            mom[i] = mom[i] * m - cm * Pre(i);
            w[i] *= keep;
            w[i] += lr * Sign(mom[i]);
          }
        });
      }
    } else if (name == "lamb") {
      const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
      // Complements in double, then rounded once (as MXNet's Python computes 1 - beta).
      const T c1m = static_cast<T>(1.0 - h.beta1), c2m = static_cast<T>(1.0 - h.beta2);
      const T eps = static_cast<T>(h.epsilon);
      const T inv1 = static_cast<T>(1.0 / (1.0 - std::pow(h.beta1, t)));
      const T inv2 = static_cast<T>(1.0 / (1.0 - std::pow(h.beta2, t)));
      T* mean = Zeroed(s.a, n).data();
      T* var = Zeroed(s.b, n).data();
      std::vector<T> update(n);
      double w2 = 0, u2 = 0;
      for (int64_t i = 0; i < n; ++i) {
        const T g = Raw(i);
        mean[i] = mean[i] * b1 + c1m * g;
        var[i] = var[i] * b2 + c2m * (g * g);
        T u = h.bias_correction ? (mean[i] * inv1) / (std::sqrt(var[i] * inv2) + eps)
                                : mean[i] / (std::sqrt(var[i]) + eps);
        u += wd * w[i];
        update[i] = u;
        w2 += static_cast<double>(w[i]) * w[i];
        u2 += static_cast<double>(u) * u;
      }
      double r1 = std::sqrt(w2);
      if (h.lower_bound) r1 = std::max(r1, *h.lower_bound);
      if (h.upper_bound) r1 = std::min(r1, *h.upper_bound);
      const double r2 = std::sqrt(u2);
      const T step = static_cast<T>(lr_now * TrustRatio(r1, r2, r1 / r2));
      for (int64_t i = 0; i < n; ++i) w[i] -= step * update[i];
    }
  }

  const Hyper h_;
  std::atomic<int64_t> num_update_{0};
  mutable absl::Mutex mu_;
  absl::node_hash_map<std::pair<Key, int64_t>, PartState> states_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

double DefaultLearningRate(absl::string_view name) {
  if (name == "sgd" || name == "nag" || name == "ftrl" || name == "lars") return 0.1;
  if (name == "adam" || name == "adamw" || name == "rmsprop" || name == "nadam" ||
      name == "lamb") {
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
  const double progress = static_cast<double>(u - s.warmup_steps) /
                          static_cast<double>(s.max_update - s.warmup_steps);
  if (s.type == "poly") {
    return s.final_lr + (base_lr - s.final_lr) * std::pow(1.0 - progress, s.pwr);
  }
  return s.final_lr + (base_lr - s.final_lr) * (1.0 + std::cos(kPi * progress)) / 2.0;
}

absl::StatusOr<OptimizerConfig> ParseOptimizerText(absl::string_view name,
                                                   absl::string_view text) {
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
      .Flag("bias_correction", &c.bias_correction);
  if (absl::Status s = fields.Parse(text); !s.ok()) return s;
  if (absl::Status s = ValidateOptimizerConfig(c); !s.ok()) return s;
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
  if (absl::Status s = ValidateOptimizerConfig(config); !s.ok()) return s;
  return std::unique_ptr<Updater>(new Optimizer(Resolve(config)));
}

}  // namespace kvstore
