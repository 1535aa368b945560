// Tests of PartTable: parts cut in chunks holding the bytes Init sent, and the checks of the
// requests that name them.
#include "server/core/part_table.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;
using testing::ToDoubles;

IncomingValue Whole(const Key& key, const Tensor& t) {
  IncomingValue v;
  v.slice = ValueSlice{key, t.dtype(), t.shape(), 0, t.num_elements()};
  v.bytes = {absl::Span<const uint8_t>(static_cast<const uint8_t*>(t.data()), t.byte_size())};
  return v;
}

bool Mentions(const absl::Status& s, const std::string& text) {
  return s.message().find(text) != absl::string_view::npos;
}

TEST_CASE("PartTable: a part is cut in chunks that hold its bytes and are found by slice",
          "[server][part_table]") {
  TestRng rng;
  INFO(rng.Describe());
  const int64_t chunk_bytes = 8 * rng.Int(1, 6);
  PartTable table(1 << 20, chunk_bytes);
  const Tensor value = rng.RandomTensor(DType::kFloat64, {rng.Int(1, 9), 3});
  const IncomingValue init = Whole(Key("w"), value);
  REQUIRE(*table.CheckInit(init, false, Key("w")));
  table.Add(init, PartTable::Fill::kNone, 2);
  const engine::Part* part = table.Get(Key("w"));
  REQUIRE(part != nullptr);
  const int64_t per_chunk = chunk_bytes / 8;
  CHECK(part->chunks.size() ==
        static_cast<size_t>((value.num_elements() + per_chunk - 1) / per_chunk));
  std::vector<double> joined;
  for (const auto& chunk : part->chunks) {
    ValueSlice slice{Key("w"), DType::kFloat64, value.shape(), chunk->offset, chunk->count};
    CHECK(*table.FindChunk(slice, "pulled") == chunk.get());
    for (double v : ToDoubles(chunk->stored)) joined.push_back(v);
  }
  CHECK(joined == ToDoubles(value));
  CHECK(table.num_bytes() == static_cast<int64_t>(value.byte_size()));
  CHECK(table.HeldBytes(init.slice) ==
        static_cast<int64_t>(value.byte_size()) + PartTable::kPartOverheadBytes + 1 +
            static_cast<int64_t>(part->chunks.size()) * PartTable::kChunkOverheadBytes);
  // A slice that is not one chunk, another dtype, a key never stored.
  ValueSlice straddling{Key("w"), DType::kFloat64, value.shape(), 1, value.num_elements() - 1};
  if (per_chunk > 1 || part->chunks.size() > 1) {
    CHECK(absl::IsInvalidArgument(table.FindChunk(straddling, "pushed").status()));
  }
  ValueSlice other = init.slice;
  other.dtype = DType::kFloat32;
  const absl::Status wrong = table.Find(other, "pushed").status();
  CHECK(absl::IsInvalidArgument(wrong));
  CHECK(Mentions(wrong, "\"w\""));
  other.key = Key("x");
  CHECK(absl::IsNotFound(table.Find(other, "pulled").status()));
  CHECK(*table.FindRows(init.slice, "pulled") == part);
}

TEST_CASE("PartTable: bad slices, bytes and keys are refused, naming the key",
          "[server][part_table]") {
  TestRng rng;
  INFO(rng.Describe());
  PartTable table(4096, 1024);
  const Tensor value = rng.RandomTensor(DType::kFloat32, {4});
  IncomingValue v = Whole(Key(3), value);
  v.slice.shape = {2, -2};
  CHECK(Mentions(table.CheckSlice(v.slice), "negative dimension"));
  v.slice.shape = {int64_t{1} << 40, int64_t{1} << 40};
  CHECK(absl::IsInvalidArgument(table.CheckSlice(v.slice)));
  v.slice.shape = {2048};
  CHECK(absl::IsResourceExhausted(table.CheckSlice(v.slice)));  // Over 4096 bytes.
  v.slice.shape = {4};
  v.slice.count = 5;
  CHECK(Mentions(table.CheckSlice(v.slice), "lies outside"));
  v.slice.count = 3;
  CHECK(Mentions(table.CheckBytes(v), "16 bytes received for 3"));
  v = Whole(Key(3), value);
  REQUIRE(*table.CheckInit(v, false, Key(3)));
  table.Add(v, PartTable::Fill::kNone, 2);
  CHECK(absl::IsAlreadyExists(table.CheckInit(v, false, Key(3)).status()));
  const absl::Status mixed = table.CheckInit(Whole(Key("s"), value), false, Key("s")).status();
  CHECK(Mentions(mixed, "cannot be mixed"));
  IncomingValue deferred = Whole(Key(4), value);
  CHECK(Mentions(table.CheckInit(deferred, true, Key(4)).status(), "carries no bytes"));
  deferred.bytes.clear();
  CHECK(*table.CheckInit(deferred, true, Key(4)));
  // A restored part: an Init of the same layout keeps it (false), another layout is refused.
  table.Get(Key(3))->restored = true;
  CHECK_FALSE(*table.CheckInit(v, false, Key(3)));
  IncomingValue reshaped = v;
  reshaped.slice.shape = {2, 2};
  CHECK(
      Mentions(table.CheckInit(reshaped, false, Key(3)).status(), "restored from the checkpoint"));
}

}  // namespace
}  // namespace kvstore
