// Checkpoint sets on real processes: every checkpoint taken during training is one cut (every
// key of every server at one round), restores, and is refused whole when partial, mixed or
// damaged; a refused checkpoint leaves nothing behind.
#include "server/core/checkpoint_set.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/state_file.h"
#include "proto/kvstore.pb.h"
#include "server/core/checkpoint_root.h"
#include "server/core/engine_state.h"
#include "server/core/server_backend.h"
#include "tests/reliability/job.h"
#include "tests/reliability/sum_reference.h"
namespace kvstore::testing {
namespace {

namespace fs = std::filesystem;

// Restored: what a server restored from a set holds.
struct Restored {
  absl::Status status;
  int64_t round = -1;
  std::vector<StoredPart> parts;
};

// Restore restores server `rank` of a job of `servers` servers from `dir` below `root`
// exactly as `kvserver --restore` does (MakeServerBackend), in this process.
Restored Restore(const std::string& root, const std::string& dir, int rank, int servers,
                 int workers) {
  static const UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  Restored restored;
  BackendSpec spec;
  spec.rank = rank;
  spec.num_servers = servers;
  spec.mode = "dist_sync";
  spec.chunk_bytes = kChunkBytes;
  for (int w = 0; w < workers; ++w) spec.worker_node_ids.push_back(100 + w);
  spec.updater = "sum";
  spec.registry = &registry;
  absl::StatusOr<std::shared_ptr<const CheckpointRoot>> opened = CheckpointRoot::Open(root);
  REQUIRE(opened.ok());
  spec.checkpoint_root = *opened;
  spec.restore_dir = dir;
  absl::StatusOr<std::shared_ptr<ServerBackend>> backend = MakeServerBackend(spec);
  if (!backend.ok()) {
    restored.status = backend.status();
    return restored;
  }
  absl::StatusOr<ConfinedDirectory> directory = (*opened)->OpenDirectory(dir, false);
  REQUIRE(directory.ok());
  absl::StatusOr<VerifiedSet> set =
      VerifyCheckpointSet(*directory, rank, servers, "dist_sync", kChunkBytes);
  REQUIRE(set.ok());
  restored.round = set->manifest.round();
  absl::StatusOr<EngineSnapshot> snapshot = (*backend)->engine->state().Snapshot();
  REQUIRE(snapshot.ok());
  restored.parts = std::move(snapshot->parts);
  return restored;
}

// Reference: the float64 values of every key after a number of rounds, advanced in order.
class Reference {
 public:
  Reference(uint64_t seed, int workers) : seed_(seed), workers_(workers) {
    for (const SumKey& k : SumKeys()) {
      std::vector<double>& v = values_[k.key];
      for (int64_t i = 0; i < k.elements; ++i) v.push_back(InitialValue(seed, k.key, i));
    }
  }
  // At returns the values after `round` rounds (rounds only grow between calls).
  const std::map<int64_t, std::vector<double>>& At(int64_t round) {
    REQUIRE(round >= round_);
    for (; round_ < round; ++round_) {
      for (auto& [key, v] : values_) {
        for (size_t i = 0; i < v.size(); ++i) {
          for (int w = 0; w < workers_; ++w) v[i] += Gradient(seed_, key, w, round_ + 1, i);
        }
      }
    }
    return values_;
  }

