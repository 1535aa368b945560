// Tests of the shard encoding: random shards, cut into fragments of random small sizes (values
// cut into pieces among them), read back equal to what was written; a shard that fits is its
// plain serialization; damaged bytes are refused, naming what is wrong.
#include "server/core/shard_encoding.h"

#include <catch2/catch.hpp>
#include <string>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "common/proto_convert.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

std::string RandomBytes(TestRng& rng, size_t n) {
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng.Int(0, 255));
  return bytes;
}

// RandomShard: `values` values of up to `max_bytes` bytes each, with chunk rounds, an updater
// with parts of state, applied request ids and every scalar set.
proto::ShardCheckpoint RandomShard(TestRng& rng, int values, size_t max_bytes) {
  proto::ShardCheckpoint shard;
  shard.set_server_rank(static_cast<int>(rng.Int(0, 7)));
  shard.set_num_servers(8);
  shard.set_mode("dist_sync");
  shard.set_chunk_bytes(rng.Int(1, 1 << 20));
  shard.set_job_id(absl::StrCat("job-", rng.Int(0, 1000)));
  shard.set_checkpoint_id(absl::StrCat("ckpt-", rng.Int(0, 1000)));
  shard.set_round(rng.Int(-1, 1000));
  shard.mutable_updater()->set_registry_name("sgd");
  shard.mutable_updater_state()->set_optimizer("adam");
  shard.mutable_updater_state()->set_num_update(rng.Int(0, 100));
  for (int v = 0; v < values; ++v) {
    proto::CheckpointValue* value = shard.add_values();
    KeyToProto(Key(int64_t{v * 7 + 1}), value->mutable_header()->mutable_key());
    const size_t bytes = static_cast<size_t>(rng.Int(0, static_cast<int64_t>(max_bytes)));
    value->mutable_header()->set_dtype(proto::FLOAT32);
    value->mutable_header()->add_shape(static_cast<int64_t>(bytes / 4));
    value->mutable_header()->set_element_count(static_cast<int64_t>(bytes / 4));
    value->set_data(RandomBytes(rng, bytes / 4 * 4));
    for (int r = static_cast<int>(rng.Int(0, 5)); r > 0; --r)
      value->add_chunk_rounds(rng.Int(0, 99));
    proto::PartState* part = shard.mutable_updater_state()->add_parts();
    *part->mutable_key() = value->header().key();
    part->set_count(static_cast<int64_t>(bytes / 4));
    part->set_updates(rng.Int(0, 50));
    part->add_buffers(RandomBytes(rng, static_cast<size_t>(rng.Int(0, 300))));
  }
  proto::AppliedRequestIds* applied = shard.add_applied();
  applied->set_node_id(5);
  for (int i = 0; i < 10; ++i) applied->add_request_ids(rng.Int(0, 1 << 30));
  return shard;
}

TEST_CASE("Shard encoding: fragments of any size read back as the shard written",
          "[server][checkpoint]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 40; ++trial) {
    const proto::ShardCheckpoint shard =
        RandomShard(rng, static_cast<int>(rng.Int(0, 12)), static_cast<size_t>(rng.Int(0, 20000)));
    const size_t limit = static_cast<size_t>(rng.Int(1024, 30000));
    INFO("trial " << trial << ": " << shard.ByteSizeLong() << " bytes in fragments of " << limit);
    absl::StatusOr<std::string> encoded = EncodeShard(shard, limit);
    REQUIRE(encoded.ok());
    const bool fragmented = shard.ByteSizeLong() > limit;
    CHECK(fragmented == (encoded->rfind(kFragmentedMagic, 0) == 0));
    if (!fragmented) CHECK(*encoded == shard.SerializeAsString());
    absl::StatusOr<proto::ShardCheckpoint> decoded = DecodeShard(*encoded);
    INFO(decoded.status().ToString());
    REQUIRE(decoded.ok());
    CHECK(decoded->SerializeAsString() == shard.SerializeAsString());
    if (!fragmented) continue;
    // Every fragment within the limit.
    size_t at = sizeof(kFragmentedMagic) - 1 + 8;
    while (at < encoded->size()) {
      const uint64_t length = absl::little_endian::Load64(encoded->data() + at);
      CHECK(length <= limit);
      at += 8 + length;
    }
    CHECK(at == encoded->size());
    // Cut short anywhere: refused, never a shard with less in it.
    const size_t cut = static_cast<size_t>(
        rng.Int(sizeof(kFragmentedMagic) - 1, static_cast<int64_t>(encoded->size()) - 1));
    const absl::Status shortened = DecodeShard(absl::string_view(*encoded).substr(0, cut)).status();
    INFO("cut at " << cut << ": " << shortened.ToString());
    CHECK(absl::IsDataLoss(shortened));
  }
}

TEST_CASE("Shard encoding: damaged fragments are refused, naming what is wrong",
          "[server][checkpoint]") {
  TestRng rng;
  INFO(rng.Describe());
  proto::ShardCheckpoint shard = RandomShard(rng, 3, 0);
  shard.mutable_values(0)->set_data(RandomBytes(rng, 5000));
  const std::string encoded = EncodeShard(shard, 2048).value();
  REQUIRE(encoded.rfind(kFragmentedMagic, 0) == 0);
  // A length past the end.
  std::string damaged = encoded;
  damaged[sizeof(kFragmentedMagic) - 1 + 8 + 7] = '\x7f';
  absl::Status status = DecodeShard(damaged).status();
  CHECK(absl::IsDataLoss(status));
  CHECK(status.message().find("end inside fragment 0") != absl::string_view::npos);
  // A fragment left out.
  damaged = encoded;
  damaged[sizeof(kFragmentedMagic) - 1] += 1;
  status = DecodeShard(damaged).status();
  CHECK(absl::IsDataLoss(status));
  CHECK(status.message().find("fragments of the") != absl::string_view::npos);
  // Plain bytes that do not parse.
  status = DecodeShard("\xff\xff\xff").status();
  CHECK(absl::IsDataLoss(status));
  CHECK(status.message().find("do not parse") != absl::string_view::npos);
  // Fragments too small to be useful.
  CHECK(absl::IsInvalidArgument(EncodeShard(shard, 100).status()));
}

}  // namespace
}  // namespace kvstore
