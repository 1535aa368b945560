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

// Rounds: every chunk of key i's parts in `files` cut at rounds[i] (chunk_rounds, as a copy
// taken at a cut carries them).
void SetChunkRounds(const std::vector<Reference>& keys, const std::vector<int64_t>& rounds,
                    std::vector<proto::ShardCheckpoint>* files) {
  for (proto::ShardCheckpoint& file : *files) {
    for (proto::CheckpointValue& value : *file.mutable_values()) {
      const Key key = KeyFromProto(value.header().key()).value();
      size_t i = 0;
      while (!(keys[i].key == key)) ++i;
      const Slice part{0, value.header().element_offset(), value.header().element_count()};
      for (size_t c = 0; c < ChunkSlice(part, DTypeSize(keys[i].dtype), file.chunk_bytes()).size();
           ++c) {
        value.add_chunk_rounds(rounds[i]);
      }
    }
  }
}

TEST_CASE("CheckpointPartFor: the pieces every old server sends one new server make its shard",
          "[checkpoint]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 60; ++trial) {
    const std::vector<Reference> keys = RandomKeys(rng);
    const int from = static_cast<int>(rng.Int(1, 5)), to = static_cast<int>(rng.Int(1, 5));
    const int64_t bound = rng.Int(1, 60);
    const int64_t chunk = rng.Int(8, 200);
    INFO("trial " << trial << ": " << keys.size() << " keys, " << from << " -> " << to
                  << " servers, bound " << bound << ", chunks of " << chunk << " bytes");
    std::vector<proto::ShardCheckpoint> files = WriteSet(keys, from, bound, chunk);
    std::vector<int64_t> rounds;
    for (size_t i = 0; i < keys.size(); ++i) rounds.push_back(rng.Int(0, 20));
    SetChunkRounds(keys, rounds, &files);
    const Partitioner after = Partitioner::Create(to, bound).value();
    int64_t moved = 0, whole = 0;
    for (const proto::ShardCheckpoint& file : files) whole += file.ByteSizeLong();
    for (int rank = 0; rank < to; ++rank) {
      std::vector<proto::ShardCheckpoint> parts;
      for (const proto::ShardCheckpoint& file : files) {
        absl::StatusOr<proto::ShardCheckpoint> part = CheckpointPartFor(file, rank, after);
        INFO(part.status().ToString());
        REQUIRE(part.ok());
        moved += part->ByteSizeLong();
        parts.push_back(*std::move(part));
      }
      std::shuffle(parts.begin(), parts.end(), rng.engine());
      absl::StatusOr<proto::ShardCheckpoint> merged =
          ReshardCheckpoint(parts, rank, after, chunk, /*pieces=*/true);
      absl::StatusOr<proto::ShardCheckpoint> reference =
          ReshardCheckpoint(files, rank, after, chunk);
      INFO(merged.status().ToString() << " / " << reference.status().ToString());
      REQUIRE(merged.ok());
      REQUIRE(reference.ok());
      // The same values and states as re-placing from every whole file.
      // (In the order the keys first appear, which differs: compared by key and offset.)
      auto by_key = [](const auto& items, auto key_of) {
        std::map<std::pair<std::string, int64_t>, std::string> out;
        for (const auto& item : items) out[key_of(item)] = item.SerializeAsString();
        return out;
      };
      auto value_key = [](const proto::CheckpointValue& v) {
        return std::make_pair(v.header().key().SerializeAsString(), v.header().element_offset());
      };
      auto state_key = [](const proto::PartState& p) {
        return std::make_pair(p.key().SerializeAsString(), p.offset());
      };
      std::map<std::pair<std::string, int64_t>, const proto::CheckpointValue*> wanted;
      for (const proto::CheckpointValue& v : reference->values()) wanted[value_key(v)] = &v;
      REQUIRE(merged->values_size() == reference->values_size());
      for (int v = 0; v < merged->values_size(); ++v) {
        const proto::CheckpointValue& got = merged->values(v);
        REQUIRE(wanted.count(value_key(got)) == 1);
        const proto::CheckpointValue& want = *wanted[value_key(got)];
        REQUIRE(got.header().SerializeAsString() == want.header().SerializeAsString());
        REQUIRE(got.data() == want.data());
        // Each new chunk carries on from its key's round.
        const Key key = KeyFromProto(got.header().key()).value();
        size_t i = 0;
        while (!(keys[i].key == key)) ++i;
        const Slice part{rank, got.header().element_offset(), got.header().element_count()};
        const size_t n_chunks = ChunkSlice(part, DTypeSize(keys[i].dtype), chunk).size();
        REQUIRE(static_cast<size_t>(got.chunk_rounds_size()) == n_chunks);
        for (int64_t r : got.chunk_rounds()) REQUIRE(r == rounds[i]);
      }
      REQUIRE(by_key(merged->updater_state().parts(), state_key) ==
              by_key(reference->updater_state().parts(), state_key));
    }
    // Each new server gets its own part, not every whole file: in all, about one copy of
    // the job's values moves (state parts overlapping two new slices go to both).
    INFO("moved " << moved << " bytes of " << whole);
    REQUIRE(moved <= 2 * whole + 4096 * to * from);
  }
}

TEST_CASE("CheckpointPartFor: chunks cut at different rounds cannot form one new chunk",
          "[checkpoint]") {
  TestRng rng;
  INFO(rng.Describe());
  Reference big;
  big.key = Key("embedding");
  big.shape = {40, 4};
  big.bytes = RandomBytes(rng, 160 * 4);
  const std::vector<Reference> keys = {big};
  // Split over 2 servers in chunks of 16 floats; server 1's chunks cut one round later.
  std::vector<proto::ShardCheckpoint> files = WriteSet(keys, 2, 10, 64);
  SetChunkRounds(keys, {5}, &files);
  for (int64_t& r : *files[1].mutable_values(0)->mutable_chunk_rounds()) r = 6;
  const Partitioner one = Partitioner::Create(1, 10).value();
  std::vector<proto::ShardCheckpoint> parts;
  for (const proto::ShardCheckpoint& file : files) {
    parts.push_back(CheckpointPartFor(file, 0, one).value());
  }
  // One server's chunks of 1 MiB: the whole value is one chunk, cut at rounds 5 and 6.
  const absl::Status s = ReshardCheckpoint(parts, 0, one, 1 << 20, /*pieces=*/true).status();
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(s.message().find("\"embedding\"") != absl::string_view::npos);
  CHECK(s.message().find("rounds 5 and 6") != absl::string_view::npos);
  // Without server 1's pieces, its elements are missing.
  const absl::Status missing = ReshardCheckpoint({parts[0]}, 0, one, 64, /*pieces=*/true).status();
  CHECK(absl::IsDataLoss(missing));
  CHECK(missing.message().find("\"embedding\"") != absl::string_view::npos);
}

}  // namespace
}  // namespace kvstore
