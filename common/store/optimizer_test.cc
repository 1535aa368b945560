#include "common/store/optimizer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/half.h"
#include "common/store/updater_state.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

// Reference: MXNet's Python `step` of each optimizer, in float64, one element at a time, with
// norms over the whole value. Written from docs/optimizers.md, independently of the kernels.
struct Reference {
  OptimizerConfig c;
  std::vector<double> a, b, cc;
  double m_schedule = 1;
  int64_t t = 0;

  double Get(const std::optional<double>& v, double d) const { return v.value_or(d); }

  void Step(std::vector<double>& w, const std::vector<double>& grad) {
    const size_t n = w.size();
    if (a.empty()) a.assign(n, 0), b.assign(n, 0), cc.assign(n, 0);
    ++t;
    const std::string& name = c.name;
    double lr = ScheduledLearningRate(c.lr_scheduler,
                                      c.learning_rate.value_or(DefaultLearningRate(name)), t);
    const double wd = c.wd;
    auto raw = [&](size_t i) {
      double g = c.rescale_grad * grad[i];
      if (c.clip_gradient > 0) g = std::max(-c.clip_gradient, std::min(c.clip_gradient, g));
      return g;
    };
    auto pre = [&](size_t i) { return raw(i) + wd * w[i]; };
    auto norm = [](const std::vector<double>& v) {
      double s = 0;
      for (double x : v) s += x * x;
      return std::sqrt(s);
    };
    auto guard = [](double r1, double r2, double v) {
      const double ratio = r1 / r2;
      return ratio == 0 || !std::isfinite(ratio) ? 1.0 : v;
    };
    const double b1 = Get(c.beta1, 0.9), b2 = Get(c.beta2, 0.999);
    if (name == "test") {
      for (size_t i = 0; i < n; ++i) w[i] += c.rescale_grad * grad[i];
    } else if (name == "sgd" || name == "lars") {
      const double m = Get(c.momentum, 0.0);
      if (name == "lars") {
        std::vector<double> rg(n);
        for (size_t i = 0; i < n; ++i) rg[i] = c.rescale_grad * grad[i];
        const double wn = norm(w), gn = norm(rg);
        lr *= guard(wn, gn, Get(c.eta, 0.001) * wn / (gn + wd * wn + Get(c.epsilon, 1e-8)));
      }
      for (size_t i = 0; i < n; ++i) {
        a[i] = m * a[i] - lr * pre(i);
        w[i] += a[i];
      }
    } else if (name == "nag") {
      const double m = Get(c.momentum, 0.9);
      for (size_t i = 0; i < n; ++i) {
        const double g = pre(i);
        a[i] = m * a[i] - lr * g;
        w[i] += m * a[i] - lr * g;
      }
    } else if (name == "adam" || name == "adamw") {
      const bool decoupled = name == "adamw";
      const double eps = Get(c.epsilon, decoupled ? 1e-6 : 1e-8);
      if (!decoupled || c.bias_correction.value_or(true)) {
        lr *= std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
      }
      for (size_t i = 0; i < n; ++i) {
        const double g = decoupled ? raw(i) : pre(i);
        a[i] = b1 * a[i] + (1 - b1) * g;
        b[i] = b2 * b[i] + (1 - b2) * g * g;
        w[i] -= lr * a[i] / (std::sqrt(b[i]) + eps);
        if (decoupled && wd > 0) w[i] -= lr * wd * w[i];
      }
    } else if (name == "torch_sgd") {
      // torch.optim.SGD (dampening 0): buf = m*buf + g, the first step's buf = g.
      const double m = Get(c.momentum, 0.0);
      for (size_t i = 0; i < n; ++i) {
        double d = pre(i);
        if (m != 0) {
          a[i] = t == 1 ? d : m * a[i] + d;
          d = c.nesterov.value_or(false) ? d + m * a[i] : a[i];
        }
        w[i] -= lr * d;
      }
    } else if (name == "torch_adam" || name == "torch_adamw") {
      // torch.optim.Adam / AdamW: eps after the corrected second moment; AdamW decays first.
      const bool decoupled = name == "torch_adamw";
      const double eps = Get(c.epsilon, 1e-8);
      for (size_t i = 0; i < n; ++i) {
        if (decoupled) w[i] *= 1 - lr * wd;
        const double g = decoupled ? raw(i) : pre(i);
        a[i] = b1 * a[i] + (1 - b1) * g;
        b[i] = b2 * b[i] + (1 - b2) * g * g;
        const double denom = std::sqrt(b[i]) / std::sqrt(1 - std::pow(b2, t)) + eps;
        w[i] -= lr / (1 - std::pow(b1, t)) * a[i] / denom;
      }
    } else if (name == "adagrad") {
      for (size_t i = 0; i < n; ++i) {
        const double g = pre(i);
        a[i] += g * g;
        w[i] -= lr * g / (std::sqrt(a[i]) + Get(c.epsilon, 1e-6));
      }
    } else if (name == "rmsprop") {
      const double rho = Get(c.rho, 0.9), eps = Get(c.epsilon, 1e-8), m = Get(c.momentum, 0.9);
      for (size_t i = 0; i < n; ++i) {
        const double g = pre(i);
        a[i] = rho * a[i] + (1 - rho) * g * g;
        if (c.centered.value_or(false)) {
          b[i] = rho * b[i] + (1 - rho) * g;
          cc[i] = m * cc[i] - lr * g / std::sqrt(a[i] - b[i] * b[i] + eps);
          w[i] += cc[i];
        } else {
          w[i] -= lr * g / (std::sqrt(a[i]) + eps);
        }
        if (c.clip_weights && *c.clip_weights > 0) {
          w[i] = std::max(-*c.clip_weights, std::min(*c.clip_weights, w[i]));
        }
      }
    } else if (name == "adadelta") {
      const double rho = Get(c.rho, 0.9), eps = Get(c.epsilon, 1e-6);
      for (size_t i = 0; i < n; ++i) {
        const double g = pre(i);
        a[i] = rho * a[i] + (1 - rho) * g * g;
        const double delta = std::sqrt(b[i] + eps) / std::sqrt(a[i] + eps) * g;
        b[i] = rho * b[i] + (1 - rho) * delta * delta;
        w[i] -= lr * delta;
      }
    } else if (name == "adamax") {
      lr /= 1 - std::pow(b1, t);
      for (size_t i = 0; i < n; ++i) {
        const double g = pre(i);
        a[i] = b1 * a[i] + (1 - b1) * g;
        b[i] = std::max(b2 * b[i], std::abs(g));
        w[i] -= lr * a[i] / b[i];
      }
    } else if (name == "nadam") {
      const double sd = Get(c.schedule_decay, 0.004), eps = Get(c.epsilon, 1e-8);
      const double mt = b1 * (1 - 0.5 * std::pow(0.96, t * sd));
      const double mt1 = b1 * (1 - 0.5 * std::pow(0.96, (t + 1) * sd));
      m_schedule *= mt;
      const double next = m_schedule * mt1;
      for (size_t i = 0; i < n; ++i) {
        const double g = pre(i);
        a[i] = b1 * a[i] + (1 - b1) * g;
        b[i] = b2 * b[i] + (1 - b2) * g * g;
        const double bar = mt1 * a[i] / (1 - next) + (1 - mt) * g / (1 - m_schedule);
        w[i] -= lr * bar / (std::sqrt(b[i] / (1 - std::pow(b2, t))) + eps);
      }
    } else if (name == "ftrl") {
      const double l1 = Get(c.lamda1, 0.01), beta = Get(c.beta, 1.0);
      for (size_t i = 0; i < n; ++i) {
        const double g = raw(i);
        const double sigma = (std::sqrt(b[i] + g * g) - std::sqrt(b[i])) / lr;
        b[i] += g * g;
        a[i] += g - sigma * w[i];
        const double z = a[i];
        w[i] = std::abs(z) > l1 ? (std::copysign(l1, z) - z) / ((beta + std::sqrt(b[i])) / lr + wd)
                                : 0.0;
      }
    } else if (name == "signum") {
      const double m = Get(c.momentum, 0.9), wd_lh = Get(c.wd_lh, 0.0);
      auto sign = [](double v) { return static_cast<double>((v > 0) - (v < 0)); };
      for (size_t i = 0; i < n; ++i) {
        if (m == 0) {
          w[i] = w[i] * (1 - lr * (wd + wd_lh)) - lr * sign(grad[i]);
        } else {
          a[i] = m * a[i] - (1 - m) * pre(i);
          w[i] = w[i] * (1 - lr * wd_lh) + lr * sign(a[i]);
        }
      }
    } else if (name == "lamb") {
      const double eps = Get(c.epsilon, 1e-6);
      std::vector<double> u(n);
      for (size_t i = 0; i < n; ++i) {
        const double g = raw(i);
        a[i] = b1 * a[i] + (1 - b1) * g;
        b[i] = b2 * b[i] + (1 - b2) * g * g;
        u[i] =
            c.bias_correction.value_or(true)
                ? (a[i] / (1 - std::pow(b1, t))) / (std::sqrt(b[i] / (1 - std::pow(b2, t))) + eps)
                : a[i] / (std::sqrt(b[i]) + eps);
        u[i] += wd * w[i];
      }
      double r1 = norm(w);
      if (c.lower_bound) r1 = std::max(r1, *c.lower_bound);
      if (c.upper_bound) r1 = std::min(r1, *c.upper_bound);
      const double r2 = norm(u);
      const double step = lr * guard(r1, r2, r1 / r2);
      for (size_t i = 0; i < n; ++i) w[i] -= step * u[i];
    }
  }
};

