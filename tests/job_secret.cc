#include "tests/job_secret.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/job_auth.h"

namespace kvstore::testing {

std::string WriteJobSecret(const std::string& dir) {
  static std::atomic<int> counter{0};
  const std::string path = absl::StrCat(dir, "/job-", getpid(), "-", counter++, ".secret");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const std::string secret = NewSecret() + "\n";
  if (fd < 0 || write(fd, secret.data(), secret.size()) != static_cast<ssize_t>(secret.size())) {
    std::fprintf(stderr, "cannot write the job secret %s\n", path.c_str());
    std::exit(1);
  }
  close(fd);
  return path;
}

}  // namespace kvstore::testing
