// SchedulerCore re-forming a running job from its nodes' registrations (scheduler_core_rejoin.cc):
// a job formed on one core is re-formed on a fresh one - a scheduler restarted in place - from
// the claims its servers present, in random order.
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/scheduler/core/scheduler_core.h"
#include "server/scheduler/core/server_failover.h"
#include "server/scheduler/core/worker_liveness.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

SchedulerOptions Options(int servers, int workers) {
  SchedulerOptions options;
  options.num_servers = servers;
  options.num_workers = workers;
  options.register_timeout = absl::Seconds(10);
  options.barrier_timeout = absl::Seconds(20);
  return options;
}

// Outcome of a registration or a barrier, answered synchronously here (one thread).
struct Answer {
  bool done = false;
  absl::StatusOr<Registration> registration = absl::UnknownError("not run");
  absl::Status status = absl::UnknownError("not run");
  SchedulerCore::RegisterDone OnRegister() {
    return [this](absl::StatusOr<Registration> r) {
      done = true;
      registration = std::move(r);
    };
  }
  SchedulerCore::BarrierDone OnBarrier() {
    return [this](absl::Status s) {
      done = true;
      status = std::move(s);
    };
  }
};

// FormJob registers every node of `core` in a random order (servers asking for their ranks).
void FormJob(SchedulerCore* core, int servers, int workers, TestRng* rng) {
  std::vector<int> order(servers + workers);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng->engine());
  std::vector<Answer> answers(order.size());
  for (int who : order) {
    const bool server = who < servers;
    core->Register(server ? NodeRole::kServer : NodeRole::kWorker, server ? who : -1,
                   server ? absl::StrCat("127.0.0.1:", 20000 + who) : "", absl::StrCat("host", who),
                   kStart, answers[who].OnRegister());
  }
  for (const Answer& a : answers) REQUIRE(a.registration.ok());
}

// ServerClaim is what server `node` of `job` presents to a restarted scheduler.
RejoinClaim ServerClaim(const NodeInfo& node, const ClusterView& view) {
  RejoinClaim claim;
  claim.role = NodeRole::kServer;
  claim.node_id = node.node_id;
  claim.rank = node.rank;
  claim.address = node.address;
  claim.hostname = node.hostname;
  claim.view = view;
  return claim;
}

