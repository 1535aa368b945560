// Multi-process tests: a real scheduler, real kvservers and real workers (test_worker), each its
// own process, talking over 127.0.0.1 with ports chosen by the OS.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/partitioner.h"
#include "tests/job_secret.h"
#include "tests/process.h"
#include "tests/test_files.h"

namespace kvstore::testing {
namespace {

// FreshCheckpointRoot makes an empty directory for the kvservers' --checkpoint_root and returns
// its canonical path, the one the servers name in their replies and errors.
std::string FreshCheckpointRoot(const std::string& name) {
  const std::filesystem::path root =
      std::filesystem::path(TempDir()) / absl::StrCat(name, "-", getpid());
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  return std::filesystem::canonical(root).string();
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
      servers_.push_back(StartProcess(absl::StrCat("server ", i), server, Env("server", i)));
    }
  }

  Variables Env(const std::string& role, int rank) const {
    return {{"DMLC_ROLE", role},
            {"DMLC_PS_ROOT_URI", "127.0.0.1"},
            {"DMLC_PS_ROOT_PORT", absl::StrCat(port_)},
            {"DMLC_NUM_WORKER", absl::StrCat(workers_)},
            {role == "server" ? "DMLC_SERVER_ID" : "DMLC_WORKER_ID", absl::StrCat(rank)}};
  }

  // AddServer starts one more kvserver with `args` (--join: it joins the running job).
  Process& AddServer(std::vector<std::string> args) {
    args.insert(args.begin(),
                {Runfile("server/kvserver"), absl::StrCat("--scheduler=127.0.0.1:", port_)});
    const int rank = static_cast<int>(servers_.size());
    servers_.push_back(StartProcess(absl::StrCat("server ", rank), args, Env("server", rank)));
    return *servers_.back();
  }

