#include "common/store/optimizer_steps.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace kvstore {
namespace optimizer_internal {

template <>
Buffers<float>& PartState::buffers<float>() {
  return f;
}
template <>
Buffers<double>& PartState::buffers<double>() {
  return d;
}

namespace {

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

// TrustRatio is LAMB's and LARS's guard: 1 where the ratio r1 / r2 is 0, infinite or NaN.
double TrustRatio(double r1, double r2, double value) {
  const double ratio = r1 / r2;
  return (ratio == 0 || !std::isfinite(ratio)) ? 1.0 : value;
}

template <typename T>
std::vector<T>& Zeroed(std::vector<T>& v, int64_t n) {
  if (v.size() != static_cast<size_t>(n)) v.assign(n, T(0));
  return v;
}

// Step: one step of one part, with the names every rule uses; each rule is a member.
template <typename T>
struct Step {
  Step(const Hyper& hyper, PartState* part, int64_t count, double lr_at, bool skip,
       const T* received, T* weights, int64_t elements)
      : h(hyper),
        state(part),
        s(part->buffers<T>()),
        t(count),
        lr_now(lr_at),
        lr(static_cast<T>(lr_at)),
        skip_lars(skip),
        grad(received),
        w(weights),
        n(elements),
        rescale(static_cast<T>(hyper.rescale)),
        clip(static_cast<T>(hyper.clip)),
        wd(static_cast<T>(hyper.wd)),
        clipping(hyper.clip > 0) {}

  // The rescaled and clipped gradient; Pre adds wd * w (the optimizers whose wd is coupled).
  T Raw(int64_t i) const {
    T g = rescale * grad[i];
    if (clipping) g = std::min(std::max(g, -clip), clip);
    return g;
  }
  T Pre(int64_t i) const { return Raw(i) + wd * w[i]; }

  void Test();
  void Sgd();
  void Lars();
  void Nag();
  void Adam();
  void AdamW();
  void Adagrad();
  void RmsProp();
  void AdaDelta();
  void AdaMax();
  void Nadam();
  void Ftrl();
  void Signum();
  void Lamb();
  void Momentum(bool lars);
  void AdamUpdate(bool decoupled);
  void TorchSgd();
  void TorchAdam();
  void TorchAdamW();
  void TorchAdamUpdate(bool decoupled);

  const Hyper& h;
  PartState* state;
  Buffers<T>& s;
  const int64_t t;
  const double lr_now;
  T lr;  // LARS scales it.
  const bool skip_lars;
  const T* grad;
  T* w;
  const int64_t n;
  const T rescale, clip, wd;
  const bool clipping;
};

template <typename T>
void Step<T>::Test() {
  ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) w[i] += rescale * grad[i];
  });
}

template <typename T>
void Step<T>::Sgd() {
  Momentum(false);
}

template <typename T>
void Step<T>::Lars() {
  Momentum(true);
}

template <typename T>
void Step<T>::Nag() {
  const T m = static_cast<T>(h.momentum);
  T* mom = Zeroed(s.a, n).data();
  ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T g = Pre(i);
      mom[i] = mom[i] * m - lr * g;
      w[i] += m * mom[i] - lr * g;
    }
  });
}

template <typename T>
void Step<T>::Adam() {
  AdamUpdate(false);
}

template <typename T>
void Step<T>::AdamW() {
  AdamUpdate(true);
}

template <typename T>
void Step<T>::Adagrad() {
  const T eps = static_cast<T>(h.epsilon);
  T* history = Zeroed(s.a, n).data();
  ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T g = Pre(i);
      history[i] += g * g;
      w[i] -= lr * g / (std::sqrt(history[i]) + eps);
    }
  });
}

template <typename T>
void Step<T>::RmsProp() {
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
}

template <typename T>
void Step<T>::AdaDelta() {
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
}

template <typename T>
void Step<T>::AdaMax() {
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
}

template <typename T>
void Step<T>::Nadam() {
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
}

template <typename T>
void Step<T>::Ftrl() {
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
}

template <typename T>
void Step<T>::Signum() {
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
}

template <typename T>
void Step<T>::Lamb() {
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

template <typename T>
void Step<T>::Momentum(bool lars) {
  if (lars && !skip_lars) {
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
}

template <typename T>
void Step<T>::AdamUpdate(bool decoupled) {
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
}

// PyTorch's rules (torch.optim, 1.13's single-tensor forms), in the order torch computes them.
// torch_sgd keeps the learning rate out of its momentum buffer (buf = momentum*buf + g;
// w -= lr*buf, or lr*(g + momentum*buf) with nesterov), so a rate changed mid-training scales
// the whole step, as in torch; MXNet's sgd folds each step's rate into its momentum.
template <typename T>
void Step<T>::TorchSgd() {
  const T m = static_cast<T>(h.momentum);
  if (h.momentum == 0) {
    ParallelFor(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) w[i] += -lr * Pre(i);
    });
    return;
  }
  T* buf = Zeroed(s.a, n).data();
  const bool nesterov = h.nesterov;
  ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T g = Pre(i);
      buf[i] = buf[i] * m + g;
      w[i] += -lr * (nesterov ? g + m * buf[i] : buf[i]);
    }
  });
}

