// KVServerDaemon's options and life cycle, without a job: its scheduler never answers.
#include "server/grpc/kvserver_daemon.h"

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "absl/time/clock.h"

namespace kvstore {
namespace {

// A server whose scheduler never answers: Start returns once it is bound, and the daemon keeps
// trying to register until it is shut down (or for the default two minutes).
KVServerOptions Unregistered() {
  KVServerOptions options;
  options.scheduler_address = "127.0.0.1:1";
  return options;
}

TEST_CASE("KVServerDaemon: serving options out of range are refused, naming the option",
          "[kvserver]") {
  struct Bad {
    const char* name;
    int threads;
    absl::Duration poll;
  };
  for (const Bad& bad :
       {Bad{"serving_threads", -1, absl::Microseconds(250)},
        Bad{"serving_poll", 1, absl::Microseconds(-1)}, Bad{"serving_poll", 1, absl::Seconds(2)}}) {
    INFO(bad.name << " " << bad.threads << " " << absl::FormatDuration(bad.poll));
    KVServerOptions options = Unregistered();
    options.serving_threads = bad.threads;
    options.serving_poll = bad.poll;
    auto daemon = KVServerDaemon::Start(options);
    REQUIRE(absl::IsInvalidArgument(daemon.status()));
    CHECK(absl::StrContains(daemon.status().message(), bad.name));
  }
}

TEST_CASE("KVServerDaemon: limits out of range are refused, naming them", "[kvserver][limits]") {
  for (const auto& [max_value_bytes, budget] :
       {std::pair<int64_t, int64_t>{0, 0}, {-1, 0}, {1 << 20, -1}}) {
    KVServerOptions options = Unregistered();
    options.max_value_bytes = max_value_bytes;
    options.memory_budget_bytes = budget;
    auto daemon = KVServerDaemon::Start(options);
    REQUIRE(absl::IsInvalidArgument(daemon.status()));
    CHECK(absl::StrContains(daemon.status().message(), "max_value_bytes"));
  }
}

TEST_CASE("KVServerDaemon: serving_poll from zero to one second starts a server", "[kvserver]") {
  for (const absl::Duration poll :
       {absl::ZeroDuration(), absl::Microseconds(250), absl::Seconds(1)}) {
    INFO(absl::FormatDuration(poll));
    KVServerOptions options = Unregistered();
    options.serving_poll = poll;
    auto daemon = KVServerDaemon::Start(options);
    REQUIRE(daemon.ok());
    CHECK((*daemon)->port() > 0);
  }
}

TEST_CASE("KVServerDaemon: Shutdown ends a registration still waiting for the scheduler",
          "[kvserver]") {
  KVServerOptions options = Unregistered();
  options.register_timeout = absl::Minutes(2);
  auto daemon = KVServerDaemon::Start(options);
  REQUIRE(daemon.ok());
  absl::SleepFor(absl::Milliseconds(200));  // Let it start waiting.
  const absl::Time start = absl::Now();
  (*daemon)->Shutdown();
  const absl::Status status = (*daemon)->Wait();
  const absl::Duration took = absl::Now() - start;
  INFO(status << " after " << absl::FormatDuration(took));
  CHECK(absl::IsCancelled(status));
  CHECK(took < absl::Seconds(30));  // Not the registration's two minutes.
}

}  // namespace
}  // namespace kvstore
