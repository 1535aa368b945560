#include "client/timer.h"

#include <dirent.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

// VoluntarySwitches returns how often the thread named `name` of this process has slept, from
// /proc (-1 when no such thread exists).
int64_t VoluntarySwitches(const std::string& name) {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int64_t switches = -1;
  while (dirent* entry = readdir(dir)) {
    const std::string task = std::string("/proc/self/task/") + entry->d_name;
    std::ifstream comm(task + "/comm");
    std::string comm_name;
    if (!std::getline(comm, comm_name) || comm_name != name) continue;
    std::ifstream status(task + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) {
        switches = std::stoll(line.substr(line.find(':') + 1));
      }
    }
  }
  closedir(dir);
  return switches;
}

TEST_CASE("Timer: functions run once each, in order of due time, not before it", "[timer]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  const int n = static_cast<int>(rng.Int(5, 20));
  absl::Mutex mu;
  std::vector<int> order;
  std::vector<absl::Duration> early;
  std::vector<absl::Duration> delays;
  {
    Timer timer;
    const absl::Time start = absl::Now();
    for (int i = 0; i < n; ++i) {
      // Distinct delays, 10 ms apart, in random order.
      delays.push_back(absl::Milliseconds(10 * rng.Int(1, 200) + i % 10));
    }
    absl::Notification all;
    for (int i = 0; i < n; ++i) {
      timer.After(delays[i] - (absl::Now() - start), [&, i] {
        absl::MutexLock lock(&mu);
        order.push_back(i);
        if (absl::Now() - start < delays[i] - absl::Milliseconds(1)) {
          early.push_back(delays[i]);
        }
        if (static_cast<int>(order.size()) == n) all.Notify();
      });
    }
    REQUIRE(all.WaitForNotificationWithTimeout(absl::Seconds(30)));
  }
  REQUIRE(static_cast<int>(order.size()) == n);
  CHECK(early.empty());
  for (int i = 1; i < n; ++i) CHECK(delays[order[i - 1]] <= delays[order[i]]);
}

TEST_CASE("Timer: an earlier function added while the timer sleeps runs first", "[timer]") {
  Timer timer;
  absl::Notification late_ran;
  absl::Notification soon_ran;
  timer.After(absl::Hours(1), [&] { late_ran.Notify(); });
  absl::SleepFor(absl::Milliseconds(20));  // The timer now sleeps until the hour is up.
  timer.After(absl::Milliseconds(5), [&] { soon_ran.Notify(); });
  CHECK(soon_ran.WaitForNotificationWithTimeout(absl::Seconds(5)));
  CHECK_FALSE(late_ran.HasBeenNotified());
}

TEST_CASE("Timer: an idle timer sleeps until its next due time", "[timer]") {
  Timer timer;
  timer.After(absl::Hours(1), [] {});
  absl::SleepFor(absl::Milliseconds(20));
  const int64_t before = VoluntarySwitches("kv-timer");
  REQUIRE(before >= 0);
  absl::SleepFor(absl::Milliseconds(500));
  const int64_t after = VoluntarySwitches("kv-timer");
  // A timer that polled every few milliseconds would have woken about a hundred times.
  CHECK(after - before <= 2);
}

TEST_CASE("Timer: functions not yet due when it is destroyed never run", "[timer]") {
  bool ran = false;
  {
    Timer timer;
    timer.After(absl::Seconds(10), [&] { ran = true; });
  }
  CHECK_FALSE(ran);
}

}  // namespace
}  // namespace kvstore
