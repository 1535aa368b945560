// The scheduler killed (SIGKILL) at a random moment of dist_sync training and started again in
// place - the same flags, the same port, as systemd's Restart=on-failure does: the kvservers
// register again, the scheduler re-forms the job from them, and training goes on. Every worker
// checks every pull against the float64 reference (sum_worker); every process must exit 0.
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/reliability/job.h"

namespace kvstore::testing {
namespace {

// LongestRound reads "longest round: T ms" from a worker's output (-1: not there).
int64_t LongestRound(const std::string& output) {
  const size_t at = output.rfind("longest round: ");
  if (at == std::string::npos) return -1;
  int64_t ms = -1;
  const std::string rest = output.substr(at + 15);
  if (!absl::SimpleAtoi(rest.substr(0, rest.find(' ')), &ms)) return -1;
  return ms;
}

struct RestartCase {
  int servers = 2;
  int workers = 3;
  std::vector<std::string> scheduler_args;
  // Worker arguments after SEED FIRST LAST PAUSE_MS.
  std::vector<std::string> worker_args;
  int64_t rounds = 60;
  // The output line of worker 0 the kill waits for ("round N ok" when empty).
  std::string kill_at;
};

// KillAndRestart trains, kills the scheduler at a random round (or at `kill_at`), restarts it
// after a random delay, and requires the job to finish exact with every process exiting 0.
void KillAndRestart(const RestartCase& c) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  const int kill_after = 3 + static_cast<int>(rng() % 25);
  const absl::Duration delay = absl::Milliseconds(rng() % 1500);
  std::vector<std::vector<std::string>> server_args(c.servers);
  for (auto& args : server_args) args.push_back("--scheduler_lost_timeout=20s");
  Job job(server_args, c.workers, c.scheduler_args);
  for (int w = 0; w < c.workers; ++w) {
    std::vector<std::string> args = {absl::StrCat(seed), "1", absl::StrCat(c.rounds), "20"};
    args.insert(args.end(), c.worker_args.begin(), c.worker_args.end());
    job.AddWorker(w, args);
  }
  const std::string kill_at =
      c.kill_at.empty() ? absl::StrCat("round ", kill_after, " ok") : c.kill_at;
  REQUIRE(job.worker(0).WaitForOutput(kill_at, absl::Seconds(60)));
  job.scheduler().Kill();
  const absl::Time killed = absl::Now();
  std::printf("scheduler killed at \"%s\" of worker 0; restarted %lld ms later\n", kill_at.c_str(),
              static_cast<long long>(absl::ToInt64Milliseconds(delay)));
  absl::SleepFor(delay);
  Process& restarted = job.RestartScheduler();
  REQUIRE(restarted.WaitForOutput("re-formed the running job", absl::Seconds(30)));
  std::printf("job re-formed %lld ms after the kill\n",
              static_cast<long long>(absl::ToInt64Milliseconds(absl::Now() - killed)));
  int64_t longest = 0;
  for (int w = 0; w < c.workers; ++w) {
    Job::ExpectExit(job.worker(w), 0);
    const std::string output = job.worker(w).output();
    CHECK(absl::StrContains(output, absl::StrCat("rounds 1..", c.rounds, " checked")));
    longest = std::max(longest, LongestRound(output));
  }
  std::printf("longest round of any worker: %lld ms (the scheduler was away for %lld ms)\n",
              static_cast<long long>(longest),
              static_cast<long long>(absl::ToInt64Milliseconds(delay)));
  for (int s = 0; s < c.servers; ++s) {
    Job::ExpectExit(job.server(s), 0);
    CHECK(absl::StrContains(job.server(s).output(), "registered again with the scheduler"));
  }
  Job::ExpectExit(restarted, 0);
  INFO(restarted.output());
  CHECK(absl::StrContains(restarted.output(), "every worker finished"));
}

TEST_CASE(
    "Scheduler restart: killed at a random round of dist_sync training and started again in "
    "place, the job re-forms and finishes exact, every process exiting 0",
    "[reliability][scheduler_restart]") {
  KillAndRestart(RestartCase{});
}

TEST_CASE(
    "Scheduler restart: with barriers every round, a scheduler killed and restarted passes "
    "each barrier once",
    "[reliability][scheduler_restart]") {
  RestartCase c;
  c.worker_args = {"barrier_every=1"};
  c.rounds = 40;
  KillAndRestart(c);
}

TEST_CASE("Scheduler restart: with replicas (3 servers), the job re-forms and finishes exact",
          "[reliability][scheduler_restart]") {
  RestartCase c;
  c.servers = 3;
  c.scheduler_args = {"--replicas=2"};
  KillAndRestart(c);
}

}  // namespace
}  // namespace kvstore::testing
