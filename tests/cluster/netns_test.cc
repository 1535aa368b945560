// Several hosts without loopback: five Linux network namespaces joined by veth pairs to a
// bridge (in a sixth), each with its own 10.77.x.y/24 address and its loopback left down. The
// scheduler and both kvservers bind every interface (0.0.0.0) and advertise their own address,
// each chosen another way (--advertise_host, DMLC_INTERFACE, DMLC_NODE_HOST); two workers
// train over TLS (certificates naming the five addresses) and match the float64 reference.
// Needs root and `ip` (iproute2): prints "SKIPPED: reason" and passes where namespaces cannot
// be made. Every namespace is deleted at the end, whatever happens.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/cluster/cluster_util.h"

namespace kvstore::testing {
namespace {

constexpr const char* kIp = "/usr/sbin/ip";

// Sh runs a shell command; its exit code (output discarded unless `out`).
int Sh(const std::string& command, std::string* out = nullptr) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  std::string text;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) text += buffer;
  const int status = pclose(pipe);
  if (out != nullptr) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Network: the namespaces, named after this test's PID; the destructor deletes them all.
class Network {
 public:
  static constexpr int kNodes = 5;  // scheduler, kvserver 0, kvserver 1, worker 0, worker 1.

  // The tag is random: PIDs repeat across sandboxes (interface names hold 15 characters).
  Network() : tag_(absl::StrCat("kv", absl::Hex(std::random_device()() & 0xffffff))) {}
  ~Network() {
    for (const std::string& ns : created_) Sh(absl::StrCat(kIp, " netns del ", ns));
  }

  // Build makes the network; an error message when it cannot ("" on success).
  std::string Build() {
    std::string out;
    if (geteuid() != 0) return "not running as root";
    if (access(kIp, X_OK) != 0) return absl::StrCat(kIp, " (iproute2) is not installed");
    if (!Add(hub(), &out)) return absl::StrCat("ip netns add failed: ", out);
    if (Sh(absl::StrCat(kIp, " -n ", hub(), " link add br0 type bridge"), &out) != 0 ||
        Sh(absl::StrCat(kIp, " -n ", hub(), " link set br0 up"), &out) != 0) {
      return absl::StrCat("cannot make a bridge: ", out);
    }
    for (int i = 0; i < kNodes; ++i) {
      if (!Add(node(i), &out)) return absl::StrCat("ip netns add failed: ", out);
      const std::string inner = absl::StrCat(tag_, "n", i), outer = absl::StrCat(tag_, "p", i);
      const std::vector<std::string> steps = {
          absl::StrCat(kIp, " link add ", inner, " type veth peer name ", outer),
          absl::StrCat(kIp, " link set ", inner, " netns ", node(i)),
          absl::StrCat(kIp, " link set ", outer, " netns ", hub()),
          absl::StrCat(kIp, " -n ", hub(), " link set ", outer, " master br0"),
          absl::StrCat(kIp, " -n ", hub(), " link set ", outer, " up"),
          absl::StrCat(kIp, " -n ", node(i), " addr add ", address(i), "/24 dev ", inner),
          absl::StrCat(kIp, " -n ", node(i), " link set ", inner, " up")};
      for (const std::string& step : steps) {
        if (Sh(step, &out) != 0) return absl::StrCat(step, ": ", out);
      }
    }
    return "";
  }

  std::string hub() const { return absl::StrCat(tag_, "-hub"); }
  std::string node(int i) const { return absl::StrCat(tag_, "-", i); }
  std::string interface(int i) const { return absl::StrCat(tag_, "n", i); }
  static std::string address(int i) { return absl::StrCat("10.77.0.", i + 1); }

  // In returns argv run inside node i's namespace.
  std::vector<std::string> In(int i, std::vector<std::string> argv) const {
    std::vector<std::string> wrapped = {kIp, "netns", "exec", node(i)};
    wrapped.insert(wrapped.end(), argv.begin(), argv.end());
    return wrapped;
  }

 private:
  bool Add(const std::string& ns, std::string* out) {
    if (Sh(absl::StrCat(kIp, " netns add ", ns), out) != 0) return false;
    created_.push_back(ns);
    return true;
  }