template <typename T>
void Step<T>::TorchAdam() {
  TorchAdamUpdate(false);
}

template <typename T>
void Step<T>::TorchAdamW() {
  TorchAdamUpdate(true);
}

// torch's Adam puts epsilon after the bias correction of the second moment
// (sqrt(v)/sqrt(1 - beta2^t) + eps); AdamW first decays the weights by lr*wd, then steps on
// the raw gradient.
template <typename T>
void Step<T>::TorchAdamUpdate(bool decoupled) {
  const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
  const T c1m = static_cast<T>(1.0 - h.beta1), c2m = static_cast<T>(1.0 - h.beta2);
  const T eps = static_cast<T>(h.epsilon);
  const T step = static_cast<T>(lr_now / (1.0 - std::pow(h.beta1, t)));
  const T correction2 = static_cast<T>(std::sqrt(1.0 - std::pow(h.beta2, t)));
  const T keep = static_cast<T>(1.0 - lr_now * h.wd);
  T* mean = Zeroed(s.a, n).data();
  T* var = Zeroed(s.b, n).data();
  ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      if (decoupled) w[i] *= keep;
      const T g = decoupled ? Raw(i) : Pre(i);
      mean[i] = mean[i] * b1 + g * c1m;
      var[i] = var[i] * b2 + g * g * c2m;
      w[i] += -step * (mean[i] / (std::sqrt(var[i]) / correction2 + eps));
    }
  });
}

// Run makes a Step and runs the rule `Rule` on it: what a StepFunctions entry points at.
template <typename T, void (Step<T>::*Rule)()>
void Run(const Hyper& h, PartState* state, int64_t t, double lr_now, bool skip_lars, const T* grad,
         T* w, int64_t n) {
  Step<T> step(h, state, t, lr_now, skip_lars, grad, w, n);
  (step.*Rule)();
}

template <void (Step<float>::*F)(), void (Step<double>::*D)()>
StepFunctions Entry() {
  return StepFunctions{&Run<float, F>, &Run<double, D>};
}

}  // namespace

absl::StatusOr<StepFunctions> StepsFor(absl::string_view name) {
  static const auto* const kSteps = new absl::flat_hash_map<std::string, StepFunctions>({
      {"test", Entry<&Step<float>::Test, &Step<double>::Test>()},
      {"sgd", Entry<&Step<float>::Sgd, &Step<double>::Sgd>()},
      {"lars", Entry<&Step<float>::Lars, &Step<double>::Lars>()},
      {"nag", Entry<&Step<float>::Nag, &Step<double>::Nag>()},
      {"adam", Entry<&Step<float>::Adam, &Step<double>::Adam>()},
      {"adamw", Entry<&Step<float>::AdamW, &Step<double>::AdamW>()},
      {"adagrad", Entry<&Step<float>::Adagrad, &Step<double>::Adagrad>()},
      {"rmsprop", Entry<&Step<float>::RmsProp, &Step<double>::RmsProp>()},
      {"adadelta", Entry<&Step<float>::AdaDelta, &Step<double>::AdaDelta>()},
      {"adamax", Entry<&Step<float>::AdaMax, &Step<double>::AdaMax>()},
      {"nadam", Entry<&Step<float>::Nadam, &Step<double>::Nadam>()},
      {"ftrl", Entry<&Step<float>::Ftrl, &Step<double>::Ftrl>()},
      {"signum", Entry<&Step<float>::Signum, &Step<double>::Signum>()},
      {"lamb", Entry<&Step<float>::Lamb, &Step<double>::Lamb>()},
      {"torch_sgd", Entry<&Step<float>::TorchSgd, &Step<double>::TorchSgd>()},
      {"torch_adam", Entry<&Step<float>::TorchAdam, &Step<double>::TorchAdam>()},
      {"torch_adamw", Entry<&Step<float>::TorchAdamW, &Step<double>::TorchAdamW>()},
  });
  const auto it = kSteps->find(name);
  if (it == kSteps->end()) {
    return absl::InvalidArgumentError(absl::StrCat("no step rule for optimizer \"", name, "\""));
  }
  return it->second;
}

}  // namespace optimizer_internal
}  // namespace kvstore
