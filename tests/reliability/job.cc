#include "tests/reliability/job.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/job_secret.h"
#include "tests/test_files.h"

namespace kvstore::testing {
namespace {}  // namespace

std::string FreshDirectory(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::path(TempDir()) / absl::StrCat(name, "-", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return std::filesystem::canonical(dir).string();
}

uint64_t TestSeed() {
  uint64_t seed = 0;
  const char* fixed = std::getenv("KV_TEST_SEED");
  if (fixed == nullptr || !absl::SimpleAtoi(fixed, &seed)) seed = std::random_device{}() % 100000;
  std::printf("seed %llu (KV_TEST_SEED=%llu repeats it)\n", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  return seed;
}

Job::Job(std::vector<std::vector<std::string>> server_args, int workers,
         std::vector<std::string> scheduler_args)
    : num_workers_(workers) {
  static int jobs = 0;
  const std::string port_file = absl::StrCat(TempDir(), "/port-", getpid(), "-", ++jobs);
  std::vector<std::string> argv = {Runfile("server/scheduler/scheduler"),
                                   "--port=0",
                                   "--port_file=" + port_file,
                                   absl::StrCat("--num_servers=", server_args.size()),
                                   absl::StrCat("--num_workers=", workers),
                                   absl::StrCat("--big_value_bound=", kBigValueBound),
                                   absl::StrCat("--chunk_bytes=", kChunkBytes),
                                   "--heartbeat_interval=100ms",
                                   "--register_timeout=30s"};
  argv.insert(argv.end(), scheduler_args.begin(), scheduler_args.end());
  scheduler_argv_ = argv;
  scheduler_ = StartProcess("scheduler", argv, {{"DMLC_ROLE", "scheduler"}});
  const absl::StatusOr<int> port = scheduler_->WaitForPortFile(port_file, absl::Seconds(20));
  INFO(port.status().ToString() << "\n" << scheduler_->output());
  REQUIRE(port.ok());
  port_ = *port;
  servers_.resize(server_args.size());
  for (size_t i = 0; i < server_args.size(); ++i) StartServer(static_cast<int>(i), server_args[i]);
}

Job::~Job() {
  for (auto& w : workers_) w->Kill();
  for (auto& s : servers_) {
    if (s != nullptr) s->Kill();
  }
  scheduler_->Kill();
}

std::vector<std::pair<std::string, std::string>> Job::Env(const std::string& role, int rank) const {
  return {{"DMLC_ROLE", role},
          {"DMLC_PS_ROOT_URI", "127.0.0.1"},
          {"DMLC_PS_ROOT_PORT", absl::StrCat(port_)},
          {"DMLC_NUM_WORKER", absl::StrCat(num_workers_)},
          {role == "server" ? "DMLC_SERVER_ID" : "DMLC_WORKER_ID", absl::StrCat(rank)}};
}

Process& Job::StartServer(int rank, std::vector<std::string> args) {
  std::vector<std::string> argv = {Runfile("server/kvserver"),
                                   absl::StrCat("--scheduler=127.0.0.1:", port_),
                                   absl::StrCat("--rank=", rank), "--updater=sum"};
  std::string fsize_kib;
  for (const std::string& arg : args) {
    if (absl::StartsWith(arg, "fsize_kib=")) {
      fsize_kib = arg.substr(10);
    } else {
      argv.push_back(arg);
    }
  }
  if (!fsize_kib.empty()) {
    argv.insert(argv.begin(),
                {"/bin/bash", "-c",
                 absl::StrCat("trap '' XFSZ; ulimit -f ", fsize_kib, "; exec \"$0\" \"$@\"")});
  }
  if (static_cast<size_t>(rank) >= servers_.size()) servers_.resize(rank + 1);  // One more.
  if (servers_[rank] != nullptr) retired_.push_back(std::move(servers_[rank]));
  servers_[rank] = StartProcess(absl::StrCat("server ", rank), argv, Env("server", rank));
  return *servers_[rank];
}

Process& Job::AddWorker(int rank, std::vector<std::string> args, const std::string& program) {
  args.insert(args.begin(), Runfile(program));
  workers_.push_back(StartProcess(absl::StrCat("worker ", rank), args, Env("worker", rank)));
  return *workers_.back();
}

Process& Job::RestartScheduler(std::vector<std::string> extra_args) {
  std::vector<std::string> argv = scheduler_argv_;
  for (std::string& arg : argv) {
    if (arg == "--port=0") arg = absl::StrCat("--port=", port_);
  }
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  retired_.push_back(std::move(scheduler_));
  scheduler_ = StartProcess("scheduler (restarted)", argv, {{"DMLC_ROLE", "scheduler"}});
  return *scheduler_;
}

std::string Job::Kvctl(const std::vector<std::string>& args, int* exit_code) {
  std::vector<std::string> argv = {Runfile("client/kvctl/kvctl"),
                                   absl::StrCat("--scheduler=127.0.0.1:", port_)};
  argv.insert(argv.end(), args.begin(), args.end());
  std::unique_ptr<Process> kvctl = StartProcess("kvctl", argv, {});
  *exit_code = kvctl->Wait(absl::Seconds(60)).value_or(-1);
  return kvctl->output();
}

void Job::ExpectExit(Process& process, int code) {
  const absl::StatusOr<int> exit_code = process.Wait(absl::Seconds(60));
  INFO(process.name() << " output:\n" << process.output());
  INFO(exit_code.status().ToString());
  REQUIRE(exit_code.ok());
  REQUIRE(*exit_code == code);
}

}  // namespace kvstore::testing
