// DistOptions that cannot work are refused before the store tries to join a job.
#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "client/kvstore.h"

namespace kvstore {
namespace {

TEST_CASE("DistOptions: values out of range are refused, naming the option", "[dist][options]") {
  struct Bad {
    const char* name;
    std::function<void(DistOptions*)> set;
  };
  const std::vector<Bad> cases = {
      {"scheduler port", [](DistOptions* o) { o->scheduler_port = 70000; }},
      {"max_inflight", [](DistOptions* o) { o->max_inflight = 0; }},
      {"connections_per_server", [](DistOptions* o) { o->connections_per_server = -1; }},
      {"max_retries", [](DistOptions* o) { o->max_retries = -1; }},
      {"fusion_bytes", [](DistOptions* o) { o->fusion_bytes = -1; }},
  };
  for (const Bad& bad : cases) {
    INFO(bad.name);
    DistOptions options;
    options.scheduler_port = 1;  // Never reached: the options are checked first.
    options.register_timeout = absl::Seconds(1);
    bad.set(&options);
    auto store = KVStore::Create("dist_sync", options);
    REQUIRE(absl::IsInvalidArgument(store.status()));
    CHECK(absl::StrContains(store.status().message(), bad.name));
  }
}

}  // namespace
}  // namespace kvstore
