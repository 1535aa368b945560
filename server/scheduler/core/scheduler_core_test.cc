#include "server/scheduler/core/scheduler_core.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <numeric>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "server/scheduler/core/server_failover.h"
#include "server/scheduler/core/worker_liveness.h"
#include "tests/test_util.h"
namespace kvstore {
namespace {

using testing::TestRng;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

std::unique_ptr<SchedulerCore> MakeCore(int servers, int workers) {
  SchedulerOptions options;
  options.num_servers = servers;
  options.num_workers = workers;
  options.register_timeout = absl::Seconds(10);
  options.barrier_timeout = absl::Seconds(20);
  return SchedulerCore::Create(options).value();
}

// A registration's outcome, delivered to whichever thread completes it.
struct Outcome {
  absl::Notification done;
  absl::StatusOr<Registration> result = absl::UnknownError("not run");
  SchedulerCore::RegisterDone Callback() {
    return [this](absl::StatusOr<Registration> r) {
      result = std::move(r);
      done.Notify();
    };
  }
};

struct BarrierOutcome {
  absl::Notification done;
  absl::Status status = absl::UnknownError("not run");
  SchedulerCore::BarrierDone Callback() {
    return [this](absl::Status s) {
      status = std::move(s);
      done.Notify();
    };
  }
};

// Registers `servers` servers and `workers` workers from concurrent threads in random order;
// the servers ask for the ranks in `server_ranks` (-1 for any).
std::vector<std::unique_ptr<Outcome>> RegisterAll(SchedulerCore* core, int workers,
                                                  const std::vector<int>& server_ranks,
                                                  TestRng* rng) {
  const int servers = static_cast<int>(server_ranks.size());
  std::vector<int> order(servers + workers);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng->engine());
  std::vector<std::unique_ptr<Outcome>> outcomes(order.size());
  for (auto& o : outcomes) o = std::make_unique<Outcome>();
  std::vector<std::thread> threads;
  for (int who : order) {
    threads.emplace_back([core, who, servers, &server_ranks, &outcomes] {
      const bool server = who < servers;
      core->Register(server ? NodeRole::kServer : NodeRole::kWorker,
                     server ? server_ranks[who] : -1,
                     server ? "127.0.0.1:" + std::to_string(20000 + who) : "",
                     "host" + std::to_string(who), kStart, outcomes[who]->Callback());
    });
  }
  for (auto& t : threads) t.join();
  for (auto& o : outcomes) REQUIRE(o->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  return outcomes;
}

TEST_CASE("SchedulerCore: ranks are unique, requested ranks are honoured", "[scheduler]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 20; ++trial) {
    const int servers = static_cast<int>(rng.Int(1, 5));
    const int workers = static_cast<int>(rng.Int(1, 6));
    // Some servers ask for a specific rank (a random permutation), the others for any.
    std::vector<int> permutation(servers);
    std::iota(permutation.begin(), permutation.end(), 0);
    std::shuffle(permutation.begin(), permutation.end(), rng.engine());
    std::vector<int> requested(servers);
    for (int i = 0; i < servers; ++i) requested[i] = rng.Int(0, 1) ? permutation[i] : -1;
    auto core = MakeCore(servers, workers);
    auto outcomes = RegisterAll(core.get(), workers, requested, &rng);

    std::set<int> server_ranks, worker_ranks;
    std::set<uint64_t> ids;
    for (int who = 0; who < servers + workers; ++who) {
      INFO("trial " << trial << " node " << who);
      const auto& result = outcomes[who]->result;
      REQUIRE(result.ok());
      ids.insert(result->node_id);
      if (who < servers) {
        server_ranks.insert(result->rank);
        if (requested[who] >= 0) REQUIRE(result->rank == requested[who]);
        // The view lists this server's address under its rank.
        REQUIRE(result->view.servers[result->rank].address ==
                "127.0.0.1:" + std::to_string(20000 + who));
      } else {
        worker_ranks.insert(result->rank);
      }
      REQUIRE(result->view.num_servers == servers);
      REQUIRE(result->view.num_workers == workers);
    }
    REQUIRE(ids.size() == static_cast<size_t>(servers + workers));
    REQUIRE(server_ranks.size() == static_cast<size_t>(servers));
    REQUIRE(*server_ranks.rbegin() == servers - 1);
    REQUIRE(worker_ranks.size() == static_cast<size_t>(workers));
    REQUIRE(*worker_ranks.rbegin() == workers - 1);
  }
}

TEST_CASE("SchedulerCore: without requests, ranks follow registration order", "[scheduler]") {
  auto core = MakeCore(2, 2);
  Outcome w0, s0, w1, s1;
  core->Register(NodeRole::kWorker, -1, "", "a", kStart, w0.Callback());
  core->Register(NodeRole::kServer, -1, "127.0.0.1:1", "b", kStart, s0.Callback());
  core->Register(NodeRole::kWorker, -1, "", "c", kStart, w1.Callback());
  REQUIRE_FALSE(w0.done.HasBeenNotified());
  core->Register(NodeRole::kServer, -1, "127.0.0.1:2", "d", kStart, s1.Callback());
  REQUIRE(w0.result->rank == 0);
  REQUIRE(w1.result->rank == 1);
  REQUIRE(s0.result->rank == 0);
  REQUIRE(s1.result->rank == 1);
  REQUIRE(core->Nodes().size() == 4);
}

TEST_CASE("SchedulerCore: bad registrations are refused and change nothing", "[scheduler]") {
  auto core = MakeCore(1, 1);
  Outcome bad_rank, no_address, server, dup, late;
  core->Register(NodeRole::kServer, 3, "127.0.0.1:1", "h", kStart, bad_rank.Callback());
  REQUIRE(absl::IsInvalidArgument(bad_rank.result.status()));
  core->Register(NodeRole::kServer, -1, "", "h", kStart, no_address.Callback());
  REQUIRE(absl::IsInvalidArgument(no_address.result.status()));
  core->Register(NodeRole::kServer, 0, "127.0.0.1:1", "h", kStart, server.Callback());
  core->Register(NodeRole::kServer, -1, "127.0.0.1:2", "h2", kStart, dup.Callback());
  REQUIRE(absl::IsFailedPrecondition(dup.result.status()));
  REQUIRE(dup.result.status().message().find("h2") != absl::string_view::npos);
  REQUIRE_FALSE(server.done.HasBeenNotified());
  core->Register(NodeRole::kWorker, -1, "", "w", kStart, late.Callback());
  REQUIRE(server.result.ok());
  REQUIRE(late.result.ok());
}

TEST_CASE("SchedulerCore: a node that never registers fails the others by name", "[scheduler]") {
  auto core = MakeCore(2, 1);
  Outcome server, worker;
  core->Register(NodeRole::kServer, -1, "127.0.0.1:1", "h", kStart, server.Callback());
  core->Register(NodeRole::kWorker, -1, "", "w", kStart, worker.Callback());
  core->ExpireDeadlines(kStart + absl::Seconds(9));
  REQUIRE_FALSE(server.done.HasBeenNotified());
  REQUIRE(core->liveness().NumDeadNodes(kGroupServers, absl::Seconds(5),
                                        kStart + absl::Seconds(9)) == 1);
  core->ExpireDeadlines(kStart + absl::Seconds(11));
  REQUIRE(absl::IsDeadlineExceeded(server.result.status()));
  REQUIRE(absl::IsDeadlineExceeded(worker.result.status()));
  REQUIRE(server.result.status().message().find("missing 1 server and 0 workers") !=
          absl::string_view::npos);
}

TEST_CASE("SchedulerCore: a shutdown answers the registrations and barriers still waiting",
          "[scheduler]") {
  TestRng rng;
  INFO(rng.Describe());
  // A job that never assembles: its registrations wait, and only the shutdown ends them.
  auto waiting = MakeCore(1, 2);
  Outcome server, worker;
  waiting->Register(NodeRole::kServer, -1, "127.0.0.1:1", "h", kStart, server.Callback());
  waiting->Register(NodeRole::kWorker, -1, "", "w", kStart, worker.Callback());
  REQUIRE_FALSE(worker.done.HasBeenNotified());
  waiting->RequestShutdown("SIGTERM");
  REQUIRE(server.done.HasBeenNotified());
  REQUIRE(worker.done.HasBeenNotified());
  REQUIRE(absl::IsAborted(worker.result.status()));
  REQUIRE(worker.result.status().message().find("SIGTERM") != absl::string_view::npos);

  // An assembled job with a barrier two of three workers entered.
  auto core = MakeCore(1, 3);
  auto outcomes = RegisterAll(core.get(), 3, {-1}, &rng);
  std::vector<std::unique_ptr<BarrierOutcome>> entered;
  for (int i = 1; i < 3; ++i) {
    entered.push_back(std::make_unique<BarrierOutcome>());
    core->Barrier(outcomes[i]->result->node_id, kGroupWorkers, kStart, entered.back()->Callback());
  }
  REQUIRE_FALSE(entered[0]->done.HasBeenNotified());
  core->RequestShutdown("kvctl shutdown");
  for (auto& e : entered) {
    REQUIRE(e->done.HasBeenNotified());
    REQUIRE(absl::IsAborted(e->status));
    REQUIRE(e->status.message().find("kvctl shutdown") != absl::string_view::npos);
  }
}

TEST_CASE("SchedulerCore: after a shutdown the scheduler stays until every live worker heard it",
          "[scheduler]") {
  TestRng rng;
  INFO(rng.Describe());
  auto core = MakeCore(1, 3);
  auto outcomes = RegisterAll(core.get(), 3, {-1}, &rng);
  const uint64_t server = outcomes[0]->result->node_id;
  const uint64_t w0 = outcomes[1]->result->node_id, w1 = outcomes[2]->result->node_id,
                 w2 = outcomes[3]->result->node_id;
  const absl::Duration gone = absl::Seconds(4);
  absl::Time now = kStart + absl::Seconds(1);
  for (uint64_t id : {server, w0, w1, w2}) REQUIRE(core->Heartbeat(id, now).value() == false);
  REQUIRE(core->Finish(w2, now).ok());  // A finished worker needs no telling.
  core->RequestShutdown("kvctl shutdown");
  now += absl::Milliseconds(500);
  REQUIRE(core->Heartbeat(server, now).value() == true);
  REQUIRE(core->servers_released_or_gone(now, gone));
  REQUIRE_FALSE(core->workers_released_or_gone(now, gone));
  REQUIRE(core->Heartbeat(w0, now).value() == true);
  REQUIRE_FALSE(core->workers_released_or_gone(now, gone));  // w1 has not heard it yet.
  REQUIRE(core->Heartbeat(w1, now + absl::Seconds(1)).value() == true);
  REQUIRE(core->workers_released_or_gone(now + absl::Seconds(1), gone));
  // A worker silent for `gone` (dead) is not waited for.
  auto other = MakeCore(1, 2);
  auto registered = RegisterAll(other.get(), 2, {-1}, &rng);
  for (const auto& o : registered) REQUIRE(other->Heartbeat(o->result->node_id, kStart).ok());
  other->RequestShutdown("kvctl shutdown");
  REQUIRE_FALSE(other->workers_released_or_gone(kStart + gone, gone));
  REQUIRE(other->workers_released_or_gone(kStart + gone + absl::Milliseconds(1), gone));
}

TEST_CASE("SchedulerCore: barriers release their whole group and time out naming stragglers",
          "[scheduler]") {
  TestRng rng;
  INFO(rng.Describe());
  auto core = MakeCore(2, 3);
  auto outcomes = RegisterAll(core.get(), 3, {-1, -1}, &rng);
  std::vector<uint64_t> workers, servers;
  for (int i = 0; i < 5; ++i) (i < 2 ? servers : workers).push_back(outcomes[i]->result->node_id);

  // Worker barrier: released only by the last worker, from concurrent threads.
  std::vector<std::unique_ptr<BarrierOutcome>> entered;
  std::vector<std::thread> threads;
  for (uint64_t id : workers) {
    entered.push_back(std::make_unique<BarrierOutcome>());
    threads.emplace_back([&core, id, outcome = entered.back().get()] {
      core->Barrier(id, kGroupWorkers, kStart, outcome->Callback());
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : entered) {
    REQUIRE(e->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    REQUIRE(e->status.ok());
  }

  // A barrier over everyone that one server never enters.
  std::vector<std::unique_ptr<BarrierOutcome>> all;
  for (uint64_t id : {workers[0], workers[1], workers[2], servers[0]}) {
    all.push_back(std::make_unique<BarrierOutcome>());
    core->Barrier(id, kGroupServers | kGroupWorkers, kStart, all.back()->Callback());
  }
  core->ExpireDeadlines(kStart + absl::Seconds(19));
  REQUIRE_FALSE(all[0]->done.HasBeenNotified());
  core->ExpireDeadlines(kStart + absl::Seconds(21));
  for (auto& a : all) {
    REQUIRE(absl::IsDeadlineExceeded(a->status));
    REQUIRE(a->status.message().find("server ") != absl::string_view::npos);
    REQUIRE(a->status.message().find("127.0.0.1:") != absl::string_view::npos);
  }

  BarrierOutcome stranger, wrong_group, twice_first, twice_second;
  core->Barrier(999, kGroupWorkers, kStart, stranger.Callback());
  REQUIRE(absl::IsInvalidArgument(stranger.status));
  REQUIRE(stranger.status.message().find("999") != absl::string_view::npos);
  core->Barrier(servers[0], kGroupWorkers, kStart, wrong_group.Callback());
  REQUIRE(absl::IsInvalidArgument(wrong_group.status));
  core->Barrier(workers[0], kGroupWorkers, kStart, twice_first.Callback());
  core->Barrier(workers[0], kGroupWorkers, kStart, twice_second.Callback());
  REQUIRE(absl::IsInvalidArgument(twice_second.status));
  REQUIRE_FALSE(twice_first.done.HasBeenNotified());
}

TEST_CASE("SchedulerCore: heartbeats, dead nodes and the clean end", "[scheduler]") {
  TestRng rng;
  INFO(rng.Describe());
  auto core = MakeCore(2, 2);
  auto outcomes = RegisterAll(core.get(), 2, {-1, -1}, &rng);
  const uint64_t s0 = outcomes[0]->result->node_id, s1 = outcomes[1]->result->node_id;
  const uint64_t w0 = outcomes[2]->result->node_id, w1 = outcomes[3]->result->node_id;

  const absl::Time later = kStart + absl::Seconds(30);
  for (uint64_t id : {s0, w0, w1}) REQUIRE(core->Heartbeat(id, later).value() == false);
  // Server s1 has been silent for 30 s.
  REQUIRE(core->liveness().NumDeadNodes(kGroupServers, absl::Seconds(10), later) == 1);
  REQUIRE(core->liveness().NumDeadNodes(kGroupWorkers, absl::Seconds(10), later) == 0);
  REQUIRE(core->liveness().NumDeadNodes(kGroupAll, absl::Seconds(60), later) == 0);
  REQUIRE(absl::IsInvalidArgument(core->Heartbeat(12345, later).status()));

  REQUIRE(core->Finish(w0, later).ok());
  REQUIRE(core->Finish(w0, later).ok());  // Idempotent.
  REQUIRE_FALSE(core->shutdown_requested());
  REQUIRE(absl::IsInvalidArgument(core->Finish(s0, later)));
  REQUIRE(core->Finish(w1, later).ok());
  REQUIRE(core->shutdown_requested());
  REQUIRE(core->Heartbeat(s1, later).value() == true);
  // Finished workers do not count as dead however long they are silent.
  REQUIRE(core->liveness().NumDeadNodes(kGroupWorkers, absl::Seconds(1), later + absl::Hours(1)) ==
          0);
}

TEST_CASE(
    "SchedulerCore: when every worker finished, servers hear it only once the scheduler's work "
    "on them is done; a failed or shut-down job's servers hear it at once",
    "[scheduler][checkpoint]") {
  TestRng rng;
  INFO(rng.Describe());
  for (const char* end : {"finished", "failed", "kvctl shutdown"}) {
    INFO(end);
    auto core = MakeCore(2, 2);
    std::atomic<bool> busy{false};
    core->SetServersBusy([&busy] { return busy.load(); });
    auto outcomes = RegisterAll(core.get(), 2, {-1, -1}, &rng);
    const uint64_t s0 = outcomes[0]->result->node_id, s1 = outcomes[1]->result->node_id;
    const uint64_t w0 = outcomes[2]->result->node_id, w1 = outcomes[3]->result->node_id;
    const absl::Time later = kStart + absl::Seconds(1);
    busy = true;  // A periodic checkpoint set begun with the last round.
    REQUIRE(core->Finish(w0, later).ok());
    if (std::string(end) == "finished") {
      REQUIRE(core->Finish(w1, later).ok());
    } else if (std::string(end) == "failed") {
      REQUIRE(core->Finish(w1, later, "worker 1 failed").ok());
    } else {
      core->RequestShutdown(end);
    }
    REQUIRE(core->shutdown_requested());
    const bool held = std::string(end) == "finished";
    // Workers hear it whatever the servers do.
    CHECK(core->Heartbeat(w0, later).value() == true);
    CHECK(core->Heartbeat(s0, later).value() == !held);
    CHECK(core->all_servers_released() == false);
    busy = false;  // The set is published.
    CHECK(core->Heartbeat(s0, later).value() == true);
    CHECK(core->Heartbeat(s1, later).value() == true);
    CHECK(core->all_servers_released());
  }
}

TEST_CASE("SchedulerCore: the wait for the job to assemble is not silence", "[scheduler]") {
  SchedulerOptions options;
  options.num_servers = 1;
  options.num_workers = 2;
  options.register_timeout = absl::Minutes(2);
  options.heartbeat_timeout = absl::Seconds(10);
  auto core = SchedulerCore::Create(options).value();
  Outcome server, early, late;
  // One worker registers 40 s before the last node: it cannot heartbeat before its answer.
  core->Register(NodeRole::kWorker, -1, "", "w", kStart, early.Callback());
  core->Register(NodeRole::kServer, -1, "127.0.0.1:1", "h", kStart + absl::Seconds(20),
                 server.Callback());
  core->Register(NodeRole::kWorker, -1, "", "w", kStart + absl::Seconds(40), late.Callback());
  REQUIRE(early.result.ok());
  const absl::Time assembled = kStart + absl::Seconds(40);
  REQUIRE(core->liveness().DeadWorkers(assembled + absl::Seconds(5)).ok());
  // Silence after the answer counts.
  const absl::Status dead = core->liveness().DeadWorkers(assembled + absl::Seconds(11));
  REQUIRE_FALSE(dead.ok());
  REQUIRE(dead.message().find("heartbeat timeout") != absl::string_view::npos);
}

TEST_CASE("SchedulerCore: a job whose unfinished workers all went silent is abandoned",
          "[scheduler]") {
  TestRng rng;
  INFO(rng.Describe());
  auto core = MakeCore(1, 3);  // workers_lost_timeout: the default, 5 minutes.
  // Before the job is complete nothing is lost (registration has its own deadline).
  REQUIRE(core->liveness().WorkersLost(kStart + absl::Hours(1)).ok());
  auto outcomes = RegisterAll(core.get(), 3, {-1}, &rng);
  const Registration& w0 = *outcomes[1]->result;
  const Registration& w1 = *outcomes[2]->result;
  const Registration& w2 = *outcomes[3]->result;
  auto named = [](const absl::Status& status, const Registration& worker) {
    return status.message().find(absl::StrCat("worker ", worker.rank, " (node ", worker.node_id)) !=
           absl::string_view::npos;
  };

  REQUIRE(core->Heartbeat(w0.node_id, kStart + absl::Minutes(4)).ok());
  REQUIRE(core->Heartbeat(w1.node_id, kStart + absl::Minutes(4)).ok());
  // w2 (and the server) have been silent for 6 minutes, but w0 and w1 are alive: the job goes
  // on.
  REQUIRE(core->liveness().WorkersLost(kStart + absl::Minutes(6)).ok());
  REQUIRE(core->Finish(w1.node_id, kStart + absl::Minutes(6)).ok());
  // Exactly at the timeout w0 still counts as alive.
  REQUIRE(core->liveness().WorkersLost(kStart + absl::Minutes(9)).ok());
  const absl::Status lost =
      core->liveness().WorkersLost(kStart + absl::Minutes(9) + absl::Seconds(1));
  INFO(lost.ToString());
  REQUIRE(absl::IsDeadlineExceeded(lost));
  REQUIRE(named(lost, w0));
  REQUIRE(named(lost, w2));
  REQUIRE_FALSE(named(lost, w1));  // Finished workers are not lost.
  REQUIRE(lost.message().find("last heard 5m1s ago") != absl::string_view::npos);
  REQUIRE(lost.message().find("last heard 9m1s ago") != absl::string_view::npos);
  // Once the job is over, nothing is reported again.
  core->RequestShutdown(std::string(lost.message()));
  REQUIRE(core->liveness().WorkersLost(kStart + absl::Hours(1)).ok());
  REQUIRE(core->shutdown_reason() == lost.message());
}

TEST_CASE("SchedulerCore: a job whose workers all finished is not abandoned", "[scheduler]") {
  TestRng rng;
  INFO(rng.Describe());
  auto core = MakeCore(1, 2);
  auto outcomes = RegisterAll(core.get(), 2, {-1}, &rng);
  for (int w = 1; w <= 2; ++w) REQUIRE(core->Finish(outcomes[w]->result->node_id, kStart).ok());
  REQUIRE(core->shutdown_requested());
  REQUIRE(core->liveness().WorkersLost(kStart + absl::Hours(1)).ok());
}

TEST_CASE("SchedulerCore: rejects jobs without servers or workers", "[scheduler]") {
  SchedulerOptions options;
  options.num_servers = 0;
  REQUIRE(absl::IsInvalidArgument(SchedulerCore::Create(options).status()));
  options.num_servers = 1;
  options.barrier_timeout = absl::ZeroDuration();
  REQUIRE(absl::IsInvalidArgument(SchedulerCore::Create(options).status()));
  options.barrier_timeout = absl::Seconds(1);
  options.workers_lost_timeout = absl::ZeroDuration();
  REQUIRE(absl::IsInvalidArgument(SchedulerCore::Create(options).status()));
}

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

TEST_CASE("SchedulerCore: progress names the missing ranks, then the nodes a barrier waits for",
          "[scheduler][progress]") {
  TestRng rng;
  INFO(rng.Describe());
  const int workers = static_cast<int>(rng.Int(2, 5));
  auto core = MakeCore(2, workers);
  CHECK(core->Progress().empty());
  std::vector<std::unique_ptr<Outcome>> outcomes;
  auto add = [&](NodeRole role, int rank, const std::string& host) {
    outcomes.push_back(std::make_unique<Outcome>());
    core->Register(role, rank, role == NodeRole::kServer ? "127.0.0.1:1" + host.substr(4) : "",
                   host, kStart, outcomes.back()->Callback());
  };
  add(NodeRole::kServer, 0, "host0");
  for (int w = 0; w < workers; ++w) add(NodeRole::kWorker, w, absl::StrCat("host", 10 + w));
  std::vector<std::string> lines = core->Progress();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == absl::StrCat("registered 1 of 2 servers and ", workers, " of ", workers,
                                 " workers; waiting for server rank 1"));
  add(NodeRole::kServer, 1, "host1");
  for (auto& outcome : outcomes) REQUIRE(outcome->done.HasBeenNotified());
  CHECK(core->Progress().empty());
  // Every worker but a random one enters a barrier over the workers.
  const int late = static_cast<int>(rng.Int(0, workers - 1));
  std::vector<std::unique_ptr<BarrierOutcome>> barriers;
  for (auto& outcome : outcomes) {
    const Registration& r = outcome->result.value();
    const bool worker =
        r.view.worker_node_ids.end() !=
        std::find(r.view.worker_node_ids.begin(), r.view.worker_node_ids.end(), r.node_id);
    if (!worker || r.rank == late) continue;
    barriers.push_back(std::make_unique<BarrierOutcome>());
    core->Barrier(r.node_id, kGroupWorkers, kStart, barriers.back()->Callback());
  }
  lines = core->Progress();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == absl::StrCat("barrier: ", workers - 1, " of ", workers,
                                 " workers; waiting for worker ", late, " on host", 10 + late));
}

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

std::unique_ptr<SchedulerCore> MakeReplicatedCore(int servers, int workers) {
  SchedulerOptions options;
  options.num_servers = servers;
  options.num_workers = workers;
  options.replicas = 2;
  return SchedulerCore::Create(options).value();
}

TEST_CASE(
    "SchedulerCore: replicas need 2 servers; a dead server is declared once; both copies "
    "of a shard dead fail the job, naming it",
    "[scheduler][replicas]") {
  SchedulerOptions one;
  one.replicas = 2;
  CHECK(absl::IsInvalidArgument(SchedulerCore::Create(one).status()));
  one.replicas = 3;
  one.num_servers = 3;
  CHECK(absl::IsInvalidArgument(SchedulerCore::Create(one).status()));

  TestRng rng;
  INFO(rng.Describe());
  auto core = MakeReplicatedCore(3, 2);
  CHECK(
      absl::IsFailedPrecondition(core->failover().DeclareServerDead(0, "early", kStart).status()));
  RegisterAll(core.get(), 2, {-1, -1, -1}, &rng);
  REQUIRE(core->view()->replicas == 2);
  const int first = static_cast<int>(rng.Int(0, 2));
  CHECK(*core->failover().DeclareServerDead(first, "killed", kStart) == true);
  CHECK(*core->failover().DeclareServerDead(first, "killed again", kStart) == false);
  CHECK(core->failover().dead_servers() == std::vector<int>{first});
  CHECK(core->job_failure().empty());
  CHECK(absl::IsInvalidArgument(core->failover().DeclareServerDead(3, "no such", kStart).status()));
  // The next rank holds the backup of `first`'s shard: both copies gone.
  const int second = (first + 1) % 3;
  CHECK(*core->failover().DeclareServerDead(second, "killed too", kStart) == true);
  const std::string failure = core->job_failure();
  INFO(failure);
  CHECK(failure.find(absl::StrCat("shard ", first, " is lost")) != std::string::npos);
}

TEST_CASE("SchedulerCore: once the job is over, a server gone is not declared dead",
          "[scheduler][replicas]") {
  TestRng rng;
  INFO(rng.Describe());
  auto core = MakeReplicatedCore(2, 1);
  RegisterAll(core.get(), 1, {-1, -1}, &rng);
  core->RequestShutdown("kvctl shutdown");
  const absl::StatusOr<bool> declared = core->failover().DeclareServerDead(0, "exited", kStart);
  CHECK(absl::IsFailedPrecondition(declared.status()));
  CHECK(core->failover().dead_servers().empty());
}

// JoinAs registers a server for `rank` at `address` at time `now` and returns the outcome.
absl::StatusOr<Registration> JoinAs(SchedulerCore* core, int rank, const std::string& address,
                                    absl::Time now) {
  Outcome outcome;
  core->Register(NodeRole::kServer, rank, address, "newhost", now, outcome.Callback());
  REQUIRE(outcome.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  return outcome.result;
}

TEST_CASE(
    "SchedulerCore: a replacement server takes a dead server's rank back; the view "
    "moves to its epoch once it is loaded",
    "[scheduler][replicas]") {
  TestRng rng;
  INFO(rng.Describe());
  const int servers = static_cast<int>(rng.Int(2, 5));
  auto core = MakeReplicatedCore(servers, 2);
  auto outcomes = RegisterAll(core.get(), 2, std::vector<int>(servers, -1), &rng);
  const int victim = static_cast<int>(rng.Int(0, servers - 1));
  const absl::Time later = kStart + absl::Milliseconds(500);
  // Its server alive: held, then refused naming it once it has stayed alive for the wait.
  {
    uint64_t victim_id = 0;
    for (const NodeInfo& node : core->Nodes()) {
      if (node.role == NodeRole::kServer && node.rank == victim) victim_id = node.node_id;
    }
    Outcome early;
    core->Register(NodeRole::kServer, victim, "127.0.0.1:30001", "newhost", later,
                   early.Callback());
    const absl::Time end = later + 4 * absl::Seconds(1) + absl::Seconds(1);
    for (absl::Time t = later; t <= end + absl::Milliseconds(300); t += absl::Milliseconds(300)) {
      CHECK(!early.done.HasBeenNotified());
      REQUIRE(core->Heartbeat(victim_id, t).ok());
      core->ExpireDeadlines(t);
    }
    REQUIRE(early.done.HasBeenNotified());
    INFO(early.result.status().ToString());
    CHECK(absl::IsFailedPrecondition(early.result.status()));
    CHECK(early.result.status().message().find("is alive") != absl::string_view::npos);
  }

  REQUIRE(*core->failover().DeclareServerDead(victim, "killed", later));
  CHECK(core->failover().routing().dead == std::vector<int>{victim});
  CHECK(core->failover().routing().epoch == 0);
  // Any rank (-1) takes the dead one.
  absl::StatusOr<Registration> joined = JoinAs(core.get(), -1, "127.0.0.1:30002", later);
  REQUIRE(joined.ok());
  CHECK(joined->rank == victim);
  CHECK(joined->join_epoch == 1);
  CHECK(joined->view.servers[victim].address == "127.0.0.1:30002");
  // While it is loaded it stays dead (its shards served by the other copies), and a second
  // replacement is refused.
  Routing routing = core->failover().routing();
  CHECK(routing.epoch == 0);
  CHECK(routing.dead == std::vector<int>{victim});
  absl::StatusOr<Registration> second = JoinAs(core.get(), victim, "127.0.0.1:30003", later);
  CHECK(absl::IsFailedPrecondition(second.status()));
  CHECK(second.status().message().find("already being replaced") != absl::string_view::npos);
  // Published: alive at its address, the view at its epoch.
  REQUIRE(core->failover().CompleteJoin(joined->node_id).ok());
  routing = core->failover().routing();
  CHECK(routing.epoch == 1);
  CHECK(routing.dead.empty());
  CHECK(routing.servers[victim].address == "127.0.0.1:30002");
  CHECK(absl::IsFailedPrecondition(core->failover().CompleteJoin(joined->node_id)));
  CHECK(core->failover().join_failure(joined->node_id).empty());
  // No dead server left: a further server is refused as before.
  absl::StatusOr<Registration> extra = JoinAs(core.get(), -1, "127.0.0.1:30004", later);
  CHECK(absl::IsFailedPrecondition(extra.status()));
  CHECK(extra.status().message().find("already has all its") != absl::string_view::npos);
}

TEST_CASE(
    "SchedulerCore: a server restarted before its old process counts as dead waits, "
    "then takes the rank; one whose rank stays alive is refused",
    "[scheduler][rejoin]") {
  TestRng rng;
  INFO(rng.Describe());
  const int servers = static_cast<int>(rng.Int(1, 4));
  auto core = MakeCore(servers, 1);  // No replicas; heartbeats every second.
  auto outcomes = RegisterAll(core.get(), 1, std::vector<int>(servers, -1), &rng);
  for (auto& outcome : outcomes) REQUIRE(outcome->result.ok());
  const int victim = static_cast<int>(rng.Int(0, servers - 1));
  uint64_t victim_id = 0;
  for (const NodeInfo& node : core->Nodes()) {
    if (node.role == NodeRole::kServer && node.rank == victim) victim_id = node.node_id;
  }
  // Its last heartbeat `beat` after the start; it dies then, and is restarted 0-1.9 s later.
  const absl::Time beat = kStart + absl::Milliseconds(rng.Int(0, 5000));
  for (const NodeInfo& node : core->Nodes()) REQUIRE(core->Heartbeat(node.node_id, beat).ok());
  const absl::Time restart = beat + absl::Milliseconds(rng.Int(0, 1900));
  Outcome restarted;
  core->Register(NodeRole::kServer, victim, "127.0.0.1:31000", "newhost", restart,
                 restarted.Callback());
  CHECK(!restarted.done.HasBeenNotified());
  const std::vector<std::string> waiting = core->Progress();
  REQUIRE(waiting.size() == 1);
  CHECK(waiting[0].find(absl::StrCat("server rank ", victim)) != std::string::npos);
  CHECK(waiting[0].find("127.0.0.1:31000") != std::string::npos);
  // It takes the rank once the old one has been silent for two heartbeat intervals.
  absl::Time t = restart;
  while (!restarted.done.HasBeenNotified()) {
    REQUIRE(t < restart + absl::Seconds(10));
    t += absl::Milliseconds(100);
    core->ExpireDeadlines(t);
  }
  INFO(restarted.result.status().ToString());
  REQUIRE(restarted.result.ok());
  CHECK(t > beat + absl::Seconds(2));
  CHECK(t <= beat + absl::Seconds(2) + absl::Milliseconds(100));
  CHECK(restarted.result->rank == victim);
  CHECK(restarted.result->node_id != victim_id);
  CHECK(restarted.result->view.servers[victim].address == "127.0.0.1:31000");
  // A second kvserver for a rank whose server stays alive is refused after the wait, naming it.
  const int other = static_cast<int>(rng.Int(0, servers - 1));
  for (const NodeInfo& node : core->Nodes()) REQUIRE(core->Heartbeat(node.node_id, t).ok());
  Outcome second;
  core->Register(NodeRole::kServer, other, "127.0.0.1:31001", "newhost", t, second.Callback());
  uint64_t holder = 0;
  for (const NodeInfo& node : core->Nodes()) {
    if (node.role == NodeRole::kServer && node.rank == other) holder = node.node_id;
  }
  const absl::Time asked = t;
  while (!second.done.HasBeenNotified()) {
    REQUIRE(t < asked + absl::Seconds(10));
    t += absl::Milliseconds(100);
    REQUIRE(core->Heartbeat(holder, t).ok());
    core->ExpireDeadlines(t);
  }
  INFO(second.result.status().ToString());
  CHECK(absl::IsFailedPrecondition(second.result.status()));
  CHECK(second.result.status().message().find(absl::StrCat("server rank ", other, " is alive")) !=
        absl::string_view::npos);
  CHECK(t - asked >= absl::Seconds(5));
  // A shutdown answers a held registration at once.
  Outcome third;
  core->Register(NodeRole::kServer, other, "127.0.0.1:31002", "newhost", t, third.Callback());
  CHECK(!third.done.HasBeenNotified());
  core->RequestShutdown("test");
  REQUIRE(third.done.HasBeenNotified());
  CHECK(absl::IsAborted(third.result.status()));
}

TEST_CASE(
    "SchedulerCore: a silent server is replaced; a failed join is told why; a shard "
    "without a living copy cannot be copied",
    "[scheduler][replicas]") {
  TestRng rng;
  INFO(rng.Describe());
  auto core = MakeReplicatedCore(3, 1);
  RegisterAll(core.get(), 1, {0, 1, 2}, &rng);
  const int victim = static_cast<int>(rng.Int(0, 2));
  // Silent for more than two heartbeat intervals (no heartbeat since kStart): declared dead by
  // the replacement's registration.
  const absl::Time later = kStart + absl::Seconds(3);
  absl::StatusOr<Registration> joined = JoinAs(core.get(), victim, "127.0.0.1:30010", later);
  REQUIRE(joined.ok());
  CHECK(joined->join_epoch == 1);
  core->failover().FailJoin(joined->node_id, "copying shard 1: DEADLINE_EXCEEDED");
  CHECK(core->failover().join_failure(joined->node_id) == "copying shard 1: DEADLINE_EXCEEDED");
  CHECK(core->failover().routing().dead == std::vector<int>{victim});
  // The epoch the refused writes wait for is published, with the rank still dead.
  CHECK(core->failover().routing().epoch == 1);
  CHECK(absl::IsFailedPrecondition(core->failover().CompleteJoin(joined->node_id)));
  // Another try gets a later epoch.
  absl::StatusOr<Registration> again = JoinAs(core.get(), victim, "127.0.0.1:30011", later);
  REQUIRE(again.ok());
  CHECK(again->join_epoch == 2);
  REQUIRE(core->failover().CompleteJoin(again->node_id).ok());
  CHECK(core->failover().routing().epoch == 2);
  // The next server dies, then the one after it: the second one's own shard has lost its
  // other copy's server (the next rank), so no replacement of it could be loaded.
  const int next = (victim + 1) % 3;
  REQUIRE(*core->failover().DeclareServerDead(next, "killed", later));
  CHECK(core->job_failure().empty());
  const int after = (victim + 2) % 3;
  absl::StatusOr<Registration> lost = JoinAs(core.get(), next, "127.0.0.1:30012", later);
  REQUIRE(lost.ok());  // Its shards' other copies (victim's replacement, `after`) live.
  core->failover().FailJoin(lost->node_id, "test");
  REQUIRE(*core->failover().DeclareServerDead(after, "killed", later));
  // Both copies of shard `next` (servers next and after) are dead: the job failed.
  CHECK(core->job_failure().find(absl::StrCat("shard ", next, " is lost")) != std::string::npos);
}

}  // namespace
}  // namespace kvstore
