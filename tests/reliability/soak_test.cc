// The soak in a short form: training under periodic and explicit checkpoint sets, a kvserver
// killed with SIGKILL at a random round (possibly in the middle of a checkpoint), then the whole
// job restarted from the newest whole set and trained to the end, every pull checked against the
// float64 reference and every exit status checked. Sets left incomplete by the kill must be
// refused, naming a file.
#include <catch2/catch.hpp>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/core/checkpoint_root.h"
#include "server/core/checkpoint_set.h"
#include "tests/reliability/job.h"

namespace kvstore::testing {
namespace {

namespace fs = std::filesystem;

TEST_CASE(
    "Soak: checkpoints while training, a kvserver killed at random, the job restarted "
    "from the newest whole set, exact to the end",
    "[reliability][soak]") {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  constexpr int kWorkers = 3, kServers = 2;
  const int kill_after = 40 + static_cast<int>(rng() % 80);
  const int victim = static_cast<int>(rng() % kServers);
  std::printf("killing server %d after round %d\n", victim, kill_after);
  const std::string base = FreshDirectory("soak");
  const std::vector<std::string> roots = {base + "/root0", base + "/root1"};
  {
    Job job({{"--checkpoint_root=" + roots[0]}, {"--checkpoint_root=" + roots[1]}}, kWorkers,
            {"--checkpoint_every=7", "--checkpoint_keep=4", "--heartbeat_timeout=2s"});
    for (int w = 0; w < kWorkers; ++w) {
      job.AddWorker(w, {absl::StrCat(seed), "1", "100000", "3"});
    }
    for (int i = 0; i < 5; ++i) {
      REQUIRE(
          job.worker(0).WaitForOutput(absl::StrCat("round ", 5 + 7 * i, " ok"), absl::Seconds(60)));
      int code = 0;
      const std::string output = job.Kvctl({"checkpoint", absl::StrCat("explicit/", i)}, &code);
      INFO(output);
      REQUIRE(code == 0);
    }
    REQUIRE(
        job.worker(0).WaitForOutput(absl::StrCat("round ", kill_after, " ok"), absl::Seconds(60)));
    job.server(victim).Kill();
    // Without the server the job fails: every worker and daemon exits non-zero, none hangs.
    for (int w = 0; w < kWorkers; ++w) Job::ExpectExit(job.worker(w), 1);
    Job::ExpectExit(job.server(1 - victim), 1);
    Job::ExpectExit(job.scheduler(), 1);
  }
  // The newest set both servers accept, periodic or explicit (a kill soon after the last
  // explicit one may come before the next periodic one); any other is whole or refused naming
  // a file.
  std::vector<std::string> sets;
  for (const char* folder : {"checkpoints", "explicit"}) {
    if (!fs::exists(roots[0] + "/" + folder)) continue;
    for (const auto& entry : fs::directory_iterator(roots[0] + "/" + folder)) {
      sets.push_back(std::string(folder) + "/" + entry.path().filename().string());
    }
  }
  REQUIRE(!sets.empty());
  std::string chosen;
  int64_t round = -1;
  for (const std::string& dir : sets) {
    bool whole = true;
    int64_t set_round = -1;
    for (int s = 0; s < kServers && whole; ++s) {
      auto root = CheckpointRoot::Open(roots[s]);
      REQUIRE(root.ok());
      auto directory = (*root)->OpenDirectory(dir, false);
      absl::Status status = directory.status();
      if (status.ok()) {
        auto set = VerifyCheckpointSet(*directory, s, kServers, "dist_sync", kChunkBytes);
        status = set.status();
        if (set.ok()) set_round = set->manifest.round();
      }
      if (!status.ok()) {
        INFO(dir << " server " << s << ": " << status.ToString());
        CHECK(absl::StrContains(status.message(), dir));
        whole = false;
      }
    }
    if (whole && set_round > round) {
      chosen = dir;
      round = set_round;
    }
  }
  INFO("sets: " << sets.size());
  REQUIRE(!chosen.empty());
  std::printf("restarting from %s at round %lld\n", chosen.c_str(), static_cast<long long>(round));
  REQUIRE(round >= 7);
  Job job({{"--checkpoint_root=" + roots[0], "--restore=" + chosen},
           {"--checkpoint_root=" + roots[1], "--restore=" + chosen}},
          kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    job.AddWorker(w, {absl::StrCat(seed), absl::StrCat(round + 1), absl::StrCat(round + 20)});
  }
  for (int w = 0; w < kWorkers; ++w) Job::ExpectExit(job.worker(w), 0);
  for (int s = 0; s < kServers; ++s) Job::ExpectExit(job.server(s), 0);
  Job::ExpectExit(job.scheduler(), 0);
}

}  // namespace
}  // namespace kvstore::testing
