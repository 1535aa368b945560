// Multi-process tests of TLS: a real scheduler, kvservers, workers (test_worker) and kvctl, each
// its own process on 127.0.0.1, with a CA and certificates made by deploy/make-certs.sh; and the
// daemons' refusal to serve a non-loopback address in the clear.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/job_secret.h"
#include "tests/process.h"
#include "tools/cpp/runfiles/runfiles.h"

namespace kvstore::testing {
namespace {

// Variables set in a process, on top of the test's own; an empty value unsets one for the
// programs (common/environment.h reads an empty variable as unset).
using Variables = std::vector<std::pair<std::string, std::string>>;

// TempDir is the test's temporary folder.
std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// Scratch returns a path for `name` in the test's temporary folder, unique to this process.
std::string Scratch(const std::string& name) {
  return absl::StrCat(TempDir(), "/tls-", getpid(), "-", name);
}

// Path returns the runfile `path` of the workspace (a binary or script this test runs).
std::string Path(const std::string& path) {
  using bazel::tools::cpp::runfiles::Runfiles;
  static const std::unique_ptr<Runfiles> runfiles = [] {
    std::string error;
    std::unique_ptr<Runfiles> made(Runfiles::CreateForTest(&error));
    INFO(error);
    REQUIRE(made != nullptr);
    return made;
  }();
  return runfiles->Rlocation("kvstore/" + path);
}

// Run starts `argv` as process `name` with `env`, its output in a log of its own.
std::unique_ptr<Process> Run(const std::string& name, std::vector<std::string> argv,
                             Variables env) {
  static int started = 0;
  ProcessOptions options;
  options.env = std::move(env);
  options.log_path = Scratch(absl::StrCat(started++, "-", name, ".log"));
  absl::StatusOr<std::unique_ptr<Process>> process =
      Process::Start(name, std::move(argv), std::move(options));
  INFO(process.status().ToString());
  REQUIRE(process.ok());
  return *std::move(process);
}

// ExitCode waits for `process` to exit and returns its exit code.
int ExitCode(Process& process) {
  const absl::StatusOr<int> code = process.Wait(absl::Seconds(60));
  INFO(process.name() << " output:\n" << process.output());
  REQUIRE(code.ok());
  return *code;
}

// Certificates: a CA and one node certificate for 127.0.0.1 and localhost, made by
// deploy/make-certs.sh into a folder of their own.
struct Certificates {
  explicit Certificates(const std::string& name) : dir(Scratch(name)) {
    std::unique_ptr<Process> maker =
        Run("make-certs " + name, {"/bin/bash", Path("deploy/make-certs.sh"), dir}, {});
    REQUIRE(ExitCode(*maker) == 0);
  }
  // Env returns the variables that give a process these files: KV_TLS_CA, and the certificate
  // and key unless `present_certificate` is false (a client that has none).
  Variables Env(bool present_certificate = true) const {
    return {{"KV_TLS_CA", dir + "/ca.pem"},
            {"KV_TLS_CERT", present_certificate ? dir + "/node.pem" : ""},
            {"KV_TLS_KEY", present_certificate ? dir + "/node.key" : ""}};
  }
  std::string dir;
};

// Plaintext: the variables of a process without TLS.
const Variables kPlaintext = {{"KV_TLS_CA", ""}, {"KV_TLS_CERT", ""}, {"KV_TLS_KEY", ""}};

// Joined returns `base` changed by `changes`: a variable in both takes its value in `changes`.
Variables Joined(Variables base, const Variables& changes) {
  for (const auto& [name, value] : changes) {
    auto same = std::find_if(base.begin(), base.end(), [&name = name](const auto& variable) {
      return variable.first == name;
    });
    if (same != base.end()) {
      same->second = value;
    } else {
      base.emplace_back(name, value);
    }
  }
  return base;
}

// TlsJob: a scheduler and its kvservers on 127.0.0.1, every process given the job's secret and
// `certificates`' TLS files, both daemons `daemon_flags` (e.g. --tls_mutual) and the scheduler
// `scheduler_flags` too.
class TlsJob {
 public:
  TlsJob(const Certificates& certificates, int servers, int workers,
         const std::vector<std::string>& daemon_flags = {},
         const std::vector<std::string>& scheduler_flags = {})
      : env_(Joined({{"KV_SECRET_FILE", WriteJobSecret(TempDir())}}, certificates.Env())),
        workers_(workers) {
    // Heartbeats every 100 ms: the daemons hear of the job's end, and exit, sooner.
    const std::string port_file = Scratch(absl::StrCat("port-", ++jobs_));
    std::vector<std::string> scheduler = daemon_flags;
    scheduler.insert(scheduler.end(), scheduler_flags.begin(), scheduler_flags.end());
    scheduler.insert(scheduler.begin(),
                     {Path("server/scheduler/scheduler"), "--port=0", "--port_file=" + port_file,
                      "--heartbeat_interval=100ms", absl::StrCat("--num_servers=", servers),
                      absl::StrCat("--num_workers=", workers)});
    scheduler_ = Run("scheduler", scheduler, env_);
    const absl::StatusOr<int> port = scheduler_->WaitForPortFile(port_file, absl::Seconds(20));
    INFO(port.status().ToString() << "\n" << scheduler_->output());
    REQUIRE(port.ok());
    address_ = absl::StrCat("127.0.0.1:", *port);
    for (int rank = 0; rank < servers; ++rank) {
      std::vector<std::string> server = {Path("server/kvserver"), "--scheduler=" + address_,
                                         absl::StrCat("--rank=", rank)};
      server.insert(server.end(), daemon_flags.begin(), daemon_flags.end());
      servers_.push_back(Run(absl::StrCat("server ", rank), server, env_));
    }
  }