// A configuration of `name` with random common and specific parameters.
OptimizerConfig RandomConfig(const std::string& name, TestRng& rng) {
  OptimizerConfig c;
  c.name = name;
  c.learning_rate = rng.Uniform(0.001, 0.05);
  c.wd = rng.Int(0, 1) ? rng.Uniform(0.0, 0.01) : 0.0;
  c.rescale_grad = rng.Uniform(0.5, 2.0);
  c.clip_gradient = rng.Int(0, 1) ? rng.Uniform(0.5, 3.0) : -1.0;
  if (name == "sgd" || name == "nag" || name == "lars" || name == "signum" || name == "torch_sgd") {
    c.momentum = rng.Int(0, 2) == 0 ? 0.0 : rng.Uniform(0.5, 0.95);
  }
  if (name == "torch_sgd" && *c.momentum != 0) c.nesterov = rng.Int(0, 1) == 1;
  if (name == "adam" || name == "adamw" || name == "nadam" || name == "lamb" || name == "adamax" ||
      name == "torch_adam" || name == "torch_adamw") {
    c.beta1 = rng.Uniform(0.8, 0.95);
    c.beta2 = rng.Uniform(0.99, 0.999);
  }
  if (name == "rmsprop") {
    c.centered = rng.Int(0, 1) == 1;
    c.rho = rng.Uniform(0.8, 0.95);
  }
  if (name == "adamw" || name == "lamb") c.bias_correction = rng.Int(0, 3) > 0;
  if (name == "ftrl") c.lamda1 = rng.Uniform(0.0, 0.05);
  if (name == "signum") c.wd_lh = rng.Uniform(0.0, 0.01);
  if (name == "lars") c.eta = rng.Uniform(0.001, 0.1);
  return c;
}

