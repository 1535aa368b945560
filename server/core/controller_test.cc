// Tests of the server's controller: its built-in commands with the sgd updater, and
// checkpoints restored into the same job only.
#include "server/core/controller.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/store/sgd_updater.h"
#include "proto/kvstore.pb.h"
#include "server/core/checkpoint_set.h"
#include "server/core/server_engine.h"
#include "server/core/server_engine_test_util.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::Incoming;
using testing::MaxAbsDiff;
using testing::NewEngine;
using testing::PullAll;
using testing::TestRng;
using testing::ToDoubles;

TEST_CASE("Controller: built-in heads and the sgd updater with momentum", "[server][controller]") {
  TestRng rng;
  INFO(rng.Describe());
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  REQUIRE(RegisterSgdUpdater(&registry).ok());
  auto engine = NewEngine(false, {2});
  Controller controller(
      engine.get(), &registry,
      [](int head, absl::string_view body) -> absl::StatusOr<std::string> {
        return absl::StrCat("custom ", head, " ", body);
      },
      /*rank=*/1);
  REQUIRE(controller.Run(kCommandPing, "hi").value() == "server 1: hi");
  REQUIRE(controller.Run(40, "x").value() == "custom 40 x");
  REQUIRE(absl::IsInvalidArgument(controller.Run(-1, "").status()));
  REQUIRE(absl::IsNotFound(controller.Run(kCommandSetUpdater, "adamw").status()));
  REQUIRE(absl::IsInvalidArgument(controller.Run(kCommandSetUpdater, "sgd lr=x").status()));
  const double lr = rng.Uniform(0.01, 0.5), momentum = rng.Uniform(0.1, 0.95);
  const double wd = rng.Uniform(0, 0.1), rescale = rng.Uniform(0.1, 2);
  REQUIRE(controller
              .Run(kCommandSetUpdater,
                   absl::StrFormat("sgd lr=%.17g momentum=%.17g,wd=%.17g rescale_grad=%.17g", lr,
                                   momentum, wd, rescale))
              .value() == "sgd");
  const Tensor init = rng.RandomTensor(DType::kFloat64, {6});
  REQUIRE(engine->Init(2, {Incoming(3, init)}).ok());
  std::vector<double> weight = ToDoubles(init), mom(6, 0.0);
  for (int step = 0; step < 4; ++step) {
    const Tensor grad = rng.RandomTensor(DType::kFloat64, {6});
    const auto g = ToDoubles(grad);
    for (size_t i = 0; i < 6; ++i) {
      mom[i] = momentum * mom[i] - lr * (rescale * g[i] + wd * weight[i]);
      weight[i] += mom[i];
    }
    engine->Push(2, step + 1, {Incoming(3, grad)}, [](absl::Status s) { REQUIRE(s.ok()); });
  }
  REQUIRE(MaxAbsDiff(PullAll(*engine, 3, init), weight) <= 1e-12);
  REQUIRE(controller.Run(kCommandStats, "").value() == "keys=1 bytes=48 updater=sgd");
}

// WriteSet writes a checkpoint set of one server into `dir` through the commands the
// scheduler's coordinator sends (7-11), and returns the server file's path.
absl::StatusOr<std::string> WriteSet(Controller& controller, const std::string& dir,
                                     const std::string& placement = kPlacement) {
  ASSIGN_OR_RETURN(std::string round, controller.Run(kCommandCutBegin, "job-1"));
  RETURN_IF_ERROR(controller.Run(kCommandCutLimit, "job-1 " + round).status());
  ASSIGN_OR_RETURN(std::string written,
                   controller.Run(kCommandCutWrite, absl::StrCat("job-1 ", round, " job ", dir)));
  std::vector<std::string> f = absl::StrSplit(written, ' ');
  if (f.size() != 3 || f[0] != "written") return absl::InternalError(written);
  proto::CheckpointManifest manifest;
  manifest.set_job_id("job");
  manifest.set_checkpoint_id("job-1");
  manifest.set_round(std::stoll(round));
  manifest.set_num_servers(2);
  manifest.set_mode("dist_sync");
  manifest.set_chunk_bytes(1 << 20);
  manifest.set_placement(placement);
  proto::CheckpointManifest::File* file = manifest.add_files();
  file->set_name("server-0.ckpt");
  file->set_payload_bytes(std::stoull(f[1]));
  file->set_payload_crc32(static_cast<uint32_t>(std::stoul(f[2])));
  // A job of two servers: the other's entry (its file lives on its own machine).
  *manifest.add_files() = *file;
  manifest.mutable_files(1)->set_name("server-1.ckpt");
  ASSIGN_OR_RETURN(std::string path, controller.Run(kCommandCutCommit, dir));
  RETURN_IF_ERROR(
      controller.Run(kCommandCutPublish, dir + "\n" + manifest.SerializeAsString()).status());
  return path;
}

