// Tests of server/daemon_options.h for the scheduler: one launch environment gives the same
// scheduler whether the program reads its flags (none given) or the SDK makes the daemon from
// DMLC_ROLE, and what the environment decides is what the header's table says.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "server/daemon_options.h"
#include "server/daemon_options_testing.h"
#include "server/scheduler/scheduler_flags.h"

namespace kvstore {
namespace {

using testing::Environment;
using testing::SecretFile;
using testing::Vars;

void CheckSame(const SchedulerDaemonOptions& a, const SchedulerDaemonOptions& b) {
  CHECK(a.host == b.host);
  CHECK(a.port == b.port);
  CHECK(a.advertise_host == b.advertise_host);
  CHECK(a.job.num_servers == b.job.num_servers);
  CHECK(a.job.num_workers == b.job.num_workers);
  CHECK(a.job.replicas == b.job.replicas);
  CHECK(a.job.elastic == b.job.elastic);
  CHECK(a.security.secret == b.security.secret);
}

TEST_CASE(
    "DaemonOptions: a scheduler's flags left unset give the SDK's daemon of the same "
    "environment",
    "[daemon_options]") {
  const std::string secret = SecretFile();
  const std::vector<Vars> environments = {
      {{"DMLC_ROLE", "scheduler"},
       {"DMLC_PS_ROOT_URI", "127.0.0.1"},
       {"DMLC_PS_ROOT_PORT", "9000"},
       {"DMLC_NUM_SERVER", "3"},
       {"DMLC_NUM_WORKER", "5"},
       {"KV_REPLICAS", "2"},
       {"KV_ELASTIC", "1"},
       {"KV_SECRET_FILE", secret}},
      {{"DMLC_PS_ROOT_URI", "10.0.0.5"}, {"DMLC_PS_ROOT_PORT", "9000"}, {"KV_INSECURE", "1"}},
      {{"KV_HOST", "0.0.0.0"},
       {"DMLC_PS_ROOT_URI", "10.0.0.5"},
       {"KV_SECRET_FILE", secret},
       {"KV_INSECURE", "1"}},
  };
  for (const Vars& vars : environments) {
    const JobEnvironment env = Environment(vars);
    auto from_flags = SchedulerOptionsFrom(env, SchedulerCommandLineFromFlags());
    auto from_role = SchedulerOptionsFrom(env, {});
    INFO(from_flags.status().ToString() << " / " << from_role.status().ToString());
    REQUIRE(from_flags.ok());
    REQUIRE(from_role.ok());
    CheckSame(*from_flags, *from_role);
  }
  const SchedulerDaemonOptions first = *SchedulerOptionsFrom(Environment(environments[0]), {});
  CHECK(first.host == "127.0.0.1");
  CHECK(first.port == 9000);
  CHECK(first.advertise_host == "127.0.0.1");
  CHECK(first.job.num_servers == 3);
  CHECK(first.job.num_workers == 5);
  CHECK(first.job.replicas == 2);
  CHECK(first.job.elastic);
  const SchedulerDaemonOptions remote = *SchedulerOptionsFrom(Environment(environments[1]), {});
  CHECK(remote.host == "10.0.0.5");  // The address the job reaches it at.
  CHECK(remote.advertise_host == "10.0.0.5");
  CHECK(remote.port == 9000);
  CHECK(remote.job.num_servers == 1);
  const SchedulerDaemonOptions any = *SchedulerOptionsFrom(Environment(environments[2]), {});
  CHECK(any.host == "0.0.0.0");
  CHECK(any.advertise_host == "10.0.0.5");
  CHECK(any.port == 0);
}

TEST_CASE("DaemonOptions: a scheduler bound off loopback without TLS is refused",
          "[daemon_options]") {
  const absl::Status clear =
      SchedulerOptionsFrom(Environment({{"KV_HOST", "0.0.0.0"}, {"KV_SECRET_FILE", SecretFile()}}),
                           {})
          .status();
  CHECK(absl::IsFailedPrecondition(clear));
  CHECK(clear.message().find("without TLS") != absl::string_view::npos);
}

}  // namespace
}  // namespace kvstore
