// Tests of server/daemon_options.h for the kvserver: one launch environment gives the same
// kvserver whether the program reads its flags (none given) or the SDK makes the daemon from
// DMLC_ROLE, and what the environment decides is what the header's table says. (The
// scheduler's half is daemon_options_scheduler_test.cc: the two programs' flags cannot share
// one binary.)
#include "server/daemon_options.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "server/daemon_options_testing.h"
#include "server/kvserver_lib.h"

namespace kvstore {
namespace {

using testing::Environment;
using testing::SecretFile;
using testing::Vars;

void CheckSame(const KVServerOptions& a, const KVServerOptions& b) {
  CHECK(a.host == b.host);
  CHECK(a.port == b.port);
  CHECK(a.advertise_host == b.advertise_host);
  CHECK(a.scheduler_address == b.scheduler_address);
  CHECK(a.requested_rank == b.requested_rank);
  CHECK(a.trace_file == b.trace_file);
  CHECK(a.name_log_lines == b.name_log_lines);
  CHECK(a.security.secret == b.security.secret);
  CHECK(a.security.tls.ca_file == b.security.tls.ca_file);
  CHECK(a.security.tls.mutual == b.security.tls.mutual);
}

TEST_CASE(
    "DaemonOptions: a kvserver's flags left unset give the SDK's daemon of the same "
    "environment",
    "[daemon_options]") {
  const std::string secret = SecretFile();
  struct Case {
    Vars vars;
    std::string host, scheduler;
  };
  const std::vector<Case> cases = {
      // A scheduler on loopback: bind loopback; the rank and the trace file from the
      // environment.
      {{{"DMLC_ROLE", "server"},
        {"DMLC_PS_ROOT_URI", "127.0.0.1"},
        {"DMLC_PS_ROOT_PORT", "9000"},
        {"DMLC_SERVER_ID", "1"},
        {"KV_TRACE_FILE", "/tmp/trace.json"},
        {"KV_SECRET_FILE", secret}},
       "127.0.0.1",
       "127.0.0.1:9000"},
      // A scheduler elsewhere: every interface (what the SDK's daemon did and the program did
      // not: it bound 127.0.0.1, which no other machine reaches).
      {{{"DMLC_ROLE", "server"},
        {"DMLC_PS_ROOT_URI", "10.0.0.5"},
        {"DMLC_PS_ROOT_PORT", "9000"},
        {"KV_INSECURE", "1"}},
       "0.0.0.0",
       "10.0.0.5:9000"},
      // The node's own address, and KV_HOST over everything.
      {{{"DMLC_PS_ROOT_URI", "10.0.0.5"},
        {"DMLC_PS_ROOT_PORT", "9000"},
        {"DMLC_NODE_HOST", "10.0.0.7"},
        {"KV_INSECURE", "1"}},
       "10.0.0.7",
       "10.0.0.5:9000"},
      {{{"DMLC_PS_ROOT_URI", "::1"},
        {"DMLC_PS_ROOT_PORT", "9000"},
        {"KV_HOST", "127.0.0.2"},
        {"KV_SECRET_FILE", secret}},
       "127.0.0.2",
       "[::1]:9000"},
  };
  for (const Case& c : cases) {
    const JobEnvironment env = Environment(c.vars);
    auto from_flags = KVServerOptionsFrom(env, KVServerCommandLineFromFlags());
    auto from_role = KVServerOptionsFrom(env, {});
    INFO(from_flags.status().ToString() << " / " << from_role.status().ToString());
    REQUIRE(from_flags.ok());
    REQUIRE(from_role.ok());
    CheckSame(*from_flags, *from_role);
    CHECK(from_role->host == c.host);
    CHECK(from_role->scheduler_address == c.scheduler);
    CHECK(!from_role->advertise_host.empty());
    CHECK(from_role->advertise_host != "0.0.0.0");
  }
  const KVServerOptions first = *KVServerOptionsFrom(Environment(cases[0].vars), {});
  CHECK(first.requested_rank == 1);
  CHECK(first.trace_file == "/tmp/trace.json");
  CHECK(first.security.secret == "0123456789abcdef0123456789abcdef");
  // What the command line gives wins over the environment.
  DaemonCommandLine given;
  given.host = "127.0.0.3";
  given.scheduler = "127.0.0.9:7";
  given.rank = 4;
  const KVServerOptions overridden = *KVServerOptionsFrom(Environment(cases[0].vars), given);
  CHECK(overridden.host == "127.0.0.3");
  CHECK(overridden.scheduler_address == "127.0.0.9:7");
  CHECK(overridden.requested_rank == 4);
}

TEST_CASE("DaemonOptions: refusals name what is missing, the same either way", "[daemon_options]") {
  // No secret and no KV_INSECURE.
  const JobEnvironment env =
      Environment({{"DMLC_PS_ROOT_URI", "127.0.0.1"}, {"DMLC_PS_ROOT_PORT", "9000"}});
  for (const DaemonCommandLine& given : {DaemonCommandLine{}, KVServerCommandLineFromFlags()}) {
    const absl::Status status = KVServerOptionsFrom(env, given).status();
    CHECK(absl::IsFailedPrecondition(status));
    CHECK(status.message().find("KV_SECRET_FILE") != absl::string_view::npos);
  }
  // No scheduler anywhere.
  const absl::Status none = KVServerOptionsFrom(Environment({{"KV_INSECURE", "1"}}), {}).status();
  CHECK(absl::IsInvalidArgument(none));
  CHECK(none.message().find("DMLC_PS_ROOT_URI") != absl::string_view::npos);
  // etcd's endpoints without the job's name, or the name alone.
  for (const testing::Vars& vars :
       std::vector<testing::Vars>{{{"KV_INSECURE", "1"}, {"KV_ETCD_ENDPOINTS", "127.0.0.1:2379"}},
                                  {{"KV_INSECURE", "1"}, {"KV_JOB", "j"}}}) {
    const absl::Status half = KVServerOptionsFrom(Environment(vars), {}).status();
    CHECK(absl::IsInvalidArgument(half));
    CHECK(half.message().find("--etcd and --job") != absl::string_view::npos);
  }
}

TEST_CASE("DaemonOptions: a kvserver finds its scheduler through etcd, on loopback when etcd is",
          "[daemon_options]") {
  const absl::StatusOr<KVServerOptions> options = KVServerOptionsFrom(
      Environment({{"KV_INSECURE", "1"},
                   {"KV_ETCD_ENDPOINTS", "http://127.0.0.1:2379,127.0.0.2:2379"},
                   {"KV_JOB", "train-7"}}),
      {});
  INFO(options.status().ToString());
  REQUIRE(options.ok());
  CHECK(options->etcd_endpoints == "http://127.0.0.1:2379,127.0.0.2:2379");
  CHECK(options->job == "train-7");
  CHECK(options->scheduler_address.empty());
  CHECK(options->host == "127.0.0.1");
  // Flags win over the environment.
  DaemonCommandLine given;
  given.etcd = "10.0.0.5:2379";
  given.job = "other";
  const KVServerOptions flagged = *KVServerOptionsFrom(
      Environment({{"KV_INSECURE", "1"}, {"KV_ETCD_ENDPOINTS", "127.0.0.1:2379"}, {"KV_JOB", "j"}}),
      given);
  CHECK(flagged.etcd_endpoints == "10.0.0.5:2379");
  CHECK(flagged.job == "other");
  CHECK(flagged.host == "0.0.0.0");
}

}  // namespace
}  // namespace kvstore
