#include "tests/etcd_server.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/etcd_client.h"
#include "tests/test_files.h"

namespace kvstore::testing {

std::unique_ptr<EtcdServer> EtcdServer::Start() {
  REQUIRE(std::filesystem::exists(kBinary));  // deploy/install-deps.sh installs etcd-server.
  static int started = 0;
  const std::string dir = absl::StrCat(TempDir(), "/etcd-", getpid(), "-", ++started);
  std::filesystem::remove_all(dir);
  auto server = std::unique_ptr<EtcdServer>(new EtcdServer());
  const int client = FreePort(), peer = FreePort();
  server->endpoint_ = absl::StrCat("127.0.0.1:", client);
  const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer);
  server->process_ = StartProcess(
      "etcd", {kBinary, "--data-dir=" + dir, "--name=test",
               absl::StrCat("--listen-client-urls=http://", server->endpoint_),
               absl::StrCat("--advertise-client-urls=http://", server->endpoint_),
               "--listen-peer-urls=" + peer_url, "--initial-advertise-peer-urls=" + peer_url,
               "--initial-cluster=test=" + peer_url, "--log-level=warn"});
  const absl::StatusOr<EtcdClient> client_of =
      EtcdClient::Create(server->endpoint_, absl::Milliseconds(500));
  REQUIRE(client_of.ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  absl::Status answered = absl::UnknownError("not asked");
  while (absl::Now() < deadline) {
    answered = client_of->Get("kvstore-test-probe").status();
    if (answered.ok() || absl::IsNotFound(answered)) return server;
    absl::SleepFor(absl::Milliseconds(100));
  }
  INFO(answered.ToString() << "\n" << server->process_->output());
  FAIL("etcd did not answer within 20 s");
  return nullptr;
}

EtcdServer::~EtcdServer() {
  if (process_ != nullptr) process_->Kill();
}

}  // namespace kvstore::testing
