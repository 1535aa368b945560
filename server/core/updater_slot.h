// UpdaterSlot: the updater a kvserver's engine applies, and the one waiting to replace it.
//
// A replacement (SetOptimizer, a controller's "sum", a restored checkpoint) is queued and
// installed only when the engine says it may be: in dist_sync, once no round is open, so that a
// round is never applied half with one updater and half with another; a replacement that takes
// the running updater's state (keep_state) also waits until no push is being applied outside
// rounds, since moving the state under a running update would race it.
//
// In dist_async an engine starts without a chosen updater unless the kvserver was given one
// (ServerEngineOptions::updater_chosen); pushes are refused until one is set (CheckChosen).
//
// Threading: thread-safe. current() may be called from any thread, and the updater it returns
// stays alive while held even if it has been replaced.
#ifndef KVSTORE_SERVER_CORE_UPDATER_SLOT_H_
#define KVSTORE_SERVER_CORE_UPDATER_SLOT_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/key.h"
#include "common/store/updater.h"

namespace kvstore {

class UpdaterSlot {
 public:
  // `initial` must not be null; `chosen` is false for a dist_async engine without a chosen
  // updater.
  UpdaterSlot(std::unique_ptr<Updater> initial, bool chosen);

  // Queue replaces the queued updater, if any, by `next` and counts as a chosen updater. With
  // `keep_state`, `next` takes the running updater's state when installed (Updater::TakeState;
  // a failure there is logged and `next` starts afresh); a second Queue before the first is
  // installed keeps the state only if both ask to.
  void Queue(std::unique_ptr<Updater> next, bool keep_state);

  // InstallIfIdle installs the queued updater, if any, unless `rounds_open`, or unless
  // `pushes_applying` and it takes the running updater's state. Returns whether it did.
  bool InstallIfIdle(bool rounds_open, bool pushes_applying);

  // current returns the updater to apply now.
  std::shared_ptr<Updater> current() const;
  std::string name() const;

  // CheckChosen returns FailedPrecondition naming `key` while no updater was chosen (a
  // dist_async push then has nothing meaningful to apply: MXNet refuses it too).
  absl::Status CheckChosen(const Key& key) const;

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<Updater> current_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Updater> queued_ ABSL_GUARDED_BY(mu_);
  bool queued_keeps_state_ ABSL_GUARDED_BY(mu_) = false;
  // Read without the lock on every push: whether an updater is queued, and was ever chosen.
  std::atomic<bool> any_queued_{false};
  std::atomic<bool> chosen_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_UPDATER_SLOT_H_
