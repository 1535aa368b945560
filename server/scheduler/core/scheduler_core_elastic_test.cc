// SchedulerCore in elastic jobs: dead and failed workers leave the job, barriers count the
// living, the job ends when every worker has finished or left and fails only when none is left.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/scheduler/core/scheduler_core.h"
#include "server/scheduler/core/worker_liveness.h"
namespace kvstore {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

struct BarrierOutcome {
  bool done = false;
  absl::Status status = absl::UnknownError("not run");
  SchedulerCore::BarrierDone Callback() {
    return [this](absl::Status s) {
      status = std::move(s);
      done = true;
    };
  }
};

// Job: one server and `workers` workers, registered at kStart; worker w's node id is ids[w].
struct Job {
  std::unique_ptr<SchedulerCore> core;
  std::vector<uint64_t> ids;
};

Job MakeJob(int workers, bool elastic) {
  SchedulerOptions options;
  options.num_servers = 1;
  options.num_workers = workers;
  options.heartbeat_timeout = absl::Seconds(1);
  options.elastic = elastic;
  Job job{SchedulerCore::Create(options).value(), std::vector<uint64_t>(workers)};
  job.core->Register(NodeRole::kServer, 0, "127.0.0.1:1", "s", kStart,
                     [](absl::StatusOr<Registration> r) { REQUIRE(r.ok()); });
  for (int w = 0; w < workers; ++w) {
    job.core->Register(
        NodeRole::kWorker, w, "", absl::StrCat("host", w), kStart,
        [&job, w](absl::StatusOr<Registration> r) {
          REQUIRE(r.ok());
          job.ids[w] = r->node_id;
        },
        "dist_sync");
  }
  REQUIRE(job.core->view().ok());
  return job;
}

// Beat sends a heartbeat at `when` from every worker in `workers` and the server.
void Beat(const Job& job, std::vector<int> workers, absl::Time when) {
  for (int w : workers) REQUIRE(job.core->Heartbeat(job.ids[w], when).ok());
  for (const NodeInfo& node : job.core->Nodes()) {
    if (node.role == NodeRole::kServer) REQUIRE(job.core->Heartbeat(node.node_id, when).ok());
  }
}

const NodeInfo& Node(const std::vector<NodeInfo>& nodes, uint64_t id) {
  for (const NodeInfo& node : nodes) {
    if (node.node_id == id) return node;
  }
  FAIL("no node " << id);
  return nodes.front();
}

TEST_CASE(
    "SchedulerCore elastic: a barrier waiting for a worker that dies passes once every "
    "living worker has entered",
    "[scheduler][elastic]") {
  Job job = MakeJob(3, true);
  SchedulerCore& core = *job.core;
  // Worker 2 enters the first barrier, then dies; worker 0 enters. The barrier must not count
  // the dead worker's entry: it still waits for worker 1.
  BarrierOutcome first[3];
  core.Barrier(job.ids[2], kGroupWorkers, kStart, first[2].Callback());
  core.Barrier(job.ids[0], kGroupWorkers, kStart, first[0].Callback());
  Beat(job, {0, 1}, kStart + absl::Milliseconds(900));
  REQUIRE(core.liveness().DropDeadWorkers(kStart + absl::Milliseconds(900)).empty());  // Not yet.
  const std::vector<std::string> dropped =
      core.liveness().DropDeadWorkers(kStart + absl::Milliseconds(1100));
  REQUIRE(dropped.size() == 1);
  INFO(dropped[0]);
  CHECK(absl::StrContains(dropped[0], absl::StrCat("worker 2 (node ", job.ids[2], " on host2)")));
  CHECK(absl::StrContains(dropped[0], "has left the job"));
  CHECK(absl::StrContains(dropped[0], "2 of 3 workers"));
  REQUIRE_FALSE(first[0].done);
  REQUIRE(core.Progress().size() == 1);
  CHECK(absl::StrContains(core.Progress()[0], "barrier: 1 of 2 workers; waiting for worker 1"));
  core.Barrier(job.ids[1], kGroupWorkers, kStart + absl::Milliseconds(1200), first[1].Callback());
  for (int w : {0, 1, 2}) {
    INFO("worker " << w);
    REQUIRE(first[w].done);
    CHECK(first[w].status.ok());
  }

  // A barrier both living workers have entered, then one dies: passes with the other.
  Beat(job, {0, 1}, kStart + absl::Seconds(2));
  BarrierOutcome second[2];
  core.Barrier(job.ids[0], kGroupWorkers, kStart + absl::Seconds(2), second[0].Callback());
  REQUIRE_FALSE(second[0].done);
  BarrierOutcome refused;
  core.Barrier(job.ids[2], kGroupWorkers, kStart + absl::Seconds(2), refused.Callback());
  REQUIRE(absl::IsFailedPrecondition(refused.status));
  CHECK(absl::StrContains(refused.status.message(), "has left the job"));
  Beat(job, {0}, kStart + absl::Seconds(3) + absl::Milliseconds(500));
  REQUIRE(
      core.liveness().DropDeadWorkers(kStart + absl::Seconds(3) + absl::Milliseconds(500)).size() ==
      1);
  REQUIRE(second[0].done);
  CHECK(second[0].status.ok());
  // A barrier over the servers and the workers counts the living too.
  BarrierOutcome all[2];
  core.Barrier(job.ids[0], kGroupServers | kGroupWorkers, kStart + absl::Seconds(4),
               all[0].Callback());
  REQUIRE_FALSE(all[0].done);
  uint64_t server = 0;
  for (const NodeInfo& node : core.Nodes()) {
    if (node.role == NodeRole::kServer) server = node.node_id;
  }
  core.Barrier(server, kGroupServers | kGroupWorkers, kStart + absl::Seconds(4), all[1].Callback());
  REQUIRE(all[0].done);
  REQUIRE(all[1].done);
  CHECK(all[0].status.ok());

  // The servers are told which workers left; the job is not over, nor failed.
  CHECK(core.liveness().left_worker_ids() == std::vector<uint64_t>{job.ids[1], job.ids[2]});
  CHECK(core.liveness().left_reason(job.ids[0]).empty());
  CHECK(absl::StrContains(core.liveness().left_reason(job.ids[2]),
                          "has left the job (died: no heartbeat"));
  const std::vector<NodeInfo> nodes = core.Nodes();
  CHECK(Node(nodes, job.ids[2]).left);
  CHECK_FALSE(Node(nodes, job.ids[2]).failed);
  CHECK_FALSE(Node(nodes, job.ids[0]).left);
  REQUIRE_FALSE(core.shutdown_requested());
  CHECK(core.liveness().DeadWorkers(kStart + absl::Seconds(4)).ok());
  // Dead is dead: NumDeadNodes counts the workers that left (ps-lite's count).
  CHECK(core.liveness().NumDeadNodes(kGroupWorkers, absl::Seconds(1), kStart + absl::Seconds(4)) ==
        2);
  // The last living worker finishes: the job is over and succeeded.
  REQUIRE(core.Finish(job.ids[0], kStart + absl::Seconds(4)).ok());
  REQUIRE(core.shutdown_requested());
  CHECK(core.job_failure().empty());
}

TEST_CASE("SchedulerCore elastic: a failed worker leaves; the job fails once no worker is left",
          "[scheduler][elastic]") {
  Job job = MakeJob(3, true);
  SchedulerCore& core = *job.core;
  BarrierOutcome waiting;
  core.Barrier(job.ids[1], kGroupWorkers, kStart, waiting.Callback());
  core.Barrier(job.ids[2], kGroupWorkers, kStart, waiting.Callback());
  // Worker 0 finishes as failed: it leaves, and the barrier it never entered passes.
  REQUIRE(core.Finish(job.ids[0], kStart, "INTERNAL: boom").ok());
  REQUIRE_FALSE(core.shutdown_requested());
  REQUIRE(waiting.done);
  CHECK(waiting.status.ok());
  CHECK(core.liveness().left_worker_ids() == std::vector<uint64_t>{job.ids[0]});
  CHECK(absl::StrContains(core.liveness().left_reason(job.ids[0]),
                          "finished as failed: INTERNAL: boom"));
  // Worker 1 dies: it leaves too, worker 2 goes on alone.
  Beat(job, {2}, kStart + absl::Seconds(2));
  REQUIRE(core.liveness().DropDeadWorkers(kStart + absl::Seconds(2)).size() == 1);
  REQUIRE_FALSE(core.shutdown_requested());
  CHECK(core.liveness().DeadWorkers(kStart + absl::Seconds(2)).ok());
  // Worker 2 dies: no worker is left, so the job fails as in the default mode, naming it.
  REQUIRE(core.liveness().DropDeadWorkers(kStart + absl::Seconds(4)).empty());
  const absl::Status dead = core.liveness().DeadWorkers(kStart + absl::Seconds(4));
  INFO(dead.ToString());
  REQUIRE(absl::IsAborted(dead));
  CHECK(absl::StrContains(dead.message(), absl::StrCat("worker 2 (node ", job.ids[2])));
  CHECK(absl::StrContains(dead.message(), "no other worker is left (2 left"));
  core.FailJob(std::string(dead.message()), kStart + absl::Seconds(4));
  REQUIRE(core.shutdown_requested());
  CHECK(core.job_failure() == dead.message());
  const std::vector<NodeInfo> nodes = core.Nodes();
  CHECK(Node(nodes, job.ids[2]).failed);
  CHECK_FALSE(Node(nodes, job.ids[2]).left);
}

TEST_CASE("SchedulerCore elastic: the default mode still fails the job on the first loss",
          "[scheduler][elastic]") {
  Job job = MakeJob(3, false);
  SchedulerCore& core = *job.core;
  Beat(job, {0, 1}, kStart + absl::Seconds(2));
  CHECK(core.liveness().DropDeadWorkers(kStart + absl::Seconds(2)).empty());
  CHECK(core.liveness().left_worker_ids().empty());
  CHECK(absl::IsAborted(core.liveness().DeadWorkers(kStart + absl::Seconds(2))));
  REQUIRE(core.Finish(job.ids[0], kStart, "INTERNAL: boom").ok());
  REQUIRE(core.shutdown_requested());
  CHECK(absl::StrContains(core.job_failure(), "failed: INTERNAL: boom"));
}

}  // namespace
}  // namespace kvstore
