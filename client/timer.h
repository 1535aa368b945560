// Timer: runs functions after a delay, on a thread of its own, in order of their due times.
//
// The thread sleeps until the earliest due time (or until a new, earlier one is added) and
// never wakes otherwise: a worker whose servers answer pays nothing for it. The worker uses it
// for the backoff between retries of an unreachable server.
//
// Threading: After may be called from any thread; functions run on the timer's thread and must
// not block for long. The destructor drops the functions not yet due and joins the thread.
#ifndef KVSTORE_CLIENT_TIMER_H_
#define KVSTORE_CLIENT_TIMER_H_

#include <functional>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvstore {

class Timer {
 public:
  Timer();
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // After runs `fn` on the timer's thread once `delay` has passed.
  void After(absl::Duration delay, std::function<void()> fn);

 private:
  void Loop();

  absl::Mutex mu_;
  std::multimap<absl::Time, std::function<void()>> due_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_TIMER_H_
