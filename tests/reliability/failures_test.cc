// Failures named where they are felt, on real processes killed with SIGKILL at random points
// (the seed is printed): a dead worker fails the others within the heartbeat timeout, naming
// it, the key and the round; every daemon of a failed job exits non-zero; kvctl shows the
// worker as failed; a lost scheduler is reported as that.
#include <catch2/catch.hpp>
#include <functional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/reliability/job.h"

namespace kvstore::testing {
namespace {

// LastRoundOk returns the last round a sum_worker printed as checked ("round R ok"), or 0.
int64_t LastRoundOk(const std::string& output) {
  static const std::regex kOk(R"(round (\d+) ok)");
  int64_t last = 0;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), kOk);
       it != std::sregex_iterator(); ++it) {
    last = std::stoll((*it)[1].str());
  }
  return last;
}

// CheckLostRounds checks a worker's DATA_LOSS message: restored at round R, the rounds lost
// are R + 1 to the last one the restarted server's predecessor acknowledged to the worker -
// its last checked round, or the one after (a push acknowledged before the pull failed).
void CheckLostRounds(const std::string& output) {
  static const std::regex kLost(
      R"(at round (\d+): the updates of rounds (\d+) to (\d+) that it had acknowledged are lost)");
  std::smatch match;
  REQUIRE(std::regex_search(output, match, kLost));
  const int64_t restored = std::stoll(match[1].str());
  const int64_t from = std::stoll(match[2].str()), to = std::stoll(match[3].str());
  const int64_t last_ok = LastRoundOk(output);
  INFO("restored " << restored << ", lost " << from << " to " << to << ", last checked "
                   << last_ok);
  CHECK(from == restored + 1);
  CHECK(to >= last_ok);
  CHECK(to <= last_ok + 1);
  CHECK(!absl::StrContains(output, "(at least)"));
}

TEST_CASE(
    "Failures: a worker killed mid-training fails the others within the heartbeat "
    "timeout, naming it",
    "[reliability][failures]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr int kWorkers = 3;
  const int victim = static_cast<int>(rng() % kWorkers);
  const int kill_after = 3 + static_cast<int>(rng() % 30);
  std::printf("killing worker %d after round %d\n", victim, kill_after);
  Job job({{}, {}}, kWorkers, {"--heartbeat_timeout=1s"});
  for (int w = 0; w < kWorkers; ++w) {
    job.AddWorker(w, {absl::StrCat(seed), "1", "100000", "2"});
  }
  REQUIRE(job.worker(victim).WaitForOutput(absl::StrCat("round ", kill_after, " ok"),
                                           absl::Seconds(60)));
  job.worker(victim).Kill();
  const absl::Time killed = absl::Now();
  // kvctl shows the dead worker as failed, and why.
  bool shown = false;
  std::string status;
  while (!shown && absl::Now() - killed < absl::Seconds(8)) {
    int code = 0;
    status = job.Kvctl({"status"}, &code);
    shown = absl::StrContains(status, absl::StrCat("worker ", victim, " failed: died"));
    if (!shown) absl::SleepFor(absl::Milliseconds(100));
  }
  INFO(status);
  CHECK(shown);
  for (int w = 0; w < kWorkers; ++w) {
    if (w == victim) continue;
    Job::ExpectExit(job.worker(w), 1);
    const absl::Duration took = absl::Now() - killed;
    const std::string output = job.worker(w).output();
    INFO("worker " << w << " failed " << took << " after the kill:\n" << output);
    // Within the heartbeat timeout (1 s) and the time to hear of it, not the RPC deadline.
    CHECK(took < absl::Seconds(6));
    CHECK(absl::StrContains(output, absl::StrCat("worker ", victim, " (node ")));
    CHECK(absl::StrContains(output, "has sent no heartbeat for"));
    CHECK(absl::StrContains(output, "it is dead"));
    CHECK(absl::StrContains(output, "dist_sync round "));
    CHECK(absl::StrContains(output, "key "));
  }
  for (int s = 0; s < 2; ++s) {
    Job::ExpectExit(job.server(s), 1);
    CHECK(absl::StrContains(job.server(s).output(), absl::StrCat("worker ", victim, " (node ")));
  }
  Job::ExpectExit(job.scheduler(), 1);
  CHECK(absl::StrContains(job.scheduler().output(), "the job failed"));
}

TEST_CASE("Failures: a worker whose last wait failed finishes as failed; every daemon exits 1",
          "[reliability][failures]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  const int kill_after = 3 + static_cast<int>(rng() % 20);
  // A server dies (no replicas): the workers' pushes fail naming it; each worker finishes as
  // failed, so the job fails and every daemon still running exits non-zero.
  Job job({{}, {}}, 2, {"--heartbeat_timeout=inf"});
  for (int w = 0; w < 2; ++w) job.AddWorker(w, {absl::StrCat(seed), "1", "100000", "2"});
  REQUIRE(
      job.worker(0).WaitForOutput(absl::StrCat("round ", kill_after, " ok"), absl::Seconds(60)));
  job.server(1).Kill();
  for (int w = 0; w < 2; ++w) {
    Job::ExpectExit(job.worker(w), 1);
    INFO(job.worker(w).output());
    CHECK(absl::StrContains(job.worker(w).output(), "server 1 at 127.0.0.1:"));
  }
  Job::ExpectExit(job.server(0), 1);
  CHECK(absl::StrContains(job.server(0).output(), "failed: "));
  Job::ExpectExit(job.scheduler(), 1);
  INFO(job.scheduler().output());
  CHECK(absl::StrContains(job.scheduler().output(), "the job failed: worker "));
  CHECK(absl::StrContains(job.scheduler().output(), "server 1 at 127.0.0.1:"));
}