  // AddWorker starts test_worker `args` as worker `rank`.
  Process& AddWorker(int rank, std::vector<std::string> args) {
    args.insert(args.begin(), Path("tests/integration/test_worker"));
    const Variables launch = {{"DMLC_ROLE", "worker"},
                              {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                              {"DMLC_PS_ROOT_PORT", address_.substr(address_.find(':') + 1)},
                              {"DMLC_NUM_WORKER", absl::StrCat(workers_)},
                              {"DMLC_WORKER_ID", absl::StrCat(rank)}};
    workers_list_.push_back(Run(absl::StrCat("worker ", rank), args, Joined(env_, launch)));
    return *workers_list_.back();
  }

  // Kvctl runs `kvctl --scheduler=ADDRESS ARGS` (ADDRESS: the scheduler's unless given) with
  // the job's variables changed by `changes`; returns its exit code and sets `output`.
  int Kvctl(std::vector<std::string> args, const Variables& changes, std::string* output,
            const std::string& address = "") {
    args.insert(args.begin(), {Path("client/kvctl/kvctl"), "--timeout=5s",
                               "--scheduler=" + (address.empty() ? address_ : address)});
    std::unique_ptr<Process> kvctl = Run("kvctl", args, Joined(env_, changes));
    const int code = ExitCode(*kvctl);
    *output = kvctl->output();
    return code;
  }

  // StatusShowing polls `kvctl status` (over the job's TLS, each call required to succeed)
  // until its output contains `text`, for up to 20 s; returns the last output.
  std::string StatusShowing(const std::string& text) {
    std::string output;
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    do {
      REQUIRE(Kvctl({"status"}, {}, &output) == 0);
      if (output.find(text) != std::string::npos) break;
      absl::SleepFor(absl::Milliseconds(100));
    } while (absl::Now() < give_up);
    return output;
  }

  // ServerAddress returns the address kvserver `rank` listens on, from its log.
  std::string ServerAddress(int rank) {
    Process& server = *servers_[rank];
    REQUIRE(server.WaitForOutput("kvserver listening on", absl::Seconds(20)));
    std::smatch found;
    const std::string log = server.output();
    REQUIRE(std::regex_search(log, found, std::regex(R"(listening on (127\.0\.0\.1:[0-9]+))")));
    return found[1];
  }

  // ExpectCleanExit requires every worker, server and the scheduler to exit 0.
  void ExpectCleanExit() {
    for (auto& worker : workers_list_) REQUIRE(ExitCode(*worker) == 0);
    for (auto& server : servers_) REQUIRE(ExitCode(*server) == 0);
    REQUIRE(ExitCode(*scheduler_) == 0);
  }

  const Variables& env() const { return env_; }
  const std::string& scheduler_address() const { return address_; }
  Process& scheduler() { return *scheduler_; }
  Process& server(int rank) { return *servers_[rank]; }

 private:
  static inline int jobs_ = 0;
  Variables env_;
  int workers_;
  std::string address_;
  std::unique_ptr<Process> scheduler_;
  std::vector<std::unique_ptr<Process>> servers_;
  std::vector<std::unique_ptr<Process>> workers_list_;
};

// The certificates of the tests' jobs, and another CA's, made once.
const Certificates& JobCertificates() {
  static const Certificates* certificates = new Certificates("job");
  return *certificates;
}
const Certificates& OtherCertificates() {
  static const Certificates* certificates = new Certificates("other");
  return *certificates;
}

// Refused is true when kvctl's output says its call never got through the TLS handshake.
bool Refused(const std::string& output) {
  return output.find("failed to connect to all addresses") != std::string::npos;
}

TEST_CASE(
    "TLS: a job over TLS trains end to end; kvctl over TLS sees it, a plaintext one is "
    "refused",
    "[tls]") {
  TlsJob job(JobCertificates(), 2, 2, {}, {"--big_value_bound=100"});
  // The scheduler's log names the transport, and kvctl over TLS sees both servers register.
  REQUIRE(job.scheduler().WaitForOutput("(TLS)", absl::Seconds(10)));
  std::string output = job.StatusShowing("2 nodes");
  INFO(output);
  REQUIRE(output.find("2 nodes") != std::string::npos);
  // A plaintext client reaches neither the scheduler nor a kvserver.
  REQUIRE(job.Kvctl({"status"}, kPlaintext, &output) == 1);
  CHECK(Refused(output));
  REQUIRE(job.Kvctl({"status"}, kPlaintext, &output, job.ServerAddress(0)) == 1);
  CHECK(Refused(output));
  // The workers train over TLS (every value checked) and the job ends cleanly.
  job.AddWorker(0, {"rounds", "dist_sync", "2"});
  job.AddWorker(1, {"rounds", "dist_sync", "2"});
  job.ExpectCleanExit();
}

TEST_CASE(
    "TLS: with --tls_mutual the job works; a client without a certificate, or with one "
    "from another CA, is refused",
    "[tls][mutual]") {
  TlsJob job(JobCertificates(), 1, 1, {"--tls_mutual"});
  REQUIRE(job.scheduler().WaitForOutput("(mutual TLS)", absl::Seconds(10)));
  std::string output;
  REQUIRE(job.Kvctl({"status"}, {}, &output) == 0);
  // Without a certificate: refused in the handshake by the scheduler and by a kvserver. With
  // its certificate, a kvctl pointed at the kvserver gets through the handshake and is only
  // told that the kvserver has no such method.
  const std::string server = job.ServerAddress(0);
  const Variables no_certificate = JobCertificates().Env(/*present_certificate=*/false);
  REQUIRE(job.Kvctl({"status"}, no_certificate, &output) == 1);
  CHECK(Refused(output));
  REQUIRE(job.Kvctl({"status"}, no_certificate, &output, server) == 1);
  CHECK(Refused(output));
  REQUIRE(job.Kvctl({"status"}, {}, &output, server) == 1);
  CHECK_FALSE(Refused(output));
  // A certificate signed by another CA is refused too, even by a client that trusts ours.
  const Variables foreign = {{"KV_TLS_CERT", OtherCertificates().dir + "/node.pem"},
                             {"KV_TLS_KEY", OtherCertificates().dir + "/node.key"}};
  REQUIRE(job.Kvctl({"status"}, foreign, &output) == 1);
  CHECK(Refused(output));
  job.AddWorker(0, {"rounds", "dist_sync", "2"});
  job.ExpectCleanExit();
}

TEST_CASE("TLS: a client that trusts another CA refuses the job's daemons", "[tls][ca]") {
  TlsJob job(JobCertificates(), 1, 1);
  std::string output;
  REQUIRE(job.Kvctl({"status"}, {}, &output) == 0);
  REQUIRE(job.Kvctl({"status"}, OtherCertificates().Env(), &output) == 1);
  INFO(output);
  CHECK(Refused(output));
  CHECK(output.find("certificate verify failed") != std::string::npos);
  // So does a kvserver: it cannot join the job, whose own server can.
  std::unique_ptr<Process> impostor = Run(
      "impostor",
      {Path("server/kvserver"), "--register_timeout=2s", "--scheduler=" + job.scheduler_address()},
      Joined(job.env(), OtherCertificates().Env()));
  CHECK(ExitCode(*impostor) == 1);
  CHECK(impostor->output().find("registering with the scheduler") != std::string::npos);
  output = job.StatusShowing("1 nodes");
  CHECK(output.find("1 nodes") != std::string::npos);
}

// HeldPort binds a listening socket to 0.0.0.0 on a port the OS chooses and keeps it: a daemon
// that tried to listen there would fail to.
class HeldPort {
 public:
  HeldPort() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t length = sizeof(addr);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&addr), length) == 0);
    REQUIRE(listen(fd_, 1) == 0);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
    port_ = ntohs(addr.sin_port);
  }
  ~HeldPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

