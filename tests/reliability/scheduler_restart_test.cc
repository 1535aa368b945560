// The scheduler killed (SIGKILL) at a random moment of dist_sync training and started again in
// place - the same flags, the same port, as systemd's Restart=on-failure does: the kvservers
// register again, the scheduler re-forms the job from them, and training goes on. Every worker
// checks every pull against the float64 reference (sum_worker); every process must exit 0.
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/state_file.h"
#include "proto/kvstore.pb.h"
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

// CheckPeriodicSets checks each server's root after a job with periodic checkpoints (every
// round, the last 2 kept) whose scheduler was restarted: nothing half written is left (no
// pending file), exactly the 2 newest sets remain, numbered on from the sets before the restart
// (ckpt-N holds checkpoint JOB-N, consecutive, above `before_kill` + 1: the newest set when the
// scheduler was killed, and one it may have been writing), all of one job, each listing every
// server.
// NewestSet returns the highest N of the ckpt-N directories in server 0's root (0: none).
int64_t NewestSet(const std::string& base) {
  int64_t newest = 0;
  const std::filesystem::path dir = std::filesystem::path(base) / "0" / "checkpoints";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    int64_t n = 0;
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "ckpt-") && absl::SimpleAtoi(name.substr(5), &n)) {
      newest = std::max(newest, n);
    }
  }
  return newest;
}

void CheckPeriodicSets(const std::string& base, int servers, int64_t before_kill, Job* job) {
  std::string job_id;
  for (int s = 0; s < servers; ++s) {
    const std::filesystem::path root = std::filesystem::path(base) / std::to_string(s);
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
      INFO(entry.path().string());
      CHECK(!absl::EndsWith(entry.path().string(), ".pending"));
    }
    std::map<int64_t, std::string> sets;  // Number -> checkpoint id.
    for (const auto& entry : std::filesystem::directory_iterator(root / "checkpoints")) {
      const std::string name = entry.path().filename().string();
      int64_t n = 0;
      REQUIRE(absl::StartsWith(name, "ckpt-"));
      REQUIRE(absl::SimpleAtoi(name.substr(5), &n));
      const absl::StatusOr<std::string> payload =
          ReadStateFile((entry.path() / "MANIFEST").string(), StateKind::kCheckpointManifest);
      INFO(payload.status().ToString());
      REQUIRE(payload.ok());
      proto::CheckpointManifest manifest;
      REQUIRE(manifest.ParseFromString(*payload));
      CHECK(manifest.files_size() == servers);
      CHECK(std::filesystem::exists(entry.path() / absl::StrCat("server-", s, ".ckpt")));
      if (job_id.empty()) job_id = manifest.job_id();
      CHECK(manifest.job_id() == job_id);
      sets[n] = manifest.checkpoint_id();
    }
    REQUIRE(sets.size() == 2);
    const int64_t newest = sets.rbegin()->first;
    // Numbered on from the sets before the kill (a restart from 1 would be at most as high).
    CHECK(newest > before_kill + 1);
    CHECK(sets.begin()->first == newest - 1);
    for (const auto& [n, id] : sets) CHECK(id == absl::StrCat(job_id, "-", n));
    std::printf("server %d keeps ckpt-%06lld and the one before (job %s)\n", s,
                static_cast<long long>(newest), job_id.c_str());
    if (absl::StrContains(job->server(s).output(), "left half done")) {
      std::printf("server %d ended a checkpoint the lost scheduler left half done\n", s);
    }
  }
}

struct RestartCase {
  // A name for the servers' checkpoint roots; empty: none.
  std::string roots;
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
  const std::string base = c.roots.empty() ? "" : FreshDirectory(c.roots);
  for (int s = 0; s < c.servers; ++s) {
    server_args[s].push_back("--scheduler_lost_timeout=20s");
    if (!base.empty()) server_args[s].push_back(absl::StrCat("--checkpoint_root=", base, "/", s));
  }
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
  const int64_t sets_before = base.empty() ? 0 : NewestSet(base);
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
  if (!base.empty()) {
    std::printf("newest set when the scheduler was killed: ckpt-%06lld\n",
                static_cast<long long>(sets_before));
    CheckPeriodicSets(base, c.servers, sets_before, &job);
  }
}

