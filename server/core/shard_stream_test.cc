// Tests of shard streams: a dist_sync engine's shard streamed page by page, read from its
// chunks, into an empty engine, and every way a stream is refused.
#include "server/core/shard_stream.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/proto_convert.h"
#include "common/state_file.h"
#include "server/core/server_engine_test_util.h"
#include "server/core/shard_encoding.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::MaxAbsDiff;
using testing::NewSumEngine;
using testing::TestRng;
using testing::ToDoubles;

// Shard: a source engine (dist_sync, sum updater, workers 2 and 3) holding random parts of 1-D
// values, each pushed for 1 or 2 rounds, and the float64 reference of every part.
struct Shard {
  std::unique_ptr<ServerEngine> engine;
  std::map<Key, std::vector<double>> reference;
};

Shard MakeShard(TestRng& rng, int64_t chunk_bytes) {
  Shard shard{NewSumEngine(true, {2, 3}, chunk_bytes), {}};
  const int keys = static_cast<int>(rng.Int(1, 8));
  uint64_t request_id = 0;  // Each push its own: a repeated id is applied once.
  for (int k = 0; k < keys; ++k) {
    const Key key(static_cast<int64_t>(k * 7 + 1));
    const DType dtype = rng.AnyFloatDType();
    const int64_t n = rng.Int(1, 300);
    const int64_t offset = rng.Int(0, n - 1);
    const int64_t count = rng.Int(1, n - offset);
    const ValueSlice layout{key, dtype, {n}, offset, count};
    const Tensor init = rng.RandomTensor(dtype, {count});
    REQUIRE(shard.engine->Init(2, {testing::Incoming(key, init, 7, layout)}).ok());
    std::vector<double> reference = ToDoubles(init);
    const int rounds = static_cast<int>(rng.Int(1, 2));
    const size_t element = DTypeSize(dtype);
    for (int round = 0; round < rounds; ++round) {
      for (uint64_t worker : {2, 3}) {
        const Tensor pushed = rng.RandomTensor(dtype, {count});
        const std::vector<double> as_doubles = ToDoubles(pushed);
        for (int64_t i = 0; i < count; ++i) reference[i] += as_doubles[i];
        for (const Slice& chunk : ChunkSlice(Slice{0, offset, count}, element, chunk_bytes)) {
          IncomingValue value;
          value.slice = ValueSlice{key, dtype, {n}, chunk.offset, chunk.count};
          value.bytes = {absl::Span<const uint8_t>(
              static_cast<const uint8_t*>(pushed.data()) + (chunk.offset - offset) * element,
              static_cast<size_t>(chunk.count) * element)};
          bool applied = false;
          shard.engine->Push(worker, ++request_id, {value}, [&applied](absl::Status s) {
            REQUIRE(s.ok());
            applied = true;
          });
          if (worker == 3) CHECK(applied);
        }
      }
    }
    shard.reference[key] = std::move(reference);
  }
  return shard;
}

// Header: the shard's ShardCheckpoint without the values' bytes, encoded, and its layouts.
struct Header {
  std::string bytes;
  std::vector<ValueSlice> layouts;
};

Header HeaderOf(const EngineSnapshot& described) {
  proto::ShardCheckpoint checkpoint;
  Header header;
  for (const StoredPart& part : described.parts) {
    proto::CheckpointValue* value = checkpoint.add_values();
    KeyToProto(part.layout.key, value->mutable_header()->mutable_key());
    value->mutable_header()->set_dtype(DTypeToProto(part.layout.dtype));
    for (int64_t d : part.layout.shape) value->mutable_header()->add_shape(d);
    value->mutable_header()->set_element_offset(part.layout.offset);
    value->mutable_header()->set_element_count(part.layout.count);
    for (int64_t r : part.chunk_rounds) value->add_chunk_rounds(r);
    header.layouts.push_back(part.layout);
  }
  absl::StatusOr<std::string> encoded = EncodeShard(std::move(checkpoint));
  REQUIRE(encoded.ok());
  header.bytes = *std::move(encoded);
  return header;
}

// DescribedHeader: the header of a stream of `engine`'s shard, as a cut describes it.
Header DescribedHeader(const ServerEngine& engine) {
  absl::StatusOr<EngineSnapshot> described = engine.state().Describe();
  REQUIRE(described.ok());
  return HeaderOf(*described);
}

