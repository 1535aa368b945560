// ReshardCheckpoint over random sets: keys small and split, of several dtypes, with optimizer
// state in chunks, written by S servers and re-placed for S' servers with another chunk size.
// The reference is each key's whole value and state buffers, kept apart from the files.
#include "server/core/checkpoint_reshard.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/partitioner.h"
#include "common/proto_convert.h"
#include "common/row_sparse.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

// Reference: a key's whole value and, when it has optimizer state, its two state buffers
// (float64, per element), update count and float32 master weights.
struct Reference {
  Key key = 0;
  DType dtype = DType::kFloat32;
  Shape shape;
  std::string bytes;
  bool has_state = false;
  int64_t updates = 0;
  std::vector<std::string> buffers;  // float64 per element.
  std::string master;                // float32 per element, for float16 keys.
};

std::string RandomBytes(TestRng& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng.Int(0, 255));
  return s;
}

std::vector<Reference> RandomKeys(TestRng& rng) {
  std::vector<Reference> keys;
  const int n = static_cast<int>(rng.Int(1, 30));
  for (int i = 0; i < n; ++i) {
    Reference r;
    r.key = i % 2 == 0 ? Key(int64_t{i} * 7919) : Key("param" + std::to_string(i));
    const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16};
    r.dtype = dtypes[rng.Int(0, 2)];
    r.shape = {rng.Int(1, 20), rng.Int(1, 7)};
    if (rng.Int(0, 9) == 0) r.shape = {0};
    const int64_t elements = NumElements(r.shape);
    r.bytes = RandomBytes(rng, elements * DTypeSize(r.dtype));
    r.has_state = rng.Int(0, 3) != 0;
    if (r.has_state) {
      r.updates = rng.Int(1, 50);
      for (int b = 0; b < 2; ++b) r.buffers.push_back(RandomBytes(rng, elements * 8));
      // A buffer the optimizer leaves unused is saved empty.
      if (rng.Int(0, 2) == 0) r.buffers.push_back("");
      if (r.dtype == DType::kFloat16) r.master = RandomBytes(rng, elements * 4);
    }
    keys.push_back(std::move(r));
  }
  return keys;
}

proto::PartState StateOf(const Reference& r, int64_t offset, int64_t count) {
  proto::PartState s;
  KeyToProto(r.key, s.mutable_key());
  s.set_offset(offset);
  s.set_count(count);
  s.set_updates(r.updates);
  s.set_m_schedule(0.5);
  s.set_dtype(proto::FLOAT64);
  for (const std::string& b : r.buffers) {
    s.add_buffers(b.empty() ? "" : b.substr(offset * 8, count * 8));
  }
  if (!r.master.empty()) s.set_master(r.master.substr(offset * 4, count * 4));
  return s;
}

// WriteSet returns the files of a set written by `servers` servers in chunks of `chunk_bytes`.
std::vector<proto::ShardCheckpoint> WriteSet(const std::vector<Reference>& keys, int servers,
                                             int64_t bound, int64_t chunk_bytes) {
  const Partitioner partitioner = Partitioner::Create(servers, bound).value();
  std::vector<proto::ShardCheckpoint> files(servers);
  for (int r = 0; r < servers; ++r) {
    files[r].set_server_rank(r);
    files[r].set_num_servers(servers);
    files[r].set_mode("dist_sync");
    files[r].set_chunk_bytes(chunk_bytes);
    files[r].set_job_id("job");
    files[r].set_checkpoint_id("ckpt-7");
    files[r].set_round(12);
    files[r].mutable_updater()->set_registry_name("adam");
    files[r].mutable_updater_state()->set_optimizer("adam");
    files[r].mutable_updater_state()->set_num_update(40 + r);
  }
  for (const Reference& ref : keys) {
    const size_t element = DTypeSize(ref.dtype);
    for (const Slice& slice :
         partitioner.Partition(ref.key, NumElements(ref.shape), RowElements(ref.shape))) {
      proto::CheckpointValue* value = files[slice.server].add_values();
      KeyToProto(ref.key, value->mutable_header()->mutable_key());
      value->mutable_header()->set_dtype(DTypeToProto(ref.dtype));
      for (int64_t d : ref.shape) value->mutable_header()->add_shape(d);
      value->mutable_header()->set_element_offset(slice.offset);
      value->mutable_header()->set_element_count(slice.count);
      value->set_data(ref.bytes.substr(slice.offset * element, slice.count * element));
      if (!ref.has_state) continue;
      for (const Slice& chunk : ChunkSlice(slice, element, chunk_bytes)) {
        *files[slice.server].mutable_updater_state()->add_parts() =
            StateOf(ref, chunk.offset, chunk.count);
      }
    }
  }
  return files;
}

