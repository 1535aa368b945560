// Tests of values held in chunks: chunked dist_sync rounds, copy on write while a pull holds a
// chunk, the spare buffers' budget, deferred Init filled stretch by stretch, and requests that
// are not one chunk.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "server/core/server_engine.h"
#include "server/core/server_engine_test_util.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::Bytes;
using testing::Incoming;
using testing::MaxAbsDiff;
using testing::NewSumEngine;
using testing::TestRng;
using testing::ToDoubles;

// IncomingChunk: elements [offset, offset + count) of `t` as one pushed chunk, in 7-byte pieces.
IncomingValue IncomingChunk(const Key& key, const Tensor& t, const Slice& chunk) {
  IncomingValue value;
  value.slice = ValueSlice{key, t.dtype(), t.shape(), chunk.offset, chunk.count};
  const size_t element = DTypeSize(t.dtype());
  const auto* bytes = static_cast<const uint8_t*>(t.data()) + chunk.offset * element;
  const size_t total = static_cast<size_t>(chunk.count) * element;
  for (size_t at = 0; at < total; at += 7) {
    value.bytes.emplace_back(bytes + at, std::min<size_t>(7, total - at));
  }
  return value;
}

TEST_CASE("ServerEngine: chunked rounds give the same bits as whole values", "[server][chunks]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::vector<uint64_t> workers = {2, 3};
  const DType dtype = rng.AnyFloatDType();
  const Shape shape = {rng.Int(5, 40)};
  const int64_t chunk_bytes = rng.Int(1, 24);
  INFO(DTypeName(dtype) << ShapeToString(shape) << " chunks of " << chunk_bytes << " bytes");
  const int64_t n = shape[0];
  const std::vector<Slice> chunks = ChunkSlice(Slice{0, 0, n}, DTypeSize(dtype), chunk_bytes);
  auto chunked = NewSumEngine(true, workers, chunk_bytes);
  auto whole = NewSumEngine(true, workers, 1 << 20);
  const Tensor init = rng.RandomTensor(dtype, shape);
  REQUIRE(chunked->Init(2, {Incoming(9, init)}).ok());
  REQUIRE(whole->Init(2, {Incoming(9, init)}).ok());
  std::vector<double> reference = ToDoubles(init);
  for (int round = 0; round < 3; ++round) {
    const Tensor a = rng.RandomTensor(dtype, shape), b = rng.RandomTensor(dtype, shape);
    int acknowledged = 0;
    auto count = [&](absl::Status status) {
      REQUIRE(status.ok());
      ++acknowledged;
    };
    // Worker 2 pushes its chunks first-to-last, worker 3 last-to-first.
    for (size_t c = 0; c < chunks.size(); ++c) {
      chunked->Push(2, 100 * round + c, {IncomingChunk(9, a, chunks[c])}, count);
    }
    CHECK(acknowledged == 0);  // Every chunk's round waits for worker 3.
    for (size_t c = chunks.size(); c-- > 0;) {
      chunked->Push(3, 100 * round + c, {IncomingChunk(9, b, chunks[c])}, count);
    }
    CHECK(acknowledged == static_cast<int>(2 * chunks.size()));
    whole->Push(2, round, {Incoming(9, a)}, count);
    whole->Push(3, round, {Incoming(9, b)}, count);
    std::vector<Tensor> parts;
    for (const Slice& c : chunks) {
      auto pulled = chunked->Pull(2, {ValueSlice{9, dtype, shape, c.offset, c.count}});
      REQUIRE(pulled.ok());
      parts.push_back((*pulled)[0]);
    }
    auto pulled_whole = whole->Pull(2, {ValueSlice{9, dtype, shape, 0, n}});
    REQUIRE(pulled_whole.ok());
    std::vector<uint8_t> joined;
    for (const Tensor& part : parts) {
      const std::vector<uint8_t> bytes = Bytes(part);
      joined.insert(joined.end(), bytes.begin(), bytes.end());
    }
    CHECK(joined == Bytes((*pulled_whole)[0]));
    const std::vector<double> av = ToDoubles(a), bv = ToDoubles(b);
    for (int64_t i = 0; i < n; ++i) reference[i] += av[i] + bv[i];
    CHECK(MaxAbsDiff(ToDoubles((*pulled_whole)[0]), reference) <= (dtype == DType::kFloat64 ? 1e-12
                                                                   : dtype == DType::kFloat32
                                                                       ? 1e-4
                                                                       : 0.2));
  }
}

