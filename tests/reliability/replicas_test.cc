// Replicas (scheduler --replicas=2) on real processes: a kvserver killed with SIGKILL at a
// random moment of dist_sync training (the seed is printed) loses no acknowledged update - every
// worker's every pull equals the float64 reference of a run without the kill - and stalls the
// workers for well under a second; the job then ends as a success. Both copies of a shard
// dead fails the job, naming the shard.
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/core/checkpoint_root.h"
#include "server/core/checkpoint_set.h"
#include "tests/reliability/job.h"

namespace kvstore::testing {
namespace {

// LongestRound reads sum_worker's "longest round: T ms" line (-1 when absent).
int64_t LongestRound(const std::string& output) {
  const size_t at = output.rfind("longest round: ");
  int64_t ms = -1;
  if (at == std::string::npos) return ms;
  const size_t start = at + std::string("longest round: ").size();
  if (!absl::SimpleAtoi(output.substr(start, output.find(" ms", start) - start), &ms)) return -1;
  return ms;
}

// ExpectExactTraining requires every worker to exit 0 having checked every round's pull
// against the reference (sum_worker exits 1 otherwise), no round stalled for a second or more.
void ExpectExactTraining(Job& job, int workers, int rounds) {
  for (int w = 0; w < workers; ++w) {
    Job::ExpectExit(job.worker(w), 0);
    const std::string output = job.worker(w).output();
    INFO("worker " << w << ":\n" << output);
    CHECK(absl::StrContains(output, absl::StrCat("rounds 1..", rounds, " checked")));
    const int64_t longest = LongestRound(output);
    std::printf("worker %d: longest round %lld ms\n", w, static_cast<long long>(longest));
    CHECK(longest >= 0);
    CHECK(longest < 1000);
  }
}

void KillOneServer(int servers) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr int kWorkers = 3;
  constexpr int kRounds = 200;
  const int victim = static_cast<int>(rng() % servers);
  const int kill_after = 3 + static_cast<int>(rng() % 30);
  const int delay_us = static_cast<int>(rng() % 20000);
  std::printf("%d servers: killing server %d %d us after round %d\n", servers, victim, delay_us,
              kill_after);
  Job job(std::vector<std::vector<std::string>>(servers), kWorkers, {"--replicas=2"});
  for (int w = 0; w < kWorkers; ++w) {
    job.AddWorker(w, {absl::StrCat(seed), "1", absl::StrCat(kRounds), "5"});
  }
  REQUIRE(
      job.worker(0).WaitForOutput(absl::StrCat("round ", kill_after, " ok"), absl::Seconds(60)));
  absl::SleepFor(absl::Microseconds(delay_us));
  job.server(victim).Kill();
  // kvctl shows the server as failed, and why, while the job trains on.
  const absl::Time killed = absl::Now();
  bool shown = false;
  std::string status;
  while (!shown && absl::Now() - killed < absl::Seconds(5)) {
    int code = 0;
    status = job.Kvctl({"status"}, &code);
    shown = absl::StrContains(status, absl::StrCat("server ", victim, " failed: declared dead: "));
  }
  INFO(status);
  CHECK(shown);
  ExpectExactTraining(job, kWorkers, kRounds);
  for (int s = 0; s < servers; ++s) {
    if (s != victim) Job::ExpectExit(job.server(s), 0);
  }
  Job::ExpectExit(job.scheduler(), 0);
  INFO(job.scheduler().output());
  CHECK(absl::StrContains(job.scheduler().output(), absl::StrCat("server ", victim, " is dead")));
}

TEST_CASE("Replicas: a kvserver of 2 killed at a random moment loses no acknowledged update",
          "[reliability][replicas]") {
  KillOneServer(2);
}

TEST_CASE("Replicas: a kvserver of 3 killed at a random moment loses no acknowledged update",
          "[reliability][replicas]") {
  KillOneServer(3);
}

// LastRound returns the last round sum_worker printed "round R ok" for (0: none).
int64_t LastRound(const std::string& output) {
  const size_t found = output.rfind("\nround ");
  if (found == std::string::npos) return 0;
  const size_t start = found + 7;
  int64_t round = 0;
  const size_t end = output.find(' ', start);
  if (end == std::string::npos || !absl::SimpleAtoi(output.substr(start, end - start), &round)) {
    return 0;
  }
  return round;
}

// ReplaceOneServer kills a random kvserver, starts a replacement for its rank, which joins
// the running job and copies its shards from the survivors, then kills the server that held
// the other copy of the replaced server's own shard: from then on that shard lives only on the
// replacement (with 2 servers, both shards do). No acknowledged update may be lost.
void ReplaceOneServer(int servers) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr int kWorkers = 3;
  constexpr int kRounds = 500;
  const int victim = static_cast<int>(rng() % servers);
  const int second = (victim + 1) % servers;  // Held the other copy of the victim's shard.
  const int kill_after = 3 + static_cast<int>(rng() % 20);
  std::printf(
      "%d servers: killing server %d after round %d, replacing it, then killing "
      "server %d\n",
      servers, victim, kill_after, second);
  Job job(std::vector<std::vector<std::string>>(servers), kWorkers, {"--replicas=2"});
  for (int w = 0; w < kWorkers; ++w) {
    job.AddWorker(w, {absl::StrCat(seed), "1", absl::StrCat(kRounds), "5"});
  }
  REQUIRE(
      job.worker(0).WaitForOutput(absl::StrCat("round ", kill_after, " ok"), absl::Seconds(60)));
  job.server(victim).Kill();
  REQUIRE(job.scheduler().WaitForOutput(absl::StrCat("server ", victim, " is dead"),
                                        absl::Seconds(10)));
  job.StartServer(victim, {});
  const std::string joined = absl::StrCat("join: server ", victim, " at ");
  INFO(job.scheduler().output());
  REQUIRE(job.scheduler().WaitForOutput("serves shards", absl::Seconds(30)));
  {
    const std::string log = job.scheduler().output();
    const size_t line = log.rfind('\n', log.find("serves shards"));
    std::printf("%s\n", log.substr(line + 1, log.find('\n', line + 1) - line - 1).c_str());
  }
  CHECK(absl::StrContains(job.scheduler().output(), joined));
  CHECK_FALSE(absl::StrContains(job.scheduler().output(), "could not join"));
  // kvctl shows the rank alive again, at the replacement's address.
  int code = 0;
  const std::string status = job.Kvctl({"status"}, &code);
  INFO(status);
  CHECK(code == 0);
  CHECK_FALSE(absl::StrContains(status, absl::StrCat("server ", victim, " failed")));
  // The other copy of the victim's shard goes: the replacement's copy is all that is left.
  absl::SleepFor(absl::Milliseconds(100));
  const int64_t round_at_kill = LastRound(job.worker(0).output());
  std::printf("killing server %d after round %lld\n", second,
              static_cast<long long>(round_at_kill));
  REQUIRE(round_at_kill < kRounds - 50);  // Training still has far to go.
  job.server(second).Kill();
  REQUIRE(job.scheduler().WaitForOutput(absl::StrCat("server ", second, " is dead"),
                                        absl::Seconds(10)));
  ExpectExactTraining(job, kWorkers, kRounds);
  for (int s = 0; s < servers; ++s) {
    if (s != second) Job::ExpectExit(job.server(s), 0);
  }
  Job::ExpectExit(job.scheduler(), 0);
}

