// Job: a real job for the reliability tests - the built scheduler, kvservers and sum_worker
// processes on 127.0.0.1 with ports the OS chooses and a job secret - that tests kill, restart
// and checkpoint.
//
// Contract: the constructor starts the scheduler and the servers (each server with its own
// flags, e.g. its own --checkpoint_root) and returns once the scheduler has its port; workers
// and kvctl calls are added by the test. Every wait is bounded; failures are Catch2 REQUIRE
// failures naming the process and its output. Processes die with the thread that started them
// (tests/process.h); the destructor kills what still runs.
#ifndef KVSTORE_TESTS_RELIABILITY_JOB_H_
#define KVSTORE_TESTS_RELIABILITY_JOB_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "tests/process.h"
#include "tests/test_files.h"

namespace kvstore::testing {

// The job's big-value bound and chunk size: the 6000-element key of sum_reference.h is split
// over the servers and held in chunks of 256 elements.
inline constexpr int kBigValueBound = 1000;
inline constexpr int kChunkBytes = 1024;

class Job {
 public:
  // `server_args[i]` are the flags of server i (their number is the job's server count).
  Job(std::vector<std::vector<std::string>> server_args, int workers,
      std::vector<std::string> scheduler_args = {});
  ~Job();

  // AddWorker starts sum_worker of `rank` with `args` (SEED FIRST LAST [PAUSE_MS]), or the
  // worker `program` (a runfile) with `args`.
  Process& AddWorker(int rank, std::vector<std::string> args,
                     const std::string& program = "tests/reliability/sum_worker");
  // StartServer starts (again) server `rank` with `args` (a rank past the job's servers: one
  // more, e.g. with --join). An argument "fsize_kib=N" is not
  // passed on: the server then runs with its file size limit at N KiB and SIGXFSZ ignored, so
  // that a write past it fails (EFBIG) as on a full disk.
  Process& StartServer(int rank, std::vector<std::string> args);
  // RestartScheduler starts the scheduler again on the same port with the same flags (what
  // systemd's Restart=on-failure does), `extra_args` added; the old process must be dead
  // (killed by the test), and is kept for its log.
  Process& RestartScheduler(std::vector<std::string> extra_args = {});
  // Kvctl runs kvctl with `args` and returns its output; `*exit_code` gets its status.
  std::string Kvctl(const std::vector<std::string>& args, int* exit_code);

  Process& scheduler() { return *scheduler_; }
  Process& server(int rank) { return *servers_[rank]; }
  Process& worker(int i) { return *workers_[i]; }
  int num_workers() const { return num_workers_; }

  // ExpectExit requires `process` to exit with `code` within 60 s.
  static void ExpectExit(Process& process, int code);

 private:
  std::vector<std::pair<std::string, std::string>> Env(const std::string& role, int rank) const;

  int num_workers_;
  int port_ = 0;
  std::vector<std::string> scheduler_argv_;
  std::unique_ptr<Process> scheduler_;
  std::vector<std::unique_ptr<Process>> servers_;
  std::vector<std::unique_ptr<Process>> workers_;
  std::vector<std::unique_ptr<Process>> retired_;  // Replaced servers, kept for their logs.
};

// FreshDirectory makes an empty directory below TempDir() and returns its canonical path.
std::string FreshDirectory(const std::string& name);
// TestSeed returns a seed drawn at random, printed, or KV_TEST_SEED when set.
uint64_t TestSeed();

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_RELIABILITY_JOB_H_