TEST_CASE(
    "Scheduler restart: after a server joined the running job, a scheduler killed and restarted "
    "re-forms it with 3 servers and it finishes exact",
    "[reliability][scheduler_restart]") {
  const uint64_t seed = TestSeed();
  Job job({{"--scheduler_lost_timeout=20s"}, {"--scheduler_lost_timeout=20s"}}, 3, {});
  for (int w = 0; w < 3; ++w) job.AddWorker(w, {absl::StrCat(seed), "1", "60", "20"});
  REQUIRE(job.worker(0).WaitForOutput("round 5 ok", absl::Seconds(60)));
  Process& joined = job.StartServer(2, {"--join", "--scheduler_lost_timeout=20s"});
  REQUIRE(job.scheduler().WaitForOutput("rescale published at view epoch 1", absl::Seconds(60)));
  const bool trained = job.worker(0).WaitForOutput("round 15 ok", absl::Seconds(60));
  INFO(job.worker(0).output() << "\n" << job.worker(1).output() << "\n" << joined.output());
  REQUIRE(trained);
  job.scheduler().Kill();
  Process& restarted = job.RestartScheduler();
  INFO(restarted.output());
  REQUIRE(restarted.WaitForOutput("re-formed the running job", absl::Seconds(30)));
  for (int w = 0; w < 3; ++w) {
    Job::ExpectExit(job.worker(w), 0);
    CHECK(absl::StrContains(job.worker(w).output(), "rounds 1..60 checked"));
  }
  for (int s = 0; s < 2; ++s) Job::ExpectExit(job.server(s), 0);
  Job::ExpectExit(joined, 0);
  Job::ExpectExit(restarted, 0);
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

TEST_CASE(
    "Scheduler restart: periodic checkpoints every round, the scheduler killed at any moment of "
    "one: nothing half written is left, and the sets go on numbered from before",
    "[reliability][scheduler_restart]") {
  RestartCase c;
  c.roots = "scheduler-restart-sets";
  c.rounds = 200;  // Training goes on while the scheduler is away: sets are cut after it too.
  c.scheduler_args = {"--checkpoint_every=1", "--checkpoint_keep=2"};
  KillAndRestart(c);
}

TEST_CASE(
    "Scheduler restart: in an elastic job a worker left, then the scheduler is killed and "
    "restarted: the re-formed job remembers who left, and the others finish exact",
    "[reliability][scheduler_restart]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr int kWorkers = 3;
  const int victim = static_cast<int>(rng() % kWorkers);
  const int kill_after = 3 + static_cast<int>(rng() % 10);
  Job job({{"--scheduler_lost_timeout=20s"}, {"--scheduler_lost_timeout=20s"}}, kWorkers,
          {"--heartbeat_timeout=1s", "--elastic"});
  for (int w = 0; w < kWorkers; ++w) {
    job.AddWorker(w, {absl::StrCat(seed), "1", "60", "50", absl::StrCat("elastic=", victim, ":-")});
  }
  REQUIRE(job.worker(victim).WaitForOutput(absl::StrCat("round ", kill_after, " ok"),
                                           absl::Seconds(60)));
  job.worker(victim).Kill();
  REQUIRE(job.scheduler().WaitForOutput("has left the job", absl::Seconds(20)));
  // Once the servers have heard it (a worker that leaves while the scheduler is away is
  // noticed again after the re-forming, by its silence).
  for (int s = 0; s < 2; ++s) {
    REQUIRE(job.server(s).WaitForOutput("have left the job", absl::Seconds(5)));
  }
  job.scheduler().Kill();
  std::printf("worker %d killed after round %d; the scheduler killed once it had left\n", victim,
              kill_after);
  absl::SleepFor(absl::Milliseconds(rng() % 1000));
  Process& restarted = job.RestartScheduler();
  REQUIRE(restarted.WaitForOutput("re-formed the running job", absl::Seconds(30)));
  CHECK(restarted.WaitForOutput("0 finished, 1 left", absl::Seconds(1)));
  int code = 0;
  const std::string status = job.Kvctl({"status"}, &code);
  INFO(status);
  CHECK(code == 0);
  CHECK(absl::StrContains(status, "left"));
  for (int w = 0; w < kWorkers; ++w) {
    if (w == victim) continue;
    Job::ExpectExit(job.worker(w), 0);
    CHECK(absl::StrContains(job.worker(w).output(), "rounds 1..60 checked"));
  }
  for (int s = 0; s < 2; ++s) Job::ExpectExit(job.server(s), 0);
  Job::ExpectExit(restarted, 0);
  CHECK(absl::StrContains(restarted.output(), "every remaining worker finished"));
}

TEST_CASE(
    "Scheduler restart: killed while a replacement kvserver joins (replicas, 3 servers): the "
    "join is finished or aborted, never half-published, and training ends exact",
    "[reliability][scheduler_restart]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr int kWorkers = 3;
  constexpr int kServers = 3;
  const int victim = static_cast<int>(rng() % kServers);
  const int kill_after = 3 + static_cast<int>(rng() % 15);
  const absl::Duration into_join = absl::Milliseconds(rng() % 60);
  std::vector<std::vector<std::string>> server_args(kServers, {"--scheduler_lost_timeout=20s"});
  Job job(server_args, kWorkers, {"--replicas=2"});
  for (int w = 0; w < kWorkers; ++w) {
    job.AddWorker(w, {absl::StrCat(seed), "1", "300", "5"});
  }
  REQUIRE(
      job.worker(0).WaitForOutput(absl::StrCat("round ", kill_after, " ok"), absl::Seconds(60)));
  job.server(victim).Kill();
  REQUIRE(job.scheduler().WaitForOutput(absl::StrCat("server ", victim, " is dead"),
                                        absl::Seconds(10)));
  Process& replacement = job.StartServer(victim, {"--scheduler_lost_timeout=20s"});
  REQUIRE(replacement.WaitForOutput("replaces a dead server", absl::Seconds(20)));
  absl::SleepFor(into_join);
  job.scheduler().Kill();
  const bool published = absl::StrContains(job.scheduler().output(), "serves shards");
  std::printf(
      "server %d killed after round %d; its replacement registered; the scheduler killed %lld "
      "ms later, %s\n",
      victim, kill_after, static_cast<long long>(absl::ToInt64Milliseconds(into_join)),
      published ? "after it had published the join" : "before it had published the join");
  absl::SleepFor(absl::Milliseconds(200));
  Process& restarted = job.RestartScheduler();
  if (!restarted.WaitForOutput("re-formed the running job", absl::Seconds(30))) {
    std::string logs = "restarted scheduler:\n" + restarted.output();
    for (int s = 0; s < kServers; ++s) {
      absl::StrAppend(&logs, "\nserver ", s, ":\n", job.server(s).output());
    }
    FAIL(logs);
  }
  for (int w = 0; w < kWorkers; ++w) {
    if (!job.worker(w).Wait(absl::Seconds(60)).ok() || job.worker(w).exit_code() != 0) {
      std::printf("worker %d failed; the restarted scheduler's log:\n%s\n", w,
                  restarted.output().c_str());
    }
    Job::ExpectExit(job.worker(w), 0);
    CHECK(absl::StrContains(job.worker(w).output(), "rounds 1..300 checked"));
  }
  for (int s = 0; s < kServers; ++s) {
    if (s != victim) Job::ExpectExit(job.server(s), 0);
  }
  // The replacement either serves on as a member of the re-formed job, or - its join not
  // published where the job's servers could tell - is refused and exits, naming why.
  const absl::StatusOr<int> code = replacement.Wait(absl::Seconds(60));
  REQUIRE(code.ok());
  INFO(replacement.output());
  if (*code == 0) {
    CHECK(absl::StrContains(replacement.output(), "registered again with the scheduler"));
    std::printf("the replacement was re-formed into the job and served to the end\n");
  } else {
    CHECK(absl::StrContains(replacement.output(), "is not a node of"));
    std::printf("the replacement's join was aborted: it exited %d\n", *code);
  }
  Job::ExpectExit(restarted, 0);
}

}  // namespace
}  // namespace kvstore::testing