// The relative error of the weight vector in the max norm: max |got - ref| / max |ref|.
double RelativeError(const std::vector<double>& got, const std::vector<double>& ref) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return worst / std::max(scale, 1e-30);
}

TEST_CASE("Optimizers: every optimizer matches its float64 reference over several steps",
          "[optimizer]") {
  TestRng rng;
  INFO(rng.Describe());
  for (const std::string& name : OptimizerNames()) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (int trial = 0; trial < 4; ++trial) {
        const OptimizerConfig config = RandomConfig(name, rng);
        INFO(name << " " << DTypeName(dtype) << " trial " << trial << " lr "
                  << *config.learning_rate << " wd " << config.wd << " clip "
                  << config.clip_gradient);
        auto updater = MakeOptimizer(config);
        REQUIRE(updater.ok());
        const int64_t n = rng.Int(64, 300);  // The max-norm scale is then about 4.
        Tensor weight = rng.RandomTensor(dtype, {n});
        std::vector<double> reference = testing::ToDoubles(weight);
        Reference ref{config};
        for (int step = 0; step < 6; ++step) {
          const Tensor grad = rng.RandomTensor(dtype, {n});
          REQUIRE((*updater)->Update(Key(1), grad, &weight).ok());
          ref.Step(reference, testing::ToDoubles(grad));
          INFO("step " << step);
          REQUIRE(RelativeError(testing::ToDoubles(weight), reference) <
                  (dtype == DType::kFloat32 ? 1e-6 : 1e-12));
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

TEST_CASE("Optimizers: learning-rate schedules follow MXNet's formulas", "[optimizer]") {
  LrScheduleConfig factor;
  factor.type = "factor";
  factor.step = 10;
  factor.factor = 0.5;
  factor.stop_factor_lr = 0.03;
  // The first decay comes at update step + 1; the rate never goes below stop_factor_lr.
  CHECK(ScheduledLearningRate(factor, 1.0, 1) == 1.0);
  CHECK(ScheduledLearningRate(factor, 1.0, 10) == 1.0);
  CHECK(ScheduledLearningRate(factor, 1.0, 11) == 0.5);
  CHECK(ScheduledLearningRate(factor, 1.0, 21) == 0.25);
  CHECK(ScheduledLearningRate(factor, 1.0, 1000) == 0.03);

  LrScheduleConfig multi;
  multi.type = "multifactor";
  multi.steps = {5, 8};
  multi.factor = 0.1;
  CHECK(ScheduledLearningRate(multi, 2.0, 5) == 2.0);
  CHECK(ScheduledLearningRate(multi, 2.0, 6) == 2.0 * 0.1);
  CHECK(ScheduledLearningRate(multi, 2.0, 9) == 2.0 * 0.1 * 0.1);

  LrScheduleConfig poly;
  poly.type = "poly";
  poly.max_update = 12;
  poly.pwr = 2;
  poly.final_lr = 0.1;
  poly.warmup_steps = 2;
  poly.warmup_begin_lr = 0.0;
  // Warm-up: linear from 0 towards base_lr over 2 updates (num_update starts at 1).
  CHECK(ScheduledLearningRate(poly, 1.0, 1) == 0.5);
  // Then final + (base - final) * (1 - (u - warmup) / (max - warmup))^2; constant after max.
  CHECK(ScheduledLearningRate(poly, 1.0, 2) == 1.0);
  CHECK(ScheduledLearningRate(poly, 1.0, 7) == Approx(0.1 + 0.9 * 0.25).epsilon(1e-15));
  CHECK(ScheduledLearningRate(poly, 1.0, 12) == Approx(0.1).epsilon(1e-15));
  CHECK(ScheduledLearningRate(poly, 1.0, 50) == Approx(0.1).epsilon(1e-15));

  LrScheduleConfig cosine;
  cosine.type = "cosine";
  cosine.max_update = 10;
  cosine.final_lr = 0.0;
  cosine.warmup_steps = 4;
  cosine.warmup_mode = "constant";
  cosine.warmup_begin_lr = 0.25;
  CHECK(ScheduledLearningRate(cosine, 1.0, 3) == 0.25);
  CHECK(ScheduledLearningRate(cosine, 1.0, 4) == 1.0);
  CHECK(ScheduledLearningRate(cosine, 1.0, 7) == Approx(0.5).epsilon(1e-12));
  CHECK(ScheduledLearningRate(cosine, 1.0, 10) == Approx(0.0).margin(1e-15));
}

TEST_CASE("Optimizers: the schedule drives the rate an optimizer applies", "[optimizer]") {
  // SGD without momentum moves the weight by exactly -lr * g: the step sizes show the rate.
  OptimizerConfig c;
  c.name = "sgd";
  c.learning_rate = 1.0;
  c.lr_scheduler.type = "multifactor";
  c.lr_scheduler.steps = {2};
  c.lr_scheduler.factor = 0.5;
  auto sgd = MakeOptimizer(c);
  REQUIRE(sgd.ok());
  Tensor w = Tensor::Zeros(DType::kFloat64, {2});
  const Tensor g = Tensor::Full(DType::kFloat64, {2}, 1.0);
  std::vector<double> seen;
  for (int step = 0; step < 4; ++step) {
    const double before = w.GetAsDouble(0);
    REQUIRE((*sgd)->Update(Key(5), g, &w).ok());
    seen.push_back(before - w.GetAsDouble(0));
  }
  CHECK(seen == std::vector<double>{1.0, 1.0, 0.5, 0.5});
}

TEST_CASE("Optimizers: float16 and bfloat16 weights use a float32 master copy", "[optimizer]") {
  TestRng rng;
  INFO(rng.Describe());
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    OptimizerConfig c;
    c.name = "adam";
    c.learning_rate = 0.01;
    auto half = MakeOptimizer(c);
    auto full = MakeOptimizer(c);
    REQUIRE(half.ok());
    REQUIRE(full.ok());
    const int64_t n = 200;
    Tensor w = rng.RandomTensor(dtype, {n});
    // The same start in float32: the master copy.
    Tensor master = Tensor::Zeros(DType::kFloat32, {n});
    for (int64_t i = 0; i < n; ++i) master.SetFromDouble(i, w.GetAsDouble(i));
    for (int step = 0; step < 20; ++step) {
      const Tensor g = rng.RandomTensor(dtype, {n});
      Tensor g32 = Tensor::Zeros(DType::kFloat32, {n});
      for (int64_t i = 0; i < n; ++i) g32.SetFromDouble(i, g.GetAsDouble(i));
      REQUIRE((*half)->Update(Key(2), g, &w).ok());
      REQUIRE((*full)->Update(Key(2), g32, &master).ok());
    }
    INFO(DTypeName(dtype));
    REQUIRE(w.dtype() == dtype);
    for (int64_t i = 0; i < n; ++i) {
      // The stored weight is the float32 master rounded, so 20 steps of 0.01 are not lost to
      // half-precision rounding.
      Tensor rounded = Tensor::Zeros(dtype, {1});
      rounded.SetFromDouble(0, master.GetAsDouble(i));
      REQUIRE(w.GetAsDouble(i) == rounded.GetAsDouble(0));
    }
  }
}

TEST_CASE("Optimizers: bad configurations and integer values are refused", "[optimizer]") {
  OptimizerConfig c;
  c.name = "adamx";
  CHECK(absl::IsInvalidArgument(MakeOptimizer(c).status()));
  c.name = "adam";
  c.rho = 0.9;
  absl::Status s = MakeOptimizer(c).status();
  CHECK(absl::IsInvalidArgument(s));
  CHECK(s.message().find("rho") != absl::string_view::npos);
  c.rho.reset();
  c.beta1 = 1.0;
  CHECK(absl::IsInvalidArgument(MakeOptimizer(c).status()));
  c.beta1.reset();
  c.lr_scheduler.type = "poly";
  c.lr_scheduler.max_update = 0;
  CHECK(absl::IsInvalidArgument(MakeOptimizer(c).status()));
  c.lr_scheduler.type = "";
  auto adam = MakeOptimizer(c);
  REQUIRE(adam.ok());
  Tensor ints = Tensor::Full(DType::kInt32, {3}, 7);
  s = (*adam)->Update(Key("counts"), Tensor::Full(DType::kInt32, {3}, 1), &ints);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(s.message().find("\"counts\"") != absl::string_view::npos);
  CHECK(ints.GetAsDouble(0) == 7);
}

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

TEST_CASE("Optimizers: saved and loaded state continues bit-exactly", "[optimizer][state]") {
  TestRng rng;
  INFO(rng.Describe());
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/optimizer_state.bin";
  for (const std::string& name : OptimizerNames()) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
      INFO(name << " " << DTypeName(dtype));
      OptimizerConfig config = RandomConfig(name, rng);
      config.lr_scheduler.type = "factor";
      config.lr_scheduler.step = 2;
      config.lr_scheduler.factor = 0.7;
      auto original = MakeOptimizer(config);
      auto restored = MakeOptimizer(config);
      REQUIRE(original.ok());
      REQUIRE(restored.ok());
      const std::vector<Key> keys = {Key(1), Key(2)};
      std::vector<Tensor> weights = {rng.RandomTensor(dtype, {70}), rng.RandomTensor(dtype, {9})};
      for (int step = 0; step < 3; ++step) {
        for (size_t k = 0; k < keys.size(); ++k) {
          REQUIRE((*original)
                      ->Update(keys[k], rng.RandomTensor(dtype, weights[k].shape()), &weights[k])
                      .ok());
        }
      }
      REQUIRE(SaveOptimizerStateFile(path, (*original)->SaveState()).ok());
      auto loaded = LoadOptimizerStateFile(path);
      REQUIRE(loaded.ok());
      REQUIRE((*restored)->LoadState(*loaded, nullptr).ok());
      std::vector<Tensor> copies = {weights[0].Clone(), weights[1].Clone()};
      for (int step = 0; step < 4; ++step) {
        for (size_t k = 0; k < keys.size(); ++k) {
          const Tensor grad = rng.RandomTensor(dtype, weights[k].shape());
          REQUIRE((*original)->Update(keys[k], grad, &weights[k]).ok());
          REQUIRE((*restored)->Update(keys[k], grad, &copies[k]).ok());
          REQUIRE(std::memcmp(weights[k].data(), copies[k].data(), weights[k].byte_size()) == 0);
        }
      }
    }
  }
  // Another optimizer's state is refused.
  OptimizerConfig adam;
  adam.name = "adam";
  OptimizerConfig sgd;
  sgd.name = "sgd";
  sgd.momentum = 0.9;
  auto a = MakeOptimizer(adam);
  auto s = MakeOptimizer(sgd);
  Tensor w = Tensor::Full(DType::kFloat32, {4}, 1);
  REQUIRE((*a)->Update(Key(1), Tensor::Full(DType::kFloat32, {4}, 0.5), &w).ok());
  const absl::Status refused = (*s)->LoadState((*a)->SaveState(), nullptr);
  CHECK(absl::IsInvalidArgument(refused));
  CHECK(refused.message().find("adam") != absl::string_view::npos);
}

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