TEST_CASE("Failures: a scheduler killed mid-training is reported as lost by servers and workers",
          "[reliability][failures]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  const int kill_after = 3 + static_cast<int>(rng() % 20);
  Job job({{"--scheduler_lost_timeout=2s"}, {"--scheduler_lost_timeout=2s"}}, 2);
  for (int w = 0; w < 2; ++w) job.AddWorker(w, {absl::StrCat(seed), "1", "100000", "2"});
  REQUIRE(
      job.worker(1).WaitForOutput(absl::StrCat("round ", kill_after, " ok"), absl::Seconds(60)));
  job.scheduler().Kill();
  for (int s = 0; s < 2; ++s) {
    Job::ExpectExit(job.server(s), 1);
    CHECK(absl::StrContains(job.server(s).output(), "lost the scheduler"));
  }
  for (int w = 0; w < 2; ++w) {
    Job::ExpectExit(job.worker(w), 1);
    INFO(job.worker(w).output());
    CHECK(absl::StrContains(job.worker(w).output(), "the scheduler is lost"));
  }
}

// RestartIntoRunningJob trains two workers on two kvservers (no replicas) with scheduler flags
// `scheduler_args`, takes a checkpoint, trains on, kills server 1 and, `delay` later, starts it
// again with --restore. `after_restart` runs once the new one serves. Then every restart must
// give the same: the new server acknowledges nothing on the restored values; each worker
// exits 1 with DATA_LOSS naming the server and the true range of rounds lost; the job fails,
// naming a worker, and every daemon exits non-zero.
void RestartIntoRunningJob(const std::string& name, std::vector<std::string> scheduler_args,
                           absl::Duration delay,
                           const std::function<void(Job&, Process&)>& after_restart) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  const int checkpoint_after = 3 + static_cast<int>(rng() % 10);
  const int more = 2 + static_cast<int>(rng() % 10);
  const std::string base = FreshDirectory(name);
  const std::vector<std::string> roots = {base + "/root0", base + "/root1"};
  Job job({{"--checkpoint_root=" + roots[0]}, {"--checkpoint_root=" + roots[1]}}, 2,
          std::move(scheduler_args));
  for (int w = 0; w < 2; ++w) job.AddWorker(w, {absl::StrCat(seed), "1", "100000", "5", "8"});
  REQUIRE(job.worker(0).WaitForOutput(absl::StrCat("round ", checkpoint_after, " ok"),
                                      absl::Seconds(60)));
  int code = 0;
  const std::string written = job.Kvctl({"checkpoint", "ck"}, &code);
  INFO(written);
  REQUIRE(code == 0);
  REQUIRE(job.worker(0).WaitForOutput(absl::StrCat("round ", checkpoint_after + more, " ok"),
                                      absl::Seconds(60)));
  job.server(1).Kill();
  absl::SleepFor(delay);
  Process& restarted = job.StartServer(1, {"--checkpoint_root=" + roots[1], "--restore=ck"});
  REQUIRE(restarted.WaitForOutput("serving", absl::Seconds(20)));
  after_restart(job, restarted);
  for (int w = 0; w < 2; ++w) {
    Job::ExpectExit(job.worker(w), 1);
    const std::string output = job.worker(w).output();
    INFO(output);
    CHECK(absl::StrContains(output, "DATA_LOSS"));
    CHECK(absl::StrContains(output, "server 1 (was 127.0.0.1:"));
    CHECK(absl::StrContains(output, "died and was restarted from checkpoint"));
    CheckLostRounds(output);
  }
  // The restarted server acknowledged nothing on the restored values.
  CHECK(absl::StrContains(restarted.output(), "refuses every data request"));
  // The workers finished as failed: the job failed, and every daemon exits non-zero.
  Job::ExpectExit(job.server(0), 1);
  Job::ExpectExit(restarted, 1);
  Job::ExpectExit(job.scheduler(), 1);
  INFO(job.scheduler().output());
  CHECK(absl::StrContains(job.scheduler().output(), "the job failed: worker "));
  CHECK(!absl::StrContains(job.scheduler().output(), "every worker finished"));
}

TEST_CASE(
    "Failures: a kvserver killed and restarted with --restore rejoins the running job; "
    "the workers are told DATA_LOSS naming it and the rounds lost",
    "[reliability][failures][rejoin]") {
  // Heartbeats every 100 ms: 500 ms later the old process has long counted as dead.
  RestartIntoRunningJob("rejoin", {"--heartbeat_timeout=inf"}, absl::Milliseconds(500),
                        [](Job&, Process&) {});
}

TEST_CASE(
    "Failures: a kvserver restarted at once (as systemd does) waits for its old process "
    "to count as dead, takes its rank, and the job fails everywhere with the true rounds "
    "lost",
    "[reliability][failures][rejoin]") {
  // Heartbeats every second: the old process counts as dead after 2 s of silence, and the
  // restart comes well before that.
  RestartIntoRunningJob(
      "restart", {"--heartbeat_timeout=inf", "--heartbeat_interval=1s"}, absl::ZeroDuration(),
      [](Job& job, Process& restarted) {
        INFO(job.scheduler().output());
        INFO(restarted.output());
        CHECK(!absl::StrContains(restarted.output(), "already has all"));
        CHECK(job.scheduler().WaitForOutput("waiting up to", absl::Seconds(10)));
        CHECK(job.scheduler().WaitForOutput("takes server rank 1", absl::Seconds(10)));
      });
}

}  // namespace
}  // namespace kvstore::testing
