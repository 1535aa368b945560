#include "common/environment.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <string>

namespace kvstore {
namespace {

Getenv From(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST_CASE("ReadJobEnvironment: MXNet's DMLC variables map onto the job", "[environment]") {
  auto env = ReadJobEnvironment(From({{"DMLC_ROLE", "server"},
                                      {"DMLC_PS_ROOT_URI", "10.1.2.3"},
                                      {"DMLC_PS_ROOT_PORT", "9091"},
                                      {"DMLC_NUM_SERVER", "3"},
                                      {"DMLC_NUM_WORKER", "5"},
                                      {"DMLC_SERVER_ID", "2"},
                                      {"DMLC_WORKER_ID", "4"}}));
  REQUIRE(env.ok());
  REQUIRE(*env->role == "server");
  REQUIRE(*env->scheduler_host == "10.1.2.3");
  REQUIRE(*env->scheduler_port == 9091);
  REQUIRE(*env->num_servers == 3);
  REQUIRE(*env->num_workers == 5);
  REQUIRE(*env->rank == 2);
}

TEST_CASE("ReadJobEnvironment: KV_ names win; unset names stay unset", "[environment]") {
  auto env = ReadJobEnvironment(
      From({{"DMLC_NUM_WORKER", "5"}, {"KV_NUM_WORKERS", "7"}, {"DMLC_WORKER_ID", "3"}}));
  REQUIRE(env.ok());
  REQUIRE(*env->num_workers == 7);
  REQUIRE(*env->rank == 3);
  REQUIRE(!env->role.has_value());
  REQUIRE(!env->scheduler_port.has_value());
}

TEST_CASE("ReadJobEnvironment: a worker started by torchrun takes RANK and WORLD_SIZE",
          "[environment]") {
  auto env = ReadJobEnvironment(From({{"RANK", "3"}, {"WORLD_SIZE", "4"}}));
  REQUIRE(env.ok());
  REQUIRE(*env->rank == 3);
  REQUIRE(*env->num_workers == 4);
  // MXNet's names win; a server or scheduler ignores torchrun's.
  env = ReadJobEnvironment(From(
      {{"RANK", "3"}, {"DMLC_WORKER_ID", "1"}, {"WORLD_SIZE", "4"}, {"DMLC_NUM_WORKER", "2"}}));
  REQUIRE(env.ok());
  REQUIRE(*env->rank == 1);
  REQUIRE(*env->num_workers == 2);
  env = ReadJobEnvironment(From({{"DMLC_ROLE", "server"}, {"RANK", "3"}, {"WORLD_SIZE", "4"}}));
  REQUIRE(env.ok());
  REQUIRE(!env->rank.has_value());
  REQUIRE(!env->num_workers.has_value());
  auto bad = ReadJobEnvironment(From({{"RANK", "x"}}));
  REQUIRE(absl::IsInvalidArgument(bad.status()));
  REQUIRE(bad.status().message().find("RANK") != absl::string_view::npos);
}

TEST_CASE("ReadJobEnvironment: bad values name the variable", "[environment]") {
  auto port = ReadJobEnvironment(From({{"DMLC_PS_ROOT_PORT", "70000"}}));
  REQUIRE(absl::IsInvalidArgument(port.status()));
  REQUIRE(port.status().message().find("DMLC_PS_ROOT_PORT") != absl::string_view::npos);
  auto role = ReadJobEnvironment(From({{"KV_ROLE", "boss"}}));
  REQUIRE(absl::IsInvalidArgument(role.status()));
  REQUIRE(role.status().message().find("boss") != absl::string_view::npos);
}

TEST_CASE("ReadJobEnvironment: the node's advertised host, interface, bind host and KV_INSECURE",
          "[environment]") {
  auto env = ReadJobEnvironment(From({{"DMLC_NODE_HOST", "10.0.0.7"},
                                      {"DMLC_INTERFACE", "eth1"},
                                      {"KV_INTERFACE", "ib0"},
                                      {"KV_HOST", "0.0.0.0"},
                                      {"KV_INSECURE", "1"}}));
  REQUIRE(env.ok());
  CHECK(*env->node_host == "10.0.0.7");
  CHECK(*env->interface == "ib0");
  CHECK(*env->bind_host == "0.0.0.0");
  CHECK(env->insecure);
  auto bad = ReadJobEnvironment(From({{"KV_INSECURE", "yes"}}));
  REQUIRE(absl::IsInvalidArgument(bad.status()));
  CHECK(bad.status().message().find("KV_INSECURE") != absl::string_view::npos);
}

TEST_CASE("ReadJobEnvironment: KV_REPLICAS is 1, 2 or unset", "[environment]") {
  auto unset = ReadJobEnvironment(From({}));
  REQUIRE(unset.ok());
  CHECK(!unset->replicas.has_value());
  auto two = ReadJobEnvironment(From({{"KV_REPLICAS", "2"}}));
  REQUIRE(two.ok());
  CHECK(two->replicas == 2);
  for (const char* bad : {"3", "0", "two"}) {
    auto refused = ReadJobEnvironment(From({{"KV_REPLICAS", bad}}));
    REQUIRE(!refused.ok());
    CHECK(refused.status().message().find("KV_REPLICAS") != absl::string_view::npos);
  }
}

TEST_CASE("ReadJobEnvironment: KV_ELASTIC is 0, 1 or unset", "[environment]") {
  auto unset = ReadJobEnvironment(From({}));
  REQUIRE(unset.ok());
  CHECK(!unset->elastic.has_value());
  auto on = ReadJobEnvironment(From({{"KV_ELASTIC", "1"}}));
  REQUIRE(on.ok());
  CHECK(on->elastic == true);
  auto off = ReadJobEnvironment(From({{"KV_ELASTIC", "0"}}));
  REQUIRE(off.ok());
  CHECK(off->elastic == false);
  auto bad = ReadJobEnvironment(From({{"KV_ELASTIC", "true"}}));
  REQUIRE(absl::IsInvalidArgument(bad.status()));
  CHECK(bad.status().message().find("KV_ELASTIC") != absl::string_view::npos);
}

TEST_CASE("SetEnvironmentVariables: sets every variable, or none when a name is bad",
          "[environment]") {
  REQUIRE(SetEnvironmentVariables({{"KV_ENV_TEST_A", "1"}, {"KV_ENV_TEST_B", "two"}}).ok());
  CHECK(std::string(std::getenv("KV_ENV_TEST_A")) == "1");
  CHECK(std::string(std::getenv("KV_ENV_TEST_B")) == "two");
  const absl::Status bad = SetEnvironmentVariables({{"KV_ENV_TEST_A", "3"}, {"X=Y", "1"}});
  REQUIRE(absl::IsInvalidArgument(bad));
  CHECK(std::string(std::getenv("KV_ENV_TEST_A")) == "1");
}

TEST_CASE("ReadJobEnvironment: PS_VERBOSE maps onto log levels; KV_LOG_LEVEL wins",
          "[environment][logging]") {
  const std::pair<const char*, const char*> verbose[] = {
      {"0", "info"}, {"1", "debug"}, {"2", "trace"}};
  for (const auto& [value, level] : verbose) {
    auto env = ReadJobEnvironment(From({{"PS_VERBOSE", value}}));
    REQUIRE(env.ok());
    CHECK(*env->log_level == level);
  }
  auto env = ReadJobEnvironment(From({{"PS_VERBOSE", "2"}, {"KV_LOG_LEVEL", "warn"}}));
  REQUIRE(env.ok());
  CHECK(*env->log_level == "warn");
  env = ReadJobEnvironment(From({}));
  REQUIRE(env.ok());
  CHECK_FALSE(env->log_level.has_value());
  CHECK_FALSE(env->trace_file.has_value());
  CHECK_FALSE(env->metrics_port.has_value());
  env = ReadJobEnvironment(From({{"KV_TRACE_FILE", "/tmp/t.json"}, {"KV_METRICS_PORT", "0"}}));
  REQUIRE(env.ok());
  CHECK(*env->trace_file == "/tmp/t.json");
  CHECK(*env->metrics_port == 0);
  for (const auto& [name, value] : std::map<std::string, std::string>{
           {"PS_VERBOSE", "3"}, {"KV_LOG_LEVEL", "loud"}, {"KV_METRICS_PORT", "70000"}}) {
    auto bad = ReadJobEnvironment(From({{name, value}}));
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(bad.status().message()).find(name) != std::string::npos);
  }
}

}  // namespace
}  // namespace kvstore