TEST_CASE("Optimizers: the registry makes them from text", "[optimizer]") {
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  REQUIRE(RegisterOptimizers(&registry).ok());
  for (const std::string& name : OptimizerNames()) {
    auto updater = registry.Create(name, "");
    INFO(name);
    REQUIRE(updater.ok());
    CHECK((*updater)->name() == name);
  }
  auto parsed = ParseOptimizerText("adam", "lr=0.02, beta1=0.8 wd=1e-4");
  REQUIRE(parsed.ok());
  CHECK(*parsed->learning_rate == 0.02);
  CHECK(*parsed->beta1 == 0.8);
  CHECK(parsed->wd == 1e-4);
  CHECK(ParseOptimizerText("rmsprop", "centered=true")->centered == true);
  CHECK(absl::IsInvalidArgument(ParseOptimizerText("adam", "momentum=0.9").status()));
  CHECK(absl::IsInvalidArgument(ParseOptimizerText("adam", "beta1=x").status()));
  CHECK(absl::IsInvalidArgument(ParseOptimizerText("adam", "gamma=1").status()));
  // As MXNet, only what cannot give a number is refused: a negative rate is legal.
  CHECK(registry.Create("adam", "lr=-1").ok());
  CHECK(registry.Create("sgd", "lr=-1 momentum=1").ok());
  CHECK(absl::IsInvalidArgument(registry.Create("adam", "lr=nan").status()));
  CHECK(absl::IsInvalidArgument(registry.Create("adam", "beta1=1").status()));
  CHECK(absl::IsInvalidArgument(registry.Create("adam", "beta2=inf").status()));
}

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