TEST_CASE(
    "Replicas: with a table, a kvserver of 3 killed, replaced, and the other copy of its shard "
    "killed: every pull of the table matches the reference",
    "[reliability][replicas][tables]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr int kServers = 3, kWorkers = 2, kRounds = 500;
  const int victim = static_cast<int>(rng() % kServers);
  const int second = (victim + 1) % kServers;
  const int kill_after = 3 + static_cast<int>(rng() % 20);
  std::printf("tables: killing server %d after round %d, replacing it, then killing server %d\n",
              victim, kill_after, second);
  Job job(std::vector<std::vector<std::string>>(kServers), kWorkers, {"--replicas=2"});
  for (int w = 0; w < kWorkers; ++w) {
    job.AddWorker(w,
                  {"tables", "dist_sync", absl::StrCat(seed), "1", absl::StrCat(kRounds),
                   absl::StrCat(kServers), "pause=10"},
                  "tests/integration/test_worker");
  }
  REQUIRE(job.worker(0).WaitForOutput(absl::StrCat("tables: round ", kill_after, " ok"),
                                      absl::Seconds(60)));
  job.server(victim).Kill();
  REQUIRE(job.scheduler().WaitForOutput(absl::StrCat("server ", victim, " is dead"),
                                        absl::Seconds(10)));
  job.StartServer(victim, {});
  INFO(job.scheduler().output());
  REQUIRE(job.scheduler().WaitForOutput("serves shards", absl::Seconds(30)));
  absl::SleepFor(absl::Milliseconds(300));
  job.server(second).Kill();
  REQUIRE(job.scheduler().WaitForOutput(absl::StrCat("server ", second, " is dead"),
                                        absl::Seconds(10)));
  for (int w = 0; w < kWorkers; ++w) {
    Job::ExpectExit(job.worker(w), 0);
    CHECK(absl::StrContains(job.worker(w).output(),
                            absl::StrCat("tables: ", kRounds, " rounds checked")));
  }
  for (int s = 0; s < kServers; ++s) {
    if (s != second) Job::ExpectExit(job.server(s), 0);
  }
  Job::ExpectExit(job.scheduler(), 0);
}

