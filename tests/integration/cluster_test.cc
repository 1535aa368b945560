// Multi-process tests: a real scheduler, real kvservers and real workers (test_worker), each its
// own process, talking over 127.0.0.1 with ports chosen by the OS.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "tests/process.h"
#include "tools/cpp/runfiles/runfiles.h"

namespace kvstore::testing {
namespace {

using Variables = std::vector<std::pair<std::string, std::string>>;

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

// StartProcess starts `argv` as `name`, its output in a log file of its own.
std::unique_ptr<Process> StartProcess(const std::string& name, std::vector<std::string> argv,
                                      Variables env) {
  static int counter = 0;
  ProcessOptions options;
  options.env = std::move(env);
  options.log_path = absl::StrReplaceAll(
      absl::StrCat(TempDir(), "/", name, "-", getpid(), "-", counter++, ".log"), {{" ", "_"}});
  auto process = Process::Start(name, std::move(argv), std::move(options));
  INFO(process.status().ToString());
  REQUIRE(process.ok());
  return *std::move(process);
}

// Cluster: a scheduler and its kvservers; workers are added by the test.
class Cluster {
 public:
  Cluster(int servers, int workers, std::vector<std::string> scheduler_args = {},
          std::vector<std::string> server_args = {},
          const std::string& server_binary = "server/kvserver")
      : workers_(workers) {
    const std::string port_file = absl::StrCat(TempDir(), "/port-", getpid(), "-", ++jobs_);
    std::vector<std::string> argv = {Runfile("server/scheduler/scheduler"),
                                     "--port=0",
                                     "--port_file=" + port_file,
                                     absl::StrCat("--num_servers=", servers),
                                     absl::StrCat("--num_workers=", workers),
                                     "--heartbeat_interval=100ms",
                                     "--register_timeout=30s"};
    argv.insert(argv.end(), scheduler_args.begin(), scheduler_args.end());
    scheduler_ = StartProcess("scheduler", argv, {{"DMLC_ROLE", "scheduler"}});
    const absl::StatusOr<int> port = scheduler_->WaitForPortFile(port_file, absl::Seconds(20));
    INFO(port.status().ToString() << "\n" << scheduler_->output());
    REQUIRE(port.ok());
    port_ = *port;
    for (int i = 0; i < servers; ++i) {
      std::vector<std::string> server = {Runfile(server_binary),
                                         absl::StrCat("--scheduler=127.0.0.1:", port_),
                                         absl::StrCat("--rank=", i)};
      server.insert(server.end(), server_args.begin(), server_args.end());
      servers_.push_back(
          StartProcess(absl::StrCat("server ", i), server, Env("server", i)));
    }
  }

  Variables Env(const std::string& role, int rank) const {
    return {{"DMLC_ROLE", role},
            {"DMLC_PS_ROOT_URI", "127.0.0.1"},
            {"DMLC_PS_ROOT_PORT", absl::StrCat(port_)},
            {"DMLC_NUM_WORKER", absl::StrCat(workers_)},
            {role == "server" ? "DMLC_SERVER_ID" : "DMLC_WORKER_ID", absl::StrCat(rank)}};
  }

  Process& AddWorker(int rank, std::vector<std::string> args) {
    args.insert(args.begin(), Runfile("tests/integration/test_worker"));
    workers_list_.push_back(
        StartProcess(absl::StrCat("worker ", rank), args, Env("worker", rank)));
    return *workers_list_.back();
  }

