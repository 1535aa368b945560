// EtcdClient against a real etcd (Debian's etcd-server, started here): leases granted, kept
// alive, expiring and revoked; a key created under a lease once only (the election), read, and
// gone with its lease; bad endpoints named.
#include "common/etcd_client.h"

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/etcd_server.h"
#include "tests/test_files.h"
#include "tests/test_util.h"

namespace kvstore::testing {
namespace {

TEST_CASE("EtcdClient: the election a scheduler standby runs, on a real etcd",
          "[etcd][integration]") {
  TestRng rng;
  INFO(rng.Describe());
  std::unique_ptr<EtcdServer> etcd = EtcdServer::Start();
  const EtcdClient client = EtcdClient::Create("http://" + etcd->endpoint()).value();
  const std::string key = absl::StrCat("/kvstore/test-", rng.Int(0, 1 << 30), "/leader");
  CHECK(absl::IsNotFound(client.Get(key).status()));

  // Two candidates: the first to create the key under its lease leads; the other reads it.
  const int64_t first = client.GrantLease(absl::Seconds(2)).value();
  const int64_t second = client.GrantLease(absl::Seconds(2)).value();
  CHECK(first != second);
  std::string holder;
  CHECK(client.PutIfAbsent(key, "10.0.0.1:9091", first, &holder).value());
  CHECK(!client.PutIfAbsent(key, "10.0.0.2:9091", second, &holder).value());
  CHECK(holder == "10.0.0.1:9091");
  CHECK(client.Get(key).value() == "10.0.0.1:9091");

  // Kept alive, the lease and its key outlive the TTL.
  const absl::Time kept_until = absl::Now() + absl::Milliseconds(3500);
  while (absl::Now() < kept_until) {
    for (const int64_t lease : {first, second}) {
      const absl::StatusOr<absl::Duration> left = client.KeepAlive(lease);
      INFO(left.status().ToString());
      REQUIRE(left.ok());
      CHECK(*left > absl::ZeroDuration());
    }
    absl::SleepFor(absl::Milliseconds(300));
  }
  CHECK(client.Get(key).value() == "10.0.0.1:9091");

  // Not kept alive, it lapses: the key goes, the other candidate takes it.
  const absl::Time stopped = absl::Now();
  while (client.Get(key).ok()) {
    REQUIRE(absl::Now() - stopped < absl::Seconds(10));
    CHECK(client.KeepAlive(second).ok());
    absl::SleepFor(absl::Milliseconds(50));
  }
  std::printf("the key went %lld ms after its lease was last kept alive\n",
              static_cast<long long>(absl::ToInt64Milliseconds(absl::Now() - stopped)));
  CHECK(absl::IsNotFound(client.KeepAlive(first).status()));
  CHECK(client.PutIfAbsent(key, "10.0.0.2:9091", second, &holder).value());
  CHECK(client.Get(key).value() == "10.0.0.2:9091");
  // Revoked, at once.
  REQUIRE(client.Revoke(second).ok());
  CHECK(absl::IsNotFound(client.Get(key).status()));
  // A key under no lease stays.
  REQUIRE(client.Put(key + "/over", "the job is over").ok());
  CHECK(client.Get(key + "/over").value() == "the job is over");
}

TEST_CASE("EtcdClient: bad endpoints are refused, unreachable ones named", "[etcd]") {
  CHECK(absl::IsInvalidArgument(EtcdClient::Create("").status()));
  CHECK(absl::IsInvalidArgument(EtcdClient::Create("localhost").status()));
  CHECK(absl::IsInvalidArgument(EtcdClient::Create("127.0.0.1:99999").status()));
  const int nobody = FreePort();
  const EtcdClient client =
      EtcdClient::Create(absl::StrCat("127.0.0.1:", nobody), absl::Milliseconds(500)).value();
  const absl::Status status = client.Get("/x").status();
  INFO(status.ToString());
  CHECK(absl::IsUnavailable(status));
  CHECK(absl::StrContains(status.message(), absl::StrCat("127.0.0.1:", nobody)));
}

}  // namespace
}  // namespace kvstore::testing