  Process& AddWorker(int rank, std::vector<std::string> args) {
    args.insert(args.begin(), Runfile("tests/integration/test_worker"));
    workers_list_.push_back(StartProcess(absl::StrCat("worker ", rank), args, Env("worker", rank)));
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
  int port() const { return port_; }
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
  INFO("peak RSS: server " << server_kib / 1024 << " MiB, worker " << worker_kib / 1024 << " MiB");
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

TEST_CASE(
    "Cluster: a table trained by 2 workers on 2 servers, dist_sync and dist_async: every pull "
    "matches a float64 reference of every server's rows",
    "[cluster][tables]") {
  for (const char* mode : {"dist_sync", "dist_async"}) {
    const uint64_t seed = absl::ToUnixNanos(absl::Now()) % 1000000007;
    std::printf("tables %s: seed %llu\n", mode, static_cast<unsigned long long>(seed));
    INFO(mode << " seed=" << seed);
    Cluster cluster(2, 2);
    const std::string release = absl::StrCat(TempDir(), "/tables-release-", mode, "-", getpid());
    std::filesystem::remove(release);
    for (int r = 0; r < 2; ++r) {
      cluster.AddWorker(r, {"tables", mode, absl::StrCat(seed), "1", "12", "2", "hold=" + release});
    }
    for (int r = 0; r < 2; ++r) {
      INFO(cluster.worker(r).output());
      REQUIRE(cluster.worker(r).WaitForOutput("READY", absl::Seconds(60)));
      CHECK(absl::StrContains(cluster.worker(r).output(), "tables: 12 rounds checked"));
    }
    // kvctl status shows each server's rows of the table: together, the reference's rows
    // (once the servers' heartbeats have brought their figures).
    const std::string output = cluster.worker(0).output();
    const size_t at = output.find("the reference holds ");
    REQUIRE(at != std::string::npos);
    const int64_t want = std::stoll(output.substr(at + std::string("the reference holds ").size()));
    int64_t rows = -1;
    std::string status;
    for (int attempt = 0; attempt < 20 && rows != want; ++attempt) {
      absl::SleepFor(absl::Milliseconds(200));
      int code = 0;
      status = cluster.Kvctl({"status"}, &code);
      rows = 0;
      const std::string line = "table \"embedding\": ";
      for (size_t p = status.find(line); p != std::string::npos; p = status.find(line, p + 1)) {
        rows += std::stoll(status.substr(p + line.size()));
      }
    }
    INFO(status);
    CHECK(rows == want);
    std::ofstream(release).put('\n');  // The workers finish.
    cluster.ExpectCleanExit();
  }
}

TEST_CASE(
    "Cluster: a table checkpointed mid-stream by 2 servers restores onto 3 and onto 1 server; "
    "training goes on matching the reference",
    "[cluster][tables][checkpoint]") {
  const uint64_t seed = absl::ToUnixNanos(absl::Now()) % 1000000007;
  std::printf("tables checkpoint: seed %llu\n", static_cast<unsigned long long>(seed));
  INFO("seed=" << seed);
  const std::string root = "--checkpoint_root=" + FreshCheckpointRoot("tables-root");
  {
    // Rounds 1..8 on 2 servers, a checkpoint after round 5.
    Cluster cluster(2, 2, {}, {root});
    for (int r = 0; r < 2; ++r) {
      cluster.AddWorker(r, {"tables", "dist_sync", absl::StrCat(seed), "1", "8", "2", "5", "t"});
    }
    cluster.ExpectCleanExit();
    for (int r = 0; r < 2; ++r)
      CHECK(absl::StrContains(cluster.worker(r).output(), "CHECKPOINTED"));
  }
  for (const int servers : {3, 1}) {
    // Rounds 6..10 on servers that restored the set, its rows re-placed.
    INFO(servers << " servers");
    Cluster cluster(servers, 2, {}, {root, "--restore=t"});
    for (int r = 0; r < 2; ++r) {
      cluster.AddWorker(
          r, {"tables", "dist_sync", absl::StrCat(seed), "6", "10", absl::StrCat(servers)});
    }
    cluster.ExpectCleanExit();
    for (int r = 0; r < 2; ++r) {
      CHECK(absl::StrContains(cluster.worker(r).output(), "tables: 5 rounds checked"));
    }
  }
}

TEST_CASE("Cluster: checkpoint, kill -9, restore: training continues bit-exactly",
          "[cluster][checkpoint]") {
  const uint64_t seed = absl::ToUnixNanos(absl::Now()) % 1000000007;
  INFO("seed=" << seed);
  const std::string dir = absl::StrCat(TempDir(), "/ckpt-", getpid());
  const std::string uninterrupted = absl::StrCat(dir, "-uninterrupted.bin");
  const std::string resumed = absl::StrCat(dir, "-resumed.bin");
  const std::vector<std::string> job = {"--big_value_bound=100", "--chunk_bytes=1000"};
  const std::string root = "--checkpoint_root=" + FreshCheckpointRoot("ckpt-root");
  {
    // The reference: rounds 1..6 without interruption.
    Cluster cluster(2, 2, job);
    for (int r = 0; r < 2; ++r) {
      cluster.AddWorker(r, {"train", absl::StrCat(seed), "1", "6", "0", "run", uninterrupted});
    }
    cluster.ExpectCleanExit();
  }
  {
    // Rounds 1..3, checkpoint, then server 0 is killed with SIGKILL and the job torn down.
    Cluster cluster(2, 2, job, {root});
    std::vector<Process*> workers;
    for (int r = 0; r < 2; ++r) {
      workers.push_back(
          &cluster.AddWorker(r, {"train", absl::StrCat(seed), "1", "3", "3", "run", "-"}));
    }
    for (Process* worker : workers) {
      INFO(worker->output());
      REQUIRE(worker->WaitForOutput("CHECKPOINTED", absl::Seconds(60)));
    }
    cluster.server(0).Kill();
  }
  {
    // A new job whose servers restore the checkpoint runs rounds 4..6.
    Cluster cluster(2, 2, job, {root, "--restore=run"});
    for (int r = 0; r < 2; ++r) {
      cluster.AddWorker(r,
                        {"train", absl::StrCat(seed), "4", "6", "0", "run", resumed, "restored"});
    }
    cluster.ExpectCleanExit();
  }
  const std::string a = ReadTextFile(uninterrupted), b = ReadTextFile(resumed);
  REQUIRE(a.size() == (600 * 5 + 7) * sizeof(float));
  REQUIRE(a == b);
}

// A set written by S servers restores onto S' servers (docs/state.md, "Restore onto another
// number of servers"): every key and its Adam state re-placed, training goes on bit-exactly.
TEST_CASE("Cluster: a checkpoint of S servers restores onto S' servers: 2->3, 3->2, 4->1",
          "[cluster][checkpoint]") {
  const uint64_t seed = absl::ToUnixNanos(absl::Now()) % 1000000007;
  INFO("seed=" << seed);
  const std::vector<std::string> job = {"--big_value_bound=100", "--chunk_bytes=1000"};
  const std::string base = absl::StrCat(TempDir(), "/reshard-", getpid());
  const std::string uninterrupted = base + "-uninterrupted.bin";
  {
    // The reference: rounds 1..6 on 2 servers without interruption.
    Cluster cluster(2, 2, job);
    for (int r = 0; r < 2; ++r) {
      cluster.AddWorker(r, {"train", absl::StrCat(seed), "1", "6", "0", "run", uninterrupted});
    }
    cluster.ExpectCleanExit();
  }
  const std::string reference = ReadTextFile(uninterrupted);
  REQUIRE(reference.size() == (600 * 5 + 7) * sizeof(float));
  for (const auto& [from, to] : std::vector<std::pair<int, int>>{{2, 3}, {3, 2}, {4, 1}}) {
    INFO(from << " -> " << to << " servers");
    const std::string root =
        "--checkpoint_root=" + FreshCheckpointRoot(absl::StrCat("reshard-", from, "-", to));
    {
      // Rounds 1..3 on `from` servers, then the checkpoint; the job is then torn down.
      Cluster cluster(from, 2, job, {root});
      for (int r = 0; r < 2; ++r) {
        cluster.AddWorker(r, {"train", absl::StrCat(seed), "1", "3", "3", "run", "-"});
      }
      for (int r = 0; r < 2; ++r) {
        INFO(cluster.worker(r).output());
        REQUIRE(cluster.worker(r).WaitForOutput("CHECKPOINTED", absl::Seconds(60)));
      }
    }
    // Rounds 4..6 on `to` servers restored from it.
    const std::string resumed = absl::StrCat(base, "-", from, "-", to, ".bin");
    Cluster cluster(to, 2, job, {root, "--restore=run"});
    for (int r = 0; r < 2; ++r) {
      cluster.AddWorker(r,
                        {"train", absl::StrCat(seed), "4", "6", "0", "run", resumed, "restored"});
    }
    cluster.ExpectCleanExit();
    INFO(cluster.server(0).output());
    REQUIRE(cluster.server(0).output().find(absl::StrCat("of ", from, " servers, re-placed")) !=
            std::string::npos);
    REQUIRE(ReadTextFile(resumed) == reference);
  }
}

TEST_CASE("Cluster: a damaged checkpoint stops the restoring server, naming the file",
          "[cluster][checkpoint]") {
  const std::string dir = FreshCheckpointRoot("damaged");
  {
    Cluster cluster(1, 1, {}, {"--checkpoint_root=" + dir});
    Process& worker = cluster.AddWorker(0, {"train", "7", "1", "1", "1", "run", "-"});
    REQUIRE(worker.WaitForOutput("CHECKPOINTED", absl::Seconds(60)));
  }
  const std::string path = dir + "/run/server-0.ckpt";
  std::string bytes = ReadTextFile(path);
  REQUIRE(bytes.size() > 100);
  bytes[bytes.size() / 2] ^= 0x40;
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; }
  Cluster cluster(1, 1, {}, {"--checkpoint_root=" + dir, "--restore=run"});
  cluster.AddWorker(0, {"train", "7", "2", "2", "0", "run", "-", "restored"});
  Cluster::ExpectExit(cluster.server(0), 1);
  const std::string log = cluster.server(0).output();
  INFO(log);
  REQUIRE(log.find(path) != std::string::npos);
  REQUIRE(log.find("checksum") != std::string::npos);
}

TEST_CASE("Cluster: checkpoints stay below --checkpoint_root; escapes are refused, naming both",
          "[cluster][checkpoint]") {
  const std::string base = FreshCheckpointRoot("confined");
  const std::string root = base + "/root", outside = base + "/outside";
  std::filesystem::create_directories(root + "/trap");
  std::filesystem::create_directories(outside);
  std::ofstream(outside + "/victim") << "precious";
  std::filesystem::create_directory_symlink(outside, root + "/link");
  std::filesystem::create_symlink(outside + "/victim", root + "/trap/server-0.ckpt");
  // not_root lists what lies below `base` outside the root: nothing may be written there.
  auto not_root = [&] {
    std::vector<std::string> found;
    for (auto it = std::filesystem::recursive_directory_iterator(base);
         it != std::filesystem::recursive_directory_iterator(); ++it) {
      if (it->path() == root) it.disable_recursion_pending();
      found.push_back(it->path().string());
    }
    std::sort(found.begin(), found.end());
    return found;
  };
  const std::vector<std::string> before = not_root();
  // DIR, the status code, and what the refusal says (it also names the root).
  struct Escape {
    std::string dir, code, why;
  };
  const std::string link = root + "/link is a symbolic link";
  const std::vector<Escape> escapes = {
      {"../escape", "INVALID_ARGUMENT", "\"../escape\" has a \"..\" component"},
      {outside + "/absolute", "INVALID_ARGUMENT", "\"" + outside + "/absolute\" is absolute"},
      {"link", "PERMISSION_DENIED", "\"link\": " + link},
      {"link/below", "PERMISSION_DENIED", "\"link/below\": " + link},
  };
  const std::string server_root = "--checkpoint_root=" + root;
  {
    Cluster cluster(1, 1, {}, {server_root});
    Process& worker = cluster.AddWorker(0, {"train", "11", "1", "2", "2", "run", "-"});
    REQUIRE(worker.WaitForOutput("CHECKPOINTED", absl::Seconds(60)));
    std::vector<Escape> refused = escapes;
    refused.push_back({"trap", "", root + "/trap/server-0.ckpt is a symbolic link"});
    int code = 0;
    for (const Escape& escape : refused) {
      const std::string output = cluster.Kvctl({"checkpoint", escape.dir}, &code);
      INFO("kvctl checkpoint " << escape.dir << ": " << output);
      CHECK(code == 1);
      CHECK(output.find(escape.why) != std::string::npos);
      CHECK(output.find("checkpoint root " + root) != std::string::npos);
    }
    CHECK(not_root() == before);
    CHECK(ReadTextFile(outside + "/victim") == "precious");
    const std::string written = cluster.Kvctl({"checkpoint", "./again/"}, &code);
    INFO(written);
    CHECK(code == 0);
    CHECK(written.find("server 0: " + root + "/again/server-0.ckpt") != std::string::npos);
    // An absolute DIR below the root's canonical path, as operators write it, is taken.
    const std::string absolute = std::filesystem::canonical(root).string() + "/abs/run";
    const std::string taken = cluster.Kvctl({"checkpoint", absolute}, &code);
    INFO(taken);
    CHECK(code == 0);
    CHECK(taken.find("server 0: " + absolute + "/server-0.ckpt") != std::string::npos);
    CHECK(std::filesystem::is_regular_file(root + "/abs/run/server-0.ckpt"));
    cluster.Kvctl({"shutdown"}, &code);
    Cluster::ExpectExit(cluster.server(0), 0);
    Cluster::ExpectExit(cluster.scheduler(), 0);
    worker.Kill();
  }
  // A kvserver asked to restore from outside the root stops at once, naming both.
  for (const Escape& escape : escapes) {
    std::unique_ptr<Process> server =
        StartProcess("kvserver",
                     {Runfile("server/kvserver"), "--scheduler=127.0.0.1:1", server_root,
                      "--restore=" + escape.dir},
                     {});
    Cluster::ExpectExit(*server, 1);
    const std::string output = server->output();
    INFO("kvserver --restore=" << escape.dir << ": " << output);
    CHECK(output.find(escape.code + ": checkpoint directory " + escape.why) != std::string::npos);
    CHECK(output.find("checkpoint root " + root) != std::string::npos);
  }
  // The checkpoint below the root restores.
  Cluster cluster(1, 1, {}, {server_root, "--restore=run"});
  cluster.AddWorker(0, {"train", "11", "3", "3", "0", "run", base + "/resumed.bin", "restored"});
  cluster.ExpectCleanExit();
  CHECK(ReadTextFile(base + "/resumed.bin").size() == (600 * 5 + 7) * sizeof(float));
  std::vector<std::string> after = before;
  after.push_back(base + "/resumed.bin");
  std::sort(after.begin(), after.end());
  CHECK(not_root() == after);
}

TEST_CASE("Cluster: a kvserver built with its own updater and controller", "[cluster][extension]") {
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

// ShutDownWhileStopped runs the `after_the_end` worker of a 1 x 1 job, shuts the job down with
// kvctl - with the worker stopped (SIGSTOP, no heartbeats) for `stopped` around it when that is
// above 0 - and requires the worker to end at once, having heard that the job is over.
void ShutDownWhileStopped(absl::Duration stopped) {
  Cluster cluster(1, 1);
  Process& worker = cluster.AddWorker(0, {"after_the_end"});
  REQUIRE(worker.WaitForOutput("READY", absl::Seconds(30)));
  if (stopped > absl::ZeroDuration()) REQUIRE(kill(worker.pid(), SIGSTOP) == 0);
  int code = 0;
  cluster.Kvctl({"shutdown"}, &code);
  if (stopped > absl::ZeroDuration()) {
    absl::SleepFor(stopped);
    REQUIRE(kill(worker.pid(), SIGCONT) == 0);
  }
  const absl::Time start = absl::Now();
  Cluster::ExpectExit(worker, 0);
  const absl::Duration took = absl::Now() - start;
  INFO(worker.output());
  CHECK(absl::StrContains(worker.output(), "is over"));
  CHECK(took < absl::Seconds(10));  // Not the SDK's 30 s for a scheduler away.
  cluster.ExpectCleanExit();
}

TEST_CASE(
    "Cluster: once a worker has heard that the job is over, a call to the gone scheduler fails "
    "at once, naming the end, rather than waiting for a scheduler away",
    "[cluster][kvctl]") {
  ShutDownWhileStopped(absl::ZeroDuration());
}

TEST_CASE(
    "Cluster: after kvctl shutdown the scheduler waits for a worker that has not heard it yet "
    "(stopped for 2 s), which then ends at once",
    "[cluster][kvctl]") {
  ShutDownWhileStopped(absl::Seconds(2));
}

TEST_CASE(
    "Cluster: a kvserver stopped (SIGTERM) while a checkpoint set is open removes its "
    "unpublished file of the set",
    "[cluster][checkpoint]") {
  // Server 0 holds no key, so it writes its file of the set at once; server 1 holds a key
  // whose round never completes, so the set stays open, waiting for it.
  const kvstore::Partitioner placement = kvstore::Partitioner::Create(2).value();
  int64_t key = 0;
  while (placement.ServerOf(kvstore::Key(key)) != 1) ++key;
  const std::string root = FreshCheckpointRoot("open-set-root");
  Cluster cluster(2, 2, {"--checkpoint_timeout=60s"}, {"--checkpoint_root=" + root});
  for (int r = 0; r < 2; ++r) cluster.AddWorker(r, {"open_round", absl::StrCat(key)});
  for (int r = 0; r < 2; ++r) REQUIRE(cluster.worker(r).WaitForOutput("READY", absl::Seconds(30)));
  std::unique_ptr<Process> kvctl =
      StartProcess("kvctl",
                   {Runfile("client/kvctl/kvctl"),
                    absl::StrCat("--scheduler=127.0.0.1:", cluster.port()), "checkpoint", "open"},
                   {});
  const std::filesystem::path pending =
      std::filesystem::path(root) / "open" / "server-0.ckpt.pending";
  bool written = false;
  for (int i = 0; i < 200 && !written; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    written = std::filesystem::exists(pending);
  }
  INFO(cluster.server(0).output());
  REQUIRE(written);
  ::kill(cluster.server(0).pid(), SIGTERM);
  const absl::StatusOr<int> code = cluster.server(0).Wait(absl::Seconds(30));
  REQUIRE(code.ok());
  CHECK_FALSE(std::filesystem::exists(pending));
  CHECK(absl::StrContains(cluster.server(0).output(), "unpublished file"));
}

TEST_CASE("Cluster: kvctl status, command fan-out and shutdown", "[cluster][kvctl]") {
  const std::string root = FreshCheckpointRoot("kvctl-ckpt");
  Cluster cluster(2, 1, {}, {"--checkpoint_root=" + root});
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
  const std::string written = cluster.Kvctl({"checkpoint", "snapshot"}, &code);
  INFO(written);
  REQUIRE(code == 0);
  for (int s = 0; s < 2; ++s) {
    const std::string path = absl::StrCat(root, "/snapshot/server-", s, ".ckpt");
    REQUIRE(written.find(absl::StrCat("server ", s, ": ", path)) != std::string::npos);
    REQUIRE(ReadTextFile(path).rfind(std::string("KVSTATE\0", 8), 0) == 0);
  }
  const std::string bad = cluster.Kvctl({"command", "16", "x"}, &code);
  REQUIRE(code == 1);
  REQUIRE(bad.find("no controller for command head 16") != std::string::npos);
  // The steps of the scheduler's own checkpoints and shard copies are not sent on request.
  for (const char* head : {"7", "12", "14", "15"}) {
    const std::string internal = cluster.Kvctl({"command", head, "x"}, &code);
    INFO(internal);
    REQUIRE(code == 1);
    REQUIRE(internal.find(absl::StrCat("command head ", head, " is a step of the scheduler's")) !=
            std::string::npos);
  }
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
  // The job failed (its workers died): the server exits non-zero too, naming them.
  Cluster::ExpectExit(cluster.server(0), 1);
  REQUIRE(cluster.server(0).output().find("worker 1 (node") != std::string::npos);
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

TEST_CASE("Cluster: without the job's secret, a kvserver or kvctl is refused; the job goes on",
          "[cluster][auth]") {
  // Payloads signed too: the worker's captured push, altered in its payload, is refused.
  Cluster cluster(1, 1, {"--signed_payloads"});
  const std::string other_secret = WriteJobSecret(TempDir());
  // Another job's kvserver (or an attacker's) cannot take a server slot.
  Variables env = cluster.Env("server", 1);
  env.emplace_back("KV_SECRET_FILE", other_secret);
  std::unique_ptr<Process> impostor =
      StartProcess("impostor", {Runfile("server/kvserver"), "--register_timeout=10s"}, env);
  const absl::StatusOr<int> impostor_exit = impostor->Wait(absl::Seconds(30));
  INFO(impostor->output());
  REQUIRE(impostor_exit.ok());
  CHECK(*impostor_exit != 0);
  CHECK(impostor->output().find("UNAUTHENTICATED") != std::string::npos);
  // Nor can a kvctl without the secret shut the job down.
  const std::vector<std::string> shutdown = {
      Runfile("client/kvctl/kvctl"),
      absl::StrCat("--scheduler=127.0.0.1:", cluster.Env("worker", 0)[2].second), "shutdown"};
  std::unique_ptr<Process> kvctl =
      StartProcess("kvctl", shutdown, {{"KV_SECRET_FILE", other_secret}});
  CHECK(kvctl->Wait(absl::Seconds(20)).value_or(-1) == 1);
  CHECK(kvctl->output().find("job token") != std::string::npos);
  // The worker's raw attacks on the server and the scheduler are refused too, and the job
  // ends cleanly with the key unchanged.
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
  const std::vector<std::string> launch = {"/usr/bin/env",
                                           "python3",
                                           Runfile("deploy/launch.py"),
                                           "-n",
                                           "2",
                                           "-s",
                                           "2",
                                           "--scheduler",
                                           Runfile("server/scheduler/scheduler"),
                                           "--kvserver",
                                           Runfile("server/kvserver"),
                                           "--timeout",
                                           "120",
                                           "--scheduler-arg=--big_value_bound=100",
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

// WaitForRound waits (at most 60 s) until worker 0 of `cluster` (with `workers` workers) has
// printed "ROUND r"; on failure every worker's output is shown.
void WaitForRound(Cluster& cluster, int workers, int round) {
  const bool reached =
      cluster.worker(0).WaitForOutput(absl::StrCat("ROUND ", round, "\n"), absl::Seconds(60));
  std::string outputs;
  for (int w = 0; w < workers && !reached; ++w) {
    absl::StrAppend(&outputs, "worker ", w, ":\n", cluster.worker(w).output(), "\n");
  }
  INFO(outputs);
  REQUIRE(reached);
}

// JoinAndDrain: 3 workers train 24 rounds on 2 servers while a third joins after round 4 and
// server 0 drains after round 12 (2 -> 3 -> 2), every pull checked exactly; every process
// exits 0.
void JoinAndDrain(std::vector<std::string> scheduler_args) {
  const uint64_t seed = absl::ToUnixNanos(absl::Now()) % 1000000007;
  INFO("seed " << seed);
  scheduler_args.push_back("--big_value_bound=1000");
  Cluster cluster(2, 3, scheduler_args, {"--updater=sum"});
  for (int w = 0; w < 3; ++w) {
    cluster.AddWorker(w, {"elastic", absl::StrCat(seed), "24", "150"});
  }
  WaitForRound(cluster, 3, 4);
  Process& joined = cluster.AddServer({"--join", "--updater=sum"});
  const bool published =
      cluster.scheduler().WaitForOutput("rescale published at view epoch 1", absl::Seconds(60));
  INFO(cluster.scheduler().output() << "\n" << joined.output());
  REQUIRE(published);
  WaitForRound(cluster, 3, 12);
  int code = -1;
  const std::string drained = cluster.Kvctl({"--timeout=60s", "servers", "drain", "0"}, &code);
  INFO(drained);
  REQUIRE(code == 0);
  REQUIRE(absl::StrContains(drained, "drained: server 0"));
  Cluster::ExpectExit(cluster.server(0), 0);  // The drained server exits 0.
  REQUIRE(absl::StrContains(cluster.scheduler().output(), "rescale published at view epoch 2"));
  for (int w = 0; w < 3; ++w) {
    Cluster::ExpectExit(cluster.worker(w), 0);
    REQUIRE(absl::StrContains(cluster.worker(w).output(), "24 rounds checked"));
  }
  cluster.ExpectCleanExit();
}

TEST_CASE("Cluster: a server joins and another drains while 3 workers train; every pull exact",
          "[cluster][rescale]") {
  JoinAndDrain({});
}

TEST_CASE("Cluster: with replicas, a server joins and another drains; every pull exact",
          "[cluster][rescale]") {
  JoinAndDrain({"--replicas=2"});
}

// Adam's state moves with the keys: training on while a server joins and another drains ends
// byte-identical to training on the same servers throughout.
TEST_CASE("Cluster: Adam training while servers join and drain ends bit-exact",
          "[cluster][rescale]") {
  const uint64_t seed = absl::ToUnixNanos(absl::Now()) % 1000000007;
  INFO("seed=" << seed);
  const std::vector<std::string> job = {"--big_value_bound=100", "--chunk_bytes=1000"};
  const std::string base = absl::StrCat(TempDir(), "/rescale-adam-", getpid());
  {
    Cluster cluster(2, 2, job);
    for (int r = 0; r < 2; ++r) {
      cluster.AddWorker(r, {"train", absl::StrCat(seed), "1", "12", "0", "run", base + "-2.bin"});
    }
    cluster.ExpectCleanExit();
  }
  const std::string reference = ReadTextFile(base + "-2.bin");
  REQUIRE(reference.size() == (600 * 5 + 7) * sizeof(float));
  Cluster cluster(2, 2, job);
  for (int r = 0; r < 2; ++r) {
    cluster.AddWorker(
        r, {"train", absl::StrCat(seed), "1", "12", "0", "run", base + "-moved.bin", "pause=100"});
  }
  WaitForRound(cluster, 2, 3);
  cluster.AddServer({"--join"});
  REQUIRE(
      cluster.scheduler().WaitForOutput("rescale published at view epoch 1", absl::Seconds(60)));
  WaitForRound(cluster, 2, 7);
  int code = -1;
  const std::string drained = cluster.Kvctl({"--timeout=60s", "servers", "drain", "1"}, &code);
  INFO(drained);
  REQUIRE(code == 0);
  cluster.ExpectCleanExit();
  INFO(cluster.scheduler().output());
  REQUIRE(absl::StrContains(cluster.scheduler().output(), "rescale published at view epoch 2"));
  REQUIRE(ReadTextFile(base + "-moved.bin") == reference);
}

TEST_CASE("Cluster: a joining kvserver killed with SIGKILL mid-rescale: the job goes on exact",
          "[cluster][rescale]") {
  const uint64_t seed = absl::ToUnixNanos(absl::Now()) % 1000000007;
  INFO("seed " << seed);
  constexpr int kRounds = 12;
  // A key of 16 MB split over the servers, so that the move takes a while; the joining
  // server is killed as soon as every server is cut, while the parts move.
  Cluster cluster(2, 3, {"--big_value_bound=1000", "--checkpoint_timeout=10s"}, {"--updater=sum"});
  for (int w = 0; w < 3; ++w) {
    cluster.AddWorker(w, {"elastic", absl::StrCat(seed), absl::StrCat(kRounds), "100", "4000000"});
  }
  WaitForRound(cluster, 3, 3);
  Process& joined = cluster.AddServer({"--join", "--updater=sum"});
  const bool cut =
      cluster.scheduler().WaitForOutput("rescale: every server cut at round", absl::Seconds(60));
  joined.Kill();
  INFO(cluster.scheduler().output());
  REQUIRE(cut);
  const bool failed =
      cluster.scheduler().WaitForOutput("rescale at view epoch 1 failed", absl::Seconds(60));
  const std::string log = cluster.scheduler().output();
  INFO(log);
  // The kill lands while the parts move: nothing is published, and the job goes on on the
  // old view with every pull exact.
  REQUIRE(failed);
  REQUIRE(!absl::StrContains(log, "rescale published"));
  for (int w = 0; w < 3; ++w) {
    Cluster::ExpectExit(cluster.worker(w), 0);
    REQUIRE(
        absl::StrContains(cluster.worker(w).output(), absl::StrCat(kRounds, " rounds checked")));
    // The workers sent their refused operations again to the old servers (at the failed
    // rescale's epoch), never to the killed one.
    REQUIRE(!absl::StrContains(cluster.worker(w).output(), "3 servers at view epoch"));
  }
  Cluster::ExpectExit(cluster.server(0), 0);
  Cluster::ExpectExit(cluster.server(1), 0);
  Cluster::ExpectExit(cluster.scheduler(), 0);
}

}  // namespace
}  // namespace kvstore::testing
