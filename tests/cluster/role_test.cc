// One program for every role, as MXNet launches a job: deploy/launch.py --same-command runs
// tests/cluster/role_job as the scheduler, 2 servers and 2 workers (DMLC_ROLE per process);
// the workers train and match a float64 replay. Also the role predicates, InitPSEnv, and
// dist_async without an updater across real processes.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/kvstore.h"
#include "tests/cluster/cluster_util.h"

namespace kvstore::testing {
namespace {

std::unique_ptr<Process> LaunchSameCommand(const std::string& mode, int steps) {
  return StartProcess(absl::StrCat("launch-", mode),
                      {"/usr/bin/env", "python3", Runfile("deploy/launch.py"), "-n", "2", "-s", "2",
                       "--same-command", "--timeout", "90", "--", Runfile("tests/cluster/role_job"),
                       mode, absl::StrCat(steps)},
                      {{"KV_TEST_SEED", absl::StrCat(TestSeed())}});
}

TEST_CASE(
    "Role API: one program for every role; servers run RunServer with the program's "
    "controller; workers match the float64 reference",
    "[role][launcher]") {
  std::unique_ptr<Process> launcher = LaunchSameCommand("aware", 20);
  ExpectExit(*launcher, 0, 90);
  const std::string out = launcher->output();
  INFO(out);
  CHECK(Contains(out, "one command for every role"));
  CHECK(Contains(out, "[scheduler] role_job aware: this process is a scheduler"));
  CHECK(Contains(out, "[server 1] role_job aware: this process is a server"));
  CHECK(Contains(out, "[worker 0] worker 0: the servers run the program's controller"));
  CHECK(Contains(out, "[worker 0] worker 0: 20 steps of dist_sync match the float64 reference"));
  CHECK(Contains(out, "[worker 1] worker 1: 20 steps of dist_sync match the float64 reference"));
  CHECK(Contains(out, "[server 0] role_job: RunServer returned OK"));
  CHECK(Contains(out, "[server 1] role_job: RunServer returned OK"));
  CHECK(Contains(out, "[scheduler] role_job: RunServer returned OK"));
}

TEST_CASE(
    "Role API: a program that ignores its role serves from its first store call and "
    "exits 0 when the job ends",
    "[role][launcher]") {
  std::unique_ptr<Process> launcher = LaunchSameCommand("naive", 15);
  ExpectExit(*launcher, 0, 90);
  const std::string out = launcher->output();
  INFO(out);
  CHECK(Contains(out, "[server 0] role_job naive: this process is a server"));
  CHECK(Contains(out, "serving as the job's server until the job ends"));
  CHECK(Contains(out, "serving as the job's scheduler until the job ends"));
  CHECK(Contains(out, "[worker 0] worker 0: 15 steps of dist_sync match the float64 reference"));
  CHECK(Contains(out, "[worker 1] worker 1: 15 steps of dist_sync match the float64 reference"));
  CHECK(!Contains(out, "RunServer returned"));
}

TEST_CASE(
    "dist_async across processes: a push with no updater is FAILED_PRECONDITION naming "
    "the key; after SetOptimizer it applies",
    "[role][async]") {
  std::unique_ptr<Process> launcher = LaunchSameCommand("async_no_updater", 1);
  ExpectExit(*launcher, 0, 90);
  const std::string out = launcher->output();
  INFO(out);
  for (const char* worker : {"[worker 0] worker 0", "[worker 1] worker 1"}) {
    CHECK(Contains(out, absl::StrCat(worker, ": refused as expected: FAILED_PRECONDITION")));
    CHECK(Contains(out, absl::StrCat(worker, ": after SetOptimizer the pushes applied")));
  }
  CHECK(Contains(out, "key \"weight\": dist_async push, but no updater is set"));
}

TEST_CASE("Role API: the predicates read DMLC_ROLE, InitPSEnv sets the environment", "[role]") {
  REQUIRE(KVStore::InitPSEnv({{"DMLC_ROLE", "server"}}).ok());
  CHECK(KVStore::IsServerNode());
  CHECK(!KVStore::IsWorkerNode());
  CHECK(!KVStore::IsSchedulerNode());
  REQUIRE(KVStore::InitPSEnv({{"DMLC_ROLE", "scheduler"}}).ok());
  CHECK(KVStore::IsSchedulerNode());
  CHECK(!KVStore::IsServerNode());
  REQUIRE(KVStore::InitPSEnv({{"DMLC_ROLE", "worker"}}).ok());
  CHECK(KVStore::IsWorkerNode());
  // A worker's store does not serve.
  auto local = KVStore::Create("local");
  REQUIRE(local.ok());
  CHECK(absl::IsFailedPrecondition((*local)->RunServer()));
  // A malformed role: no predicate holds, and Create says why.
  REQUIRE(KVStore::InitPSEnv({{"DMLC_ROLE", "boss"}}).ok());
  CHECK(!KVStore::IsWorkerNode());
  CHECK(!KVStore::IsServerNode());
  const auto refused = KVStore::Create("dist_sync");
  REQUIRE(absl::IsInvalidArgument(refused.status()));
  CHECK(Contains(std::string(refused.status().message()), "DMLC_ROLE=\"boss\""));
  // Bad names change nothing.
  const absl::Status bad = KVStore::InitPSEnv({{"A=B", "1"}, {"DMLC_ROLE", "worker"}});
  CHECK(absl::IsInvalidArgument(bad));
  CHECK(!KVStore::IsWorkerNode());
  unsetenv("DMLC_ROLE");
  CHECK(KVStore::IsWorkerNode());
}

TEST_CASE("Role API: a server process without a job secret is refused, naming the variable",
          "[role]") {
  REQUIRE(
      KVStore::InitPSEnv(
          {{"DMLC_ROLE", "server"}, {"DMLC_PS_ROOT_URI", "127.0.0.1"}, {"DMLC_PS_ROOT_PORT", "9"}})
          .ok());
  unsetenv("KV_SECRET_FILE");
  unsetenv("KV_INSECURE");
  auto store = KVStore::Create("dist_sync");
  REQUIRE(store.ok());
  const absl::Status status = (*store)->RunServer();
  INFO(status.ToString());
  CHECK(absl::IsFailedPrecondition(status));
  CHECK(Contains(std::string(status.message()), "KV_SECRET_FILE"));
  CHECK(absl::IsFailedPrecondition((*store)->RunServer()));  // Served once already.
  unsetenv("DMLC_ROLE");
  unsetenv("DMLC_PS_ROOT_URI");
  unsetenv("DMLC_PS_ROOT_PORT");
}

}  // namespace
}  // namespace kvstore::testing
