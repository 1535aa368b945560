// Three schedulers of one job elect their leader through a real etcd (Debian's etcd-server,
// started here); kvservers and workers find the leader there. The leader is killed (SIGKILL) at
// a random round of dist_sync training: the standby takes over when its lease lapses, the
// kvservers register again with it, and training ends exact - every pull checked against the
// float64 reference (sum_worker), every exit status checked; the standby that did not take
// over stops once the new leader has recorded in etcd that the job is over.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/etcd_server.h"
#include "tests/reliability/job.h"
#include "tests/test_files.h"

namespace kvstore::testing {
namespace {

constexpr int kServers = 2;
constexpr int kWorkers = 2;
constexpr int kRounds = 80;

std::unique_ptr<Process> StartScheduler(const std::string& name, const std::string& etcd,
                                        const std::string& job) {
  return StartProcess(
      name,
      {Runfile("server/scheduler/scheduler"), "--port=0", absl::StrCat("--num_servers=", kServers),
       absl::StrCat("--num_workers=", kWorkers), absl::StrCat("--big_value_bound=", kBigValueBound),
       absl::StrCat("--chunk_bytes=", kChunkBytes), "--heartbeat_interval=100ms",
       "--register_timeout=30s", "--etcd=" + etcd, "--job=" + job, "--etcd_lease=1s"},
      {{"DMLC_ROLE", "scheduler"}});
}

TEST_CASE(
    "Scheduler standby: the leader killed mid-training, the standby takes over through etcd "
    "and the job finishes exact",
    "[reliability][scheduler_standby][etcd]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  const int kill_after = 3 + static_cast<int>(rng() % 20);
  std::unique_ptr<EtcdServer> etcd = EtcdServer::Start();
  const std::string job = absl::StrCat("standby-", seed);
  std::unique_ptr<Process> first = StartScheduler("scheduler A", etcd->endpoint(), job);
  REQUIRE(first->WaitForOutput("leads job", absl::Seconds(20)));
  std::unique_ptr<Process> standby_b = StartScheduler("scheduler B", etcd->endpoint(), job);
  std::unique_ptr<Process> standby_c = StartScheduler("scheduler C", etcd->endpoint(), job);
  REQUIRE(standby_b->WaitForOutput("a standby of job", absl::Seconds(20)));
  REQUIRE(standby_c->WaitForOutput("a standby of job", absl::Seconds(20)));

  std::vector<std::unique_ptr<Process>> servers, workers;
  for (int s = 0; s < kServers; ++s) {
    servers.push_back(
        StartProcess(absl::StrCat("server ", s),
                     {Runfile("server/kvserver"), "--etcd=" + etcd->endpoint(), "--job=" + job,
                      absl::StrCat("--rank=", s), "--updater=sum", "--scheduler_lost_timeout=20s"},
                     {{"DMLC_ROLE", "server"}}));
  }
  for (int w = 0; w < kWorkers; ++w) {
    workers.push_back(StartProcess(absl::StrCat("worker ", w),
                                   {Runfile("tests/reliability/sum_worker"), absl::StrCat(seed),
                                    "1", absl::StrCat(kRounds), "20"},
                                   {{"DMLC_ROLE", "worker"},
                                    {"KV_ETCD_ENDPOINTS", etcd->endpoint()},
                                    {"KV_JOB", job},
                                    {"DMLC_NUM_WORKER", absl::StrCat(kWorkers)},
                                    {"DMLC_WORKER_ID", absl::StrCat(w)}}));
  }
  if (!workers[0]->WaitForOutput(absl::StrCat("round ", kill_after, " ok"), absl::Seconds(60))) {
    FAIL("no training: worker 0:\n"
         << workers[0]->output() << "\nserver 0:\n"
         << servers[0]->output() << "\nscheduler A:\n"
         << first->output());
  }
  first->Kill();
  const absl::Time killed = absl::Now();
  // One of the standbys leads; the other stays a standby.
  Process* second = nullptr;
  Process* third = nullptr;
  while (second == nullptr && absl::Now() - killed < absl::Seconds(20)) {
    if (absl::StrContains(standby_b->output(), "leads job")) {
      second = standby_b.get();
      third = standby_c.get();
    } else if (absl::StrContains(standby_c->output(), "leads job")) {
      second = standby_c.get();
      third = standby_b.get();
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  REQUIRE(second != nullptr);
  const absl::Duration took_over = absl::Now() - killed;
  REQUIRE(second->WaitForOutput("re-formed the running job", absl::Seconds(20)));
  const absl::Duration reformed = absl::Now() - killed;
  std::printf(
      "leader killed after round %d; the standby led %lld ms later and had re-formed the job "
      "%lld ms after the kill (lease 1s; etcd's minimum is about 2 s)\n",
      kill_after, static_cast<long long>(absl::ToInt64Milliseconds(took_over)),
      static_cast<long long>(absl::ToInt64Milliseconds(reformed)));
  // kvctl finds the new leader through etcd too.
  std::unique_ptr<Process> kvctl = StartProcess(
      "kvctl",
      {Runfile("client/kvctl/kvctl"), "--etcd=" + etcd->endpoint(), "--job=" + job, "status"});
  const absl::StatusOr<int> kvctl_code = kvctl->Wait(absl::Seconds(30));
  INFO(kvctl->output());
  CHECK((kvctl_code.ok() && *kvctl_code == 0));
  CHECK(absl::StrContains(kvctl->output(), "server"));
  for (int w = 0; w < kWorkers; ++w) {
    Job::ExpectExit(*workers[w], 0);
    CHECK(absl::StrContains(workers[w]->output(), absl::StrCat("rounds 1..", kRounds, " checked")));
  }
  for (int s = 0; s < kServers; ++s) {
    Job::ExpectExit(*servers[s], 0);
    CHECK(absl::StrContains(servers[s]->output(), "registered again with the scheduler of job"));
  }
  Job::ExpectExit(*second, 0);
  CHECK(absl::StrContains(second->output(), "every worker finished"));
  // The other standby hears in etcd that the job is over, and stops.
  Job::ExpectExit(*third, 0);
  CHECK(absl::StrContains(third->output(), "is over"));
  CHECK(!absl::StrContains(third->output(), "leads job"));
}

// SchedulerPid returns the pid of the scheduler process whose command line names `job` and
// launch.py's port file `port_file` ("scheduler-K.port"); 0 when there is none.
int SchedulerPid(const std::string& job, const std::string& port_file) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::ifstream in(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (absl::StrContains(cmdline, "--job=" + job) && absl::StrContains(cmdline, port_file)) {
      return pid;
    }
  }
  return 0;
}

TEST_CASE(
    "Scheduler standby: deploy/launch.py --etcd runs a leader and a standby; the leader killed, "
    "the job goes on and the launcher exits 0",
    "[reliability][scheduler_standby][etcd][launcher]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  const int kill_after = 3 + static_cast<int>(rng() % 15);
  std::unique_ptr<EtcdServer> etcd = EtcdServer::Start();
  const std::string job = absl::StrCat("launch-standby-", seed);
  const std::vector<std::string> argv = {
      "/usr/bin/env",
      "python3",
      Runfile("deploy/launch.py"),
      "-n",
      "2",
      "-s",
      "2",
      "--etcd",
      etcd->endpoint(),
      "--job",
      job,
      "--scheduler",
      Runfile("server/scheduler/scheduler"),
      "--kvserver",
      Runfile("server/kvserver"),
      "--timeout",
      "90",
      absl::StrCat("--scheduler-arg=--big_value_bound=", kBigValueBound),
      absl::StrCat("--scheduler-arg=--chunk_bytes=", kChunkBytes),
      "--scheduler-arg=--heartbeat_interval=100ms",
      "--server-arg=--updater=sum",
      "--server-arg=--scheduler_lost_timeout=20s",
      "--",
      Runfile("tests/reliability/sum_worker"),
      absl::StrCat(seed),
      "1",
      "60",
      "40"};
  std::unique_ptr<Process> launcher = StartProcess("launch", argv, {});
  REQUIRE(launcher->WaitForOutput(absl::StrCat("round ", kill_after, " ok"), absl::Seconds(60)));
  // The leader: the scheduler whose log line says it leads ("[scheduler] " or "[scheduler 1] ").
  const std::string log = launcher->output();
  const size_t leads = log.find("leads job");
  REQUIRE(leads != std::string::npos);
  const size_t line = log.rfind('\n', leads) + 1;
  const int leader = absl::StartsWith(log.substr(line), "[scheduler 1]") ? 1 : 0;
  const int pid = SchedulerPid(job, absl::StrCat("scheduler-", leader, ".port"));
  REQUIRE(pid > 0);
  std::printf("killing scheduler %d (the leader, pid %d) after round %d\n", leader, pid,
              kill_after);
  REQUIRE(kill(pid, SIGKILL) == 0);
  Job::ExpectExit(*launcher, 0);
  const std::string output = launcher->output();
  INFO(output);
  CHECK(absl::StrContains(output, "a standby takes over"));
  for (int w = 0; w < 2; ++w) {
    CHECK(absl::StrContains(output,
                            absl::StrCat("[worker ", w, "] worker ", w, ": rounds 1..60 checked")));
  }
  CHECK(absl::StrContains(output, "re-formed the running job"));
}

}  // namespace
}  // namespace kvstore::testing
