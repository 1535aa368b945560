#include "server/core/sgd_updater.h"

#include <algorithm>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvstore {
namespace {

class SgdUpdater final : public Updater {
 public:
  explicit SgdUpdater(const SgdConfig& config) : config_(config) {}

  absl::Status Update(const Key& key, const Tensor& received, Tensor* stored) override {
    return UpdateAt(key, 0, received, stored);
  }

  absl::Status UpdateAt(const Key& key, int64_t offset, const Tensor& received,
                        Tensor* stored) override {
    if (!IsFloatingPoint(stored->dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sgd updates float values only; key ", key.Quoted(), " holds ",
          DTypeName(stored->dtype())));
    }
    const int64_t n = stored->num_elements();
    switch (stored->dtype()) {
      case DType::kFloat32:
        Apply({key, offset}, received.data_as<float>(), stored->data_as<float>(), n);
        break;
      case DType::kFloat64:
        Apply({key, offset}, received.data_as<double>(), stored->data_as<double>(), n);
        break;
      default: {
        // Half types: through float32, element by element.
        std::vector<float> grad(n), weight(n);
        for (int64_t i = 0; i < n; ++i) {
          grad[i] = static_cast<float>(received.GetAsDouble(i));
          weight[i] = static_cast<float>(stored->GetAsDouble(i));
        }
        Apply({key, offset}, grad.data(), weight.data(), n);
        for (int64_t i = 0; i < n; ++i) stored->SetFromDouble(i, weight[i]);
      }
    }
    return absl::OkStatus();
  }

  absl::string_view name() const override { return "sgd"; }

 private:
  // Momentum is kept per (key, first element): a kvserver updates big values chunk by chunk.
  using Part = std::pair<Key, int64_t>;

  // State returns the momentum of `part`, zeroed when new or resized. Calls for different parts
  // may run concurrently; the vectors of a node_hash_map stay where they are.
  std::vector<double>& State(const Part& part, int64_t n) {
    absl::MutexLock lock(&mu_);
    std::vector<double>& state = momentum_[part];
    if (state.size() != static_cast<size_t>(n)) state.assign(n, 0.0);
    return state;
  }

  template <typename T>
  void Apply(const Part& part, const T* grad, T* weight, int64_t n) {
    const T lr = static_cast<T>(config_.lr), wd = static_cast<T>(config_.wd);
    const T rescale = static_cast<T>(config_.rescale_grad);
    const T clip = static_cast<T>(config_.clip_gradient);
    auto gradient = [&](int64_t i) {
      T g = rescale * grad[i];
      if (clip > 0) g = std::clamp(g, -clip, clip);
      return g + wd * weight[i];
    };
    if (config_.momentum == 0) {
      for (int64_t i = 0; i < n; ++i) weight[i] -= lr * gradient(i);
      return;
    }
    std::vector<double>& state = State(part, n);
    const double momentum = config_.momentum;
    for (int64_t i = 0; i < n; ++i) {
      state[i] = momentum * state[i] - static_cast<double>(lr * gradient(i));
      weight[i] += static_cast<T>(state[i]);
    }
  }

  const SgdConfig config_;
  absl::Mutex mu_;
  absl::node_hash_map<Part, std::vector<double>> momentum_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

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

std::unique_ptr<Updater> MakeSgdUpdater(const SgdConfig& config) {
  return std::make_unique<SgdUpdater>(config);
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