TEST_CASE("SchedulerCore rejoin: a fresh core re-forms a running job from its servers' claims",
          "[scheduler][rejoin]") {
  TestRng rng;
  INFO(rng.Describe());
  const int servers = rng.Int(1, 4), workers = rng.Int(1, 5);
  INFO("servers " << servers << ", workers " << workers);
  auto before = SchedulerCore::Create(Options(servers, workers)).value();
  FormJob(before.get(), servers, workers, &rng);
  const ClusterView view = before->view().value();
  // Some workers finish before the scheduler dies (not all: the job still runs).
  std::set<uint64_t> finished;
  for (uint64_t id : view.worker_node_ids) {
    if (finished.size() + 1 < view.worker_node_ids.size() && rng.Int(0, 1) == 1) {
      REQUIRE(before->Finish(id, kStart).ok());
      finished.insert(id);
    }
  }
  std::vector<RejoinClaim> claims;
  for (const NodeInfo& node : before->Nodes()) {
    if (node.role != NodeRole::kServer) continue;
    claims.push_back(ServerClaim(node, view));
    claims.back().finished_workers.assign(finished.begin(), finished.end());
    claims.back().max_round = rng.Int(0, 100);
  }
  std::shuffle(claims.begin(), claims.end(), rng.engine());

  auto after = SchedulerCore::Create(Options(servers, workers)).value();
  REQUIRE(after->job_id() != before->job_id());
  // Before any claim: a worker's heartbeat and barrier are to be retried (Unavailable).
  const uint64_t worker = view.worker_node_ids[0];
  CHECK(absl::IsUnavailable(after->Heartbeat(worker, kStart).status()));
  std::vector<Answer> answers(claims.size());
  for (size_t i = 0; i < claims.size(); ++i) {
    after->Rejoin(claims[i], kStart, answers[i].OnRegister());
    if (i + 1 < claims.size()) {
      CHECK(!answers[i].done);
      const absl::Status beat = after->Heartbeat(worker, kStart).status();
      CHECK(absl::IsUnavailable(beat));
      CHECK(absl::StrContains(beat.message(), "re-forming job " + before->job_id()));
    }
  }
  for (size_t i = 0; i < claims.size(); ++i) {
    INFO(answers[i].registration.status().ToString());
    REQUIRE(answers[i].registration.ok());
    CHECK(answers[i].registration->node_id == claims[i].node_id);
    CHECK(answers[i].registration->rank == claims[i].rank);
  }
  // The same job: its id, view, nodes and what had finished.
  CHECK(after->job_id() == before->job_id());
  const ClusterView reformed = after->view().value();
  CHECK(reformed.job_id == view.job_id);
  CHECK(reformed.worker_node_ids == view.worker_node_ids);
  CHECK(reformed.mode == view.mode);
  REQUIRE(reformed.servers.size() == view.servers.size());
  for (size_t i = 0; i < view.servers.size(); ++i) {
    CHECK(reformed.servers[i].node_id == view.servers[i].node_id);
    CHECK(reformed.servers[i].address == view.servers[i].address);
  }
  CHECK(after->finished_worker_ids() == before->finished_worker_ids());
  CHECK(!after->shutdown_requested());
  // Workers go on without registering: their heartbeats name known nodes.
  for (uint64_t id : view.worker_node_ids) CHECK(after->Heartbeat(id, kStart).ok());
  // The job is whole: an ordinary registration is refused; a known server's claim is
  // answered at once; an unknown one is refused.
  Answer extra;
  after->Register(NodeRole::kWorker, -1, "", "late", kStart, extra.OnRegister());
  CHECK(absl::IsFailedPrecondition(extra.registration.status()));
  Answer again;
  after->Rejoin(claims[0], kStart, again.OnRegister());
  REQUIRE(again.registration.ok());
  CHECK(again.registration->known);
  CHECK(!answers[0].registration->known);
  RejoinClaim stranger = claims[0];
  stranger.node_id = 999;
  Answer refused;
  after->Rejoin(stranger, kStart, refused.OnRegister());
  CHECK(absl::IsFailedPrecondition(refused.registration.status()));
  // Every remaining worker finishing ends the job as before.
  for (uint64_t id : view.worker_node_ids) {
    if (finished.count(id) == 0) REQUIRE(after->Finish(id, kStart).ok());
  }
  CHECK(after->shutdown_requested());
  CHECK(after->shutdown_reason() == "every worker finished");
}

