// A shard over protobuf's 2 GiB limit - one float32 value of 2.2 GB - written as a checkpoint
// set and restored, and copied as a replacement server's join copies it (commands 14 and 15),
// every element compared. Before shard_encoding.h, both wrote an empty message: the set was
// published, and restoring it failed.
//
// About 11 GB of memory and a 2.2 GB file: tagged manual, run with
//   kv_bazel test //server/core:big_shard_test
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/partitioner.h"
#include "common/status_macros.h"
#include "server/core/checkpoint_root.h"
#include "server/core/checkpoint_set.h"
#include "server/core/controller.h"
#include "server/core/server_engine.h"
#include "server/core/server_engine_test_util.h"

namespace kvstore {
namespace {

using testing::Incoming;
using testing::NewEngine;

constexpr int64_t kElements = 550'000'000;  // 2.2 GB of float32.
constexpr uint64_t kWorker = 3;
const JobShape kJob{1, "dist_sync", 1 << 20};

float Pattern(int64_t i) { return static_cast<float>(i % 1000003) * 0.5f; }

// Filled: an engine holding key 9 with the pattern.
std::unique_ptr<ServerEngine> Filled() {
  auto engine = NewEngine(true, {kWorker});
  Tensor value = Tensor::Zeros(DType::kFloat32, {kElements});
  float* v = value.data_as<float>();
  for (int64_t i = 0; i < kElements; ++i) v[i] = Pattern(i);
  REQUIRE(engine->Init(kWorker, {Incoming(Key(int64_t{9}), value, size_t{1} << 26)}).ok());
  return engine;
}

// Holds requires `engine` to hold key 9 with the pattern, every element (pulled chunk by
// chunk, as workers pull a value split in chunks).
void Holds(const ServerEngine& engine) {
  const int64_t kChunk = kDefaultChunkBytes / 4;
  int64_t wrong = 0;
  for (int64_t at = 0; at < kElements; at += kChunk) {
    const int64_t count = std::min(kChunk, kElements - at);
    const ValueSlice slice{Key(int64_t{9}), DType::kFloat32, {kElements}, at, count};
    absl::StatusOr<std::vector<Tensor>> pulled = engine.Pull(kWorker, {slice});
    INFO(pulled.status().ToString());
    REQUIRE(pulled.ok());
    const float* v = (*pulled)[0].data_as<float>();
    for (int64_t i = 0; i < count; ++i) wrong += v[i] != Pattern(at + i);
  }
  CHECK(wrong == 0);
}

TEST_CASE("A 2.2 GB shard: a checkpoint set restores it", "[server][checkpoint][big]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  auto root = CheckpointRoot::Open(tmp != nullptr ? tmp : "/tmp");
  REQUIRE(root.ok());
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  {
    auto engine = Filled();
    Controller controller(engine.get(), &registry, nullptr, 0);
    controller.SetJob(kJob);
    controller.SetCheckpointRoot(*root);
    const std::string round = controller.Run(kCommandCutBegin, "big-1").value();
    REQUIRE(controller.Run(kCommandCutLimit, "big-1 " + round).ok());
    const absl::StatusOr<std::string> written =
        controller.Run(kCommandCutWrite, absl::StrCat("big-1 ", round, " job big"));
    INFO(written.status().ToString());
    REQUIRE(written.ok());
    const std::vector<std::string> f = absl::StrSplit(*written, ' ');
    REQUIRE(f.size() == 3);
    CHECK(std::stoull(f[1]) > static_cast<uint64_t>(kElements) * 4);
    proto::CheckpointManifest manifest;
    manifest.set_job_id("job");
    manifest.set_checkpoint_id("big-1");
    manifest.set_round(std::stoll(round));
    manifest.set_num_servers(1);
    manifest.set_mode("dist_sync");
    manifest.set_chunk_bytes(1 << 20);
    manifest.set_placement(kPlacement);
    proto::CheckpointManifest::File* file = manifest.add_files();
    file->set_name(CheckpointFileName(0));
    file->set_payload_bytes(std::stoull(f[1]));
    file->set_payload_crc32(static_cast<uint32_t>(std::stoul(f[2])));
    REQUIRE(controller.Run(kCommandCutCommit, "big").ok());
    REQUIRE(controller.Run(kCommandCutPublish, "big\n" + manifest.SerializeAsString()).ok());
  }
  auto restored = NewEngine(true, {kWorker});
  Controller controller(restored.get(), &registry, nullptr, 0);
  controller.SetJob(kJob);
  controller.SetCheckpointRoot(*root);
  const absl::Status status = controller.Restore("big");
  INFO(status.ToString());
  REQUIRE(status.ok());
  Holds(*restored);
}

TEST_CASE("A 2.2 GB shard: a join's copy loads it", "[server][replicas][big]") {
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  auto source = Filled();
  Controller out(source.get(), &registry, nullptr, 0);
  out.SetJob(kJob);
  auto target = NewEngine(true, {kWorker});
  Controller in(target.get(), &registry, nullptr, 0);
  in.SetJob(kJob);
  const std::string round = out.Run(kCommandCutBegin, "join-1-0").value();
  REQUIRE(out.Run(kCommandCutLimit, "join-1-0 " + round).ok());
  const absl::StatusOr<std::string> copied =
      out.Run(kCommandCopyOut, absl::StrCat("cut join-1-0 ", round, " 1"));
  INFO(copied.status().ToString());
  REQUIRE(copied.ok());
  const std::vector<std::string> f = absl::StrSplit(*copied, ' ');
  REQUIRE(f.size() == 3);
  CHECK(std::stoull(f[1]) > static_cast<uint64_t>(kElements) * 4);
  REQUIRE(in.Run(kCommandCopyIn, absl::StrCat("begin ", f[1], " 7")).ok());
  out.SetCopySender([&in](const std::string&, bool, absl::string_view copy) -> absl::Status {
    constexpr size_t kPage = size_t{64} << 20;
    for (size_t offset = 0; offset < copy.size(); offset += kPage) {
      RETURN_IF_ERROR(
          in.Run(kCommandCopyIn, absl::StrCat("put ", offset, "\n", copy.substr(offset, kPage)))
              .status());
    }
    return absl::OkStatus();
  });
  REQUIRE(out.Run(kCommandCopyOut, "send join-1-0 127.0.0.1:9 0").ok());
  REQUIRE(out.Run(kCommandCopyOut, "end join-1-0").ok());
  source.reset();
  const absl::StatusOr<std::string> loaded =
      in.Run(kCommandCopyIn, absl::StrCat("load ", f[1], " ", f[2]));
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  Holds(*target);
}

}  // namespace
}  // namespace kvstore