TEST_CASE("ServerEngine: a pulled chunk is never overwritten while it is held",
          "[server][chunks]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = NewSumEngine(false, {2}, 16);
  const Shape shape = {rng.Int(9, 30)};
  const Tensor init = rng.RandomTensor(DType::kFloat32, shape);
  REQUIRE(engine->Init(2, {Incoming(4, init)}).ok());
  const Slice first = ChunkSlice(Slice{0, 0, shape[0]}, 4, 16).front();
  const ValueSlice slice{4, DType::kFloat32, shape, first.offset, first.count};
  for (int step = 0; step < 3; ++step) {
    auto held = engine->Pull(2, {slice});
    REQUIRE(held.ok());
    const std::vector<uint8_t> before = Bytes((*held)[0]);
    const Tensor push = rng.RandomTensor(DType::kFloat32, shape);
    absl::Status pushed = absl::UnknownError("not called");
    engine->Push(2, step, {IncomingChunk(4, push, first)}, [&](absl::Status s) { pushed = s; });
    REQUIRE(pushed.ok());
    CHECK(Bytes((*held)[0]) == before);  // The reply being sent still reads the old value.
    auto after = engine->Pull(2, {slice});
    REQUIRE(after.ok());
    const std::vector<double> old_values = ToDoubles((*held)[0]);
    const std::vector<double> new_values = ToDoubles((*after)[0]);
    const std::vector<double> pushed_values = ToDoubles(push);
    for (int64_t i = 0; i < first.count; ++i) {
      CHECK(new_values[i] ==
            static_cast<double>(static_cast<float>(static_cast<float>(old_values[i]) +
                                                   static_cast<float>(pushed_values[i]))));
    }
  }
}

// PullChunks pulls a chunked value of `n` elements chunk by chunk, as the SDK does.
Tensor PullChunks(ServerEngine& engine, const Key& key, DType dtype, int64_t n,
                  int64_t chunk_bytes) {
  Tensor out = Tensor::Zeros(dtype, {n});
  const size_t element = DTypeSize(dtype);
  for (const Slice& c : ChunkSlice(Slice{0, 0, n}, element, chunk_bytes)) {
    auto pulled = engine.Pull(2, {ValueSlice{key, dtype, {n}, c.offset, c.count}});
    REQUIRE(pulled.ok());
    std::memcpy(static_cast<uint8_t*>(out.data()) + c.offset * element, (*pulled)[0].data(),
                (*pulled)[0].byte_size());
  }
  return out;
}

