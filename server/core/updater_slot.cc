#include "server/core/updater_slot.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace kvstore {

UpdaterSlot::UpdaterSlot(std::unique_ptr<Updater> initial, bool chosen)
    : current_(std::move(initial)), chosen_(chosen) {}

void UpdaterSlot::Queue(std::unique_ptr<Updater> next, bool keep_state) {
  absl::MutexLock lock(&mu_);
  queued_keeps_state_ = keep_state && (queued_ == nullptr || queued_keeps_state_);
  queued_ = std::move(next);
  any_queued_.store(true);
  chosen_.store(true);
}

bool UpdaterSlot::InstallIfIdle(bool rounds_open, bool pushes_applying) {
  if (!any_queued_.load()) return false;
  absl::MutexLock lock(&mu_);
  if (queued_ == nullptr || rounds_open || (queued_keeps_state_ && pushes_applying)) return false;
  if (queued_keeps_state_) {
    if (absl::Status s = queued_->TakeState(current_.get()); !s.ok()) {
      spdlog::warn("the new updater {} starts without the state of {}: {}",
                   std::string(queued_->name()), std::string(current_->name()),
                   std::string(s.message()));
    }
  }
  current_ = std::move(queued_);
  any_queued_.store(false);
  return true;
}

std::shared_ptr<Updater> UpdaterSlot::current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

std::string UpdaterSlot::name() const { return std::string(current()->name()); }

absl::Status UpdaterSlot::CheckChosen(const Key& key) const {
  if (chosen_.load()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "key ", key.Quoted(),
      ": dist_async push, but no updater is set on the servers (MXNet: \"Updater needs to be "
      "set for async mode\"): call SetOptimizer (e.g. sgd) or SendCommandToServers(0, "
      "\"sum\") on a worker first, or start the kvservers with --updater=NAME"));
}

}  // namespace kvstore