TEST_CASE(
    "Replicas: a replacement kvserver of 2 takes a dead server's rank back and holds "
    "its shards",
    "[reliability][replicas]") {
  ReplaceOneServer(2);
}

TEST_CASE(
    "Replicas: a replacement kvserver of 3 takes a dead server's rank back and holds "
    "its shards",
    "[reliability][replicas]") {
  ReplaceOneServer(3);
}

TEST_CASE(
    "Replicas: a replacement kvserver killed (SIGKILL) while it joins leaves nothing "
    "half-published: the job goes on on the other copies, exact",
    "[reliability][replicas]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr int kServers = 3, kWorkers = 3, kRounds = 300;
  const int victim = static_cast<int>(rng() % kServers);
  const int kill_after = 3 + static_cast<int>(rng() % 15);
  const absl::Duration into_join = absl::Milliseconds(rng() % 40);
  Job job(std::vector<std::vector<std::string>>(kServers), kWorkers, {"--replicas=2"});
  for (int w = 0; w < kWorkers; ++w) {
    job.AddWorker(w, {absl::StrCat(seed), "1", absl::StrCat(kRounds), "5"});
  }
  REQUIRE(
      job.worker(0).WaitForOutput(absl::StrCat("round ", kill_after, " ok"), absl::Seconds(60)));
  job.server(victim).Kill();
  REQUIRE(job.scheduler().WaitForOutput(absl::StrCat("server ", victim, " is dead"),
                                        absl::Seconds(10)));
  Process& replacement = job.StartServer(victim, {});
  REQUIRE(replacement.WaitForOutput("replaces a dead server", absl::Seconds(20)));
  absl::SleepFor(into_join);
  replacement.Kill();
  const bool published = absl::StrContains(job.scheduler().output(), "serves shards");
  std::printf("server %d killed after round %d; its replacement killed %lld ms into its join, %s\n",
              victim, kill_after, static_cast<long long>(absl::ToInt64Milliseconds(into_join)),
              published ? "after the join was published" : "before the join was published");
  ExpectExactTraining(job, kWorkers, kRounds);
  for (int s = 0; s < kServers; ++s) {
    if (s != victim) Job::ExpectExit(job.server(s), 0);
  }
  Job::ExpectExit(job.scheduler(), 0);
  // Either the join failed, named, or the published replacement was found dead again (the
  // rank declared dead a second time).
  const std::string log = job.scheduler().output();
  INFO(log);
  const std::string dead = absl::StrCat("server ", victim, " is dead");
  const size_t first = log.find(dead);
  const bool dead_again =
      first != std::string::npos && log.find(dead, first + dead.size()) != std::string::npos;
  CHECK((absl::StrContains(log, "could not join") || dead_again));
}

