// SIGTERM and SIGINT on the daemons: a kvserver stops serving while a worker trains (the
// worker's calls fail with a status naming the server), logs one line and exits 0 within a
// few seconds; the scheduler ends the job, logs one line and exits 0. Real processes.
#include <signal.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/cluster/cluster_util.h"

namespace kvstore::testing {
namespace {

struct Job {
  std::unique_ptr<Process> scheduler;
  std::unique_ptr<Process> server;
  int port = 0;
};

Job StartJob(int workers) {
  Job job;
  const std::string port_file = absl::StrCat(TempDir(), "/signals-", getpid(), ".port");
  std::remove(port_file.c_str());
  job.scheduler = StartProcess(
      "scheduler",
      {Runfile("server/scheduler/scheduler"), "--port=0", absl::StrCat("--port_file=", port_file),
       "--num_servers=1", absl::StrCat("--num_workers=", workers), "--register_timeout=30s"},
      {});
  const absl::StatusOr<int> port = job.scheduler->WaitForPortFile(port_file, absl::Seconds(20));
  INFO(port.status().ToString() << "\n" << job.scheduler->output());
  REQUIRE(port.ok());
  job.port = *port;
  job.server = StartProcess(
      "kvserver",
      {Runfile("server/kvserver"), absl::StrCat("--scheduler=127.0.0.1:", job.port), "--rank=0"},
      {});
  return job;
}

std::unique_ptr<Process> StartWorker(const Job& job, int steps) {
  return StartProcess("worker", {Runfile("tests/cluster/role_job"), "naive", absl::StrCat(steps)},
                      {{"DMLC_ROLE", "worker"},
                       {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                       {"DMLC_PS_ROOT_PORT", absl::StrCat(job.port)},
                       {"DMLC_NUM_SERVER", "1"},
                       {"DMLC_NUM_WORKER", "1"},
                       {"KV_TEST_SEED", absl::StrCat(TestSeed())}});
}

TEST_CASE(
    "Signals: SIGTERM or SIGINT stops a kvserver serving a training worker; it exits 0 "
    "within 5 s with one line",
    "[signals]") {
  const int signal = GENERATE(SIGTERM, SIGINT);
  const std::string name = signal == SIGTERM ? "SIGTERM" : "SIGINT";
  INFO(name);
  Job job = StartJob(1);
  std::unique_ptr<Process> worker = StartWorker(job, 100000000);
  REQUIRE(job.server->WaitForOutput("serving dist_sync", absl::Seconds(20)));
  absl::SleepFor(absl::Milliseconds(500));  // The worker is pushing and pulling now.
  INFO(worker->output());
  REQUIRE(!worker->Exited(absl::ZeroDuration()));
  const absl::Time sent = absl::Now();
  REQUIRE(kill(job.server->pid(), signal) == 0);
  ExpectExit(*job.server, 0, 10);
  const absl::Duration took = absl::Now() - sent;
  INFO(absl::FormatDuration(took));
  CHECK(took < absl::Seconds(5));
  CHECK(Contains(job.server->output(),
                 absl::StrCat("kvserver: got ", name, "; stopped serving, exiting")));
  if (signal == SIGTERM) {
    // The worker's in-flight and later calls fail with a status naming the server (after its
    // retries: a few seconds). The other case's worker is killed by the test.
    ExpectExit(*worker, 1, 60);
    const std::string worker_out = worker->output();
    INFO(worker_out);
    CHECK(Contains(worker_out, "UNAVAILABLE: server 0 at 127.0.0.1:"));
    CHECK(Contains(worker_out, "unreachable after 9 attempts"));
  }
}

TEST_CASE(
    "Signals: SIGTERM or SIGINT on the scheduler ends a running job: the kvserver hears "
    "it and exits 0, the scheduler logs one line and exits 0, the worker stops with an "
    "error",
    "[signals]") {
  const int signal = GENERATE(SIGTERM, SIGINT);
  const std::string name = signal == SIGTERM ? "SIGTERM" : "SIGINT";
  INFO(name);
  Job job = StartJob(1);
  std::unique_ptr<Process> worker = StartWorker(job, 100000000);
  REQUIRE(job.server->WaitForOutput("serving dist_sync", absl::Seconds(20)));
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time sent = absl::Now();
  REQUIRE(kill(job.scheduler->pid(), signal) == 0);
  ExpectExit(*job.scheduler, 0, 15);
  ExpectExit(*job.server, 0, 15);
  INFO(absl::FormatDuration(absl::Now() - sent));
  CHECK(absl::Now() - sent < absl::Seconds(12));
  CHECK(Contains(
      job.scheduler->output(),
      absl::StrCat("scheduler: got ", name, "; ended the job and stopped serving, exiting")));
  CHECK(Contains(job.server->output(), "the job is over, exiting"));
  // The worker learns that the job is over from its next heartbeat and stops with an error.
  const absl::StatusOr<int> code = worker->Wait(absl::Seconds(60));
  INFO(worker->output());
  REQUIRE(code.ok());
  CHECK(*code != 0);
}

}  // namespace
}  // namespace kvstore::testing