// Runs `steps` random gradients through `updater` and `ref` on one key; returns the weights.
void RunSteps(Updater* updater, Reference* ref, const Key& key, int steps, TestRng& rng,
              Tensor* weight, std::vector<double>* reference) {
  for (int step = 0; step < steps; ++step) {
    const Tensor grad = rng.RandomTensor(DType::kFloat64, weight->shape());
    REQUIRE(updater->Update(key, grad, weight).ok());
    ref->Step(*reference, testing::ToDoubles(grad));
  }
}

TEST_CASE("Optimizers: keep_state changes hyper-parameters and carries the state over",
          "[optimizer][state]") {
  TestRng rng;
  INFO(rng.Describe());
  for (const std::string name : {"torch_sgd", "torch_adam", "torch_adamw", "adam"}) {
    INFO(name);
    OptimizerConfig c = RandomConfig(name, rng);
    if (name == "torch_sgd") c.momentum = 0.9;
    auto first = MakeOptimizer(c);
    REQUIRE(first.ok());
    Tensor weight = rng.RandomTensor(DType::kFloat64, {rng.Int(20, 90)});
    std::vector<double> reference = testing::ToDoubles(weight);
    Reference ref{c};
    RunSteps(first->get(), &ref, Key("w"), 3, rng, &weight, &reference);
    // A learning-rate change, as a torch scheduler makes it: the reference keeps its state.
    c.learning_rate = *c.learning_rate * rng.Uniform(0.1, 0.5);
    c.wd = rng.Uniform(0.0, 0.01);
    c.keep_state = true;
    ref.c = c;
    auto second = MakeOptimizer(c);
    REQUIRE(second.ok());
    REQUIRE(CheckKeepsState(c, (*first)->name()).ok());
    REQUIRE((*second)->TakeState(first->get()).ok());
    RunSteps(second->get(), &ref, Key("w"), 3, rng, &weight, &reference);
    CHECK(RelativeError(testing::ToDoubles(weight), reference) < 1e-12);
    // Without the state the same steps give other weights: the carried state mattered.
    CHECK((*second)->SaveState().parts.at(0).updates == 6);
  }
  OptimizerConfig adam;
  adam.name = "adam";
  adam.keep_state = true;
  const absl::Status refused = CheckKeepsState(adam, "sgd");
  CHECK(absl::IsFailedPrecondition(refused));
  CHECK(refused.message().find("\"sgd\"") != absl::string_view::npos);
  CHECK(refused.message().find("\"adam\"") != absl::string_view::npos);
  adam.keep_state = false;
  CHECK(CheckKeepsState(adam, "sgd").ok());
}

