#include "client/split_loop.h"

#include <pthread.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

// RunOnce sums a function of each index through `loop` and checks that every index was
// visited exactly once, in blocks no longer than `block`, against a sequential float64 sum.
void RunOnce(SplitLoop& loop, size_t n, size_t block) {
  INFO("n " << n << ", block " << block);
  std::vector<std::atomic<int>> visits(n);
  for (auto& v : visits) v = 0;
  std::atomic<bool> too_long{false};
  std::vector<double> sums((n + std::max<size_t>(block, 1) - 1) / std::max<size_t>(block, 1));
  loop.Run(n, block, [&](size_t begin, size_t end) {
    if (end - begin > std::max<size_t>(block, 1) || begin % std::max<size_t>(block, 1) != 0) {
      too_long = true;
    }
    double sum = 0;
    for (size_t i = begin; i < end; ++i) {
      visits[i].fetch_add(1);
      sum += std::sin(static_cast<double>(i));
    }
    sums[begin / std::max<size_t>(block, 1)] = sum;
  });
  REQUIRE_FALSE(too_long);
  for (size_t i = 0; i < n; ++i) {
    INFO("index " << i);
    REQUIRE(visits[i] == 1);
  }
  double total = 0, reference = 0;
  for (double s : sums) total += s;
  for (size_t i = 0; i < n; ++i) reference += std::sin(static_cast<double>(i));
  REQUIRE(std::abs(total - reference) <= 1e-9 * static_cast<double>(n + 1));
}

TEST_CASE("SplitLoop visits every index once, in blocks", "[split_loop]") {
  TestRng rng;
  INFO(rng.Describe());
  SplitLoop loop;
  for (int trial = 0; trial < 20; ++trial) {
    const size_t n = static_cast<size_t>(rng.Int(0, 60000));
    const size_t block = static_cast<size_t>(rng.Int(0, 5000));
    RunOnce(loop, n, block);
  }
}

TEST_CASE("SplitLoop runs blocks on two threads at once", "[split_loop]") {
  // Whichever thread runs block 0 holds it until another thread has begun a block: the
  // caller cannot, so the helper must (bounded: 10 s, then the test fails).
  SplitLoop loop;
  for (int trial = 0; trial < 3; ++trial) {
    std::atomic<int> started{0};
    absl::Notification other_began;
    std::atomic<bool> waited_out{false};
    const std::thread::id caller = std::this_thread::get_id();
    std::string helper_name;  // Written by the helper only; read once Run has returned.
    loop.Run(8, 1, [&](size_t begin, size_t) {
      started.fetch_add(1);
      if (std::this_thread::get_id() != caller) {
        char name[16] = {};
        pthread_getname_np(pthread_self(), name, sizeof(name));
        helper_name = name;
      }
      if (begin == 0) {
        if (!other_began.WaitForNotificationWithTimeout(absl::Seconds(10))) waited_out = true;
      } else if (!other_began.HasBeenNotified()) {
        other_began.Notify();
      }
    });
    REQUIRE_FALSE(waited_out);
    REQUIRE(started == 8);
    // The helper is named for profiles and traces.
    REQUIRE(helper_name == "kv-split");
  }
}

TEST_CASE("SplitLoop takes concurrent runs", "[split_loop]") {
  TestRng rng;
  INFO(rng.Describe());
  SplitLoop loop;
  std::vector<std::pair<size_t, size_t>> sizes;
  for (int t = 0; t < 3 * 5; ++t) {
    sizes.emplace_back(static_cast<size_t>(rng.Int(1000, 40000)),
                       static_cast<size_t>(rng.Int(100, 3000)));
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 5; ++r) {
        const auto [n, block] = sizes[t * 5 + r];
        std::vector<std::atomic<int>> visits(n);
        for (auto& v : visits) v = 0;
        loop.Run(n, block, [&](size_t begin, size_t end) {
          for (size_t i = begin; i < end; ++i) visits[i].fetch_add(1);
        });
        for (const auto& v : visits) {
          if (v != 1) failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  REQUIRE(failures == 0);
}

}  // namespace
}  // namespace kvstore
