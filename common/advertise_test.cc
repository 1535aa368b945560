// ChooseAdvertiseHost's order of sources, its refusal of wildcards, interface lookup and the
// host:port form.
#include "common/advertise.h"

#include <catch2/catch.hpp>
#include <string>

namespace kvstore {
namespace {

TEST_CASE(
    "ChooseAdvertiseHost: flag, then DMLC_NODE_HOST, then DMLC_INTERFACE, then the bind "
    "host",
    "[advertise]") {
  JobEnvironment env;
  env.node_host = "10.1.2.3";
  env.interface = "lo";
  CHECK(ChooseAdvertiseHost("10.9.9.9", "0.0.0.0", env).value() == "10.9.9.9");
  CHECK(ChooseAdvertiseHost("", "0.0.0.0", env).value() == "10.1.2.3");
  env.node_host.reset();
  CHECK(ChooseAdvertiseHost("", "0.0.0.0", env).value() == "127.0.0.1");  // lo's address.
  env.interface.reset();
  CHECK(ChooseAdvertiseHost("", "10.4.4.4", env).value() == "10.4.4.4");
  // A wildcard bind with nothing else: this host's name resolved, never the wildcard.
  const std::string resolved = ChooseAdvertiseHost("", "0.0.0.0", env).value();
  CHECK(!IsWildcardHost(resolved));
}

TEST_CASE(
    "ChooseAdvertiseHost: a wildcard is refused naming its source; an unknown interface "
    "is NotFound listing those with an address",
    "[advertise]") {
  JobEnvironment env;
  const auto flag = ChooseAdvertiseHost("0.0.0.0", "127.0.0.1", env);
  REQUIRE(absl::IsInvalidArgument(flag.status()));
  CHECK(std::string(flag.status().message()).find("--advertise_host") != std::string::npos);
  env.node_host = "::";
  const auto node = ChooseAdvertiseHost("", "127.0.0.1", env);
  REQUIRE(absl::IsInvalidArgument(node.status()));
  CHECK(std::string(node.status().message()).find("DMLC_NODE_HOST") != std::string::npos);
  env.node_host.reset();
  env.interface = "nosuchif9";
  const auto missing = ChooseAdvertiseHost("", "0.0.0.0", env);
  REQUIRE(absl::IsNotFound(missing.status()));
  CHECK(std::string(missing.status().message()).find("\"nosuchif9\"") != std::string::npos);
  CHECK(std::string(missing.status().message()).find("lo") != std::string::npos);
}

TEST_CASE("FormatHostPort and IsWildcardHost", "[advertise]") {
  CHECK(FormatHostPort("10.0.0.1", 9091) == "10.0.0.1:9091");
  CHECK(FormatHostPort("fd00::1", 9091) == "[fd00::1]:9091");
  CHECK(FormatHostPort("[fd00::1]", 9091) == "[fd00::1]:9091");
  CHECK(FormatHostPort("node1", 22) == "node1:22");
  CHECK(IsWildcardHost("0.0.0.0"));
  CHECK(IsWildcardHost("::"));
  CHECK(IsWildcardHost(""));
  CHECK(!IsWildcardHost("127.0.0.1"));
  CHECK(!IsWildcardHost("::1"));
}

}  // namespace
}  // namespace kvstore
