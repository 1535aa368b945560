#include "tests/test_files.h"

#include <cstdlib>

#include <catch2/catch.hpp>

#include "tests/job_secret.h"
#include "tools/cpp/runfiles/runfiles.h"

namespace kvstore::testing {

std::string Runfile(const std::string& path) {
  using bazel::tools::cpp::runfiles::Runfiles;
  static Runfiles* const runfiles = [] {
    std::string error;
    Runfiles* created = Runfiles::CreateForTest(&error);
    INFO(error);
    REQUIRE(created != nullptr);
    return created;
  }();
  return runfiles->Rlocation("kvstore/" + path);
}

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

const std::string& JobSecret() {
  static const std::string* path = new std::string(WriteJobSecret(TempDir()));
  return *path;
}

}  // namespace kvstore::testing
