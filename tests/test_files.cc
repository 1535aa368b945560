#include "tests/test_files.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/job_secret.h"
#include "tools/cpp/runfiles/runfiles.h"

namespace kvstore::testing {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t length = sizeof(addr);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
  close(fd);
  return ntohs(addr.sin_port);
}

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

std::unique_ptr<Process> StartProcess(const std::string& name, std::vector<std::string> argv,
                                      Variables env) {
  static int counter = 0;
  ProcessOptions options;
  const bool own_secret = std::any_of(env.begin(), env.end(), [](const auto& variable) {
    return variable.first == "KV_SECRET_FILE";
  });
  if (!own_secret) env.emplace_back("KV_SECRET_FILE", JobSecret());
  options.env = std::move(env);
  options.log_path = absl::StrReplaceAll(
      absl::StrCat(TempDir(), "/", name, "-", getpid(), "-", counter++, ".log"), {{" ", "_"}});
  auto process = Process::Start(name, std::move(argv), std::move(options));
  INFO(process.status().ToString());
  REQUIRE(process.ok());
  return *std::move(process);
}

}  // namespace kvstore::testing