TEST_CASE("Optimizers: key_prefix leaves other keys to ASSIGN; lr_mult and wd_mult scale per key",
          "[optimizer]") {
  TestRng rng;
  INFO(rng.Describe());
  OptimizerConfig c = RandomConfig("torch_sgd", rng);
  c.momentum = 0.5;
  c.wd = 0.01;
  c.key_prefix = "torch/opt/";
  c.lr_mult = {{"torch/opt/b", rng.Uniform(0.1, 3.0)}};
  c.wd_mult = {{"torch/opt/b", 0.0}, {"torch/opt/c", rng.Uniform(2.0, 5.0)}};
  auto updater = MakeOptimizer(c);
  REQUIRE(updater.ok());
  for (const std::string key : {"torch/opt/a", "torch/opt/b", "torch/opt/c"}) {
    INFO(key);
    OptimizerConfig scaled = c;
    scaled.learning_rate = *c.learning_rate * (c.lr_mult.count(key) ? c.lr_mult.at(key) : 1.0);
    scaled.wd = c.wd * (c.wd_mult.count(key) ? c.wd_mult.at(key) : 1.0);
    Reference ref{scaled};
    Tensor weight = rng.RandomTensor(DType::kFloat64, {rng.Int(20, 90)});
    std::vector<double> reference = testing::ToDoubles(weight);
    RunSteps(updater->get(), &ref, Key(key), 4, rng, &weight, &reference);
    CHECK(RelativeError(testing::ToDoubles(weight), reference) < 1e-12);
  }
  // Keys outside the prefix, integer ones and integer values included, store what they get.
  for (const Key& key : {Key("params/w"), Key(7)}) {
    for (DType dtype : {DType::kFloat32, DType::kInt64}) {
      Tensor stored = rng.RandomTensor(dtype, {5});
      const Tensor received = rng.RandomTensor(dtype, {5});
      REQUIRE((*updater)->Update(key, received, &stored).ok());
      CHECK(testing::ToDoubles(stored) == testing::ToDoubles(received));
    }
  }
  CHECK((*updater)->SaveState().parts.size() == 3);
  c.lr_mult["x"] = std::nan("");
  const absl::Status refused = MakeOptimizer(c).status();
  CHECK(absl::IsInvalidArgument(refused));
  CHECK(refused.message().find("lr_mult of key \"x\"") != absl::string_view::npos);
}

}  // namespace
}  // namespace kvstore
