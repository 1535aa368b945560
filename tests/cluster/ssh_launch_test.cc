// deploy/launch.py --launcher ssh -H HOSTFILE against a real sshd (Debian's openssh-server)
// that the test starts itself: on 127.0.0.1 and 127.0.0.2, a free port, a throwaway host key
// and user key in a temporary folder. A 2-server, 2-worker job whose servers and workers all
// start through ssh, round-robin over the two addresses, trains and matches the float64
// reference; with --same-command too. Needs root for sshd (prints "SKIPPED: reason" and
// passes where sshd cannot run).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/cluster/cluster_util.h"

namespace kvstore::testing {
namespace {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  REQUIRE(out.good());
}

// Sshd: a private sshd and the keys to log in to it.
class Sshd {
 public:
  Sshd() : dir_(absl::StrCat(TempDir(), "/sshd-", getpid())) {}
  ~Sshd() {
    process_.reset();  // Killed, with its group, if still running.
    std::filesystem::remove_all(dir_);
  }

  // Start returns "" once sshd listens, else why it cannot run.
  std::string Start() {
    if (geteuid() != 0) return "not running as root";
    if (access("/usr/sbin/sshd", X_OK) != 0) return "/usr/sbin/sshd is not installed";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::error_code ignored;
    std::filesystem::create_directories("/run/sshd", ignored);  // Privilege separation.
    for (const char* key : {"host_key", "user_key"}) {
      const std::string command =
          absl::StrCat("ssh-keygen -q -t ed25519 -N '' -f ", dir_, "/", key, " > /dev/null 2>&1");
      if (std::system(command.c_str()) != 0) return "ssh-keygen failed";
    }
    std::filesystem::copy_file(dir_ + "/user_key.pub", dir_ + "/authorized_keys");
    port_ = FreePort();
    WriteFile(dir_ + "/sshd_config",
              absl::StrCat("Port ", port_, "\nListenAddress 127.0.0.1\nListenAddress 127.0.0.2\n",
                           "HostKey ", dir_, "/host_key\nAuthorizedKeysFile ", dir_,
                           "/authorized_keys\nStrictModes no\nPasswordAuthentication no\n",
                           "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n",
                           "PermitRootLogin prohibit-password\nUsePAM no\nPidFile ", dir_,
                           "/sshd.pid\nLogLevel VERBOSE\n"));
    process_ =
        StartProcess("sshd", {"/usr/sbin/sshd", "-D", "-e", "-f", dir_ + "/sshd_config"}, {});
    if (!process_->WaitForOutput(absl::StrCat("Server listening on 127.0.0.2 port ", port_),
                                 absl::Seconds(10))) {
      return absl::StrCat("sshd did not start: ", process_->output());
    }
    WriteFile(dir_ + "/hostfile", absl::StrCat("# the two hosts of the job\n127.0.0.1:", port_,
                                               "\n127.0.0.2:", port_, "\n"));
    return "";
  }

  // LauncherArgs: launch.py's ssh options.
  std::vector<std::string> LauncherArgs() const {
    return {"--launcher",   "ssh",
            "-H",           dir_ + "/hostfile",
            "--ssh-arg=-F", "--ssh-arg=/dev/null",
            "--ssh-arg=-i", absl::StrCat("--ssh-arg=", dir_, "/user_key"),
            "--ssh-arg=-o", "--ssh-arg=IdentitiesOnly=yes",
            "--ssh-arg=-o", absl::StrCat("--ssh-arg=UserKnownHostsFile=", dir_, "/known_hosts")};
  }
  // logins counts the public-key logins sshd has accepted so far.
  int logins() const {
    int count = 0;
    for (absl::string_view line : absl::StrSplit(process_->output(), '\n')) {
      if (Contains(std::string(line), "Accepted publickey for")) ++count;
    }
    return count;
  }

 private:
  std::string dir_;
  int port_ = 0;
  std::unique_ptr<Process> process_;
};

// Running counts the processes whose command line holds `marker` (read from /proc).
int Running(const std::string& marker) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string cmdline = ReadTextFile(entry.path().string() + "/cmdline");
    if (cmdline.find(marker) != std::string::npos) ++count;
  }
  return count;
}

