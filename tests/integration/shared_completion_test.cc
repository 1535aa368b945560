// Two workers of one job in one process sharing one completion thread
// (DistOptions::completion_thread): both run dist_sync rounds over real gRPC to two kvservers
// (in this process, on 127.0.0.1 with OS-chosen ports) and pull exact sums, while the process
// has one "kv-completion" thread; the thread stops once both stores are gone. Each worker has
// one connection to each server (the default for a job of several workers).
#include <dirent.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/kvstore.h"
#include "server/grpc/kvserver_daemon.h"
#include "server/scheduler/grpc/scheduler_daemon.h"
#include "tests/test_util.h"

namespace kvstore::testing {
namespace {

// CompletionThreads counts this process's threads named "kv-completion".
int CompletionThreads() {
  int count = 0;
  DIR* tasks = opendir("/proc/self/task");
  REQUIRE(tasks != nullptr);
  while (dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream comm(absl::StrCat("/proc/self/task/", entry->d_name, "/comm"));
    std::string name;
    std::getline(comm, name);
    if (name == "kv-completion") ++count;
  }
  closedir(tasks);
  return count;
}

// ConnectionsTo counts the established TCP connections to `port` of this network namespace, on
// the connecting side (/proc/net/tcp and tcp6: gRPC may connect over a v4-mapped socket).
int ConnectionsTo(int port) {
  int count = 0;
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream table(file);
    std::string line;
    std::getline(table, line);  // The heading.
    while (std::getline(table, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const size_t colon = remote.find(':');
      if (colon == std::string::npos || state != "01") continue;  // 01: ESTABLISHED.
      if (std::stoi(remote.substr(colon + 1), nullptr, 16) == port) ++count;
    }
  }
  return count;
}

TEST_CASE("Shared completion thread: two workers of one process, exact dist_sync sums",
          "[dist][completion]") {
  TestRng rng;
  INFO(rng.Describe());
  constexpr int kWorkers = 2;
  constexpr int kServers = 2;
  SchedulerDaemonOptions scheduler;
  scheduler.job.num_servers = kServers;
  scheduler.job.num_workers = kWorkers;
  scheduler.job.big_value_bound = 8;
  scheduler.job.chunk_bytes = 1024;  // Values of a few KB move in several chunks.
  scheduler.job.register_timeout = absl::Seconds(30);
  scheduler.job.heartbeat_interval = absl::Milliseconds(50);
  auto started = SchedulerDaemon::Start(scheduler);
  REQUIRE(started.ok());
  std::unique_ptr<SchedulerDaemon> scheduler_daemon = *std::move(started);
  std::vector<std::unique_ptr<KVServerDaemon>> servers;
  for (int s = 0; s < kServers; ++s) {
    KVServerOptions server;
    server.scheduler_address = scheduler_daemon->address();
    server.requested_rank = s;
    auto daemon = KVServerDaemon::Start(std::move(server));
    REQUIRE(daemon.ok());
    servers.push_back(*std::move(daemon));
  }

  const int before = CompletionThreads();
  std::shared_ptr<CompletionThread> shared = NewCompletionThread();
  std::vector<std::unique_ptr<KVStore>> workers(kWorkers);
  std::vector<absl::Status> joined(kWorkers);
  {
    std::vector<std::thread> joining;
    for (int w = 0; w < kWorkers; ++w) {
      joining.emplace_back([&, w] {
        DistOptions options;
        options.scheduler_port = scheduler_daemon->port();
        options.requested_rank = w;
        options.register_timeout = absl::Seconds(30);
        options.rpc_timeout = absl::Seconds(30);
        options.barrier_timeout = absl::Seconds(30);
        options.completion_thread = shared;
        auto store = KVStore::Create("dist_sync", options);
        joined[w] = store.status();
        if (store.ok()) workers[w] = *std::move(store);
      });
    }
    for (std::thread& t : joining) t.join();
  }
  for (const absl::Status& status : joined) REQUIRE(status.ok());
  CHECK(CompletionThreads() == before + 1);  // The two stores run their replies on one thread.

  // Keys of 1 to 3000 float32 (up to 12 KB: split over both servers, several chunks each).
  constexpr int kKeys = 6;
  constexpr int kRounds = 3;
  std::vector<Shape> shapes;
  for (int k = 0; k < kKeys; ++k) shapes.push_back({rng.Int(1, 3000)});
  // pushes[r][w][k]: what worker w pushes to key k in round r.
  std::vector<std::vector<std::vector<Tensor>>> pushes(kRounds);
  for (auto& round : pushes) {
    round.resize(kWorkers);
    for (auto& worker : round) {
      for (const Shape& shape : shapes) worker.push_back(rng.RandomTensor(DType::kFloat32, shape));
    }
  }
  std::vector<std::vector<std::vector<Tensor>>> pulled(kRounds);
  std::vector<absl::Status> ran(kWorkers);
  {
    std::vector<std::thread> running;
    for (int w = 0; w < kWorkers; ++w) {
      running.emplace_back([&, w] {
        ran[w] = [&]() -> absl::Status {
          KVStore& kv = *workers[w];
          for (int k = 0; k < kKeys; ++k) {
            absl::Status status = kv.Init(k, Tensor::Zeros(DType::kFloat32, shapes[k]));
            if (!status.ok()) return status;
          }
          for (int r = 0; r < kRounds; ++r) {
            std::vector<Tensor> outs;
            for (int k = 0; k < kKeys; ++k) {
              absl::Status status = kv.Push(k, pushes[r][w][k]);
              if (!status.ok()) return status;
              outs.push_back(Tensor::Zeros(DType::kFloat32, shapes[k]));
            }
            for (int k = 0; k < kKeys; ++k) {
              absl::Status status = kv.Pull(k, &outs[k]);
              if (!status.ok()) return status;
            }
            absl::Status status = kv.WaitAll();
            if (!status.ok()) return status;
            if (w == 0) pulled[r] = {std::move(outs)};
          }
          return absl::OkStatus();
        }();
      });
    }
    for (std::thread& t : running) t.join();
  }
  for (int w = 0; w < kWorkers; ++w) {
    INFO("worker " << w << ": " << ran[w].ToString());
    CHECK(ran[w].ok());
  }
  for (const absl::Status& status : ran) REQUIRE(status.ok());
  for (int r = 0; r < kRounds; ++r) {
    for (int k = 0; k < kKeys; ++k) {
      // Without an updater a dist_sync server stores each round's sum of the pushes.
      std::vector<double> want = ToDoubles(pushes[r][0][k]);
      const std::vector<double> other = ToDoubles(pushes[r][1][k]);
      for (size_t i = 0; i < want.size(); ++i) want[i] += other[i];
      INFO("round " << r << " key " << k);
      CHECK(MaxAbsDiff(ToDoubles(pulled[r][0][k]), want) <= Tolerance(DType::kFloat32, 2, 4));
    }
  }

  // With more than one worker each opens one connection to each server by default
  // (DistOptions::connections_per_server 0).
  for (const auto& server : servers) CHECK(ConnectionsTo(server->port()) == kWorkers);

  workers[0].reset();
  shared.reset();
  CHECK(CompletionThreads() == before + 1);  // Worker 1 still holds it.
  workers[1].reset();
  CHECK(CompletionThreads() == before);
  for (auto& server : servers) server->Shutdown();
  scheduler_daemon->Shutdown();
}

}  // namespace
}  // namespace kvstore::testing
