// Child processes for multi-process tests and benchmarks: the daemons (scheduler, kvservers),
// workers and tools a test starts, each a real process.
//
// Contract:
// - Start runs `argv[0]` (a path; no PATH search) with `argv` and this process's environment
//   plus `env` (an entry of `env` replaces a variable of the same name). The child leads a new
//   process group and gets SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG), so
//   a test or benchmark that dies leaves no daemon behind.
// - Output: with a `log_path`, stdout and stderr go to that file (truncated first) and
//   `output()` reads it back; without one they are forwarded to this process's own.
// - Waiting is bounded: Wait, Exited, WaitForOutput and WaitForPortFile take a timeout, and
//   an error names the process (its name and PID), what was waited for and for how long.
// - Kill signals only what Start started: the child and the process group it leads (the
//   group's id is the child's PID), and only while the child has not been reaped, so never a
//   recycled PID. Nothing is ever signalled by name.
//
// Threading: a Process is used by one thread at a time. Start forks: the child runs only
// async-signal-safe calls before exec, so starting a process from a program with threads (a
// gRPC client, a worker pool) is safe.
#ifndef KVSTORE_TESTS_PROCESS_H_
#define KVSTORE_TESTS_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kvstore::testing {

struct ProcessOptions {
  // Variables set in the child on top of this process's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // Where the child's stdout and stderr go; empty: this process's own stdout and stderr.
  std::string log_path;
};

class Process {
 public:
  // Start starts `argv` as process `name` (the name errors use). It returns once the child has
  // exec'd: InvalidArgument for an empty argv, Internal naming `name` and the program when the
  // log cannot be opened, fork fails or exec fails (a missing binary is reported here, not as
  // an exit code later).
  static absl::StatusOr<std::unique_ptr<Process>> Start(std::string name,
                                                        std::vector<std::string> argv,
                                                        ProcessOptions options = {});

  // The destructor kills the process if it is still running (Kill).
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Wait waits up to `timeout` for the process to exit and returns its exit code (128 + the
  // signal number when a signal ended it). When it is still running at `timeout` it is killed
  // and Wait returns DeadlineExceeded naming the process.
  absl::StatusOr<int> Wait(absl::Duration timeout);

  // Exited waits up to `timeout` for the process to exit: true once it has, false (and the
  // process left running) when it has not.
  bool Exited(absl::Duration timeout);

  // Kill sends SIGKILL to the child and the process group it leads and reaps the child;
  // nothing when it has already exited. Returns once the child is reaped.
  void Kill();

  // WaitForOutput polls the log for `text` for up to `timeout`: false when it does not appear
  // (or there is no log).
  bool WaitForOutput(absl::string_view text, absl::Duration timeout);

  // WaitForPortFile waits up to `timeout` for the process to write a port number into `path`
  // and returns it. FailedPrecondition naming the process and its exit code when it exits
  // first; DeadlineExceeded naming the process and the file when no port appears in time.
  absl::StatusOr<int> WaitForPortFile(const std::string& path, absl::Duration timeout);

  // output returns what the process has written to its log so far ("" without a log).
  std::string output() const;
  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  // exit_code is the exit code once the process has been seen to exit (Wait, Exited, Kill).
  std::optional<int> exit_code() const { return exit_code_; }
  // peak_rss_kib is the peak resident memory of the process in KiB once it has been seen to
  // exit (else 0).
  long peak_rss_kib() const { return peak_rss_kib_; }

 private:
  Process(std::string name, std::string log_path, pid_t pid)
      : name_(std::move(name)), log_path_(std::move(log_path)), pid_(pid) {}

  // Reap collects the child's status if it has exited (blocking when `block`); true once it has.
  bool Reap(bool block);

  std::string name_;
  std::string log_path_;
  pid_t pid_;
  std::optional<int> exit_code_;
  long peak_rss_kib_ = 0;
};

// ReadTextFile returns the contents of `path` ("" when it cannot be read).
std::string ReadTextFile(const std::string& path);

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_PROCESS_H_