TEST_CASE(
    "Controller: AbandonCut ends what a lost scheduler left half done - the cut, a pending or "
    "committed file - and leaves a published set alone",
    "[server][checkpoint]") {
  TestRng rng;
  INFO(rng.Describe());
  const char* tmp = std::getenv("TEST_TMPDIR");
  auto root = CheckpointRoot::Open(tmp != nullptr ? tmp : "/tmp");
  REQUIRE(root.ok());
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  auto engine = NewEngine(true, {3});
  Controller controller(engine.get(), &registry, nullptr, /*rank=*/0);
  controller.SetJob(JobShape{2, "dist_sync", 1 << 20});
  controller.SetCheckpointRoot(*root);
  const Tensor init = rng.RandomTensor(DType::kFloat32, {4});
  REQUIRE(engine->Init(3, {Incoming(2, init)}).ok());
  const std::string base = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/");
  auto exists = [&](const std::string& path) { return std::filesystem::exists(base + path); };
  CHECK(controller.AbandonCut().value().empty());

  // Frozen by a cut: a push of a new round is held until the cut ends.
  REQUIRE(controller.Run(kCommandCutBegin, "job-1").ok());
  bool pushed = false;
  engine->Push(3, 1, {Incoming(2, rng.RandomTensor(DType::kFloat32, {4}))},
               [&pushed](absl::Status s) {
                 CHECK(s.ok());
                 pushed = true;
               });
  CHECK(!pushed);
  CHECK(controller.AbandonCut().value() == "the cut of checkpoint job-1");
  CHECK(pushed);

  // Written under the pending name, or committed without a manifest: removed, with the
  // directory the set would have made.
  for (const bool commit : {false, true}) {
    const std::string dir = commit ? "abandoned-committed/set" : "abandoned-pending/set";
    const std::string round = controller.Run(kCommandCutBegin, "job-2").value();
    REQUIRE(controller.Run(kCommandCutLimit, "job-2 " + round).ok());
    REQUIRE(absl::StartsWith(
        controller.Run(kCommandCutWrite, absl::StrCat("job-2 ", round, " job ", dir)).value(),
        "written "));
    REQUIRE(exists(dir + "/" + PendingFileName(0)));
    if (commit) REQUIRE(controller.Run(kCommandCutCommit, dir).ok());
    CHECK(exists(dir + "/" + (commit ? CheckpointFileName(0) : PendingFileName(0))));
    const std::string ended = controller.AbandonCut().value();
    INFO(ended);
    CHECK(absl::StrContains(ended, "in " + dir));
    CHECK(!exists(dir));
  }
  // A published set is the scheduler's finished work: nothing to end, nothing removed.
  const absl::StatusOr<std::string> path = WriteSet(controller, "abandoned-published");
  REQUIRE(path.ok());
  CHECK(controller.AbandonCut().value().empty());
  CHECK(std::filesystem::exists(*path));
  CHECK(exists(std::string("abandoned-published/") + kManifestFileName));
}

