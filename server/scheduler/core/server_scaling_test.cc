// ServerScaling: servers joining and drained while a job runs - the plans, their refusals, what
// publishing one changes (ranks, the view, its epoch, heartbeats) and what failing one leaves.
#include "server/scheduler/core/server_scaling.h"

#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/scheduler/core/server_failover.h"

namespace kvstore {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

// MakeJob registers `servers` servers (127.0.0.1:1000 + rank) and one worker of `mode`.
std::unique_ptr<SchedulerCore> MakeJob(int servers, int replicas = 1,
                                       const std::string& mode = "dist_sync") {
  SchedulerOptions options;
  options.num_servers = servers;
  options.num_workers = 1;
  options.replicas = replicas;
  auto core = SchedulerCore::Create(options).value();
  for (int s = 0; s < servers; ++s) {
    core->Register(NodeRole::kServer, s, absl::StrCat("127.0.0.1:", 1000 + s), "h", kStart,
                   [](absl::StatusOr<Registration> r) { REQUIRE(r.ok()); });
  }
  core->Register(
      NodeRole::kWorker, 0, "", "w", kStart,
      [](absl::StatusOr<Registration> r) { REQUIRE(r.ok()); }, mode);
  REQUIRE(core->view().ok());
  return core;
}

absl::StatusOr<Registration> Join(SchedulerCore& core, const std::string& address) {
  std::optional<absl::StatusOr<Registration>> answer;
  core.Register(
      NodeRole::kServer, -1, address, "joiner", kStart,
      [&](absl::StatusOr<Registration> r) { answer = std::move(r); }, "", /*join=*/true);
  REQUIRE(answer.has_value());
  return *answer;
}

std::vector<std::string> Addresses(const ClusterView& view) {
  std::vector<std::string> out;
  for (const ServerEntry& server : view.servers) out.push_back(server.address);
  return out;
}

TEST_CASE("ServerScaling: a server joins: planned, then published at the plan's epoch",
          "[scheduler][rescale]") {
  auto core = MakeJob(2);
  absl::StatusOr<Registration> joined = Join(*core, "127.0.0.1:2000");
  REQUIRE(joined.ok());
  CHECK(joined->scaling);
  CHECK(joined->rank == 2);
  CHECK(joined->view.num_servers == 3);
  CHECK(joined->join_epoch == 1);
  // Not one of the job's servers until published; its heartbeats are answered meanwhile.
  CHECK(core->view()->num_servers == 2);
  CHECK(core->failover().routing().epoch == 0);
  CHECK(core->Heartbeat(joined->node_id, kStart).value() == false);
  // A second rescale waits for this one.
  CHECK(absl::IsFailedPrecondition(Join(*core, "127.0.0.1:2001").status()));
  CHECK(absl::IsFailedPrecondition(core->scaling().Drain(0).status()));
  const std::optional<RescalePlan> plan = core->scaling().active();
  REQUIRE(plan.has_value());
  CHECK(plan->before.size() == 2);
  CHECK(plan->after.size() == 3);
  REQUIRE(core->scaling().Complete(*plan, kStart).ok());
  CHECK(Addresses(core->view().value()) ==
        std::vector<std::string>{"127.0.0.1:1000", "127.0.0.1:1001", "127.0.0.1:2000"});
  CHECK(core->view()->num_servers == 3);
  CHECK(core->failover().routing().epoch == 1);
  CHECK(core->Heartbeat(joined->node_id, kStart).value() == false);
  CHECK(!core->scaling().active().has_value());
}

TEST_CASE("ServerScaling: a drain renumbers the servers above and lets the drained one go",
          "[scheduler][rescale]") {
  auto core = MakeJob(3);
  const uint64_t drained = core->view()->servers[0].node_id;
  CHECK(absl::IsInvalidArgument(core->scaling().Drain(3).status()));
  absl::StatusOr<RescalePlan> plan = core->scaling().Drain(0);
  REQUIRE(plan.ok());
  CHECK(plan->draining == drained);
  REQUIRE(plan->after.size() == 2);
  CHECK(plan->after[0].address == "127.0.0.1:1001");
  CHECK(plan->after[0].rank == 0);
  REQUIRE(core->scaling().Complete(*plan, kStart).ok());
  CHECK(Addresses(core->view().value()) ==
        std::vector<std::string>{"127.0.0.1:1001", "127.0.0.1:1002"});
  CHECK(core->view()->servers[1].rank == 1);
  // The drained server hears that the job is over for it only a few heartbeats later.
  CHECK(core->Heartbeat(drained, kStart + absl::Milliseconds(100)).value() == false);
  CHECK(core->Heartbeat(drained, kStart + absl::Seconds(6)).value() == true);
  // The job's only server is never drained.
  auto one = MakeJob(1);
  const absl::Status only = one->scaling().Drain(0).status();
  CHECK(absl::IsFailedPrecondition(only));
  CHECK(absl::StrContains(only.message(), "only server"));
}

TEST_CASE(
    "ServerScaling: refused in dist_async, below the copies or with a dead server; a "
    "failed rescale moves the epoch",
    "[scheduler][rescale]") {
  // With replicas: joins while every server lives; drains while as many servers as copies stay.
  auto replicated = MakeJob(2, 2);
  const absl::Status few = replicated->scaling().Drain(1).status();
  CHECK(absl::IsFailedPrecondition(few));
  CHECK(absl::StrContains(few.message(), "keeps at least 2 servers"));
  REQUIRE(replicated->failover().DeclareServerDead(1, "killed", kStart).ok());
  const absl::Status dead = Join(*replicated, "127.0.0.1:2000").status();
  CHECK(absl::IsFailedPrecondition(dead));
  CHECK(absl::StrContains(dead.message(), "is dead"));
  // Embedding tables (a server's heartbeat reports them): refused.
  auto tabled = MakeJob(2);
  const uint64_t server = tabled->view()->servers[0].node_id;
  REQUIRE(
      tabled->Heartbeat(server, kStart, ServerLoad{0, 0, 0, -1, "", {TableLoad{"\"t\"", 8}}}).ok());
  const absl::Status tables = tabled->scaling().Drain(1).status();
  CHECK(absl::IsFailedPrecondition(tables));
  CHECK(absl::StrContains(tables.message(), "embedding tables"));
  auto healthy = MakeJob(2, 2);
  absl::StatusOr<Registration> joined_replicated = Join(*healthy, "127.0.0.1:2000");
  REQUIRE(joined_replicated.ok());
  CHECK(healthy->scaling().active()->replicas == 2);
  const absl::Status async = MakeJob(2, 1, "dist_async")->scaling().Drain(1).status();
  CHECK(absl::IsFailedPrecondition(async));
  CHECK(absl::StrContains(async.message(), "dist_async"));
  auto core = MakeJob(2);
  absl::StatusOr<Registration> joined = Join(*core, "127.0.0.1:2000");
  REQUIRE(joined.ok());
  core->scaling().Fail(*core->scaling().active(), "killed");
  // The same servers at the plan's epoch; the joining server is told why and exits.
  CHECK(core->view()->num_servers == 2);
  CHECK(core->failover().routing().epoch == 1);
  CHECK(core->scaling().join_failure(joined->node_id) == "killed");
  CHECK(core->Heartbeat(joined->node_id, kStart).value() == true);
  // The next rescale takes the next epoch.
  absl::StatusOr<Registration> again = Join(*core, "127.0.0.1:2001");
  REQUIRE(again.ok());
  CHECK(again->join_epoch == 2);
}

}  // namespace
}  // namespace kvstore
