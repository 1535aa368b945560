// custom_kvserver: a kvserver built with an updater and a controller of its own, through
// //server:kvserver_lib (see server/kvserver_lib.h).
//
// - Updater "clipped_sum" (config "limit=L", default 1): stored += clip(received, -L, L), for
//   float32 and float64 values. Select it with --updater=clipped_sum or, from a worker,
//   SendCommandToServers(0, "clipped_sum limit=0.5").
// - Controller head 16: replies "updates=N", the number of updates this server applied with
//   clipped_sum (`kvctl command 16 ""`).
//
//   bazel build //examples:custom_kvserver
//   bazel-bin/examples/custom_kvserver --scheduler=HOST:PORT --updater=clipped_sum
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/kvserver_lib.h"

namespace {

std::atomic<int64_t> updates{0};

class ClippedSum final : public kvstore::Updater {
 public:
  explicit ClippedSum(double limit) : limit_(limit) {}

  absl::Status Update(const kvstore::Key& key, const kvstore::Tensor& received,
                      kvstore::Tensor* stored) override {
    switch (stored->dtype()) {
      case kvstore::DType::kFloat32:
        Add(received.data_as<const float>(), stored->data_as<float>(), stored->num_elements());
        break;
      case kvstore::DType::kFloat64:
        Add(received.data_as<const double>(), stored->data_as<double>(), stored->num_elements());
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("clipped_sum takes float32 and float64 values; key ", key.Quoted(),
                         " holds ", kvstore::DTypeName(stored->dtype())));
    }
    ++updates;
    return absl::OkStatus();
  }

  // Element-wise and stateless: any split of a value gives the same bits.
  bool piecewise() const override { return true; }
  absl::string_view name() const override { return "clipped_sum"; }

 private:
  template <typename T>
  void Add(const T* received, T* stored, int64_t n) const {
    const T limit = static_cast<T>(limit_);
    for (int64_t i = 0; i < n; ++i) stored[i] += std::clamp(received[i], -limit, limit);
  }

  const double limit_;
};

absl::StatusOr<std::unique_ptr<kvstore::Updater>> MakeClippedSum(absl::string_view config) {
  double limit = 1.0;
  config = absl::StripAsciiWhitespace(config);
  if (!config.empty()) {
    if (!absl::ConsumePrefix(&config, "limit=") || !absl::SimpleAtod(config, &limit) ||
        !(limit > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("clipped_sum config \"", config, "\" is not limit=POSITIVE_NUMBER"));
    }
  }
  return std::unique_ptr<kvstore::Updater>(new ClippedSum(limit));
}

}  // namespace

int main(int argc, char** argv) {
  return kvstore::KVServerMain(argc, argv, [](kvstore::KVServerOptions* options) {
    options->custom_controller = [](int head, absl::string_view) -> absl::StatusOr<std::string> {
      if (head != 16) {
        return absl::InvalidArgumentError(
            absl::StrCat("custom_kvserver knows head 16, not ", head));
      }
      return absl::StrCat("updates=", updates.load());
    };
    return options->registry.Register("clipped_sum", MakeClippedSum);
  });
}