TEST_CASE("ServerEngine: copies on write keep at most kSpareBytes of previous buffers",
          "[server][chunks][memory]") {
  // A value of kSpareBytes + 32 MiB in 1 MiB chunks; every chunk is held by a pull while it is
  // pushed, so every chunk moves to another buffer. Values are integers: sums are exact.
  TestRng rng;
  INFO(rng.Describe());
  REQUIRE(SpareBuffer::BytesHeld() == 0);
  const int64_t chunk_bytes = 1 << 20;
  const int64_t n = (ServerEngine::kSpareBytes + (32 << 20)) / 4;
  auto engine = NewSumEngine(false, {2}, chunk_bytes);
  auto integers = [&] {
    Tensor t = Tensor::Zeros(DType::kFloat32, {n});
    for (int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = static_cast<float>(rng.Int(-99, 99));
    return t;
  };
  const Tensor init = integers();
  REQUIRE(engine->Init(2, {Incoming(4, init, 1 << 16)}).ok());
  std::vector<float> expected(init.data_as<const float>(), init.data_as<const float>() + n);
  const std::vector<Slice> chunks = ChunkSlice(Slice{0, 0, n}, 4, chunk_bytes);
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    std::vector<Tensor> held;  // Step 0 holds every chunk's buffer while it is pushed.
    if (step == 0) {
      for (const Slice& c : chunks) {
        auto pulled = engine->Pull(2, {ValueSlice{4, DType::kFloat32, {n}, c.offset, c.count}});
        REQUIRE(pulled.ok());
        held.push_back((*pulled)[0]);
      }
    }
    const Tensor push = integers();
    for (size_t c = 0; c < chunks.size(); ++c) {
      absl::Status pushed = absl::UnknownError("not called");
      engine->Push(2, 1000 * step + c, {IncomingChunk(4, push, chunks[c])},
                   [&](absl::Status s) { pushed = s; });
      REQUIRE(pushed.ok());
    }
    CHECK(SpareBuffer::BytesHeld() <= ServerEngine::kSpareBytes);
    for (int64_t i = 0; i < n; ++i) expected[i] += push.data_as<const float>()[i];
    const Tensor pulled = PullChunks(*engine, 4, DType::kFloat32, n, chunk_bytes);
    REQUIRE(std::memcmp(pulled.data(), expected.data(), expected.size() * 4) == 0);
  }
  engine.reset();
  CHECK(SpareBuffer::BytesHeld() == 0);
}