// StreamOf: the stream `header` heads, its values read from `engine`.
ShardStreamOut StreamOf(const Header& header, const ServerEngine& engine) {
  absl::StatusOr<StreamedParts> parts = StreamedParts::Of(header.layouts, header.bytes.size());
  REQUIRE(parts.ok());
  return ShardStreamOut(header.bytes, *parts, &engine.state());
}

// PartsOfHeader reads a header's parts back, as a controller's check does.
absl::StatusOr<std::vector<StoredPart>> PartsOfHeader(const proto::ShardCheckpoint& header) {
  std::vector<StoredPart> parts;
  for (const proto::CheckpointValue& value : header.values()) {
    const proto::TensorHeader& h = value.header();
    StoredPart part;
    absl::StatusOr<Key> key = KeyFromProto(h.key());
    if (!key.ok()) return key.status();
    absl::StatusOr<DType> dtype = DTypeFromProto(h.dtype());
    if (!dtype.ok()) return dtype.status();
    part.layout = ValueSlice{*key, *dtype, Shape(h.shape().begin(), h.shape().end()),
                             h.element_offset(), h.element_count()};
    part.chunk_rounds.assign(value.chunk_rounds().begin(), value.chunk_rounds().end());
    parts.push_back(std::move(part));
  }
  return parts;
}

// Page: [begin, end) of a stream and its bytes.
struct Page {
  uint64_t begin;
  std::string bytes;
};

// PagesOf reads `out` in pages of at most 1..`max_page` bytes, ended where it says.
std::vector<Page> PagesOf(const ShardStreamOut& out, TestRng& rng, int64_t max_page) {
  std::vector<Page> pages;
  for (uint64_t at = 0; at < out.size();) {
    const uint64_t end = out.PageEnd(at, static_cast<uint64_t>(rng.Int(1, max_page)));
    REQUIRE(end > at);
    REQUIRE(end <= out.size());
    Page page{at, std::string(end - at, '\0')};
    REQUIRE(out.Read(at, end, page.bytes.data()).ok());
    pages.push_back(std::move(page));
    at = end;
  }
  return pages;
}

std::map<Key, StoredPart> ByKey(const EngineSnapshot& snapshot) {
  std::map<Key, StoredPart> out;
  for (const StoredPart& part : snapshot.parts) out[part.layout.key] = part;
  return out;
}

TEST_CASE("ShardStream: a shard streamed in pages of any size, in any order, arrives exact",
          "[server][copy]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t chunk_bytes = rng.Int(8, 256);
    INFO("trial " << trial << ", chunks of " << chunk_bytes << " bytes");
    Shard shard = MakeShard(rng, chunk_bytes);
    const Header header = DescribedHeader(*shard.engine);
    ShardStreamOut out = StreamOf(header, *shard.engine);
    std::vector<Page> pages = PagesOf(out, rng, 64);
    // The header's pages first, in order; the values' in any order.
    auto values = std::partition_point(pages.begin(), pages.end(),
                                       [&](const Page& p) { return p.begin < out.head_bytes(); });
    std::shuffle(values, pages.end(), rng.engine());

    auto target = NewSumEngine(true, {2, 3}, chunk_bytes);
    ShardStreamIn in(target.get(), out.size(), out.head_bytes(), PartsOfHeader, "the copy");
    for (const Page& page : pages) REQUIRE(in.Put(page.begin, page.bytes).ok());
    absl::StatusOr<proto::ShardCheckpoint> loaded = in.Finish(out.size(), Crc32(header.bytes));
    REQUIRE(loaded.ok());
    CHECK(loaded->values_size() == static_cast<int>(header.layouts.size()));

    absl::StatusOr<EngineSnapshot> source = shard.engine->state().Snapshot();
    absl::StatusOr<EngineSnapshot> copied = target->state().Snapshot();
    REQUIRE(source.ok());
    REQUIRE(copied.ok());
    const std::map<Key, StoredPart> from = ByKey(*source), to = ByKey(*copied);
    REQUIRE(to.size() == shard.reference.size());
    for (const auto& [key, want] : shard.reference) {
      INFO("key " << key.Quoted());
      REQUIRE(to.count(key) == 1);
      const StoredPart& got = to.at(key);
      const StoredPart& was = from.at(key);
      CHECK(got.layout.offset == was.layout.offset);
      CHECK(got.layout.count == was.layout.count);
      CHECK(got.chunk_rounds == was.chunk_rounds);
      CHECK(std::all_of(got.chunk_rounds.begin(), got.chunk_rounds.end(),
                        [](int64_t r) { return r >= 1; }));
      CHECK(got.data.byte_size() == was.data.byte_size());
      CHECK(std::memcmp(got.data.data(), was.data.data(), was.data.byte_size()) == 0);
      CHECK(MaxAbsDiff(ToDoubles(got.data), want) <= testing::Tolerance(got.layout.dtype, 5, 20));
    }
  }
}

