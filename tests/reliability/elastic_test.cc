// Elastic dist_sync (scheduler --elastic) on real processes: a worker killed with SIGKILL at a
// random round (the seed is printed; KV_TEST_SEED repeats it) leaves the job, and the others
// train on to the end with every pull checked exactly against a float64 reference in which the
// killed worker's pushes are those of rounds 1..K of each round unit, K the round it was killed
// in or the next one; a barrier waiting for a worker that dies passes with the living; and
// deploy/launch.py --elastic runs such a job to its end. Every process's exit status is
// checked: the job succeeds with the workers that remain.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/partitioner.h"
#include "tests/reliability/elastic_reference.h"
#include "tests/reliability/job.h"
#include "tests/reliability/sum_reference.h"

namespace kvstore::testing {
namespace {

constexpr int kKilled = 128 + 9;  // Process::exit_code of a process killed by SIGKILL.

// LastRound returns the last round a sum_worker printed as "round R ok" (0: none).
int64_t LastRound(const std::string& output) {
  int64_t last = 0;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    int64_t round = 0;
    if (absl::ConsumePrefix(&line, "round ") && absl::ConsumeSuffix(&line, " ok") &&
        absl::SimpleAtoi(line, &round)) {
      last = std::max(last, round);
    }
  }
  return last;
}

// RoundUnits returns the elements of every dist_sync round unit (a chunk of a key's part on a
// server) of SumKeys() in the test job, as (key, first element, count).
struct Unit {
  int64_t key, offset, count;
};
std::vector<Unit> RoundUnits(int servers) {
  const Partitioner partitioner = Partitioner::Create(servers, kBigValueBound).value();
  std::vector<Unit> units;
  for (const SumKey& k : SumKeys()) {
    for (const Slice& part : partitioner.Partition(Key(k.key), k.elements)) {
      for (const Slice& chunk : ChunkSlice(part, sizeof(float), kChunkBytes)) {
        units.push_back({k.key, chunk.offset, chunk.count});
      }
    }
  }
  return units;
}

TEST_CASE(
    "Elastic: a worker killed mid-training leaves the job; the others train on to the "
    "end, every value exact",
    "[reliability][elastic]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr int kWorkers = 3;
  constexpr int kLast = 40;
  const int victim = static_cast<int>(rng() % kWorkers);
  const int kill_after = 3 + static_cast<int>(rng() % 15);
  // The others pause 100 ms between rounds. A victim that pauses too is killed in its pause,
  // between rounds; one that does not has pushed its next round already (it waits for the
  // others), and its pushes of that round stay in the rounds the others complete.
  const bool victim_pauses = rng() % 2 == 0;
  std::printf("killing worker %d after round %d of %d, %s\n", victim, kill_after, kLast,
              victim_pauses ? "in its pause between rounds" : "with its next round pushed");
  const std::string dir = FreshDirectory("elastic");
  Job job({{}, {}}, kWorkers, {"--heartbeat_timeout=1s", "--elastic"});
  std::vector<std::string> masks;
  for (int w = 0; w < kWorkers; ++w) {
    masks.push_back(absl::StrCat(dir, "/masks-", w));
    job.AddWorker(w, {absl::StrCat(seed), "1", absl::StrCat(kLast),
                      w == victim && !victim_pauses ? "0" : "100",
                      absl::StrCat("elastic=", victim, ":", masks.back())});
  }
  REQUIRE(job.worker(victim).WaitForOutput(absl::StrCat("round ", kill_after, " ok"),
                                           absl::Seconds(60)));
  job.worker(victim).Kill();
  const absl::Time killed = absl::Now();
  REQUIRE(job.worker(victim).exit_code() == kKilled);
  // The rounds it completed: its pushes of the next one may be in some round units.
  const int64_t completed = LastRound(job.worker(victim).output());
  std::printf("worker %d was killed after completing round %lld\n", victim,
              static_cast<long long>(completed));
  REQUIRE(completed >= kill_after);

  // kvctl shows it as having left, and why, while the others train on.
  bool shown = false;
  std::string status;
  while (!shown && absl::Now() - killed < absl::Seconds(8)) {
    int code = 0;
    status = job.Kvctl({"status"}, &code);
    shown = absl::StrContains(status,
                              absl::StrCat("worker ", victim, " left the job: died: no heartbeat"));
    if (!shown) absl::SleepFor(absl::Milliseconds(100));
  }
  INFO(status);
  CHECK(shown);

  // The others train on to the end: every pull checked (sum_worker), exit 0.
  std::vector<int> survivors;
  for (int w = 0; w < kWorkers; ++w) {
    if (w != victim) survivors.push_back(w);
  }
  for (int w : survivors) {
    Job::ExpectExit(job.worker(w), 0);
    CHECK(absl::StrContains(job.worker(w).output(),
                            absl::StrCat("rounds 1..", kLast, " checked (elastic")));
  }
  // The job succeeded with the workers that remain: every daemon exits 0.
  for (int s = 0; s < 2; ++s) {
    Job::ExpectExit(job.server(s), 0);
    CHECK(absl::StrContains(job.server(s).output(), "have left the job"));
  }
  Job::ExpectExit(job.scheduler(), 0);
  const std::string scheduler = job.scheduler().output();
  INFO(scheduler);
  CHECK(absl::StrContains(scheduler, absl::StrCat("worker ", victim, " (node ")));
  CHECK(absl::StrContains(scheduler, "it is dead and has left the job"));
  CHECK_FALSE(absl::StrContains(scheduler, "the job failed"));

  // The killed worker's pushes in every round unit are exactly those of rounds 1..K, K the
  // last round it completed or the next one (it may have pushed that one to some units).
  const auto first = ElasticReference::Read(masks[survivors[0]]);
  const auto second = ElasticReference::Read(masks[survivors[1]]);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  REQUIRE(first->size() == second->size());
  std::map<std::pair<int64_t, int64_t>, uint64_t> mask;
  for (size_t i = 0; i < first->size(); ++i) {
    const auto& a = (*first)[i];
    const auto& b = (*second)[i];
    REQUIRE(a.key == b.key);
    REQUIRE(a.element == b.element);
    CHECK(a.mask == b.mask);  // Both pulled the same values.
    mask[{a.key, a.element}] = a.mask;
  }
  int at_completed = 0, at_next = 0;
  for (const Unit& unit : RoundUnits(2)) {
    uint64_t common = ~uint64_t{0};
    for (int64_t e = unit.offset; e < unit.offset + unit.count; ++e) {
      REQUIRE(mask.count({unit.key, e}) == 1);
      common &= mask[{unit.key, e}];
    }
    INFO("key " << unit.key << " elements [" << unit.offset << ", " << unit.offset + unit.count
                << "): rounds K possible (bits) " << std::hex << common);
    const bool k = (common >> completed & 1) != 0;
    const bool next = (common >> (completed + 1) & 1) != 0;
    CHECK((k || next));
    at_completed += k;
    at_next += next && !k;
  }
  std::printf("round units with the killed worker's pushes of rounds 1..%lld: %d, 1..%lld: %d\n",
              static_cast<long long>(completed), at_completed,
              static_cast<long long>(completed + 1), at_next);
}

TEST_CASE(
    "Elastic: a barrier waiting for a worker that dies passes once every living worker "
    "has entered",
    "[reliability][elastic]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr int kWorkers = 3;
  const int victim = static_cast<int>(rng() % kWorkers);
  const int rounds = 3 + static_cast<int>(rng() % 5);
  std::printf("worker %d dies while the others wait in a barrier after round %d\n", victim, rounds);
  Job job({{}, {}}, kWorkers, {"--heartbeat_timeout=1s", "--elastic"});
  for (int w = 0; w < kWorkers; ++w) {
    if (w == victim) {
      // It trains every round, then stays away from the barrier (a minute's pause).
      job.AddWorker(w, {absl::StrCat(seed), "1", absl::StrCat(rounds), "0", "linger=60000"});
    } else {
      job.AddWorker(w, {absl::StrCat(seed), "1", absl::StrCat(rounds), "0", "barrier"});
    }
  }
  std::vector<int> survivors;
  for (int w = 0; w < kWorkers; ++w) {
    if (w != victim) survivors.push_back(w);
  }
  for (int w : survivors) {
    REQUIRE(job.worker(w).WaitForOutput("entering the barrier", absl::Seconds(60)));
  }
  // The barrier waits for the victim while it lives.
  absl::SleepFor(absl::Milliseconds(1500));
  for (int w : survivors) {
    INFO(job.worker(w).output());
    REQUIRE_FALSE(job.worker(w).Exited(absl::ZeroDuration()));
    REQUIRE_FALSE(absl::StrContains(job.worker(w).output(), "barrier passed"));
  }
  job.worker(victim).Kill();
  const absl::Time killed = absl::Now();
  REQUIRE(job.worker(victim).exit_code() == kKilled);
  for (int w : survivors) {
    Job::ExpectExit(job.worker(w), 0);
    const absl::Duration took = absl::Now() - killed;
    INFO("worker " << w << " left the barrier " << took << " after the kill:\n"
                   << job.worker(w).output());
    std::printf("worker %d left the barrier %s after the kill\n", w,
                absl::FormatDuration(absl::Trunc(took, absl::Milliseconds(10))).c_str());
    // Within the heartbeat timeout (1 s) and the time to notice, not the barrier's deadline.
    CHECK(took < absl::Seconds(6));
    CHECK(absl::StrContains(job.worker(w).output(), "barrier passed"));
  }
  for (int s = 0; s < 2; ++s) Job::ExpectExit(job.server(s), 0);
  Job::ExpectExit(job.scheduler(), 0);
  INFO(job.scheduler().output());
  CHECK(absl::StrContains(job.scheduler().output(), "it is dead and has left the job"));
}

TEST_CASE(
    "Elastic: deploy/launch.py --elastic keeps the job running when a worker dies and "
    "exits 0 with the others",
    "[reliability][elastic][launcher]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  const int victim = static_cast<int>(rng() % 3);
  const int crash_after = 2 + static_cast<int>(rng() % 5);
  std::printf("worker %d kills itself after round %d\n", victim, crash_after);
  const std::vector<std::string> argv = {
      "/usr/bin/env",
      "python3",
      Runfile("deploy/launch.py"),
      "-n",
      "3",
      "-s",
      "2",
      "--elastic",
      "--scheduler",
      Runfile("server/scheduler/scheduler"),
      "--kvserver",
      Runfile("server/kvserver"),
      "--timeout",
      "60",
      absl::StrCat("--scheduler-arg=--big_value_bound=", kBigValueBound),
      absl::StrCat("--scheduler-arg=--chunk_bytes=", kChunkBytes),
      "--scheduler-arg=--heartbeat_interval=100ms",
      "--scheduler-arg=--heartbeat_timeout=1s",
      "--server-arg=--updater=sum",
      "--",
      Runfile("tests/reliability/sum_worker"),
      absl::StrCat(seed),
      "1",
      "12",
      "50",
      absl::StrCat("elastic=", victim, ":-"),
      absl::StrCat("crash=", victim, ":", crash_after)};
  std::unique_ptr<Process> launcher = StartProcess("launch", argv, {});
  Job::ExpectExit(*launcher, 0);
  const std::string output = launcher->output();
  INFO(output);
  CHECK(absl::StrContains(
      output, absl::StrCat("worker ", victim,
                           " was killed by signal 9; the job goes on without it (--elastic)")));
  for (int w = 0; w < 3; ++w) {
    if (w == victim) continue;
    CHECK(absl::StrContains(
        output, absl::StrCat("[worker ", w, "] worker ", w, ": rounds 1..12 checked (elastic")));
  }
  CHECK(absl::StrContains(output, "it is dead and has left the job"));
}

}  // namespace
}  // namespace kvstore::testing