TEST_CASE("SchedulerCore rejoin: claims that do not fit are refused, changing nothing",
          "[scheduler][rejoin]") {
  TestRng rng;
  INFO(rng.Describe());
  auto before = SchedulerCore::Create(Options(2, 2)).value();
  FormJob(before.get(), 2, 2, &rng);
  const ClusterView view = before->view().value();
  const std::vector<NodeInfo> nodes = before->Nodes();
  const RejoinClaim claim = ServerClaim(nodes[0], view);

  SECTION("a scheduler forming a new job") {
    auto after = SchedulerCore::Create(Options(2, 2)).value();
    Answer ordinary, claimed;
    after->Register(NodeRole::kServer, 0, "127.0.0.1:1", "h", kStart, ordinary.OnRegister());
    after->Rejoin(claim, kStart, claimed.OnRegister());
    CHECK(absl::IsFailedPrecondition(claimed.registration.status()));
    CHECK(absl::StrContains(claimed.registration.status().message(), "forming a new job"));
  }
  SECTION("a server of another job while one is re-formed") {
    auto after = SchedulerCore::Create(Options(2, 2)).value();
    Answer first, other;
    after->Rejoin(claim, kStart, first.OnRegister());
    RejoinClaim foreign = ServerClaim(nodes[1], view);
    foreign.view.job_id = "another";
    after->Rejoin(foreign, kStart, other.OnRegister());
    CHECK(absl::IsFailedPrecondition(other.registration.status()));
    CHECK(absl::StrContains(other.registration.status().message(), "belongs to job another"));
    CHECK(!first.done);
  }
  SECTION("a view of another number of workers, or no job named") {
    // (Another number of servers is taken: servers join and drain running jobs.)
    auto after = SchedulerCore::Create(Options(2, 3)).value();
    Answer sized;
    after->Rejoin(claim, kStart, sized.OnRegister());
    CHECK(absl::IsInvalidArgument(sized.registration.status()));
    CHECK(absl::StrContains(sized.registration.status().message(),
                            "this scheduler runs a job of 3 workers"));
    RejoinClaim nameless = claim;
    nameless.view.job_id.clear();
    Answer unnamed;
    after->Rejoin(nameless, kStart, unnamed.OnRegister());
    CHECK(absl::IsInvalidArgument(unnamed.registration.status()));
    CHECK(absl::IsFailedPrecondition(after->view().status()));
  }
  SECTION("a server that never comes back: the claims expire, naming it") {
    auto after = SchedulerCore::Create(Options(2, 2)).value();
    Answer first;
    after->Rejoin(claim, kStart, first.OnRegister());
    after->ExpireDeadlines(kStart + absl::Seconds(5));
    CHECK(!first.done);
    after->ExpireDeadlines(kStart + absl::Seconds(11));
    REQUIRE(first.done);
    CHECK(absl::IsDeadlineExceeded(first.registration.status()));
    CHECK(absl::StrContains(first.registration.status().message(),
                            absl::StrCat("waiting for server ", nodes[1].rank, " (node ",
                                         nodes[1].node_id, " at ", nodes[1].address, ")")));
  }
}

TEST_CASE(
    "SchedulerCore rejoin: dead servers, the view epoch and workers that left an elastic job "
    "are re-formed as the servers knew them",
    "[scheduler][rejoin]") {
  TestRng rng;
  INFO(rng.Describe());
  SchedulerOptions options = Options(3, 3);
  options.replicas = 2;
  options.elastic = true;
  auto before = SchedulerCore::Create(options).value();
  FormJob(before.get(), 3, 3, &rng);
  const ClusterView view = before->view().value();
  const int dead_rank = rng.Int(0, 2);
  const uint64_t left = view.worker_node_ids[rng.Int(0, 2)];
  auto after = SchedulerCore::Create(options).value();
  std::vector<Answer> answers(3);
  int claimed = 0;
  for (const ServerEntry& server : view.servers) {
    if (server.rank == dead_rank) continue;  // Dead: it presents nothing.
    NodeInfo node{server.node_id, NodeRole::kServer, server.rank, server.address};
    RejoinClaim claim = ServerClaim(node, view);
    claim.view_epoch = 4;
    claim.servers = view.servers;
    claim.dead_servers = {dead_rank};
    claim.left_workers = {left};
    after->Rejoin(claim, kStart, answers[claimed++].OnRegister());
  }
  for (int i = 0; i < claimed; ++i) REQUIRE(answers[i].registration.ok());
  const Routing routing = after->failover().routing();
  CHECK(routing.epoch == 4);
  CHECK(routing.dead == std::vector<int>{dead_rank});
  CHECK(after->liveness().left_worker_ids() == std::vector<uint64_t>{left});
  // A barrier over the workers waits only for the two that did not leave.
  std::vector<Answer> barrier(3);
  int entered = 0;
  for (uint64_t id : view.worker_node_ids) {
    if (id == left) continue;
    after->Barrier(id, kGroupWorkers, kStart, barrier[entered++].OnBarrier(), 1);
  }
  CHECK(barrier[0].status.ok());
  CHECK(barrier[1].status.ok());
}

