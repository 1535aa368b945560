#include "common/stop_signals.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace kvstore {
namespace {

// The handler may only touch a lock-free atomic: these are the process's one record of a stop
// signal, owned by the installed StopSignals.
std::atomic<int> received_signal{0};
std::atomic<bool> installed{false};

void RecordSignal(int signal) {
  int expected = 0;
  received_signal.compare_exchange_strong(expected, signal);
}

}  // namespace

absl::StatusOr<std::unique_ptr<StopSignals>> StopSignals::Install(
    std::function<void(int signal)> on_signal) {
  bool expected = false;
  if (!installed.compare_exchange_strong(expected, true)) {
    return absl::FailedPreconditionError("SIGTERM and SIGINT are already handled in this process");
  }
  received_signal.store(0);
  std::unique_ptr<StopSignals> signals(new StopSignals());
  signals->on_signal_ = std::move(on_signal);
  struct sigaction action {};
  action.sa_handler = RecordSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, &signals->previous_term_);
  sigaction(SIGINT, &action, &signals->previous_int_);
  signals->watcher_ = std::thread([s = signals.get()] {
    while (!s->stop_.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
      const int signal = received_signal.load();
      if (signal != 0) {
        s->on_signal_(signal);
        return;
      }
    }
  });
  return signals;
}

StopSignals::~StopSignals() {
  stop_.Notify();
  if (watcher_.joinable()) watcher_.join();
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
  installed.store(false);
}

int StopSignals::received() const { return received_signal.load(); }

std::string StopSignals::Name(int signal) {
  if (signal == SIGTERM) return "SIGTERM";
  if (signal == SIGINT) return "SIGINT";
  return absl::StrCat("signal ", signal);
}

}  // namespace kvstore
