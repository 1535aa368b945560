#include "client/timer.h"

#include <utility>

#include "common/named_thread.h"

namespace kvstore {

Timer::Timer() {
  thread_ = NamedThread("kv-timer", [this] { Loop(); });
}

Timer::~Timer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void Timer::After(absl::Duration delay, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  due_.emplace(absl::Now() + delay, std::move(fn));
}

void Timer::Loop() {
  mu_.Lock();
  while (!stop_) {
    // Sleeps until the earliest due time, or until After or the destructor changes what the
    // loop waits for (absl::Condition re-evaluates it on every release of mu_).
    const absl::Time first = due_.empty() ? absl::InfiniteFuture() : due_.begin()->first;
    if (first > absl::Now()) {
      const auto changed = [this, first]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || (!due_.empty() && due_.begin()->first < first);
      };
      mu_.AwaitWithDeadline(absl::Condition(&changed), first);
      continue;
    }
    std::function<void()> fn = std::move(due_.begin()->second);
    due_.erase(due_.begin());
    mu_.Unlock();
    fn();
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace kvstore