TEST_CASE("Replicas: both copies of a shard dead fails the job, naming the shard",
          "[reliability][replicas]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  const int first = static_cast<int>(rng() % 3);
  const int second = (first + 1) % 3;  // Holds the backup of `first`'s shard.
  const int kill_after = 3 + static_cast<int>(rng() % 20);
  Job job({{}, {}, {}}, 2, {"--replicas=2"});
  for (int w = 0; w < 2; ++w) job.AddWorker(w, {absl::StrCat(seed), "1", "100000", "5"});
  REQUIRE(
      job.worker(0).WaitForOutput(absl::StrCat("round ", kill_after, " ok"), absl::Seconds(60)));
  job.server(first).Kill();
  REQUIRE(
      job.scheduler().WaitForOutput(absl::StrCat("server ", first, " is dead"), absl::Seconds(10)));
  job.server(second).Kill();
  for (int w = 0; w < 2; ++w) {
    Job::ExpectExit(job.worker(w), 1);
    INFO(job.worker(w).output());
    CHECK(absl::StrContains(job.worker(w).output(), absl::StrCat("shard ", first)));
  }
  const int survivor = 3 - first - second;
  Job::ExpectExit(job.server(survivor), 1);
  Job::ExpectExit(job.scheduler(), 1);
  INFO(job.scheduler().output());
  CHECK(absl::StrContains(job.scheduler().output(),
                          absl::StrCat("shard ", first, " is lost: both its copies are dead")));
}

TEST_CASE(
    "Replicas: a checkpoint after a failover writes the dead server's shard from its "
    "backup; restored, training goes on exactly",
    "[reliability][replicas]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr int kServers = 3, kWorkers = 2;
  const int victim = static_cast<int>(rng() % kServers);
  const int kill_after = 3 + static_cast<int>(rng() % 20);
  std::printf("killing server %d after round %d\n", victim, kill_after);
  const std::string root = FreshDirectory("replicas-checkpoint");
  const std::vector<std::string> server_args = {"--checkpoint_root=" + root};
  int64_t round = 0;
  {
    Job job(std::vector<std::vector<std::string>>(kServers, server_args), kWorkers,
            {"--replicas=2"});
    for (int w = 0; w < kWorkers; ++w) {
      job.AddWorker(w, {absl::StrCat(seed), "1", "100000", "2"});
    }
    REQUIRE(
        job.worker(0).WaitForOutput(absl::StrCat("round ", kill_after, " ok"), absl::Seconds(60)));
    job.server(victim).Kill();
    REQUIRE(job.scheduler().WaitForOutput(absl::StrCat("server ", victim, " is dead"),
                                          absl::Seconds(10)));
    int code = 0;
    const std::string written = job.Kvctl({"checkpoint", "after"}, &code);
    INFO(written);
    REQUIRE(code == 0);
    job.Kvctl({"shutdown"}, &code);
    for (int s = 0; s < kServers; ++s) {
      if (s != victim) Job::ExpectExit(job.server(s), 0);
    }
  }
  absl::StatusOr<std::shared_ptr<const CheckpointRoot>> opened = CheckpointRoot::Open(root);
  REQUIRE(opened.ok());
  absl::StatusOr<ConfinedDirectory> directory = (*opened)->OpenDirectory("after", false);
  REQUIRE(directory.ok());
  for (int s = 0; s < kServers; ++s) {
    absl::StatusOr<VerifiedSet> set =
        VerifyCheckpointSet(*directory, s, kServers, "dist_sync", kChunkBytes);
    INFO(set.status().ToString());
    REQUIRE(set.ok());
    round = set->manifest.round();
  }
  REQUIRE(round >= kill_after);
  // A new job with replicas restores the set (each server its shard and its backup) and goes
  // on from round + 1; every pull is checked against the reference by the workers.
  std::vector<std::string> restore_args = server_args;
  restore_args.push_back("--restore=after");
  Job job(std::vector<std::vector<std::string>>(kServers, restore_args), kWorkers,
          {"--replicas=2"});
  for (int w = 0; w < kWorkers; ++w) {
    job.AddWorker(w, {absl::StrCat(seed), absl::StrCat(round + 1), absl::StrCat(round + 10)});
  }
  for (int w = 0; w < kWorkers; ++w) Job::ExpectExit(job.worker(w), 0);
  for (int s = 0; s < kServers; ++s) Job::ExpectExit(job.server(s), 0);
  Job::ExpectExit(job.scheduler(), 0);
}

}  // namespace
}  // namespace kvstore::testing
