// What an outsider can learn of the real daemons of a job with a secret: each listens on the
// one port it advertises and on no other, and a kvserver answers every method - its Backup
// methods included - with UNAUTHENTICATED to a request that its sender did not sign, before
// saying anything of itself (whether the job has replicas, whether it is set up).
#include <dirent.h>
#include <grpcpp/client_context.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/server_methods.h"
#include "proto/kvstore.pb.h"
#include "tests/integration/daemon_job.h"

namespace kvstore::testing {
namespace {

using Daemon = DaemonJob::Daemon;

// ListeningPorts returns the TCP ports process `pid` listens on: the sockets among its open
// files that /proc/net/tcp and tcp6 list in state LISTEN.
std::set<int> ListeningPorts(pid_t pid) {
  // Socket inode -> port, for every listening socket of the machine (this network namespace).
  std::map<std::string, int> listening;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // The heading.
    while (std::getline(in, line)) {
      std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      if (fields.size() < 10 || fields[3] != "0A") continue;
      const std::string local = fields[1];
      int port = 0;
      if (!absl::SimpleHexAtoi(local.substr(local.find(':') + 1), &port)) continue;
      listening[fields[9]] = port;
    }
  }
  std::set<int> ports;
  const std::string fds = absl::StrCat("/proc/", pid, "/fd");
  DIR* dir = opendir(fds.c_str());
  REQUIRE(dir != nullptr);
  while (dirent* entry = readdir(dir)) {
    char target[256] = {};
    const std::string path = absl::StrCat(fds, "/", entry->d_name);
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string link(target, static_cast<size_t>(n));
    if (!absl::StartsWith(link, "socket:[")) continue;
    const std::string inode = link.substr(8, link.size() - 9);
    if (auto found = listening.find(inode); found != listening.end()) ports.insert(found->second);
  }
  closedir(dir);
  return ports;
}

int PortOf(const std::string& address) {
  int port = 0;
  REQUIRE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
  return port;
}

TEST_CASE(
    "Exposure: the scheduler and the kvserver each listen only on the port they "
    "advertise",
    "[security][exposure]") {
  DaemonJob job({}, {});
  for (const Daemon daemon : {Daemon::kScheduler, Daemon::kServer}) {
    const std::string address = job.address(daemon);
    const std::set<int> ports = ListeningPorts(job.process(daemon).pid());
    INFO(job.process(daemon).name()
         << " advertises " << address << "; listens on " << ports.size() << " ports");
    CHECK(ports == std::set<int>{PortOf(address)});
  }
  REQUIRE(job.Finish().ok());
}

TEST_CASE(
    "Exposure: every kvserver method, Backup methods included, answers an unsigned "
    "request UNAUTHENTICATED and nothing else",
    "[security][exposure]") {
  DaemonJob job({}, {});
  std::unique_ptr<grpc::GenericStub> stub = job.Connection(Daemon::kServer);
  proto::PullRequest pull;
  pull.set_node_id(job.node_id());
  const std::string bytes = pull.SerializeAsString();
  for (int m = 0; m < kNumServerMethods; ++m) {
    for (const bool backup : {false, true}) {
      const char* method = GrpcMethodPath(static_cast<ServerMethod>(m), backup);
      grpc::Slice slice(bytes);
      grpc::ByteBuffer request(&slice, 1), reply;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      absl::Notification done;
      grpc::Status status;
      stub->UnaryCall(&context, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
        status = std::move(s);
        done.Notify();
      });
      done.WaitForNotification();
      INFO(method << ": " << status.error_code() << " " << status.error_message());
      CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
      CHECK(!absl::StrContains(status.error_message(), "replicas"));
      CHECK(!absl::StrContains(status.error_message(), "backup"));
    }
  }
  // The same methods signed by the job's worker: its Backup methods now say why they refuse.
  const absl::Status backup =
      job.Call(Daemon::kServer, GrpcMethodPath(ServerMethod::kPull, true), [&] {
        grpc::Slice slice(bytes);
        return grpc::ByteBuffer(&slice, 1);
      }());
  INFO(backup.ToString());
  CHECK(absl::IsFailedPrecondition(backup));
  CHECK(absl::StrContains(backup.message(), "no backup shard"));
  REQUIRE(job.Finish().ok());
}

}  // namespace
}  // namespace kvstore::testing