TEST_CASE(
    "TLS: a daemon bound to 0.0.0.0 without TLS refuses to start, before binding, "
    "unless --insecure",
    "[tls][insecure]") {
  const Variables secret = {{"KV_SECRET_FILE", WriteJobSecret(TempDir())}};
  const HeldPort held;
  const std::string taken = absl::StrCat("--port=", held.port());
  const std::vector<std::vector<std::string>> daemons = {
      {Path("server/scheduler/scheduler"), "--host=0.0.0.0", taken},
      {Path("server/kvserver"), "--host=0.0.0.0", taken, "--scheduler=127.0.0.1:1"}};
  for (const std::vector<std::string>& argv : daemons) {
    std::unique_ptr<Process> daemon = Run("daemon", argv, Joined(secret, kPlaintext));
    REQUIRE(ExitCode(*daemon) == 1);
    const std::string output = daemon->output();
    INFO(output);
    CHECK(output.find("bound to 0.0.0.0 without TLS") != std::string::npos);
    CHECK(output.find("--insecure") != std::string::npos);
    // It stopped before trying the port, which is taken.
    CHECK(output.find("cannot listen") == std::string::npos);
  }
  SECTION("with --insecure it serves, and says so in its log") {
    const std::string port_file = Scratch("insecure-port");
    std::unique_ptr<Process> scheduler = Run("scheduler",
                                             {Path("server/scheduler/scheduler"), "--host=0.0.0.0",
                                              "--port=0", "--port_file=" + port_file, "--insecure"},
                                             Joined(secret, kPlaintext));
    REQUIRE(scheduler->WaitForPortFile(port_file, absl::Seconds(20)).ok());
    CHECK(scheduler->WaitForOutput("without TLS (--insecure)", absl::Seconds(10)));
  }
  SECTION("with TLS it serves; a client over TLS reaches it") {
    const std::string port_file = Scratch("tls-port");
    std::unique_ptr<Process> scheduler = Run("scheduler",
                                             {Path("server/scheduler/scheduler"), "--host=0.0.0.0",
                                              "--port=0", "--port_file=" + port_file},
                                             Joined(secret, JobCertificates().Env()));
    const absl::StatusOr<int> port = scheduler->WaitForPortFile(port_file, absl::Seconds(20));
    REQUIRE(port.ok());
    std::unique_ptr<Process> kvctl =
        Run("kvctl",
            {Path("client/kvctl/kvctl"), absl::StrCat("--scheduler=127.0.0.1:", *port), "status"},
            Joined(secret, JobCertificates().Env()));
    REQUIRE(ExitCode(*kvctl) == 0);
  }
}

