// Tests of ServerJoiner, the scheduler's side of a replacement server's join, over recorded
// controller commands: both living copies are cut at one round, the higher of those they had
// started; each copy is sent by the server holding it, which the new server is told to expect;
// the join is published at its epoch; a failed join aborts both copies and still moves the
// view to its epoch, with the rank dead.
#include "server/scheduler/core/server_joiner.h"

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/server_commands.h"
#include "server/scheduler/core/server_failover.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

// Registered: a registration's outcome.
struct Registered {
  absl::Notification done;
  absl::StatusOr<Registration> result = absl::UnknownError("not run");
};

// Job: a scheduler core with replicas whose `servers` servers and one worker registered, server
// `victim` declared dead and a replacement for it registered at kNewAddress.
struct Job {
  static constexpr char kNewAddress[] = "127.0.0.1:30010";

  Job(int servers, int victim) {
    SchedulerOptions options;
    options.num_servers = servers;
    options.num_workers = 1;
    options.replicas = 2;
    core = SchedulerCore::Create(options).value();
    std::vector<std::unique_ptr<Registered>> outcomes;
    for (int who = 0; who <= servers; ++who) {
      outcomes.push_back(std::make_unique<Registered>());
      Registered* outcome = outcomes.back().get();
      const bool server = who < servers;
      core->Register(server ? NodeRole::kServer : NodeRole::kWorker, server ? who : -1,
                     server ? absl::StrCat("127.0.0.1:", 20000 + who) : "", "host", kStart,
                     [outcome](absl::StatusOr<Registration> r) {
                       outcome->result = std::move(r);
                       outcome->done.Notify();
                     });
    }
    for (auto& outcome : outcomes) {
      REQUIRE(outcome->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
      REQUIRE(outcome->result.ok());
    }
    REQUIRE(*core->failover().DeclareServerDead(victim, "killed", kStart));
    Registered joining;
    core->Register(NodeRole::kServer, victim, kNewAddress, "newhost", kStart,
                   [&joining](absl::StatusOr<Registration> r) {
                     joining.result = std::move(r);
                     joining.done.Notify();
                   });
    REQUIRE(joining.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    REQUIRE(joining.result.ok());
    joiner = *joining.result;
    REQUIRE(joiner.join_epoch > 0);
  }

  uint64_t NodeOf(int rank) const { return core->view()->servers[rank].node_id; }

  std::unique_ptr<SchedulerCore> core;
  Registration joiner;
};

// Recorder: the commands a join sends, answered as servers would; `started` gives the round
// each shard's living copy has started, and a "send" of `failing_shard` fails.
struct Recorder {
  std::map<int, int64_t> started;
  int failing_shard = -1;
  absl::Mutex mu;
  std::vector<std::string> to_shards;     // "SHARD HEAD BODY"
  std::vector<std::string> to_addresses;  // "ADDRESS BACKUP HEAD BODY"

  absl::StatusOr<std::string> ToShard(int shard, int head, const std::string& body) {
    {
      absl::MutexLock lock(&mu);
      to_shards.push_back(absl::StrCat(shard, " ", head, " ", body));
    }
    if (head == kCommandCutBegin) return absl::StrCat(started.at(shard));
    if (head == kCommandCutLimit) return std::string("limited");
    if (absl::StartsWith(body, "cut ")) return std::string("copied 10 123 4");
    if (absl::StartsWith(body, "send ")) {
      if (shard == failing_shard) return absl::UnavailableError("Socket closed");
      return std::string("sent 10");
    }
    return std::string("ended");
  }
  absl::StatusOr<std::string> ToAddress(const std::string& address, bool backup, int head,
                                        const std::string& body) {
    {
      absl::MutexLock lock(&mu);
      to_addresses.push_back(absl::StrCat(address, " ", backup ? 1 : 0, " ", head, " ", body));
    }
    if (head == kCommandPing) return std::string("pong");
    if (absl::StartsWith(body, "begin ")) return std::string("begun 10");
    return std::string("loaded 3 keys");
  }
  bool Sent(const std::vector<std::string>& log, const std::string& line) {
    absl::MutexLock lock(&mu);
    return std::find(log.begin(), log.end(), line) != log.end();
  }
};

ServerJoiner MakeJoiner(Job& job, Recorder& recorder) {
  return ServerJoiner(
      job.core.get(),
      [&recorder](int shard, int head, const std::string& body) {
        return recorder.ToShard(shard, head, body);
      },
      [&recorder](const std::string& address, bool backup, int head, const std::string& body) {
        return recorder.ToAddress(address, backup, head, body);
      },
      [](bool) {}, absl::Seconds(5));
}

TEST_CASE(
    "ServerJoiner: both copies are cut at the higher round started, and each is sent by the "
    "server holding it",
    "[scheduler][replicas]") {
  TestRng rng;
  INFO(rng.Describe());
  const int servers = static_cast<int>(rng.Int(2, 5));
  const int victim = static_cast<int>(rng.Int(0, servers - 1));
  Job job(servers, victim);
  const int previous = (victim + servers - 1) % servers;  // The shard it backs up.
  const int next = (victim + 1) % servers;                // Holds the backup of its own shard.
  Recorder recorder;
  // The two living copies have started different rounds (a round began between the freezes).
  const int64_t low = rng.Int(0, 100);
  const bool own_lower = rng.Int(0, 1) == 1;
  recorder.started = {{victim, own_lower ? low : low + 1}, {previous, own_lower ? low + 1 : low}};
  ServerJoiner joiner = MakeJoiner(job, recorder);
  REQUIRE(joiner.Join(job.joiner, Job::kNewAddress).ok());
  const uint64_t epoch = job.joiner.join_epoch;
  for (const int shard : {victim, previous}) {
    INFO("shard " << shard);
    const std::string id = absl::StrCat("join-", epoch, "-", shard);
    CHECK(recorder.Sent(recorder.to_shards,
                        absl::StrCat(shard, " ", kCommandCutLimit, " ", id, " ", low + 1)));
    CHECK(recorder.Sent(recorder.to_shards, absl::StrCat(shard, " ", kCommandCopyOut, " cut ", id,
                                                         " ", low + 1, " ", epoch)));
    const bool backup = shard == previous;
    CHECK(recorder.Sent(recorder.to_shards, absl::StrCat(shard, " ", kCommandCopyOut, " send ", id,
                                                         " ", Job::kNewAddress, " ", backup)));
    // The new server expects the copy from the server holding it: its own shard's backup on
    // the next rank, the previous shard's primary on the previous rank.
    const uint64_t holder = job.NodeOf(shard == victim ? next : previous);
    CHECK(recorder.Sent(recorder.to_addresses,
                        absl::StrCat(Job::kNewAddress, " ", backup, " ", kCommandCopyIn,
                                     " begin 10 ", holder, " 4")));
    CHECK(
        recorder.Sent(recorder.to_shards, absl::StrCat(shard, " ", kCommandCopyOut, " end ", id)));
  }
  const Routing routing = job.core->failover().routing();
  CHECK(routing.epoch == epoch);
  CHECK(routing.dead.empty());
}

TEST_CASE(
    "ServerJoiner: a copy that cannot be sent fails the join: both copies aborted, the rank "
    "dead, the view at the join's epoch",
    "[scheduler][replicas]") {
  TestRng rng;
  INFO(rng.Describe());
  const int servers = static_cast<int>(rng.Int(2, 4));
  const int victim = static_cast<int>(rng.Int(0, servers - 1));
  Job job(servers, victim);
  const int previous = (victim + servers - 1) % servers;
  Recorder recorder;
  recorder.started = {{victim, 7}, {previous, 7}};
  recorder.failing_shard = rng.Int(0, 1) == 1 ? victim : previous;
  ServerJoiner joiner = MakeJoiner(job, recorder);
  const absl::Status joined = joiner.Join(job.joiner, Job::kNewAddress);
  INFO(joined.ToString());
  CHECK(absl::IsUnavailable(joined));
  CHECK(absl::StrContains(joined.message(), absl::StrCat("shard ", recorder.failing_shard)));
  const uint64_t epoch = job.joiner.join_epoch;
  for (const int shard : {victim, previous}) {
    CHECK(recorder.Sent(recorder.to_shards, absl::StrCat(shard, " ", kCommandCopyOut, " abort ",
                                                         "join-", epoch, "-", shard)));
  }
  CHECK(!job.core->failover().join_failure(job.joiner.node_id).empty());
  const Routing routing = job.core->failover().routing();
  CHECK(routing.epoch == epoch);
  CHECK(routing.dead == std::vector<int>{victim});
}

}  // namespace
}  // namespace kvstore