TEST_CASE(
    "SchedulerCore rejoin: counted barriers retried after a restart pass once, in either order",
    "[scheduler][rejoin]") {
  TestRng rng;
  INFO(rng.Describe());
  const int workers = rng.Int(2, 4);
  auto before = SchedulerCore::Create(Options(1, workers)).value();
  FormJob(before.get(), 1, workers, &rng);
  const ClusterView view = before->view().value();
  auto after = SchedulerCore::Create(Options(1, workers)).value();
  Answer server;
  after->Rejoin(ServerClaim(before->Nodes()[0], view), kStart, server.OnRegister());
  REQUIRE(server.registration.ok());
  // Barrier 1 passed before the restart, but only worker `ahead` heard so: it enters barrier 2
  // (or first says, in a heartbeat, that it got through 1 - it may be pushing, waiting for the
  // others); the others retry barrier 1 - some before that, some after.
  const bool by_heartbeat = rng.Int(0, 1) == 1;
  INFO("by heartbeat: " << by_heartbeat);
  const std::vector<uint64_t>& ids = view.worker_node_ids;
  const size_t ahead = rng.Int(0, workers - 1);
  std::vector<size_t> behind;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i != ahead) behind.push_back(i);
  }
  std::shuffle(behind.begin(), behind.end(), rng.engine());
  const size_t early = rng.Int(0, static_cast<int>(behind.size()));
  std::vector<Answer> first(ids.size()), second(ids.size());
  for (size_t k = 0; k < early; ++k) {
    after->Barrier(ids[behind[k]], kGroupWorkers, kStart, first[behind[k]].OnBarrier(), 1);
    CHECK(!first[behind[k]].done);
  }
  if (by_heartbeat) {
    REQUIRE(after->Heartbeat(ids[ahead], kStart, {}, WorkerReport{"host", 1}).ok());
    for (size_t k = 0; k < early; ++k) CHECK(first[behind[k]].status.ok());
  }
  after->Barrier(ids[ahead], kGroupWorkers, kStart, second[ahead].OnBarrier(), 2);
  for (size_t k = 0; k < early; ++k) CHECK(first[behind[k]].status.ok());
  for (size_t k = early; k < behind.size(); ++k) {
    after->Barrier(ids[behind[k]], kGroupWorkers, kStart, first[behind[k]].OnBarrier(), 1);
    CHECK(first[behind[k]].status.ok());
  }
  // Barrier 2 passes once every worker has entered it, and not before.
  for (size_t k = 0; k < behind.size(); ++k) {
    CHECK(!second[ahead].done);
    after->Barrier(ids[behind[k]], kGroupWorkers, kStart, second[behind[k]].OnBarrier(), 2);
  }
  for (size_t i = 0; i < ids.size(); ++i) CHECK(second[i].status.ok());
  // Uncounted entries keep the old meaning: every member, once.
  std::vector<Answer> plain(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    CHECK(!(i > 0 && plain[0].done));
    after->Barrier(ids[i], kGroupWorkers, kStart, plain[i].OnBarrier());
  }
  for (const Answer& a : plain) CHECK(a.status.ok());
}

TEST_CASE(
    "SchedulerCore rejoin: with replicas, a server that died while the scheduler was away is "
    "declared dead and the job re-forms without it, above every epoch a server requires",
    "[scheduler][rejoin]") {
  TestRng rng;
  INFO(rng.Describe());
  const int servers = static_cast<int>(rng.Int(3, 5));
  SchedulerOptions options = Options(servers, 2);
  options.replicas = 2;
  auto before = SchedulerCore::Create(options).value();
  FormJob(before.get(), servers, 2, &rng);
  const ClusterView view = before->view().value();
  const int gone = static_cast<int>(rng.Int(0, servers - 1));
  const uint64_t floor = static_cast<uint64_t>(rng.Int(1, 9));
  auto after = SchedulerCore::Create(options).value();
  std::vector<Answer> answers(servers);
  for (const ServerEntry& server : view.servers) {
    if (server.rank == gone) continue;
    RejoinClaim claim =
        ServerClaim(NodeInfo{server.node_id, NodeRole::kServer, server.rank, server.address}, view);
    // One server's engines require an epoch no heartbeat told of (a join's copy).
    if (server.rank == (gone + 1) % servers) claim.epoch_floor = floor;
    after->Rejoin(claim, kStart, answers[server.rank].OnRegister());
  }
  CHECK(!answers[(gone + 1) % servers].done);
  CHECK(after->ReformMissing(kStart, absl::Seconds(1)).empty());  // Not waited long enough.
  const std::vector<ServerEntry> missing =
      after->ReformMissing(kStart + absl::Seconds(2), absl::Seconds(1));
  REQUIRE(missing.size() == 1);
  CHECK(missing[0].rank == gone);
  REQUIRE(after->ReformWithout(gone, "nothing answers", kStart + absl::Seconds(2)).ok());
  for (const ServerEntry& server : view.servers) {
    if (server.rank != gone) CHECK(answers[server.rank].registration.ok());
  }
  const Routing routing = after->failover().routing();
  CHECK(routing.dead == std::vector<int>{gone});
  CHECK(routing.epoch == floor + 1);
  CHECK(after->ReformMissing(kStart + absl::Seconds(9), absl::Seconds(1)).empty());
  CHECK(absl::IsFailedPrecondition(after->ReformWithout(gone, "again", kStart)));
}

