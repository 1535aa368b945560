#include "common/store/updater.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/reduce.h"

namespace kvstore {

absl::Status Updater::UpdateSpan(const Key& key, int64_t offset, DType dtype, const void* received,
                                 void* stored, int64_t count) {
  const Tensor in = Tensor::Borrow(const_cast<void*>(received), dtype, Shape{count});
  Tensor out = Tensor::Borrow(stored, dtype, Shape{count});
  return UpdateAt(key, offset, in, &out);
}

absl::Status Updater::UpdateSpanOfSum(const Key& key, int64_t, DType, absl::Span<const void* const>,
                                      void*, int64_t) {
  return absl::UnimplementedError(absl::StrCat("updater \"", name(), "\" (key ", key.Quoted(),
                                               ") does not merge a sum in place"));
}

namespace {

class FunctionUpdater final : public Updater {
 public:
  FunctionUpdater(std::string name, UpdateFunction function)
      : name_(std::move(name)), function_(std::move(function)) {}

  absl::Status Update(const Key& key, const Tensor& received, Tensor* stored) override {
    absl::MutexLock lock(&mu_);  // User functions need not be thread-safe.
    function_(key, received, stored);
    return absl::OkStatus();
  }
  absl::string_view name() const override { return name_; }

 private:
  absl::Mutex mu_;
  std::string name_;
  UpdateFunction function_;
};

class AssignUpdater final : public Updater {
 public:
  absl::Status Update(const Key&, const Tensor& received, Tensor* stored) override {
    return CopyInto(received, stored);
  }
  bool piecewise() const override { return true; }
  absl::Status UpdateSpan(const Key&, int64_t, DType dtype, const void* received, void* stored,
                          int64_t count) override {
    if (received != stored) std::memmove(stored, received, DTypeSize(dtype) * count);
    return absl::OkStatus();
  }
  bool sums_in_place() const override { return true; }
  absl::Status UpdateSpanOfSum(const Key&, int64_t, DType dtype,
                               absl::Span<const void* const> received, void* stored,
                               int64_t count) override {
    SumRaw(dtype, received.data(), received.size(), stored, count, /*accumulate=*/false);
    return absl::OkStatus();
  }
  absl::string_view name() const override { return "assign"; }
};

class SumUpdater final : public Updater {
 public:
  absl::Status Update(const Key&, const Tensor& received, Tensor* stored) override {
    return AddInto(received, stored);
  }
  bool piecewise() const override { return true; }
  absl::Status UpdateSpan(const Key&, int64_t, DType dtype, const void* received, void* stored,
                          int64_t count) override {
    AddRaw(dtype, received, stored, count);
    return absl::OkStatus();
  }
  bool sums_in_place() const override { return true; }
  absl::Status UpdateSpanOfSum(const Key&, int64_t, DType dtype,
                               absl::Span<const void* const> received, void* stored,
                               int64_t count) override {
    SumRaw(dtype, received.data(), received.size(), stored, count, /*accumulate=*/true);
    return absl::OkStatus();
  }
  absl::string_view name() const override { return "sum"; }
};

// Wraps a factory for a built-in updater that takes no configuration.
template <typename Make>
UpdaterRegistry::Factory NoConfig(absl::string_view name, Make make) {
  return [name = std::string(name),
          make](absl::string_view config) -> absl::StatusOr<std::unique_ptr<Updater>> {
    if (!config.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("updater \"", name, "\" takes no configuration, got \"", config, "\""));
    }
    return make();
  };
}

}  // namespace

std::unique_ptr<Updater> MakeFunctionUpdater(std::string name, UpdateFunction function) {
  return std::make_unique<FunctionUpdater>(std::move(name), std::move(function));
}

std::unique_ptr<Updater> MakeAssignUpdater() { return std::make_unique<AssignUpdater>(); }

std::unique_ptr<Updater> MakeSumUpdater() { return std::make_unique<SumUpdater>(); }

UpdaterRegistry UpdaterRegistry::WithBuiltins() {
  UpdaterRegistry registry;
  registry.factories_.emplace("assign", NoConfig("assign", MakeAssignUpdater));
  registry.factories_.emplace("sum", NoConfig("sum", MakeSumUpdater));
  return registry;
}

absl::Status UpdaterRegistry::Register(std::string name, Factory factory) {
  if (name.empty()) return absl::InvalidArgumentError("updater name is empty");
  if (factories_.count(name) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("updater \"", name, "\" is already registered"));
  }
  factories_.emplace(std::move(name), std::move(factory));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Updater>> UpdaterRegistry::Create(absl::string_view name,
                                                                 absl::string_view config) const {
  auto it = factories_.find(name);
  if (it == factories_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no updater named \"", name, "\"; known: ", absl::StrJoin(Names(), ", ")));
  }
  return it->second(config);
}

std::vector<std::string> UpdaterRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& entry : factories_) names.push_back(entry.first);
  return names;
}

}  // namespace kvstore