 private:
  uint64_t seed_;
  int workers_;
  int64_t round_ = 0;
  std::map<int64_t, std::vector<double>> values_;
};

// CheckParts requires `parts` (one server's) to hold exactly `want`, element by element, and
// returns how many elements it checked.
int64_t CheckParts(const std::vector<StoredPart>& parts,
                   const std::map<int64_t, std::vector<double>>& want, const std::string& what) {
  int64_t checked = 0;
  for (const StoredPart& part : parts) {
    REQUIRE(part.layout.key.is_int());
    const auto it = want.find(part.layout.key.int_key());
    REQUIRE(it != want.end());
    for (int64_t j = 0; j < part.layout.count; ++j) {
      const double got = part.data.GetAsDouble(j);
      const double expected = it->second[part.layout.offset + j];
      if (got != expected) {
        FAIL(what << ": key " << part.layout.key.int_key() << " element " << part.layout.offset + j
                  << " holds " << got << ", the reference " << expected);
      }
      ++checked;
    }
  }
  return checked;
}

// Files lists every regular file below `dir`, relative to it, sorted.
std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> found;
  if (!fs::exists(dir)) return found;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) found.push_back(fs::relative(entry.path(), dir).string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

int64_t ElementsOfAllKeys() {
  int64_t total = 0;
  for (const SumKey& k : SumKeys()) total += k.elements;
  return total;
}

TEST_CASE("Checkpoint sets: 30 checkpoints during training, each restored, each one round",
          "[reliability][checkpoint]") {
  const uint64_t seed = TestSeed();
  constexpr int kServers = 2, kWorkers = 3, kLast = 100000, kCheckpoints = 30;
  const std::string base = FreshDirectory("sets");
  const std::vector<std::string> roots = {base + "/root0", base + "/root1"};
  // The training runs until the test has taken its checkpoints, then the servers are told to
  // end the job (kvctl shutdown) - the workers, mid-round, are killed.
  {
    Job job({{"--checkpoint_root=" + roots[0]}, {"--checkpoint_root=" + roots[1]}}, kWorkers,
            {"--checkpoint_every=25", "--checkpoint_keep=3", "--checkpoint_prefix=periodic"});
    for (int w = 0; w < kWorkers; ++w) {
      job.AddWorker(w, {absl::StrCat(seed), "1", absl::StrCat(kLast), "2"});
    }
    REQUIRE(job.worker(0).WaitForOutput("round 5 ok", absl::Seconds(60)));
    for (int i = 0; i < kCheckpoints; ++i) {
      int code = 0;
      const std::string output = job.Kvctl({"checkpoint", absl::StrCat("c", i)}, &code);
      INFO(output);
      REQUIRE(code == 0);
      REQUIRE(absl::StrContains(output, roots[1] + "/c" + std::to_string(i) + "/server-1.ckpt"));
    }
    // Periodic checkpoints (every 25 rounds, counted from the last checkpoint of any kind):
    // wait for the fourth, so that the oldest has been removed (--checkpoint_keep=3).
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (!fs::exists(roots[1] + "/periodic/ckpt-000004/MANIFEST") && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    INFO(job.scheduler().output());
    REQUIRE(fs::exists(roots[1] + "/periodic/ckpt-000004/MANIFEST"));
    // Every worker is still training: each checkpoint was taken during training.
    for (int w = 0; w < kWorkers; ++w) {
      INFO(job.worker(w).output());
      REQUIRE(!job.worker(w).Exited(absl::ZeroDuration()));
    }
    int code = 0;
    job.Kvctl({"shutdown"}, &code);
    CHECK(code == 0);
    for (int s = 0; s < kServers; ++s) Job::ExpectExit(job.server(s), 0);
  }
  // Each set: both servers restore it (as kvserver --restore does); every element of every key
  // equals the float64 reference at the manifest's round.
  Reference reference(seed, kWorkers);
  std::vector<std::pair<int64_t, std::string>> sets;
  for (int i = 0; i < kCheckpoints; ++i) sets.push_back({-1, absl::StrCat("c", i)});
  for (const auto& entry : fs::directory_iterator(roots[0] + "/periodic")) {
    sets.push_back({-1, "periodic/" + entry.path().filename().string()});
  }
  CHECK(sets.size() == kCheckpoints + 3);  // --checkpoint_keep=3
  for (auto& [round, dir] : sets) {
    const Restored restored = Restore(roots[0], dir, 0, kServers, kWorkers);
    INFO(dir << ": " << restored.status.ToString());
    REQUIRE(restored.status.ok());
    round = restored.round;
  }
  std::sort(sets.begin(), sets.end());
  int64_t previous = 0;
  std::vector<int64_t> rounds;
  for (const auto& [round, dir] : sets) {
    INFO(dir << " round " << round);
    REQUIRE(round >= 1);
    rounds.push_back(round);
    const auto& want = reference.At(round);
    int64_t checked = 0;
    for (int s = 0; s < kServers; ++s) {
      const Restored restored = Restore(roots[s], dir, s, kServers, kWorkers);
      INFO(restored.status.ToString());
      REQUIRE(restored.status.ok());
      REQUIRE(restored.round == round);
      checked += CheckParts(restored.parts, want, absl::StrCat(dir, " server ", s));
    }
    REQUIRE(checked == ElementsOfAllKeys());
    previous = round;
  }
  // The kvctl checkpoints were taken one after another during training: their rounds grow.
  std::printf("checkpoint rounds:");
  for (int64_t r : rounds) std::printf(" %lld", static_cast<long long>(r));
  std::printf("\n");
  CHECK(previous > rounds.front());
  // Nothing pending is left anywhere.
  for (const std::string& root : roots) {
    for (const std::string& file : Files(root)) CHECK(!absl::StrContains(file, "pending"));
  }
}

TEST_CASE("Checkpoint sets: kvserver --restore of a set taken mid-training goes on from its round",
          "[reliability][checkpoint]") {
  const uint64_t seed = TestSeed();
  constexpr int kWorkers = 2;
  const std::string root = FreshDirectory("resume");
  int64_t round = 0;
  {
    Job job({{"--checkpoint_root=" + root}, {"--checkpoint_root=" + root}}, kWorkers);
    for (int w = 0; w < kWorkers; ++w) job.AddWorker(w, {absl::StrCat(seed), "1", "100000", "1"});
    REQUIRE(job.worker(1).WaitForOutput("round 20 ok", absl::Seconds(60)));
    int code = 0;
    const std::string output = job.Kvctl({"checkpoint", "mid"}, &code);
    INFO(output);
    REQUIRE(code == 0);
    job.Kvctl({"shutdown"}, &code);
    Job::ExpectExit(job.server(0), 0);
    Job::ExpectExit(job.server(1), 0);
  }
  const Restored restored = Restore(root, "mid", 0, 2, kWorkers);
  REQUIRE(restored.status.ok());
  round = restored.round;
  REQUIRE(round >= 20);
  // The same training goes on from round + 1 in a new job; every pull is checked against the
  // reference by the workers.
  Job job({{"--checkpoint_root=" + root, "--restore=mid"},
           {"--checkpoint_root=" + root, "--restore=mid"}},
          kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    job.AddWorker(w, {absl::StrCat(seed), absl::StrCat(round + 1), absl::StrCat(round + 15)});
  }
  for (int w = 0; w < kWorkers; ++w) Job::ExpectExit(job.worker(w), 0);
  Job::ExpectExit(job.server(0), 0);
  Job::ExpectExit(job.server(1), 0);
  Job::ExpectExit(job.scheduler(), 0);
}

// CopyFile copies `from` to `to`, replacing it.
void CopyFile(const std::string& from, const std::string& to) {
  fs::create_directories(fs::path(to).parent_path());
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

TEST_CASE("Checkpoint sets: partial, mixed and damaged directories are refused, naming the file",
          "[reliability][checkpoint]") {
  const uint64_t seed = TestSeed();
  constexpr int kWorkers = 2;
  // Both servers share one root (one directory holds both files and the manifest).
  const std::string root = FreshDirectory("mixed");
  {
    Job job({{"--checkpoint_root=" + root}, {"--checkpoint_root=" + root}}, kWorkers);
    for (int w = 0; w < kWorkers; ++w) job.AddWorker(w, {absl::StrCat(seed), "1", "100000", "1"});
    REQUIRE(job.worker(0).WaitForOutput("round 5 ok", absl::Seconds(60)));
    int code = 0;
    REQUIRE(job.Kvctl({"checkpoint", "a"}, &code).size() > 0);
    REQUIRE(code == 0);
    REQUIRE(job.worker(0).WaitForOutput("round 15 ok", absl::Seconds(60)));
    job.Kvctl({"checkpoint", "b"}, &code);
    REQUIRE(code == 0);
    job.Kvctl({"shutdown"}, &code);
    Job::ExpectExit(job.server(0), 0);
    Job::ExpectExit(job.server(1), 0);
  }
  REQUIRE(Restore(root, "a", 1, 2, kWorkers).status.ok());
  REQUIRE(Restore(root, "b", 1, 2, kWorkers).status.ok());
  REQUIRE(Restore(root, "a", 0, 2, kWorkers).round < Restore(root, "b", 0, 2, kWorkers).round);
  struct Case {
    std::string name;
    std::vector<std::pair<std::string, std::string>> files;  // from (below root), to name
    int rank;                                                // The server that restores.
    std::string file, why;                                   // What the refusal names.
  };
  const std::vector<Case> cases = {
      {"mixed",
       {{"a/MANIFEST", "MANIFEST"},
        {"a/server-0.ckpt", "server-0.ckpt"},
        {"b/server-1.ckpt", "server-1.ckpt"}},
       0,
       "server-1.ckpt",
       "does not match"},
      {"mixed1",
       {{"a/MANIFEST", "MANIFEST"},
        {"a/server-0.ckpt", "server-0.ckpt"},
        {"b/server-1.ckpt", "server-1.ckpt"}},
       1,
       "server-1.ckpt",
       "mixes files of two checkpoints"},
      {"no_manifest",
       {{"a/server-0.ckpt", "server-0.ckpt"}, {"a/server-1.ckpt", "server-1.ckpt"}},
       0,
       "MANIFEST",
       "is missing"},
      {"partial",
       {{"a/MANIFEST", "MANIFEST"}, {"a/server-0.ckpt", "server-0.ckpt"}},
       1,
       "server-1.ckpt",
       "the set is partial"},
      {"foreign_manifest",
       {{"b/MANIFEST", "MANIFEST"},
        {"a/server-0.ckpt", "server-0.ckpt"},
        {"a/server-1.ckpt", "server-1.ckpt"}},
       0,
       "server-0.ckpt",
       "does not match"},
      {"stray",
       {{"a/MANIFEST", "MANIFEST"},
        {"a/server-0.ckpt", "server-0.ckpt"},
        {"a/server-1.ckpt", "server-1.ckpt"},
        {"b/server-1.ckpt", "server-2.ckpt"}},
       0,
       "server-2.ckpt",
       "is not part of checkpoint"},
  };
  for (const Case& c : cases) {
    for (const auto& [from, to] : c.files)
      CopyFile(root + "/" + from, root + "/" + c.name + "/" + to);
    const Restored restored = Restore(root, c.name, c.rank, 2, kWorkers);
    INFO(c.name << ": " << restored.status.ToString());
    CHECK(!restored.status.ok());
    CHECK(absl::StrContains(restored.status.message(), root + "/" + c.name + "/" + c.file));
    CHECK(absl::StrContains(restored.status.message(), c.why));
  }
  // A damaged manifest: its checksum.
  CopyFile(root + "/a/MANIFEST", root + "/damaged/MANIFEST");
  CopyFile(root + "/a/server-0.ckpt", root + "/damaged/server-0.ckpt");
  {
    std::fstream manifest(root + "/damaged/MANIFEST",
                          std::ios::in | std::ios::out | std::ios::binary);
    manifest.seekp(30);
    manifest.put('\x7f');
  }
  const Restored damaged = Restore(root, "damaged", 0, 2, kWorkers);
  INFO(damaged.status.ToString());
  CHECK(absl::StrContains(damaged.status.message(), root + "/damaged/MANIFEST"));
  // A real kvserver asked to restore the mixed directory stops, naming the file, and restores
  // nothing.
  Job job({{"--checkpoint_root=" + root, "--restore=mixed"},
           {"--checkpoint_root=" + root, "--restore=mixed"}},
          kWorkers);
  for (int w = 0; w < kWorkers; ++w) job.AddWorker(w, {absl::StrCat(seed), "1", "3"});
  for (int s = 0; s < 2; ++s) {
    Job::ExpectExit(job.server(s), 1);
    INFO(job.server(s).output());
    CHECK(absl::StrContains(job.server(s).output(), root + "/mixed/server-1.ckpt"));
  }
}

TEST_CASE("Checkpoint sets: a checkpoint refused by one server leaves nothing; training goes on",
          "[reliability][checkpoint]") {
  const uint64_t seed = TestSeed();
  constexpr int kWorkers = 2, kLast = 150;
  const std::string base = FreshDirectory("refused");
  const std::vector<std::string> roots = {base + "/root0", base + "/root1"};
  fs::create_directories(roots[0]);
  fs::create_directories(roots[1]);
  // On server 1 "blocked" is a file, so no checkpoint directory can be made there; server 0
  // makes it, writes its file and must take both away again.
  std::ofstream(roots[1] + "/blocked") << "a file";
  Job job({{"--checkpoint_root=" + roots[0]}, {"--checkpoint_root=" + roots[1]}}, kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    job.AddWorker(w, {absl::StrCat(seed), "1", absl::StrCat(kLast), "10"});
  }
  REQUIRE(job.worker(0).WaitForOutput("round 3 ok", absl::Seconds(60)));
  const std::vector<std::string> before0 = Files(roots[0]), before1 = Files(roots[1]);
  int code = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string output = job.Kvctl({"checkpoint", "blocked"}, &code);
    INFO(output);
    CHECK(code == 1);
    CHECK(absl::StrContains(output, "server 1"));
    CHECK(absl::StrContains(output, roots[1] + "/blocked"));
  }
  CHECK(Files(roots[0]) == before0);
  CHECK(Files(roots[1]) == before1);
  CHECK(!fs::exists(roots[0] + "/blocked"));
  // The refused cuts held no push for good: every worker trains to the end, every pull exact.
  for (int w = 0; w < kWorkers; ++w) Job::ExpectExit(job.worker(w), 0);
  Job::ExpectExit(job.server(0), 0);
  Job::ExpectExit(job.server(1), 0);
  Job::ExpectExit(job.scheduler(), 0);
}

TEST_CASE(
    "Checkpoint sets: a write that fails on one server (file size limit, as a full disk) "
    "leaves nothing; training goes on",
    "[reliability][checkpoint]") {
  const uint64_t seed = TestSeed();
  constexpr int kWorkers = 2, kLast = 150;
  const std::string base = FreshDirectory("full");
  const std::vector<std::string> roots = {base + "/root0", base + "/root1"};
  // Server 1 holds about 20 KB: its checkpoint file cannot be written within 8 KiB.
  Job job({{"--checkpoint_root=" + roots[0]}, {"--checkpoint_root=" + roots[1], "fsize_kib=8"}},
          kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    job.AddWorker(w, {absl::StrCat(seed), "1", absl::StrCat(kLast), "10"});
  }
  REQUIRE(job.worker(0).WaitForOutput("round 3 ok", absl::Seconds(60)));
  int code = 0;
  const std::string output = job.Kvctl({"checkpoint", "full"}, &code);
  INFO(output);
  CHECK(code == 1);
  CHECK(absl::StrContains(output, "server 1"));
  CHECK(absl::StrContains(output, roots[1] + "/full"));
  CHECK(Files(roots[0]).empty());
  CHECK(Files(roots[1]).empty());
  CHECK(!fs::exists(roots[0] + "/full"));
  CHECK(!fs::exists(roots[1] + "/full"));
  for (int w = 0; w < kWorkers; ++w) Job::ExpectExit(job.worker(w), 0);
  Job::ExpectExit(job.server(0), 0);
  Job::ExpectExit(job.server(1), 0);
  Job::ExpectExit(job.scheduler(), 0);
}

}  // namespace
}  // namespace kvstore::testing