TEST_CASE(
    "SchedulerCore rejoin: a missing server is not given up without replicas, nor when the "
    "other copy of one of its shards is dead",
    "[scheduler][rejoin]") {
  TestRng rng;
  INFO(rng.Describe());
  for (const int replicas : {1, 2}) {
    SchedulerOptions options = Options(3, 1);
    options.replicas = replicas;
    auto before = SchedulerCore::Create(options).value();
    FormJob(before.get(), 3, 1, &rng);
    const ClusterView view = before->view().value();
    auto after = SchedulerCore::Create(options).value();
    // Server 0 presents itself; with replicas it says server 2 was declared dead; server 1 is
    // missing - and holds the other copy of shard 0, whose first copy's server is dead.
    RejoinClaim claim = ServerClaim(
        NodeInfo{view.servers[0].node_id, NodeRole::kServer, 0, view.servers[0].address}, view);
    if (replicas == 2) claim.dead_servers = {2};
    Answer answer;
    after->Rejoin(claim, kStart, answer.OnRegister());
    if (replicas == 1) {
      CHECK(after->ReformMissing(kStart + absl::Seconds(5), absl::Seconds(1)).empty());
    }
    const absl::Status refused = after->ReformWithout(1, "nothing answers", kStart);
    INFO(refused.ToString());
    CHECK(absl::IsFailedPrecondition(refused));
    CHECK(!answer.done);
    CHECK(absl::IsFailedPrecondition(after->view().status()));
  }
}

TEST_CASE("SchedulerCore: a standby answers registrations Unavailable until it leads",
          "[scheduler][rejoin]") {
  TestRng rng;
  INFO(rng.Describe());
  auto before = SchedulerCore::Create(Options(1, 1)).value();
  FormJob(before.get(), 1, 1, &rng);
  const ClusterView view = before->view().value();
  auto standby = SchedulerCore::Create(Options(1, 1)).value();
  standby->SetStandby("a standby of job j");
  CHECK(standby->standby());
  Answer ordinary, claimed;
  standby->Register(NodeRole::kWorker, -1, "", "h", kStart, ordinary.OnRegister());
  standby->Rejoin(ServerClaim(before->Nodes()[0], view), kStart, claimed.OnRegister());
  for (const Answer* answer : {&ordinary, &claimed}) {
    CHECK(absl::IsUnavailable(answer->registration.status()));
    CHECK(absl::StrContains(answer->registration.status().message(), "a standby of job j"));
  }
  CHECK(absl::IsFailedPrecondition(standby->view().status()));
  // Leading, it re-forms the job from the same claim.
  standby->SetStandby("");
  Answer again;
  standby->Rejoin(ServerClaim(before->Nodes()[0], view), kStart, again.OnRegister());
  CHECK(again.registration.ok());
  CHECK(standby->job_id() == before->job_id());
}

}  // namespace
}  // namespace kvstore