  std::string Kvctl(const std::vector<std::string>& args, int* exit_code) {
    std::vector<std::string> argv = {Runfile("client/kvctl/kvctl"),
                                     absl::StrCat("--scheduler=127.0.0.1:", port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    std::unique_ptr<Process> kvctl = StartProcess("kvctl", argv, {});
    *exit_code = kvctl->Wait(absl::Seconds(20)).value_or(-1);
    return kvctl->output();
  }

  // ExpectCleanExit requires every worker, server and the scheduler to exit 0 in time.
  void ExpectCleanExit() {
    for (auto& worker : workers_list_) ExpectExit(*worker, 0);
    for (auto& server : servers_) ExpectExit(*server, 0);
    ExpectExit(*scheduler_, 0);
  }

  static void ExpectExit(Process& process, int code) {
    const absl::StatusOr<int> exit_code = process.Wait(absl::Seconds(60));
    INFO(process.name() << " output:\n" << process.output());
    INFO(exit_code.status().ToString());
    REQUIRE(exit_code.ok());
    REQUIRE(*exit_code == code);
  }

  Process& scheduler() { return *scheduler_; }
  Process& server(int i) { return *servers_[i]; }
  Process& worker(int i) { return *workers_list_[i]; }

 private:
  static inline int jobs_ = 0;
  int workers_;
  int port_ = 0;
  std::unique_ptr<Process> scheduler_;
  std::vector<std::unique_ptr<Process>> servers_;
  std::vector<std::unique_ptr<Process>> workers_list_;
};

TEST_CASE("Cluster: 3 workers push (r+1)*base for 4 rounds in dist_sync; sums exact, clean exit",
          "[cluster][sync]") {
  Cluster cluster(2, 3, {"--big_value_bound=100"});
  for (int r = 0; r < 3; ++r) cluster.AddWorker(r, {"rounds", "dist_sync", "4"});
  cluster.ExpectCleanExit();
}

TEST_CASE("Cluster: a 400 MiB value through init, pull, push and pushpull; no extra copies held",
          "[cluster][memory]") {
  // Values of random integers (exact sums), checked element by element by the worker. The
  // server must hold the value once (plus bounded transport buffers), the worker its three
  // tensors (initial or running sum, pushed, pulled): a staging copy of the value anywhere, or
  // a receive buffer the size of the value, would show as a whole extra 400 MiB.
  const int64_t mib = 400;
  const uint64_t seed = std::random_device()() | 1;
  INFO("seed " << seed);
  Cluster cluster(1, 1, {}, {"--updater=sum"});
  cluster.AddWorker(0, {"big_value", absl::StrCat(seed), absl::StrCat(mib)});
  cluster.ExpectCleanExit();
  const long server_kib = cluster.server(0).peak_rss_kib();
  const long worker_kib = cluster.worker(0).peak_rss_kib();
  INFO("peak RSS: server " << server_kib / 1024 << " MiB, worker " << worker_kib / 1024
                           << " MiB");
  REQUIRE(server_kib > mib * 1024);  // The server did hold the value.
  REQUIRE(server_kib < (mib + mib / 4 + 128) * 1024);
  REQUIRE(worker_kib > 3 * mib * 1024);
  REQUIRE(worker_kib < (3 * mib + mib / 4 + 128) * 1024);
}

TEST_CASE("Cluster: dist_async applies every push; after a barrier the value is exact",
          "[cluster][async]") {
  Cluster cluster(3, 3, {"--big_value_bound=100"}, {"--updater=sum"});
  for (int r = 0; r < 3; ++r) cluster.AddWorker(r, {"rounds", "dist_async", "5"});
  cluster.ExpectCleanExit();
}

TEST_CASE("Cluster: string keys, one split over 3 servers", "[cluster][strings]") {
  Cluster cluster(3, 2, {"--big_value_bound=100"});
  for (int r = 0; r < 2; ++r) cluster.AddWorker(r, {"string_keys"});
  cluster.ExpectCleanExit();
}

TEST_CASE("Cluster: 2bit and 1bit compressed pushes from 2 workers; 1/16 and 1/32 on the wire",
          "[cluster][compression]") {
  const uint64_t seed = absl::ToUnixNanos(absl::Now()) % 1000000007;
  for (const char* type : {"2bit", "1bit"}) {
    INFO(type << " seed=" << seed);
    Cluster cluster(2, 2);
    for (int r = 0; r < 2; ++r) {
      cluster.AddWorker(r, {"compressed", type, absl::StrCat(seed)});
    }
    cluster.ExpectCleanExit();
  }
}

TEST_CASE("Cluster: row-sparse pushes from 2 workers summed by rows over 2 servers",
          "[cluster][row_sparse]") {
  const uint64_t seed = absl::ToUnixNanos(absl::Now()) % 1000000007;
  INFO("seed=" << seed);
  Cluster cluster(2, 2, {"--big_value_bound=100", "--chunk_bytes=1000"});
  for (int r = 0; r < 2; ++r) cluster.AddWorker(r, {"row_sparse", absl::StrCat(seed)});
  cluster.ExpectCleanExit();
}

TEST_CASE("Cluster: checkpoint, kill -9, restore: training continues bit-exactly",
          "[cluster][checkpoint]") {
  const uint64_t seed = absl::ToUnixNanos(absl::Now()) % 1000000007;
  INFO("seed=" << seed);
  const std::string dir = absl::StrCat(TempDir(), "/ckpt-", getpid());
  const std::string uninterrupted = absl::StrCat(dir, "-uninterrupted.bin");
  const std::string resumed = absl::StrCat(dir, "-resumed.bin");
  const std::vector<std::string> job = {"--big_value_bound=100", "--chunk_bytes=1000"};
  {
    // The reference: rounds 1..6 without interruption.
    Cluster cluster(2, 2, job);
    for (int r = 0; r < 2; ++r) {
      cluster.AddWorker(r, {"train", absl::StrCat(seed), "1", "6", "0", dir, uninterrupted});
    }
    cluster.ExpectCleanExit();
  }
  {
    // Rounds 1..3, checkpoint, then server 0 is killed with SIGKILL and the job torn down.
    Cluster cluster(2, 2, job);
    std::vector<Process*> workers;
    for (int r = 0; r < 2; ++r) {
      workers.push_back(
          &cluster.AddWorker(r, {"train", absl::StrCat(seed), "1", "3", "3", dir, "-"}));
    }
    for (Process* worker : workers) {
      INFO(worker->output());
      REQUIRE(worker->WaitForOutput("CHECKPOINTED", absl::Seconds(60)));
    }
    cluster.server(0).Kill();
  }
  {
    // A new job whose servers restore the checkpoint runs rounds 4..6.
    Cluster cluster(2, 2, job, {"--restore=" + dir});
    for (int r = 0; r < 2; ++r) {
      cluster.AddWorker(r, {"train", absl::StrCat(seed), "4", "6", "0", dir, resumed, "restored"});
    }
    cluster.ExpectCleanExit();
  }
  const std::string a = ReadTextFile(uninterrupted), b = ReadTextFile(resumed);
  REQUIRE(a.size() == (600 * 5 + 7) * sizeof(float));
  REQUIRE(a == b);
}

TEST_CASE("Cluster: a damaged checkpoint stops the restoring server, naming the file",
          "[cluster][checkpoint]") {
  const std::string dir = absl::StrCat(TempDir(), "/damaged-", getpid());
  {
    Cluster cluster(1, 1);
    Process& worker = cluster.AddWorker(0, {"train", "7", "1", "1", "1", dir, "-"});
    REQUIRE(worker.WaitForOutput("CHECKPOINTED", absl::Seconds(60)));
  }
  const std::string path = dir + "/server-0.ckpt";
  std::string bytes = ReadTextFile(path);
  REQUIRE(bytes.size() > 100);
  bytes[bytes.size() / 2] ^= 0x40;
  {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  Cluster cluster(1, 1, {}, {"--restore=" + dir});
  cluster.AddWorker(0, {"train", "7", "2", "2", "0", dir, "-", "restored"});
  Cluster::ExpectExit(cluster.server(0), 1);
  const std::string log = cluster.server(0).output();
  INFO(log);
  REQUIRE(log.find(path) != std::string::npos);
  REQUIRE(log.find("checksum") != std::string::npos);
}

TEST_CASE("Cluster: a kvserver built with its own updater and controller",
          "[cluster][extension]") {
  Cluster cluster(1, 1, {}, {}, "examples/custom_kvserver");
  Process& worker = cluster.AddWorker(0, {"clipped_sum"});
  REQUIRE(worker.WaitForOutput("READY", absl::Seconds(60)));
  int code = 0;
  const std::string replies = cluster.Kvctl({"command", "16", ""}, &code);
  INFO(replies);
  REQUIRE(code == 0);
  REQUIRE(replies.find("server 0: updates=2") != std::string::npos);
  cluster.Kvctl({"shutdown"}, &code);
  cluster.ExpectCleanExit();
}

TEST_CASE("Cluster: kvctl status, command fan-out and shutdown", "[cluster][kvctl]") {
  Cluster cluster(2, 1);
  Process& worker = cluster.AddWorker(0, {"dead_server"});
  REQUIRE(worker.WaitForOutput("READY", absl::Seconds(30)));
  int code = 0;
  const std::string status = cluster.Kvctl({"status"}, &code);
  INFO(status);
  REQUIRE(code == 0);
  REQUIRE(status.find("server     0") != std::string::npos);
  REQUIRE(status.find("server     1") != std::string::npos);
  REQUIRE(status.find("worker     0") != std::string::npos);
  const std::string json = cluster.Kvctl({"--json", "status"}, &code);
  INFO(json);
  REQUIRE(code == 0);
  // With or without blanks between the tokens.
  REQUIRE(absl::StrReplaceAll(json, {{" ", ""}}).find("\"num_dead\":0") != std::string::npos);
  REQUIRE(json.find("\"role\":\"SERVER\"") != std::string::npos);
  const std::string json_replies = cluster.Kvctl({"--json", "command", "2", "hello"}, &code);
  INFO(json_replies);
  REQUIRE(code == 0);
  REQUIRE(json_replies.find("{\"head\":2,\"replies\":[\"server 0: hello\",\"server 1: hello\"]}") !=
          std::string::npos);
  const std::string replies = cluster.Kvctl({"command", "2", "hello"}, &code);
  INFO(replies);
  REQUIRE(code == 0);
  REQUIRE(replies.find("server 0: server 0: hello") != std::string::npos);
  REQUIRE(replies.find("server 1: server 1: hello") != std::string::npos);
  const std::string dir = absl::StrCat(TempDir(), "/kvctl-ckpt-", getpid());
  const std::string written = cluster.Kvctl({"checkpoint", dir}, &code);
  INFO(written);
  REQUIRE(code == 0);
  for (int s = 0; s < 2; ++s) {
    const std::string path = absl::StrCat(dir, "/server-", s, ".ckpt");
    REQUIRE(written.find(absl::StrCat("server ", s, ": ", path)) != std::string::npos);
    REQUIRE(ReadTextFile(path).rfind(std::string("KVSTATE\0", 8), 0) == 0);
  }
  const std::string bad = cluster.Kvctl({"command", "9", "x"}, &code);
  REQUIRE(code == 1);
  REQUIRE(bad.find("no controller for command head 9") != std::string::npos);
  cluster.Kvctl({"shutdown"}, &code);
  REQUIRE(code == 0);
  Cluster::ExpectExit(cluster.server(0), 0);
  Cluster::ExpectExit(cluster.server(1), 0);
  Cluster::ExpectExit(cluster.scheduler(), 0);
  worker.Kill();
}

TEST_CASE("Cluster: a killed server is counted dead and named in errors", "[cluster][faults]") {
  Cluster cluster(2, 1, {"--big_value_bound=100"});
  Process& worker = cluster.AddWorker(0, {"dead_server"});
  REQUIRE(worker.WaitForOutput("READY", absl::Seconds(30)));
  cluster.server(1).Kill();
  Cluster::ExpectExit(worker, 0);
}

TEST_CASE("Cluster: once every worker is gone, the scheduler ends the job and names them",
          "[cluster][faults]") {
  Cluster cluster(1, 2, {"--workers_lost_timeout=2s"});
  Process& w0 = cluster.AddWorker(0, {"until_killed"});
  Process& w1 = cluster.AddWorker(1, {"until_killed"});
  REQUIRE(w0.WaitForOutput("READY", absl::Seconds(30)));
  REQUIRE(w1.WaitForOutput("READY", absl::Seconds(30)));
  w0.Kill();
  // Worker 1 still sends heartbeats: the job goes on past the timeout.
  REQUIRE_FALSE(cluster.scheduler().Exited(absl::Seconds(4)));
  REQUIRE_FALSE(cluster.server(0).Exited(absl::ZeroDuration()));
  w1.Kill();
  // The server still holds worker 0's push of a key worker 1 never pushed; ending the job with
  // it open is a clean exit.
  Cluster::ExpectExit(cluster.server(0), 0);
  Cluster::ExpectExit(cluster.scheduler(), 1);
  const std::string log = cluster.scheduler().output();
  REQUIRE(log.find("the job is abandoned") != std::string::npos);
  REQUIRE(log.find("worker 0 (node") != std::string::npos);
  REQUIRE(log.find("worker 1 (node") != std::string::npos);
}

TEST_CASE("Cluster: malformed, mismatched and foreign requests are refused; state unchanged",
          "[cluster][errors]") {
  Cluster cluster(1, 1);
  cluster.AddWorker(0, {"bad_input"});
  cluster.ExpectCleanExit();
}

TEST_CASE("Cluster: a worker that never comes makes the others fail, naming what is missing",
          "[cluster][faults]") {
  Cluster cluster(1, 2, {"--register_timeout=2s"});
  Process& worker = cluster.AddWorker(0, {"rounds", "dist_sync", "1"});
  Cluster::ExpectExit(worker, 1);
  REQUIRE(worker.output().find("missing 0 servers and 1 worker") != std::string::npos);
  Cluster::ExpectExit(cluster.server(0), 1);
  Cluster::ExpectExit(cluster.scheduler(), 1);
  REQUIRE(cluster.scheduler().output().find("missing") != std::string::npos);
}

TEST_CASE("Launcher: runs a job with prefixed output, exits with the workers' status",
          "[cluster][launcher]") {
  const std::vector<std::string> launch = {
      "/usr/bin/env", "python3", Runfile("deploy/launch.py"), "-n", "2", "-s", "2",
      "--scheduler", Runfile("server/scheduler/scheduler"), "--kvserver",
      Runfile("server/kvserver"), "--timeout", "120", "--scheduler-arg=--big_value_bound=100",
      "--"};
  SECTION("a clean job exits 0") {
    std::vector<std::string> argv = launch;
    argv.insert(argv.end(), {Runfile("tests/integration/test_worker"), "rounds", "dist_sync", "2"});
    std::unique_ptr<Process> launcher = StartProcess("launch", argv, {});
    Cluster::ExpectExit(*launcher, 0);
    const std::string output = launcher->output();
    INFO(output);
    REQUIRE(output.find("[worker 0] worker 0: 2 rounds of dist_sync checked") != std::string::npos);
    REQUIRE(output.find("[worker 1] worker 1: 2 rounds of dist_sync checked") != std::string::npos);
    REQUIRE(output.find("[scheduler] ") != std::string::npos);
    REQUIRE(output.find("[server 1] ") != std::string::npos);
  }
  SECTION("a failing worker fails the job with its status") {
    std::vector<std::string> argv = launch;
    argv.insert(argv.end(), {Runfile("tests/integration/test_worker"), "no_such_scenario"});
    std::unique_ptr<Process> launcher = StartProcess("launch", argv, {});
    Cluster::ExpectExit(*launcher, 1);
    const std::string output = launcher->output();
    INFO(output);
    REQUIRE(output.find("unknown scenario no_such_scenario") != std::string::npos);
    REQUIRE(output.find("exited with status 1") != std::string::npos);
  }
}

}  // namespace
}  // namespace kvstore::testing