std::vector<std::string> Launch(const Sshd& sshd, bool same_command,
                                const std::string& steps = "10",
                                const std::string& timeout = "60") {
  std::vector<std::string> argv = {
      "/usr/bin/env", "python3", Runfile("deploy/launch.py"), "-n", "2", "-s", "2",
      "--timeout",    timeout};
  const std::vector<std::string> ssh = sshd.LauncherArgs();
  argv.insert(argv.end(), ssh.begin(), ssh.end());
  if (same_command) {
    argv.push_back("--same-command");
  } else {
    argv.insert(argv.end(), {"--scheduler", Runfile("server/scheduler/scheduler"), "--kvserver",
                             Runfile("server/kvserver")});
  }
  argv.insert(argv.end(), {"--", Runfile("tests/cluster/role_job"), "naive", steps});
  return argv;
}

TEST_CASE(
    "ssh launcher: servers and workers start through a real sshd on two addresses, "
    "train, and match the float64 reference",
    "[ssh][launcher]") {
  Sshd sshd;
  const std::string error = sshd.Start();
  if (!error.empty()) {
    std::printf("SKIPPED: cannot run sshd: %s\n", error.c_str());
    WARN("SKIPPED: " << error);
    return;
  }
  const bool same_command = GENERATE(false, true);
  INFO((same_command ? "--same-command" : "kvserver binaries"));
  const int before = sshd.logins();
  std::unique_ptr<Process> launcher = StartProcess("launch-ssh", Launch(sshd, same_command),
                                                   {{"KV_TEST_SEED", absl::StrCat(TestSeed())}});
  ExpectExit(*launcher, 0, 90);
  const std::string out = launcher->output();
  INFO(out);
  CHECK(Contains(out, "over ssh on 2 hosts"));
  CHECK(Contains(out, "[worker 0] worker 0: 10 steps of dist_sync match the float64 reference"));
  CHECK(Contains(out, "[worker 1] worker 1: 10 steps of dist_sync match the float64 reference"));
  // Round-robin: server 0 on 127.0.0.1, server 1 on 127.0.0.2, each advertising its host.
  CHECK(Contains(out, "[server 0] "));
  CHECK(Contains(out, "kvserver listening on 127.0.0.1:"));
  CHECK(Contains(out, "kvserver listening on 127.0.0.2:"));
  // Two servers and two workers, each one ssh login.
  CHECK(sshd.logins() - before == 4);
}

TEST_CASE("ssh launcher: a job ended by the launcher leaves no remote process behind",
          "[ssh][launcher]") {
  Sshd sshd;
  const std::string error = sshd.Start();
  if (!error.empty()) {
    std::printf("SKIPPED: cannot run sshd: %s\n", error.c_str());
    WARN("SKIPPED: " << error);
    return;
  }
  // A job far longer than its --timeout: the launcher kills its ssh clients, and each remote
  // command's process group gets SIGTERM when its connection closes. The timeout leaves room
  // for four ssh logins and starts: on a VM where system calls are slow, server 0 was up
  // 5.5 s after the launcher, and a 6 s timeout ended the job before server 1 was.
  const std::string steps = absl::StrCat(900000000 + getpid());
  std::unique_ptr<Process> launcher =
      StartProcess("launch-ssh-timeout", Launch(sshd, true, steps, "20"),
                   {{"KV_TEST_SEED", absl::StrCat(TestSeed())}});
  // While it runs, the scheduler here and the 4 remote processes are found by their marker.
  const std::string marker = absl::StrCat("naive", std::string(1, '\0'), steps);
  if (!launcher->WaitForOutput("[server 1] [", absl::Seconds(30)) ||
      !launcher->WaitForOutput("serving dist_sync for 2 workers", absl::Seconds(30))) {
    FAIL("the job's servers did not start serving within 30 s; the launcher said:\n"
         << launcher->output());
  }
  CHECK(Running(marker) >= 5);
  ExpectExit(*launcher, 124, 60);
  INFO(launcher->output());
  CHECK(Contains(launcher->output(), "job timed out after 20 s"));
  // Every remote server and worker is gone within a few seconds.
  int left = 0;
  for (int i = 0; i < 50 && (left = Running(marker)) > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  CHECK(left == 0);
}

}  // namespace
}  // namespace kvstore::testing
