// Tests of a chunk's merging (engine_values.h) on its own: rounds summed over workers against a
// float64 reference, received bytes split anywhere, pushes applied at once, workers excused,
// and the copy a pull's handle forces.
#include "server/core/engine_values.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <vector>

#include "common/store/updater.h"
#include "tests/test_util.h"

namespace kvstore::engine {
namespace {

using testing::TestRng;
using testing::ToDoubles;

// Split cuts a tensor's bytes into pieces of random sizes, as received gRPC slices are.
ByteChunks Split(const Tensor& t, TestRng& rng) {
  ByteChunks pieces;
  const auto* bytes = static_cast<const uint8_t*>(t.data());
  for (size_t at = 0; at < t.byte_size();) {
    const size_t n = std::min<size_t>(rng.Int(1, 13), t.byte_size() - at);
    pieces.emplace_back(bytes + at, n);
    at += n;
  }
  return pieces;
}

std::unique_ptr<Chunk> MakeChunk(const Tensor& initial) {
  auto chunk = std::make_unique<Chunk>();
  chunk->count = initial.num_elements();
  chunk->stored = Tensor::Zeros(initial.dtype(), initial.shape());
  std::memcpy(chunk->stored.data(), initial.data(), initial.byte_size());
  return chunk;
}

TEST_CASE("Chunk: a round sums every worker's push, then the updater runs once",
          "[server][engine_values]") {
  TestRng rng;
  INFO(rng.Describe());
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    const int64_t n = rng.Int(1, 40);
    const size_t workers = rng.Int(2, 4);
    const Tensor initial = rng.RandomTensor(dtype, {n});
    std::unique_ptr<Chunk> owned = MakeChunk(initial);
    Chunk& chunk = *owned;
    auto sum = MakeSumUpdater();
    std::vector<double> expected = ToDoubles(initial);
    for (int round = 0; round < 3; ++round) {
      for (size_t w = 0; w < workers; ++w) {
        const Tensor push = rng.RandomTensor(dtype, {n});
        const std::vector<double> values = ToDoubles(push);
        for (int64_t i = 0; i < n; ++i) expected[i] += values[i];
        const MergeRule rule{false, workers, 0};
        // Every other push arrives contiguous (a key group's member).
        absl::StatusOr<bool> done =
            w % 2 == 0 ? chunk.Merge(Key(3), Split(push, rng), CompressionParams(), sum.get(), rule)
                       : chunk.MergeSpan(Key(3), push.data(), sum.get(), rule);
        REQUIRE(done.ok());
        CHECK(*done == (w + 1 == workers));  // Only the last push completes the round.
      }
      CHECK(chunk.completing);
      chunk.completing = false;
      CHECK(testing::MaxAbsDiff(ToDoubles(chunk.stored), expected) <=
            testing::Tolerance(dtype, 4 * (round + 1), 16));
    }
  }
}

TEST_CASE("Chunk: pushes applied at once; dropped workers are excused from the next round",
          "[server][engine_values]") {
  TestRng rng;
  INFO(rng.Describe());
  const int64_t n = rng.Int(1, 30);
  const Tensor initial = rng.RandomTensor(DType::kFloat64, {n});
  std::unique_ptr<Chunk> owned = MakeChunk(initial);
  Chunk& chunk = *owned;
  auto assign = MakeAssignUpdater();
  const Tensor push = rng.RandomTensor(DType::kFloat64, {n});
  REQUIRE(*chunk.Merge(Key("k"), Split(push, rng), CompressionParams(), assign.get(),
                       MergeRule{true, 1, 0}));
  CHECK(ToDoubles(chunk.stored) == ToDoubles(push));
  // Three workers, one dropped while the round is open: the next round waits for two.
  const MergeRule rule{false, 3, 1};
  for (int w = 0; w < 3; ++w) {
    REQUIRE(*chunk.Merge(Key("k"), Split(push, rng), CompressionParams(), assign.get(), rule) ==
            (w == 2));
  }
  CHECK(chunk.excused == 1);
  REQUIRE(!*chunk.Merge(Key("k"), Split(push, rng), CompressionParams(), assign.get(), rule));
  REQUIRE(*chunk.Merge(Key("k"), Split(push, rng), CompressionParams(), assign.get(), rule));
  std::vector<double> twice = ToDoubles(push);
  for (double& v : twice) v *= 2;
  CHECK(ToDoubles(chunk.stored) == twice);
}

TEST_CASE("Chunk: an update while a pull holds the stored buffer goes to a copy",
          "[server][engine_values]") {
  TestRng rng;
  INFO(rng.Describe());
  const int64_t n = rng.Int(1, 30);
  const Tensor initial = rng.RandomTensor(DType::kFloat32, {n});
  std::unique_ptr<Chunk> owned = MakeChunk(initial);
  Chunk& chunk = *owned;
  const Tensor held = chunk.stored;  // A pull reply still being sent.
  auto sum = MakeSumUpdater();
  const Tensor push = rng.RandomTensor(DType::kFloat32, {n});
  {
    ChunkLock lock(chunk);
    REQUIRE(chunk.Apply(Key(1), push, sum.get()).ok());
  }
  CHECK(chunk.stored.data() != held.data());
  CHECK(ToDoubles(held) == ToDoubles(initial));  // The pull's bytes did not change.
  std::vector<double> expected = ToDoubles(initial);
  const std::vector<double> added = ToDoubles(push);
  for (int64_t i = 0; i < n; ++i) expected[i] += added[i];
  CHECK(testing::MaxAbsDiff(ToDoubles(chunk.stored), expected) <= 1e-6);
}

}  // namespace
}  // namespace kvstore::engine