  std::string tag_;
  std::vector<std::string> created_;
};

TEST_CASE(
    "Several hosts: scheduler, 2 kvservers and 2 workers in 5 network namespaces bind "
    "0.0.0.0, advertise their own 10.77.0.x and train over TLS without loopback",
    "[netns][advertise]") {
  Network net;
  const std::string error = net.Build();
  if (!error.empty()) {
    std::printf("SKIPPED: cannot make network namespaces: %s\n", error.c_str());
    WARN("SKIPPED: " << error);
    return;
  }
  // Loopback is down in every namespace: nothing here can use 127.0.0.1.
  std::string out;
  for (int i = 0; i < Network::kNodes; ++i) {
    REQUIRE(Sh(absl::StrCat(kIp, " -n ", net.node(i), " link show lo"), &out) == 0);
    INFO(out);
    REQUIRE(Contains(out, "state DOWN"));
  }
  const std::string certs = absl::StrCat(TempDir(), "/netns-certs-", getpid());
  std::string names;
  for (int i = 0; i < Network::kNodes; ++i) names += " " + Network::address(i);
  REQUIRE(Sh(absl::StrCat("bash ", Runfile("deploy/make-certs.sh"), " ", certs, names), &out) == 0);
  const Variables tls = {{"KV_TLS_CA", certs + "/ca.pem"},
                         {"KV_TLS_CERT", certs + "/node.pem"},
                         {"KV_TLS_KEY", certs + "/node.key"}};
  auto with = [&](Variables extra) {
    extra.insert(extra.end(), tls.begin(), tls.end());
    return extra;
  };

  const std::string port_file = absl::StrCat(TempDir(), "/netns-", getpid(), ".port");
  std::remove(port_file.c_str());
  std::unique_ptr<Process> scheduler =
      StartProcess("scheduler",
                   net.In(0, {Runfile("server/scheduler/scheduler"), "--host=0.0.0.0",
                              absl::StrCat("--advertise_host=", Network::address(0)), "--port=0",
                              absl::StrCat("--port_file=", port_file), "--num_servers=2",
                              "--num_workers=2", "--register_timeout=40s"}),
                   with({}));
  const absl::StatusOr<int> port = scheduler->WaitForPortFile(port_file, absl::Seconds(20));
  INFO(port.status().ToString() << "\n" << scheduler->output());
  REQUIRE(port.ok());
  const std::string scheduler_address = absl::StrCat(Network::address(0), ":", *port);
  // kvserver 0 advertises its interface's address (DMLC_INTERFACE), kvserver 1 the address
  // DMLC_NODE_HOST names; both bind every interface.
  std::vector<std::unique_ptr<Process>> servers;
  servers.push_back(
      StartProcess("kvserver 0",
                   net.In(1, {Runfile("server/kvserver"), "--host=0.0.0.0",
                              absl::StrCat("--scheduler=", scheduler_address), "--rank=0"}),
                   with({{"DMLC_INTERFACE", net.interface(1)}})));
  servers.push_back(
      StartProcess("kvserver 1",
                   net.In(2, {Runfile("server/kvserver"), "--host=0.0.0.0",
                              absl::StrCat("--scheduler=", scheduler_address), "--rank=1"}),
                   with({{"DMLC_NODE_HOST", Network::address(2)}})));
  std::vector<std::unique_ptr<Process>> workers;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(
        StartProcess(absl::StrCat("worker ", w),
                     net.In(3 + w, {Runfile("tests/cluster/role_job"), "naive", "12"}),
                     with({{"DMLC_ROLE", "worker"},
                           {"DMLC_PS_ROOT_URI", Network::address(0)},
                           {"DMLC_PS_ROOT_PORT", absl::StrCat(*port)},
                           {"DMLC_WORKER_ID", absl::StrCat(w)},
                           {"DMLC_NUM_WORKER", "2"},
                           {"DMLC_NUM_SERVER", "2"},
                           {"KV_TEST_SEED", absl::StrCat(TestSeed())}})));
  }
  for (int w = 0; w < 2; ++w) {
    ExpectExit(*workers[w], 0, 60);
    CHECK(Contains(workers[w]->output(),
                   absl::StrCat("worker ", w, ": 12 steps of dist_sync match the float64")));
  }
  for (auto& server : servers) ExpectExit(*server, 0, 20);
  ExpectExit(*scheduler, 0, 20);
  const std::string s0 = servers[0]->output(), s1 = servers[1]->output();
  INFO(scheduler->output() << s0 << s1);
  CHECK(Contains(scheduler->output(), "scheduler listening on 0.0.0.0:"));
  CHECK(Contains(scheduler->output(),
                 absl::StrCat("scheduler advertised to the job as ", scheduler_address)));
  CHECK(Contains(s0, "kvserver listening on 0.0.0.0:"));
  CHECK(Contains(s0, absl::StrCat("kvserver advertised to the job as ", Network::address(1), ":")));
  CHECK(Contains(s1, absl::StrCat("kvserver advertised to the job as ", Network::address(2), ":")));
  for (const std::string& text : {scheduler->output(), s0, s1}) {
    CHECK(!Contains(text, "127.0.0.1"));
  }
  Sh("rm -rf " + certs);
}

TEST_CASE("Advertise: a daemon refuses to advertise a wildcard address, naming the source",
          "[advertise]") {
  std::unique_ptr<Process> server =
      StartProcess("kvserver",
                   {Runfile("server/kvserver"), "--scheduler=127.0.0.1:9", "--insecure",
                    "--advertise_host=0.0.0.0"},
                   {});
  ExpectExit(*server, 1, 20);
  CHECK(Contains(server->output(), "--advertise_host is the wildcard address \"0.0.0.0\""));
  std::unique_ptr<Process> scheduler =
      StartProcess("scheduler", {Runfile("server/scheduler/scheduler"), "--port=0", "--insecure"},
                   {{"DMLC_NODE_HOST", "::"}});
  ExpectExit(*scheduler, 1, 20);
  CHECK(Contains(scheduler->output(), "DMLC_NODE_HOST is the wildcard address \"::\""));
  std::unique_ptr<Process> missing = StartProcess(
      "kvserver",
      {Runfile("server/kvserver"), "--scheduler=127.0.0.1:9", "--insecure", "--host=0.0.0.0"},
      {{"DMLC_INTERFACE", "nosuchif0"}});
  ExpectExit(*missing, 1, 20);
  CHECK(Contains(missing->output(),
                 "network interface \"nosuchif0\" (DMLC_INTERFACE) has no "
                 "address; interfaces with one: "));
}

}  // namespace
}  // namespace kvstore::testing
