// The step rule of each optimizer (common/store/optimizer.h): one function per optimizer, chosen
// once when the optimizer is made (StepsFor), run on a part's elements by Optimizer::UpdateAt.
// Internal to common/store/optimizer.cc.
//
// Each rule follows MXNet's update operator of the same name (docs/optimizers.md): `grad` is
// the received value (rescaled by rescale_grad and clipped to clip_gradient by Raw; Pre adds
// wd * w for the optimizers whose weight decay is coupled), `w` the stored weights, updated in
// place; the part's state buffers are allocated at the first step.
//
// Threading: a step runs on one part; steps of different parts may run concurrently.
#ifndef KVSTORE_COMMON_STORE_OPTIMIZER_STEPS_H_
#define KVSTORE_COMMON_STORE_OPTIMIZER_STEPS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/optimizer_config.h"

namespace kvstore {
namespace optimizer_internal {

// Hyper: the configuration with every default resolved.
struct Hyper {
  std::string name;
  double lr = 0.01;
  double wd = 0, rescale = 1, clip = -1;
  double momentum = 0, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8, rho = 0.9;
  bool centered = false, bias_correction = true, nesterov = false;
  double clip_weights = -1, schedule_decay = 0.004, lamda1 = 0.01, beta = 1, wd_lh = 0;
  double eta = 0.001;
  std::optional<double> lower_bound, upper_bound;
  LrScheduleConfig schedule;
};

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

// StepFunctions: an optimizer's step for float and for double weights: (hyper-parameters,
// the part's state, its update count t, the learning rate now, whether LARS skips the key,
// gradient, weights, element count).
struct StepFunctions {
  using Float = void (*)(const Hyper&, PartState*, int64_t, double, bool, const float*, float*,
                         int64_t);
  using Double = void (*)(const Hyper&, PartState*, int64_t, double, bool, const double*, double*,
                          int64_t);
  Float f32 = nullptr;
  Double f64 = nullptr;
};

// StepsFor returns the step functions of the optimizer `name` (one of OptimizerNames());
// InvalidArgument naming it otherwise.
absl::StatusOr<StepFunctions> StepsFor(absl::string_view name);

}  // namespace optimizer_internal
}  // namespace kvstore

#endif  // KVSTORE_COMMON_STORE_OPTIMIZER_STEPS_H_