TEST_CASE("Controller: a checkpoint restores into the same job only", "[server][checkpoint]") {
  TestRng rng;
  INFO(rng.Describe());
  const char* tmp = std::getenv("TEST_TMPDIR");
  auto root = CheckpointRoot::Open(tmp != nullptr ? tmp : "/tmp");
  REQUIRE(root.ok());
  const std::string dir = "engine-ckpt/nested";
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  auto engine = NewEngine(true, {2});
  Controller controller(engine.get(), &registry, nullptr, /*rank=*/0);
  controller.SetJob(JobShape{2, "dist_sync", 1 << 20});
  const Tensor init = rng.RandomTensor(DType::kFloat32, {2, 3});
  REQUIRE(engine->Init(2, {Incoming("w", init)}).ok());
  // Without a root a server neither writes nor restores checkpoints.
  CHECK(absl::IsFailedPrecondition(controller.Run(kCommandCheckpoint, dir).status()));
  CHECK(absl::IsFailedPrecondition(controller.Restore(dir)));
  controller.SetCheckpointRoot(*root);
  CHECK(absl::IsInvalidArgument(controller.Run(kCommandCheckpoint, "../up").status()));
  CHECK(absl::IsInvalidArgument(controller.Run(kCommandCheckpoint, " ").status()));
  CHECK(controller.Run(kCommandCheckpoint, dir).ok());  // One server's file, outside a set.
  // Without a manifest, the directory is no checkpoint set: refused, naming the manifest.
  {
    auto engine0 = NewEngine(true, {2});
    Controller refusing(engine0.get(), &registry, nullptr, 0);
    refusing.SetJob(JobShape{2, "dist_sync", 1 << 20});
    refusing.SetCheckpointRoot(*root);
    const absl::Status partial = refusing.Restore(dir);
    CHECK(absl::IsFailedPrecondition(partial));
    CHECK(partial.message().find(dir + "/MANIFEST is missing") != absl::string_view::npos);
  }
  auto path = WriteSet(controller, dir);
  INFO(path.status().ToString());
  REQUIRE(path.ok());
  REQUIRE(*path == (*root)->path() + "/" + dir + "/server-0.ckpt");

  // The same job: the value comes back, and a matching Init keeps it.
  auto restored = NewEngine(true, {2});
  Controller same(restored.get(), &registry, nullptr, 0);
  same.SetJob(JobShape{2, "dist_sync", 1 << 20});
  same.SetCheckpointRoot(*root);
  const absl::Status restore = same.Restore(dir);
  INFO(restore.ToString());
  REQUIRE(restore.ok());
  REQUIRE(restored->Init(2, {Incoming("w", Tensor::Zeros(DType::kFloat32, {2, 3}))}).ok());
  REQUIRE(PullAll(*restored, "w", init) == ToDoubles(init));
  REQUIRE(absl::IsInvalidArgument(
      restored->Init(2, {Incoming("w", Tensor::Zeros(DType::kFloat32, {3, 2}))})));

  // Another number of servers, another rank, or no file: refused, naming the file.
  auto other = NewEngine(true, {2});
  Controller three(other.get(), &registry, nullptr, 0);
  three.SetJob(JobShape{3, "dist_sync", 1 << 20});
  three.SetCheckpointRoot(*root);
  absl::Status s = three.Restore(dir);
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(s.message().find((*root)->path() + "/" + dir + "/MANIFEST") != absl::string_view::npos);
  Controller rank1(other.get(), &registry, nullptr, 1);
  rank1.SetJob(JobShape{2, "dist_sync", 1 << 20});
  rank1.SetCheckpointRoot(*root);
  s = rank1.Restore(dir);
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(s.message().find(dir + "/server-1.ckpt is missing") != absl::string_view::npos);
  // Another number of servers needs every file of the set: refused, naming the missing one.
  s = three.Restore(dir);
  CHECK(s.message().find("missing: server-1.ckpt") != absl::string_view::npos);
  // A set written under the placement before rendezvous hashing (no placement in its
  // manifest) is re-placed too, so it needs every file even for the same number of servers.
  const std::string old_dir = "engine-ckpt/modulo";
  REQUIRE(WriteSet(controller, old_dir, "").ok());
  Controller old_same(other.get(), &registry, nullptr, 0);
  old_same.SetJob(JobShape{2, "dist_sync", 1 << 20});
  old_same.SetCheckpointRoot(*root);
  s = old_same.Restore(old_dir);
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(s.message().find("older placement") != absl::string_view::npos);
  CHECK(s.message().find("missing: server-1.ckpt") != absl::string_view::npos);
  CHECK(other->stats().num_keys == 0);
}

}  // namespace
}  // namespace kvstore