TEST_CASE("ReshardCheckpoint: every key lands where the new placement puts it, with its state",
          "[checkpoint]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 60; ++trial) {
    const std::vector<Reference> keys = RandomKeys(rng);
    const int from = static_cast<int>(rng.Int(1, 5)), to = static_cast<int>(rng.Int(1, 5));
    const int64_t bound = rng.Int(1, 60);
    const int64_t old_chunk = rng.Int(8, 200), new_chunk = rng.Int(8, 200);
    INFO("trial " << trial << ": " << keys.size() << " keys, " << from << " -> " << to
                  << " servers, bound " << bound << ", chunks " << old_chunk << " -> " << new_chunk
                  << " bytes");
    std::vector<proto::ShardCheckpoint> files = WriteSet(keys, from, bound, old_chunk);
    std::shuffle(files.begin(), files.end(), rng.engine());
    const Partitioner after = Partitioner::Create(to, bound).value();
    std::map<std::string, int64_t> elements_seen;  // Per key, over the new servers.
    for (int rank = 0; rank < to; ++rank) {
      absl::StatusOr<proto::ShardCheckpoint> out = ReshardCheckpoint(files, rank, after, new_chunk);
      INFO(out.status().ToString());
      REQUIRE(out.ok());
      REQUIRE(out->server_rank() == rank);
      REQUIRE(out->num_servers() == to);
      REQUIRE(out->chunk_bytes() == new_chunk);
      REQUIRE(out->checkpoint_id() == "ckpt-7");
      REQUIRE(out->round() == 12);
      REQUIRE(out->updater().registry_name() == "adam");
      REQUIRE(out->updater_state().num_update() == 40 + from - 1);
      // The state parts of this server, by (key, offset).
      std::map<std::pair<std::string, int64_t>, const proto::PartState*> states;
      for (const proto::PartState& s : out->updater_state().parts()) {
        REQUIRE(states.emplace(std::make_pair(s.key().SerializeAsString(), s.offset()), &s).second);
      }
      size_t states_expected = 0;
      for (const Reference& ref : keys) {
        const size_t element = DTypeSize(ref.dtype);
        proto::Key key_proto;
        KeyToProto(ref.key, &key_proto);
        for (const Slice& slice :
             after.Partition(ref.key, NumElements(ref.shape), RowElements(ref.shape))) {
          if (slice.server != rank) continue;
          // The value: found on this server with the reference's bytes.
          const proto::CheckpointValue* found = nullptr;
          for (const proto::CheckpointValue& v : out->values()) {
            if (v.header().key().SerializeAsString() == key_proto.SerializeAsString() &&
                v.header().element_offset() == slice.offset) {
              found = &v;
            }
          }
          INFO("key " << ref.key.Quoted() << " slice at " << slice.offset);
          REQUIRE(found != nullptr);
          REQUIRE(found->header().element_count() == slice.count);
          REQUIRE(found->header().dtype() == DTypeToProto(ref.dtype));
          REQUIRE(found->data() == ref.bytes.substr(slice.offset * element, slice.count * element));
          elements_seen[key_proto.SerializeAsString()] += slice.count;
          // The state: one part per new chunk, the reference's elements.
          if (!ref.has_state) continue;
          for (const Slice& chunk : ChunkSlice(slice, element, new_chunk)) {
            ++states_expected;
            auto it = states.find({key_proto.SerializeAsString(), chunk.offset});
            REQUIRE(it != states.end());
            const proto::PartState& s = *it->second;
            const proto::PartState want = StateOf(ref, chunk.offset, chunk.count);
            REQUIRE(s.count() == chunk.count);
            REQUIRE(s.updates() == ref.updates);
            REQUIRE(s.buffers_size() == want.buffers_size());
            for (int b = 0; b < want.buffers_size(); ++b) REQUIRE(s.buffers(b) == want.buffers(b));
            REQUIRE(s.master() == want.master());
          }
        }
      }
      REQUIRE(states.size() == states_expected);  // No state for keys that had none.
    }
    // Every element of every key is on exactly one new server.
    for (const Reference& ref : keys) {
      proto::Key key_proto;
      KeyToProto(ref.key, &key_proto);
      REQUIRE(elements_seen[key_proto.SerializeAsString()] == NumElements(ref.shape));
    }
  }
}

TEST_CASE("ReshardCheckpoint: a missing file or disagreeing state is refused, naming the key",
          "[checkpoint]") {
  TestRng rng;
  INFO(rng.Describe());
  std::vector<Reference> keys;
  Reference big;
  big.key = Key("embedding");
  big.shape = {40, 4};
  big.bytes = RandomBytes(rng, 160 * 4);
  big.has_state = true;
  big.updates = 3;
  for (int b = 0; b < 2; ++b) big.buffers.push_back(RandomBytes(rng, 160 * 8));
  keys.push_back(big);
  const Partitioner one = Partitioner::Create(1, 10).value();
  // Without server 1's file, the split key has a gap.
  std::vector<proto::ShardCheckpoint> files = WriteSet(keys, 3, 10, 64);
  std::vector<proto::ShardCheckpoint> partial = {files[0], files[2]};
  absl::Status s = ReshardCheckpoint(partial, 0, one, 1 << 20).status();
  CHECK(absl::IsDataLoss(s));
  CHECK(s.message().find("\"embedding\"") != absl::string_view::npos);
  // Chunks of one key at different update counts cannot merge into one chunk.
  for (proto::PartState& part : *files[1].mutable_updater_state()->mutable_parts()) {
    if (part.key().str_key() == "embedding") part.set_updates(4);
  }
  s = ReshardCheckpoint(files, 0, one, 1 << 20).status();
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(s.message().find("\"embedding\"") != absl::string_view::npos);
  CHECK(s.message().find("update counts") != absl::string_view::npos);
  // Files naming different updaters.
  files = WriteSet(keys, 2, 10, 64);
  files[1].mutable_updater()->set_registry_name("sgd");
  CHECK(absl::IsFailedPrecondition(ReshardCheckpoint(files, 0, one, 64).status()));
}

}  // namespace
}  // namespace kvstore
