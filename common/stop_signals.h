// StopSignals: turns SIGTERM and SIGINT into a call, for daemons that stop cleanly when a
// supervisor (systemd, Kubernetes, Slurm, a launcher, Ctrl-C) asks.
//
//   auto stop = StopSignals::Install([&](int signal) { daemon->Shutdown(); });
//   ... daemon->Wait() ...
//
// Install replaces the process's handlers of SIGTERM and SIGINT with one that only records the
// signal (async-signal-safe), and starts a thread that notices it within 20 ms and calls
// `on_signal(signal)` once, on that thread. The previous handlers come back when the object is
// destroyed. Signals are process-wide, so at most one StopSignals may exist at a time
// (FailedPrecondition otherwise).
#ifndef KVSTORE_COMMON_STOP_SIGNALS_H_
#define KVSTORE_COMMON_STOP_SIGNALS_H_

#include <signal.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"

namespace kvstore {

class StopSignals {
 public:
  static absl::StatusOr<std::unique_ptr<StopSignals>> Install(
      std::function<void(int signal)> on_signal);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // received returns the signal that arrived (0: none yet).
  int received() const;

  // Name returns "SIGTERM", "SIGINT" or "signal N".
  static std::string Name(int signal);

 private:
  StopSignals() = default;
  std::function<void(int)> on_signal_;
  struct sigaction previous_term_ {};
  struct sigaction previous_int_ {};
  std::thread watcher_;
  absl::Notification stop_;
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_STOP_SIGNALS_H_