TEST_CASE("ShardStream: a damaged, partial, misplaced or withdrawn stream is refused",
          "[server][copy]") {
  TestRng rng;
  INFO(rng.Describe());
  const int64_t chunk_bytes = 32;
  Shard shard = MakeShard(rng, chunk_bytes);
  const Header header = DescribedHeader(*shard.engine);
  ShardStreamOut out = StreamOf(header, *shard.engine);
  const std::vector<Page> pages = PagesOf(out, rng, 1 << 20);  // The header, then the values.
  REQUIRE(pages.size() == 2);
  const uint64_t head = out.head_bytes(), total = out.size();
  auto fresh = [&] { return NewSumEngine(true, {2, 3}, chunk_bytes); };

  SECTION("values before the whole header") {
    auto target = fresh();
    ShardStreamIn in(target.get(), total, head, PartsOfHeader, "the copy");
    const absl::Status s = in.Put(head, pages[1].bytes);
    CHECK(absl::IsFailedPrecondition(s));
    CHECK(target->stats().num_keys == 0);
  }
  SECTION("a page over bytes received, or past the end") {
    auto target = fresh();
    ShardStreamIn in(target.get(), total, head, PartsOfHeader, "the copy");
    REQUIRE(in.Put(0, pages[0].bytes).ok());
    CHECK(target->stats().num_keys == static_cast<int64_t>(header.layouts.size()));
    CHECK(absl::IsOutOfRange(in.Put(0, pages[0].bytes)));
    CHECK(absl::IsOutOfRange(in.Put(head + 1, pages[1].bytes)));
    REQUIRE(in.Put(head, pages[1].bytes).ok());
    CHECK(absl::IsOutOfRange(in.Put(head, pages[1].bytes)));
  }
  SECTION("a page that splits an element") {
    auto target = fresh();
    ShardStreamIn in(target.get(), total, head, PartsOfHeader, "the copy");
    REQUIRE(in.Put(0, pages[0].bytes).ok());
    const absl::Status s = in.Put(head, absl::string_view(pages[1].bytes).substr(0, 1));
    CHECK(absl::IsInvalidArgument(s));
    CHECK_THAT(std::string(s.message()), Catch::Contains("split an element of key"));
    // Refused, it counts for nothing: the whole page still goes in.
    REQUIRE(in.Put(head, pages[1].bytes).ok());
    CHECK(in.Finish(total, Crc32(header.bytes)).ok());
  }
  SECTION("a page missing, or the header damaged") {
    auto target = fresh();
    ShardStreamIn in(target.get(), total, head, PartsOfHeader, "the copy");
    REQUIRE(in.Put(0, pages[0].bytes).ok());
    absl::StatusOr<proto::ShardCheckpoint> missing = in.Finish(total, Crc32(header.bytes));
    CHECK(absl::IsDataLoss(missing.status()));
    CHECK_THAT(std::string(missing.status().message()), Catch::Contains("received"));
    REQUIRE(in.Put(head, pages[1].bytes).ok());
    CHECK(absl::IsDataLoss(in.Finish(total, Crc32(header.bytes) ^ 1).status()));
    CHECK(in.Finish(total, Crc32(header.bytes)).ok());
    CHECK(absl::IsFailedPrecondition(in.Finish(total, Crc32(header.bytes)).status()));
  }
  SECTION("a header whose values do not fill the stream, or into an engine holding them") {
    auto target = fresh();
    ShardStreamIn longer(target.get(), total + 4, head, PartsOfHeader, "the copy");
    CHECK(absl::IsDataLoss(longer.Put(0, pages[0].bytes)));
    CHECK(target->stats().num_keys == 0);
    ShardStreamIn first(target.get(), total, head, PartsOfHeader, "the copy");
    REQUIRE(first.Put(0, pages[0].bytes).ok());
    ShardStreamIn second(target.get(), total, head, PartsOfHeader, "the copy");
    CHECK(absl::IsAlreadyExists(second.Put(0, pages[0].bytes)));
  }
  SECTION("a stream withdrawn while it is read") {
    out.Withdraw();
    std::string bytes(total, '\0');
    CHECK(absl::IsAborted(out.Read(0, total, bytes.data())));
  }
}

}  // namespace
}  // namespace kvstore