TEST_CASE("ServerEngine: a deferred Init is filled stretch by stretch; fills are checked",
          "[server][init]") {
  TestRng rng;
  INFO(rng.Describe());
  const DType dtype = rng.AnyDType();
  const int64_t n = rng.Int(20, 200);
  const int64_t chunk_bytes = 8 * rng.Int(1, 6);
  INFO(DTypeName(dtype) << " x " << n << ", chunks of " << chunk_bytes << " bytes");
  auto engine = NewSumEngine(true, {2, 3}, chunk_bytes);
  const Tensor init = rng.RandomTensor(dtype, {n});
  const Tensor whole = rng.RandomTensor(dtype, {4});
  REQUIRE(engine->Init(2, {Incoming(8, whole)}).ok());
  // A deferred Init carries no bytes; the part holds zeros until it is filled.
  IncomingValue header = Incoming(7, init);
  REQUIRE(absl::IsInvalidArgument(engine->Init(2, {header}, /*deferred=*/true)));
  header.bytes.clear();
  REQUIRE(engine->Init(2, {header}, /*deferred=*/true).ok());
  REQUIRE(ToDoubles(PullChunks(*engine, 7, dtype, n, chunk_bytes)) == std::vector<double>(n, 0.0));
  // Stretches that do not follow the chunks: random cuts, filled in a random order.
  std::vector<int64_t> cuts = {0, n};
  for (int i = 0; i < 4; ++i) cuts.push_back(rng.Int(1, n - 1));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<Slice> stretches;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    stretches.push_back(Slice{0, cuts[i], cuts[i + 1] - cuts[i]});
  }
  std::shuffle(stretches.begin(), stretches.end(), rng.engine());
  const std::vector<double> zeros(n, 0.0);
  for (size_t i = 0; i < stretches.size(); ++i) {
    const Slice& s = stretches[i];
    const std::vector<double> before = ToDoubles(PullChunks(*engine, 7, dtype, n, chunk_bytes));
    // Refused, changing nothing: another node, another dtype, outside the part, short bytes.
    REQUIRE(absl::IsFailedPrecondition(engine->InitFill(3, {IncomingChunk(7, init, s)})));
    const Tensor other =
        rng.RandomTensor(dtype == DType::kFloat64 ? DType::kFloat32 : DType::kFloat64, {n});
    REQUIRE(absl::IsInvalidArgument(engine->InitFill(2, {IncomingChunk(7, other, s)})));
    const Tensor longer = rng.RandomTensor(dtype, {n + 1});
    IncomingValue outside = IncomingChunk(7, longer, Slice{0, n - 1, 2});
    outside.slice.shape = {n};
    REQUIRE(absl::IsInvalidArgument(engine->InitFill(2, {outside})));
    IncomingValue short_bytes = IncomingChunk(7, init, s);
    short_bytes.bytes.pop_back();
    REQUIRE(absl::IsInvalidArgument(engine->InitFill(2, {short_bytes})));
    REQUIRE(ToDoubles(PullChunks(*engine, 7, dtype, n, chunk_bytes)) == before);
    REQUIRE(engine->InitFill(2, {IncomingChunk(7, init, s)}).ok());
  }
  REQUIRE(ToDoubles(PullChunks(*engine, 7, dtype, n, chunk_bytes)) == ToDoubles(init));
  // Key 6 is filled as the SDK does it: whole chunks (here in a random order). A chunk filled
  // again before the part is complete (a retry) is accepted; once every chunk has been
  // filled, the part is complete and takes no more fills.
  IncomingValue header6 = Incoming(6, init);
  header6.bytes.clear();
  REQUIRE(engine->Init(2, {header6}, /*deferred=*/true).ok());
  std::vector<Slice> chunks = ChunkSlice(Slice{0, 0, n}, DTypeSize(dtype), chunk_bytes);
  std::shuffle(chunks.begin(), chunks.end(), rng.engine());
  for (size_t c = 0; c < chunks.size(); ++c) {
    REQUIRE(engine->InitFill(2, {IncomingChunk(6, init, chunks[c])}).ok());
    if (c + 1 < chunks.size()) {
      REQUIRE(engine->InitFill(2, {IncomingChunk(6, init, chunks[c])}).ok());
    }
  }
  REQUIRE(ToDoubles(PullChunks(*engine, 6, dtype, n, chunk_bytes)) == ToDoubles(init));
  REQUIRE(absl::IsFailedPrecondition(engine->InitFill(2, {IncomingChunk(6, init, chunks[0])})));
  // Key 7 completes too once its chunks are filled whole.
  for (const Slice& c : chunks) {
    const absl::Status status = engine->InitFill(2, {IncomingChunk(7, init, c)});
    REQUIRE((status.ok() || absl::IsFailedPrecondition(status)));
  }
  // Complete: no more fills. A key initialised whole, or never, takes none either.
  REQUIRE(
      absl::IsFailedPrecondition(engine->InitFill(2, {IncomingChunk(7, init, Slice{0, 0, n})})));
  REQUIRE(
      absl::IsFailedPrecondition(engine->InitFill(2, {IncomingChunk(8, whole, Slice{0, 0, 4})})));
  REQUIRE(absl::IsNotFound(engine->InitFill(2, {IncomingChunk(9, whole, Slice{0, 0, 4})})));
  REQUIRE(ToDoubles(PullChunks(*engine, 7, dtype, n, chunk_bytes)) == ToDoubles(init));
  REQUIRE(ToDoubles(PullChunks(*engine, 8, dtype, 4, chunk_bytes)) == ToDoubles(whole));
}

TEST_CASE("ServerEngine: a request that is not one chunk is refused", "[server][chunks]") {
  auto engine = NewSumEngine(true, {2}, 16);
  const Tensor init = Tensor::Full(DType::kFloat32, {10}, 1.5);
  REQUIRE(engine->Init(2, {Incoming(6, init)}).ok());
  absl::Status status;
  engine->Push(2, 1, {IncomingChunk(6, init, Slice{0, 0, 10})},
               [&](absl::Status s) { status = s; });
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(status.message()), Catch::Contains("in chunks of 4 elements"));
  auto pulled = engine->Pull(2, {ValueSlice{6, DType::kFloat32, {10}, 2, 4}});
  CHECK(pulled.status().code() == absl::StatusCode::kInvalidArgument);
  auto ok = engine->Pull(2, {ValueSlice{6, DType::kFloat32, {10}, 8, 2}});
  REQUIRE(ok.ok());
  CHECK(ToDoubles((*ok)[0]) == std::vector<double>{1.5, 1.5});
}

}  // namespace
}  // namespace kvstore
