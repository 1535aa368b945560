// Helpers of the daemon_options tests (the kvserver's and the scheduler's halves run as two
// binaries: the two programs' flags cannot share one).
#ifndef KVSTORE_SERVER_DAEMON_OPTIONS_TESTING_H_
#define KVSTORE_SERVER_DAEMON_OPTIONS_TESTING_H_

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/environment.h"

namespace kvstore::testing {

using Vars = std::map<std::string, std::string>;

// Environment reads a launch environment made of `vars` only.
inline JobEnvironment Environment(const Vars& vars) {
  absl::StatusOr<JobEnvironment> env = ReadJobEnvironment([vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
  INFO(env.status().ToString());
  REQUIRE(env.ok());
  return *env;
}

// SecretFile writes a job secret readable by its owner only and returns its path.
inline std::string SecretFile() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/daemon_options_secret");
  std::ofstream(path) << "0123456789abcdef0123456789abcdef\n";
  chmod(path.c_str(), 0600);
  return path;
}

}  // namespace kvstore::testing

#endif  // KVSTORE_SERVER_DAEMON_OPTIONS_TESTING_H_