TEST_CASE("Launcher: --tls-mutual runs a job over mutual TLS", "[tls][launcher]") {
  std::unique_ptr<Process> launcher = Run(
      "launch",
      {"/usr/bin/env", "python3", Path("deploy/launch.py"), "-n", "1", "-s", "1", "--tls-mutual",
       "--scheduler", Path("server/scheduler/scheduler"), "--kvserver", Path("server/kvserver"),
       "--timeout", "120", "--", Path("tests/integration/test_worker"), "rounds", "dist_sync", "2"},
      kPlaintext);
  REQUIRE(ExitCode(*launcher) == 0);
  const std::string output = launcher->output();
  INFO(output);
  // The worker's checked values, and both daemons on mutual TLS by their logs.
  for (const std::regex& line :
       {std::regex(R"(\[worker 0\] worker 0: 2 rounds of dist_sync checked)"),
        std::regex(R"(\[scheduler\] .* listening on 127\.0\.0\.1:[0-9]+ \(mutual TLS\))"),
        std::regex(R"(\[server 0\] .* listening on 127\.0\.0\.1:[0-9]+ \(mutual TLS, )")}) {
    CHECK(std::regex_search(output, line));
  }
}

}  // namespace
}  // namespace kvstore::testing

namespace kvstore::testing {
namespace {

TEST_CASE(
    "TLS: a replacement kvserver joins a job with replicas over mutual TLS; the survivor "
    "sends it its shards directly",
    "[tls][mutual][replicas]") {
  TlsJob job(JobCertificates(), 2, 1, {"--tls_mutual"}, {"--replicas=2", "--big_value_bound=100"});
  // Every round's pulls are checked against the sums the worker computes itself.
  Process& worker = job.AddWorker(0, {"rounds", "dist_sync", "4000"});
  REQUIRE(job.scheduler().WaitForOutput("barrier over the workers passed", absl::Seconds(20)));
  absl::SleepFor(absl::Milliseconds(300));
  job.server(1).Kill();
  std::unique_ptr<Process> replacement =
      Run("replacement 1",
          {Path("server/kvserver"), "--scheduler=" + job.scheduler_address(), "--rank=1",
           "--tls_mutual"},
          job.env());
  const bool joined =
      job.scheduler().WaitForOutput("serves shards 1 and 0 again", absl::Seconds(30));
  const std::string log = job.scheduler().output();
  INFO(log);
  REQUIRE(joined);
  // Both shards came from server 0, the only living copy of each, to the replacement.
  CHECK(log.find("shard 1 (") != std::string::npos);
  CHECK(log.find("copied from server 0 into the server at") != std::string::npos);
  CHECK(log.find("could not join") == std::string::npos);
  REQUIRE(ExitCode(worker) == 0);
  CHECK(ExitCode(*replacement) == 0);
  CHECK(ExitCode(job.server(0)) == 0);
  CHECK(ExitCode(job.scheduler()) == 0);
}

}  // namespace
}  // namespace kvstore::testing
