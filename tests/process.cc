#include "tests/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

extern char** environ;

namespace kvstore::testing {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(10);

// Pointers into `strings`, null-terminated, as execve takes them.
std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// The child's environment: this process's, with `overrides` replacing or adding variables.
std::vector<std::string> ChildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  absl::flat_hash_set<std::string> replaced;
  for (const auto& [name, value] : overrides) replaced.insert(name);
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const absl::string_view text(*entry);
    if (!replaced.contains(text.substr(0, text.find('=')))) env.emplace_back(text);
  }
  for (const auto& [name, value] : overrides) env.push_back(absl::StrCat(name, "=", value));
  return env;
}

// The child's side of Start: only async-signal-safe calls until exec. On failure it reports
// errno through `report` (closed by a successful exec) and exits 127.
[[noreturn]] void RunChild(pid_t parent, int log_fd, int report, char* const* argv,
                           char* const* envp) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // The parent is already gone.
  if (log_fd >= 0 && (dup2(log_fd, STDOUT_FILENO) < 0 || dup2(log_fd, STDERR_FILENO) < 0)) {
    const int error = errno;
    (void)!write(report, &error, sizeof(error));
    _exit(127);
  }
  execve(argv[0], argv, envp);
  const int error = errno;
  (void)!write(report, &error, sizeof(error));
  _exit(127);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Process>> Process::Start(std::string name,
                                                        std::vector<std::string> argv,
                                                        ProcessOptions options) {
  if (argv.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("process ", name, ": no program to run"));
  }
  const std::string program = argv[0];
  std::vector<std::string> env = ChildEnvironment(options.env);
  const std::vector<char*> argv_c = CStrings(argv);
  const std::vector<char*> env_c = CStrings(env);
  int log_fd = -1;
  if (!options.log_path.empty()) {
    log_fd = open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return absl::InternalError(absl::StrCat("process ", name, ": cannot open log ",
                                              options.log_path, ": ", std::strerror(errno)));
    }
  }
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    const int error = errno;
    if (log_fd >= 0) close(log_fd);
    return absl::InternalError(
        absl::StrCat("process ", name, ": pipe failed: ", std::strerror(error)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) RunChild(parent, log_fd, report[1], argv_c.data(), env_c.data());
  const int fork_error = errno;
  close(report[1]);
  if (log_fd >= 0) close(log_fd);
  if (pid < 0) {
    close(report[0]);
    return absl::InternalError(
        absl::StrCat("process ", name, ": fork failed: ", std::strerror(fork_error)));
  }
  // The report pipe closes when the child execs (or exits): read it to learn which.
  int child_error = 0;
  ssize_t got;
  do {
    got = read(report[0], &child_error, sizeof(child_error));
  } while (got < 0 && errno == EINTR);
  close(report[0]);
  std::unique_ptr<Process> process(new Process(std::move(name), options.log_path, pid));
  if (got > 0) {
    process->Reap(/*block=*/true);
    return absl::InternalError(absl::StrCat("process ", process->name_, ": cannot run ", program,
                                            ": ", std::strerror(child_error)));
  }
  return process;
}

Process::~Process() { Kill(); }

bool Process::Reap(bool block) {
  if (exit_code_) return true;
  int status = 0;
  struct rusage usage = {};
  pid_t got;
  do {
    got = wait4(pid_, &status, block ? 0 : WNOHANG, &usage);
  } while (got < 0 && errno == EINTR);
  if (got != pid_) return false;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  peak_rss_kib_ = usage.ru_maxrss;
  return true;
}

bool Process::Exited(absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (!Reap(/*block=*/false)) {
    if (absl::Now() >= give_up) return false;
    absl::SleepFor(kPollInterval);
  }
  return true;
}

absl::StatusOr<int> Process::Wait(absl::Duration timeout) {
  if (!Exited(timeout)) {
    Kill();
    return absl::DeadlineExceededError(absl::StrCat("process ", name_, " (pid ", pid_,
                                                    ") did not exit within ",
                                                    absl::FormatDuration(timeout), "; killed"));
  }
  return *exit_code_;
}

void Process::Kill() {
  if (Reap(/*block=*/false)) return;
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);  // Also when the child has left its group.
  Reap(/*block=*/true);
}

bool Process::WaitForOutput(absl::string_view text, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (true) {
    if (absl::StrContains(output(), text)) return true;
    if (absl::Now() >= give_up) return false;
    absl::SleepFor(kPollInterval);
  }
}

absl::StatusOr<int> Process::WaitForPortFile(const std::string& path, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (true) {
    int port = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadTextFile(path)), &port) && port > 0) {
      return port;
    }
    if (Reap(/*block=*/false)) {
      return absl::FailedPreconditionError(absl::StrCat("process ", name_, " (pid ", pid_,
                                                        ") exited with ", *exit_code_,
                                                        " before writing its port to ", path));
    }
    if (absl::Now() >= give_up) {
      return absl::DeadlineExceededError(absl::StrCat("process ", name_, " (pid ", pid_,
                                                      ") wrote no port to ", path, " within ",
                                                      absl::FormatDuration(timeout)));
    }
    absl::SleepFor(kPollInterval);
  }
}

std::string Process::output() const {
  return log_path_.empty() ? std::string() : ReadTextFile(log_path_);
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace kvstore::testing
