// Tests of the kvserver's engine: dist_sync rounds, dist_async, slices, request ids, errors,
// the controller and the sgd updater.
#include "server/core/server_engine.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

#include <catch2/catch.hpp>

#include "absl/strings/str_format.h"

#include "server/core/controller.h"
#include "server/core/sgd_updater.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::MaxAbsDiff;
using testing::TestRng;
using testing::ToDoubles;

// Incoming wraps a tensor's bytes as a value, cut into chunks of at most `chunk` bytes so that
// elements straddle chunk boundaries the way received gRPC slices do.
IncomingValue Incoming(const Key& key, const Tensor& t, size_t chunk = 7,
                       std::optional<ValueSlice> slice = std::nullopt) {
  IncomingValue value;
  value.slice = slice ? *slice : ValueSlice{key, t.dtype(), t.shape(), 0, t.num_elements()};
  const auto* bytes = static_cast<const uint8_t*>(t.data());
  for (size_t at = 0; at < t.byte_size(); at += chunk) {
    value.bytes.emplace_back(bytes + at, std::min(chunk, t.byte_size() - at));
  }
  return value;
}

std::unique_ptr<ServerEngine> NewEngine(bool sync, std::vector<uint64_t> workers) {
  auto engine = ServerEngine::Create(ServerEngineOptions{sync, std::move(workers)}, nullptr);
  REQUIRE(engine.ok());
  return std::move(engine).value();
}

std::vector<double> PullAll(ServerEngine& engine, const Key& key, const Tensor& like) {
  auto pulled = engine.Pull(2, {ValueSlice{key, like.dtype(), like.shape(), 0,
                                           like.num_elements()}});
  REQUIRE(pulled.ok());
  return ToDoubles((*pulled)[0]);
}

TEST_CASE("ServerEngine: a dist_sync round applies the sum once and then acknowledges",
          "[server][sync]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::vector<uint64_t> workers = {2, 3, 4};
  auto engine = NewEngine(true, workers);
  const DType dtype = rng.AnyDType();
  const Shape shape = rng.AnyShape();
  INFO(DTypeName(dtype) << ShapeToString(shape));
  const Tensor init = rng.RandomTensor(dtype, shape);
  REQUIRE(engine->Init(2, {Incoming(5, init)}).ok());
  for (int round = 0; round < 3; ++round) {
    std::vector<double> expected(init.num_elements(), 0.0);
    int acknowledged = 0;
    for (size_t w = 0; w < workers.size(); ++w) {
      const Tensor pushed = rng.RandomTensor(dtype, shape);
      const auto values = ToDoubles(pushed);
      for (size_t i = 0; i < values.size(); ++i) expected[i] += values[i];
      engine->Push(workers[w], 100 + round, {Incoming(5, pushed)}, [&](absl::Status s) {
        REQUIRE(s.ok());
        ++acknowledged;
      });
      // Nobody is acknowledged before the last worker's push completes the round.
      REQUIRE(acknowledged == (w + 1 == workers.size() ? 3 : 0));
    }
    REQUIRE(MaxAbsDiff(PullAll(*engine, 5, init), expected) <=
            testing::Tolerance(dtype, 3, 4));
  }
}

TEST_CASE("ServerEngine: a retried push is applied once", "[server][dedup]") {
  TestRng rng;
  INFO(rng.Describe());
  SECTION("dist_async") {
    auto engine = NewEngine(false, {2});
    engine->SetUpdater(MakeSumUpdater());
    const Tensor init = rng.RandomTensor(DType::kFloat64, {4});
    const Tensor pushed = rng.RandomTensor(DType::kFloat64, {4});
    REQUIRE(engine->Init(2, {Incoming(1, init)}).ok());
    int acks = 0;
    for (int attempt = 0; attempt < 3; ++attempt) {
      engine->Push(2, 77, {Incoming(1, pushed)}, [&](absl::Status s) { acks += s.ok(); });
    }
    REQUIRE(acks == 3);
    auto expected = ToDoubles(init);
    const auto p = ToDoubles(pushed);
    for (size_t i = 0; i < p.size(); ++i) expected[i] += p[i];
    REQUIRE(PullAll(*engine, 1, init) == expected);
  }
  SECTION("dist_sync: a retry waits for the round") {
    auto engine = NewEngine(true, {2, 3});
    const Tensor init = rng.RandomTensor(DType::kInt32, {3});
    const Tensor a = rng.RandomTensor(DType::kInt32, {3});
    const Tensor b = rng.RandomTensor(DType::kInt32, {3});
    REQUIRE(engine->Init(2, {Incoming("w", init)}).ok());
    int acks = 0;
    engine->Push(2, 9, {Incoming("w", a)}, [&](absl::Status s) { acks += s.ok(); });
    engine->Push(2, 9, {Incoming("w", a)}, [&](absl::Status s) { acks += s.ok(); });
    REQUIRE(acks == 0);
    engine->Push(3, 9, {Incoming("w", b)}, [&](absl::Status s) { acks += s.ok(); });
    REQUIRE(acks == 3);
    auto expected = ToDoubles(a);
    const auto bv = ToDoubles(b);
    for (size_t i = 0; i < bv.size(); ++i) expected[i] += bv[i];
    REQUIRE(PullAll(*engine, "w", init) == expected);
    // A different request id in the same round is a second push: refused.
    engine->Push(2, 10, {Incoming("w", a)}, [](absl::Status s) { REQUIRE(s.ok()); });
    engine->Push(2, 11, {Incoming("w", a)},
                 [](absl::Status s) { REQUIRE(absl::IsFailedPrecondition(s)); });
  }
}

TEST_CASE("ServerEngine: slices of a split value are checked and stored flat", "[server]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = NewEngine(false, {2});
  const Tensor part = rng.RandomTensor(DType::kFloat32, {5});
  const ValueSlice slice{7, DType::kFloat32, {4, 3}, 4, 5};
  REQUIRE(engine->Init(2, {Incoming(7, part, 3, slice)}).ok());
  auto pulled = engine->Pull(2, {slice});
  REQUIRE(pulled.ok());
  REQUIRE((*pulled)[0].shape() == Shape{5});
  REQUIRE(ToDoubles((*pulled)[0]) == ToDoubles(part));
  ValueSlice other = slice;
  other.offset = 3;
  const auto status = engine->Pull(2, {other}).status();
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE(status.message().find("[4, 9)") != absl::string_view::npos);
}

TEST_CASE("ServerEngine: bad requests are refused whole and change nothing", "[server][errors]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = NewEngine(false, {2});
  const Tensor init = rng.RandomTensor(DType::kFloat32, {2, 3});
  REQUIRE(engine->Init(2, {Incoming(1, init)}).ok());
  auto push_status = [&](uint64_t node, std::vector<IncomingValue> values) {
    absl::Status result = absl::UnknownError("not called");
    engine->Push(node, rng.Int(1, 1 << 30), values, [&](absl::Status s) { result = s; });
    return result;
  };
  const Tensor good = rng.RandomTensor(DType::kFloat32, {2, 3});
  REQUIRE(absl::IsNotFound(push_status(2, {Incoming(1, good), Incoming(9, good)})));
  REQUIRE(absl::IsInvalidArgument(
      push_status(2, {Incoming(1, good), Incoming(1, rng.RandomTensor(DType::kFloat32, {3, 2}))})));
  REQUIRE(absl::IsInvalidArgument(
      push_status(2, {Incoming(1, rng.RandomTensor(DType::kFloat64, {2, 3}))})));
  IncomingValue short_bytes = Incoming(1, good);
  short_bytes.bytes.pop_back();
  REQUIRE(absl::IsInvalidArgument(push_status(2, {short_bytes})));
  const absl::Status stranger = push_status(99, {Incoming(1, good)});
  REQUIRE(absl::IsPermissionDenied(stranger));
  REQUIRE(stranger.message().find("99") != absl::string_view::npos);
  REQUIRE(absl::IsAlreadyExists(engine->Init(2, {Incoming(1, good)})));
  REQUIRE(PullAll(*engine, 1, init) == ToDoubles(init));
}

TEST_CASE("Controller: built-in heads and the sgd updater with momentum", "[server][controller]") {
  TestRng rng;
  INFO(rng.Describe());
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  REQUIRE(RegisterSgdUpdater(&registry).ok());
  auto engine = NewEngine(false, {2});
  Controller controller(engine.get(), &registry,
                        [](int head, absl::string_view body) -> absl::StatusOr<std::string> {
                          return absl::StrCat("custom ", head, " ", body);
                        },
                        /*rank=*/1);
  REQUIRE(controller.Run(kCommandPing, "hi").value() == "server 1: hi");
  REQUIRE(controller.Run(40, "x").value() == "custom 40 x");
  REQUIRE(absl::IsInvalidArgument(controller.Run(7, "").status()));
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

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

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

std::unique_ptr<ServerEngine> NewSumEngine(bool sync, std::vector<uint64_t> workers,
                                           int64_t chunk_bytes) {
  ServerEngineOptions options;
  options.sync = sync;
  options.worker_node_ids = std::move(workers);
  options.chunk_bytes = chunk_bytes;
  auto engine = ServerEngine::Create(std::move(options), MakeSumUpdater());
  REQUIRE(engine.ok());
  return std::move(engine).value();
}

std::vector<uint8_t> Bytes(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  return std::vector<uint8_t>(p, p + t.byte_size());
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
    CHECK(MaxAbsDiff(ToDoubles((*pulled_whole)[0]), reference) <=
          (dtype == DType::kFloat64 ? 1e-12 : dtype == DType::kFloat32 ? 1e-4 : 0.2));
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
      CHECK(new_values[i] == static_cast<double>(static_cast<float>(
                                 static_cast<float>(old_values[i]) +
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
  REQUIRE(ServerEngine::SpareBytesHeld() == 0);
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
    CHECK(ServerEngine::SpareBytesHeld() <= ServerEngine::kSpareBytes);
    for (int64_t i = 0; i < n; ++i) expected[i] += push.data_as<const float>()[i];
    const Tensor pulled = PullChunks(*engine, 4, DType::kFloat32, n, chunk_bytes);
    REQUIRE(std::memcmp(pulled.data(), expected.data(), expected.size() * 4) == 0);
  }
  engine.reset();
  CHECK(ServerEngine::SpareBytesHeld() == 0);
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
    const Tensor other = rng.RandomTensor(dtype == DType::kFloat64 ? DType::kFloat32
                                                                   : DType::kFloat64, {n});
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
  REQUIRE(absl::IsFailedPrecondition(
      engine->InitFill(2, {IncomingChunk(7, init, Slice{0, 0, n})})));
  REQUIRE(absl::IsFailedPrecondition(
      engine->InitFill(2, {IncomingChunk(8, whole, Slice{0, 0, 4})})));
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

namespace kvstore {
namespace {

TEST_CASE("ServerEngine: a new updater takes effect between dist_sync rounds",
          "[server][sync][updater]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::vector<uint64_t> workers = {2, 3};
  auto engine = NewEngine(true, workers);
  const Tensor init = rng.RandomTensor(DType::kFloat64, {5});
  REQUIRE(engine->Init(2, {Incoming(1, init)}).ok());
  const Tensor a = rng.RandomTensor(DType::kFloat64, {5});
  const Tensor b = rng.RandomTensor(DType::kFloat64, {5});
  int acknowledged = 0;
  auto ack = [&](absl::Status s) {
    REQUIRE(s.ok());
    ++acknowledged;
  };
  // Round 1 is open (worker 2 pushed) when the updater changes to "sum": the round still
  // completes with ASSIGN.
  engine->Push(2, 1, {Incoming(1, a)}, ack);
  engine->SetUpdater(MakeSumUpdater());
  CHECK(engine->updater_name() == "assign");
  engine->Push(3, 1, {Incoming(1, b)}, ack);
  REQUIRE(acknowledged == 2);
  CHECK(engine->updater_name() == "sum");
  std::vector<double> expected(5);
  const auto va = ToDoubles(a), vb = ToDoubles(b);
  for (int i = 0; i < 5; ++i) expected[i] = va[i] + vb[i];
  REQUIRE(PullAll(*engine, 1, init) == expected);
  // Round 2 uses "sum": stored += a + b.
  engine->Push(2, 2, {Incoming(1, a)}, ack);
  engine->Push(3, 2, {Incoming(1, b)}, ack);
  for (int i = 0; i < 5; ++i) expected[i] += va[i] + vb[i];
  REQUIRE(MaxAbsDiff(PullAll(*engine, 1, init), expected) <= 1e-12);
  // With no round open, the change is immediate.
  engine->SetUpdater(MakeAssignUpdater());
  CHECK(engine->updater_name() == "assign");
}

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

TEST_CASE("Controller: a checkpoint restores into the same job only", "[server][checkpoint]") {
  TestRng rng;
  INFO(rng.Describe());
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/engine-ckpt/nested";
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  auto engine = NewEngine(true, {2});
  Controller controller(engine.get(), &registry, nullptr, /*rank=*/0);
  controller.SetJob(JobShape{2, "dist_sync", 1 << 20});
  const Tensor init = rng.RandomTensor(DType::kFloat32, {2, 3});
  REQUIRE(engine->Init(2, {Incoming("w", init)}).ok());
  auto path = controller.Run(kCommandCheckpoint, dir);
  INFO(path.status().ToString());
  REQUIRE(path.ok());
  REQUIRE(*path == dir + "/server-0.ckpt");

  // The same job: the value comes back, and a matching Init keeps it.
  auto restored = NewEngine(true, {2});
  Controller same(restored.get(), &registry, nullptr, 0);
  same.SetJob(JobShape{2, "dist_sync", 1 << 20});
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
  absl::Status s = three.Restore(dir);
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(s.message().find(*path) != absl::string_view::npos);
  Controller rank1(other.get(), &registry, nullptr, 1);
  rank1.SetJob(JobShape{2, "dist_sync", 1 << 20});
  CHECK(absl::IsNotFound(rank1.Restore(dir)));
  CHECK(other->stats().num_keys == 0);
}

// A key group: members of random dtypes and shapes, their bytes packed in member order.
struct TestGroup {
  std::vector<Key> keys;
  std::vector<Tensor> like;
  std::vector<ValueSlice> members;

  std::vector<uint8_t> Pack(const std::vector<Tensor>& values) const {
    std::vector<uint8_t> bytes;
    for (const Tensor& v : values) {
      const auto* p = static_cast<const uint8_t*>(v.data());
      bytes.insert(bytes.end(), p, p + v.byte_size());
    }
    return bytes;
  }

  // Draw draws a random value for every member, adds it to `*expected` (per member, as
  // doubles) and returns the values packed in member order.
  std::vector<uint8_t> Draw(TestRng& rng, std::vector<std::vector<double>>* expected) const {
    std::vector<Tensor> pushed;
    for (size_t i = 0; i < like.size(); ++i) {
      pushed.push_back(rng.RandomTensor(like[i].dtype(), like[i].shape()));
      const auto values = ToDoubles(pushed.back());
      for (size_t e = 0; e < values.size(); ++e) (*expected)[i][e] += values[e];
    }
    return Pack(pushed);
  }
};

// Chunks cuts `bytes` into slices of `size` bytes, as gRPC delivers them.
ByteChunks Chunks(const std::vector<uint8_t>& bytes, size_t size) {
  ByteChunks chunks;
  for (size_t at = 0; at < bytes.size(); at += size) {
    chunks.emplace_back(bytes.data() + at, std::min(size, bytes.size() - at));
  }
  return chunks;
}

TestGroup MakeGroup(TestRng& rng, ServerEngine& engine, int n) {
  TestGroup group;
  std::vector<IncomingValue> init;
  std::vector<Tensor> initial;
  for (int i = 0; i < n; ++i) {
    const Key key = int64_t{1000 + 3 * i};
    const DType dtype = rng.AnyDType();
    const Shape shape = rng.AnyShape(2, 5);
    initial.push_back(rng.RandomTensor(dtype, shape));
    group.keys.push_back(key);
    group.like.push_back(initial.back());
    group.members.push_back(ValueSlice{key, dtype, shape, 0, NumElements(shape)});
  }
  for (int i = 0; i < n; ++i) init.push_back(Incoming(group.keys[i], initial[i]));
  REQUIRE(engine.Init(2, init).ok());
  return group;
}

TEST_CASE("ServerEngine: a key-group push is the push of its members", "[server][groups]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::vector<uint64_t> workers = {2, 3, 4};
  auto engine = NewEngine(true, workers);
  engine->SetUpdater(MakeSumUpdater());
  const TestGroup group = MakeGroup(rng, *engine, 40);
  // Workers 2 and 4 push through groups of their own ids; worker 3 pushes key by key.
  REQUIRE(engine->RegisterGroup(2, 7, group.members).ok());
  REQUIRE(engine->RegisterGroup(4, 1, group.members).ok());
  std::vector<std::vector<double>> expected;
  for (const Tensor& t : group.like) expected.push_back(ToDoubles(t));
  for (int round = 0; round < 3; ++round) {
    int acknowledged = 0;
    for (uint64_t w : workers) {
      std::vector<Tensor> pushed;
      for (const Tensor& like : group.like) {
        pushed.push_back(rng.RandomTensor(like.dtype(), like.shape()));
        const auto values = ToDoubles(pushed.back());
        auto& e = expected[pushed.size() - 1];
        for (size_t i = 0; i < values.size(); ++i) e[i] += values[i];
      }
      auto ack = [&](absl::Status s) {
        REQUIRE(s.ok());
        ++acknowledged;
      };
      if (w == 3) {
        std::vector<IncomingValue> values;
        for (size_t i = 0; i < pushed.size(); ++i) {
          values.push_back(Incoming(group.keys[i], pushed[i]));
        }
        engine->Push(w, 50 + round, values, ack);
      } else {
        const std::vector<uint8_t> bytes = group.Pack(pushed);
        // Slices of 5 bytes: most members straddle two or more of them.
        engine->PushGroup(w, 50 + round, w == 2 ? 7 : 1, Chunks(bytes, 5), ack);
      }
      REQUIRE(acknowledged == (w == workers.back() ? 3 : 0));
    }
    auto packed = engine->PullGroup(2, 7);
    REQUIRE(packed.ok());
    size_t offset = 0;
    for (size_t i = 0; i < group.keys.size(); ++i) {
      const Tensor& like = group.like[i];
      INFO("key " << group.keys[i].Quoted() << " " << DTypeName(like.dtype()));
      const std::vector<double> pulled = PullAll(*engine, group.keys[i], like);
      // Integers wrap and sum exactly; floats within the dtype's tolerance of 4 summed terms.
      REQUIRE(MaxAbsDiff(pulled, expected[i]) <= testing::Tolerance(like.dtype(), 4, 4));
      expected[i] = pulled;  // The next round starts from what is stored.
      const Tensor view = Tensor::Borrow(
          static_cast<uint8_t*>(packed->buffer.data()) + offset, like.dtype(), like.shape());
      REQUIRE(ToDoubles(view) == pulled);
      offset += like.byte_size();
    }
    REQUIRE(offset == packed->bytes);
  }
}

TEST_CASE("ServerEngine: one worker's key-group pushes apply at once", "[server][groups]") {
  TestRng rng;
  INFO(rng.Describe());
  const bool sync = GENERATE(true, false);
  INFO((sync ? "dist_sync" : "dist_async"));
  auto engine = NewEngine(sync, {2});
  engine->SetUpdater(MakeSumUpdater());
  const TestGroup group = MakeGroup(rng, *engine, 25);
  REQUIRE(engine->RegisterGroup(2, 3, group.members).ok());
  std::vector<std::vector<double>> expected;
  for (const Tensor& t : group.like) expected.push_back(ToDoubles(t));
  const std::vector<uint8_t> bytes = group.Draw(rng, &expected);
  int acks = 0;
  // The same request id twice: applied once.
  for (int attempt = 0; attempt < 2; ++attempt) {
    engine->PushGroup(2, 8, 3, Chunks(bytes, 64), [&](absl::Status s) { acks += s.ok(); });
  }
  REQUIRE(acks == 2);
  for (size_t i = 0; i < group.keys.size(); ++i) {
    REQUIRE(MaxAbsDiff(PullAll(*engine, group.keys[i], group.like[i]), expected[i]) <=
            testing::Tolerance(group.like[i].dtype(), 2, 4));
  }
}

TEST_CASE("ServerEngine: a group push acknowledged before its sum is seen by every later reader",
          "[server][groups][arena]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = NewEngine(false, {2, 3});
  engine->SetUpdater(MakeSumUpdater());
  // Members of one dtype, so that they share an arena.
  const DType dtype = rng.AnyFloatDType();
  INFO(DTypeName(dtype));
  TestGroup group;
  std::vector<IncomingValue> init;
  for (int i = 0; i < 40; ++i) {
    const Shape shape = rng.AnyShape(2, 4);
    group.keys.push_back(int64_t{7000 + i});
    group.like.push_back(rng.RandomTensor(dtype, shape));
    group.members.push_back(ValueSlice{group.keys[i], dtype, shape, 0, NumElements(shape)});
    init.push_back(Incoming(group.keys[i], group.like[i]));
  }
  REQUIRE(engine->Init(2, init).ok());
  REQUIRE(engine->RegisterGroup(2, 5, group.members).ok());
  REQUIRE(engine->GroupInArena(2, 5));
  std::vector<std::vector<double>> expected;
  for (const Tensor& t : group.like) expected.push_back(ToDoubles(t));
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    const std::vector<uint8_t> bytes = group.Draw(rng, &expected);
    // Once the push is acknowledged, another worker reads every member from another thread;
    // the acknowledgement then waits, to give that reader time to read too early, were it let.
    std::vector<std::vector<double>> seen(group.keys.size());
    std::atomic<int> failures{0};
    std::thread reader;
    int acks = 0;
    engine->PushGroup(
        2, 60 + round, 5, Chunks(bytes, 48),
        [&](absl::Status s) {
          acks += s.ok();
          reader = std::thread([&] {
            for (size_t i = 0; i < group.members.size(); ++i) {
              auto pulled = engine->Pull(3, {group.members[i]});
              if (pulled.ok()) seen[i] = ToDoubles((*pulled)[0]);
              failures += !pulled.ok();
            }
          });
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        },
        ServerEngine::Ack::kOrdered);
    reader.join();
    REQUIRE(acks == 1);
    REQUIRE(failures == 0);
    for (size_t i = 0; i < group.keys.size(); ++i) {
      INFO("key " << group.keys[i].Quoted());
      REQUIRE(MaxAbsDiff(seen[i], expected[i]) <=
              testing::Tolerance(group.like[i].dtype(), 2 + round, 4));
    }
  }
}

TEST_CASE("ServerEngine: key groups in an arena stay coherent with their members",
          "[server][groups][arena]") {
  TestRng rng;
  INFO(rng.Describe());
  // Pushes that need no round: one worker in dist_sync, or two in dist_async.
  const bool sync = GENERATE(true, false);
  INFO((sync ? "dist_sync, 1 worker" : "dist_async, 2 workers"));
  const uint64_t other = sync ? 2 : 3;
  auto engine = NewEngine(sync, sync ? std::vector<uint64_t>{2} : std::vector<uint64_t>{2, 3});
  engine->SetUpdater(MakeSumUpdater());
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64};
  const DType dtype = dtypes[rng.Int(0, 3)];
  INFO(DTypeName(dtype));
  const int n = 60;
  std::vector<ValueSlice> members;
  std::vector<Tensor> like;
  std::vector<std::vector<double>> expected;
  std::vector<IncomingValue> init;
  for (int i = 0; i < n; ++i) {
    const Shape shape = rng.AnyShape(2, 4);
    like.push_back(rng.RandomTensor(dtype, shape));
    expected.push_back(ToDoubles(like.back()));
    members.push_back(ValueSlice{int64_t{1000 + i}, dtype, shape, 0, NumElements(shape)});
    init.push_back(Incoming(members.back().key, like.back()));
  }
  REQUIRE(engine->Init(2, init).ok());

  struct Group {
    uint64_t node, id;
    std::vector<size_t> index;  // Members, as indices into `members`.
    bool arena;
  };
  std::vector<Group> groups = {{2, 1, {}, true}, {other, 2, {}, true}, {2, 3, {}, true},
                               {other, 4, {}, false}};
  for (size_t i = 0; i < n; ++i) groups[0].index.push_back(i);
  groups[1].index = groups[0].index;  // The same list from another worker: the same arena.
  for (size_t i = 10; i < 35; ++i) groups[2].index.push_back(i);  // A stretch of it.
  for (size_t i = n; i-- > 0;) groups[3].index.push_back(i);  // Another order: no arena.
  for (const Group& g : groups) {
    std::vector<ValueSlice> list;
    for (size_t i : g.index) list.push_back(members[i]);
    REQUIRE(engine->RegisterGroup(g.node, g.id, list).ok());
    INFO("group " << g.id);
    REQUIRE(engine->GroupInArena(g.node, g.id) == g.arena);
  }

  bool subtract = false;  // After the updater is replaced: stored -= received.
  auto apply = [&](size_t i, const Tensor& value) {
    const std::vector<double> v = ToDoubles(value);
    for (size_t e = 0; e < v.size(); ++e) expected[i][e] += subtract ? -v[e] : v[e];
  };
  auto check = [&](size_t i, const Tensor& got) {
    INFO("key " << members[i].key.Quoted());
    REQUIRE(MaxAbsDiff(ToDoubles(got), expected[i]) <= testing::Tolerance(dtype, 64, 300));
  };
  std::vector<std::pair<Tensor, std::vector<double>>> held;  // Pulled handles, kept.
  uint64_t request = 100;
  int acks = 0, sent = 0;
  auto ack = [&](absl::Status s) {
    REQUIRE(s.ok());
    ++acks;
  };
  for (int step = 0; step < 60; ++step) {
    if (step == 30) {
      // An updater that is not piecewise, and that replaces the stored handle.
      engine->SetUpdater(MakeFunctionUpdater(
          "subtract", [](const Key&, const Tensor& received, Tensor* stored) {
            Tensor next = stored->Clone();
            for (int64_t e = 0; e < next.num_elements(); ++e) {
              next.SetFromDouble(e, stored->GetAsDouble(e) - received.GetAsDouble(e));
            }
            *stored = next;
          }));
      subtract = true;
    }
    const Group& g = groups[static_cast<size_t>(rng.Int(0, 3))];
    const size_t key = static_cast<size_t>(rng.Int(0, n - 1));
    switch (rng.Int(0, 3)) {
      case 0: {  // A group push, in slices that cut members.
        std::vector<uint8_t> bytes;
        for (size_t i : g.index) {
          const Tensor value = rng.RandomTensor(dtype, members[i].shape);
          apply(i, value);
          const auto* p = static_cast<const uint8_t*>(value.data());
          bytes.insert(bytes.end(), p, p + value.byte_size());
        }
        engine->PushGroup(g.node, request++, g.id, Chunks(bytes, rng.Int(3, 41)), ack);
        ++sent;
        break;
      }
      case 1: {  // One member pushed alone.
        const Tensor value = rng.RandomTensor(dtype, members[key].shape);
        apply(key, value);
        engine->Push(other, request++, {Incoming(members[key].key, value)}, ack);
        ++sent;
        break;
      }
      case 2: {  // One member pulled alone; the handle is kept to the end.
        auto pulled = engine->Pull(2, {members[key]});
        REQUIRE(pulled.ok());
        check(key, (*pulled)[0]);
        held.emplace_back((*pulled)[0], ToDoubles((*pulled)[0]));
        break;
      }
      default: {  // A group pull.
        auto packed = engine->PullGroup(g.node, g.id);
        REQUIRE(packed.ok());
        size_t offset = 0;
        for (size_t i : g.index) {
          const Tensor& t = like[i];
          check(i, Tensor::Borrow(static_cast<uint8_t*>(packed->buffer.data()) + offset, dtype,
                                  t.shape()));
          offset += t.byte_size();
        }
        REQUIRE(offset == packed->bytes);
      }
    }
    REQUIRE(acks == sent);
  }
  // Later updates never reached a pulled handle.
  for (const auto& [handle, values] : held) REQUIRE(ToDoubles(handle) == values);
  auto snapshot = engine->Snapshot();
  REQUIRE(snapshot.ok());
  for (const StoredPart& part : snapshot->parts) {
    check(static_cast<size_t>(part.layout.key.int_key() - 1000), part.data);
  }
}

TEST_CASE("ServerEngine: key-group pushes give the same bits as the same pushes key by key",
          "[server][groups][bits]") {
  // Random floating-point values, so that any other order of additions would show in the bits:
  // one worker (the arena, one update per run), or three (rounds, the sum buffers).
  TestRng rng;
  INFO(rng.Describe());
  const int workers = GENERATE(1, 3);
  const DType dtype = rng.AnyFloatDType();
  INFO(workers << " workers, " << DTypeName(dtype));
  std::vector<uint64_t> nodes;
  for (int w = 0; w < workers; ++w) nodes.push_back(2 + w);
  auto by_key = NewSumEngine(true, nodes, 1 << 20);
  auto grouped = NewSumEngine(true, nodes, 1 << 20);
  const int n = 40;
  std::vector<ValueSlice> members;
  std::vector<IncomingValue> init;
  std::vector<Tensor> initial;
  for (int i = 0; i < n; ++i) {
    const Shape shape = rng.AnyShape(1, 3);
    initial.push_back(rng.RandomTensor(dtype, shape));
    members.push_back(ValueSlice{int64_t{500 + i}, dtype, shape, 0, NumElements(shape)});
    init.push_back(Incoming(members.back().key, initial.back()));
  }
  REQUIRE(by_key->Init(2, init).ok());
  REQUIRE(grouped->Init(2, init).ok());
  for (uint64_t node : nodes) REQUIRE(grouped->RegisterGroup(node, 9, members).ok());
  for (int round = 0; round < 4; ++round) {
    for (uint64_t node : nodes) {
      std::vector<IncomingValue> values;
      std::vector<Tensor> pushed;
      std::vector<uint8_t> packed;
      for (int i = 0; i < n; ++i) {
        pushed.push_back(rng.RandomTensor(dtype, members[i].shape));
        values.push_back(Incoming(members[i].key, pushed.back()));
        const std::vector<uint8_t> bytes = Bytes(pushed.back());
        packed.insert(packed.end(), bytes.begin(), bytes.end());
      }
      absl::Status a = absl::UnknownError("not called"), b = a;
      by_key->Push(node, 10 * round, values, [&](absl::Status s) { a = s; });
      ByteChunks chunks;  // Received in 5-byte pieces: members straddle them.
      for (size_t at = 0; at < packed.size(); at += 5) {
        chunks.emplace_back(packed.data() + at, std::min<size_t>(5, packed.size() - at));
      }
      grouped->PushGroup(node, 10 * round, 9, chunks, [&](absl::Status s) { b = s; });
      if (node == nodes.back()) {
        REQUIRE(a.ok());
        REQUIRE(b.ok());
      }
    }
    for (int i = 0; i < n; ++i) {
      INFO("round " << round << ", key " << members[i].key.ToString());
      auto x = by_key->Pull(2, {members[i]});
      auto y = grouped->Pull(2, {members[i]});
      REQUIRE(x.ok());
      REQUIRE(y.ok());
      REQUIRE(Bytes((*x)[0]) == Bytes((*y)[0]));
    }
  }
}

TEST_CASE("ServerEngine: members move into an arena while other threads push and pull them",
          "[server][groups][arena]") {
  TestRng rng;
  INFO(rng.Describe());
  // dist_async with two workers: every push applies at once, from two threads.
  auto engine = NewEngine(false, {2, 3});
  engine->SetUpdater(MakeSumUpdater());
  const int n = 200;
  std::vector<ValueSlice> members;
  std::vector<std::vector<double>> expected;
  std::vector<IncomingValue> init;
  std::vector<Tensor> initial;
  for (int i = 0; i < n; ++i) {
    initial.push_back(rng.RandomTensor(DType::kInt64, {3}));
    expected.push_back(ToDoubles(initial.back()));
    members.push_back(ValueSlice{int64_t{5000 + i}, DType::kInt64, {3}, 0, 3});
    init.push_back(Incoming(members.back().key, initial.back()));
  }
  REQUIRE(engine->Init(2, init).ok());
  // Worker 3 pushes and pulls members one by one from its own thread, with values drawn up
  // front, while worker 2 registers the group (moving the members into an arena) and pushes
  // it whole.
  // The single pushes go to a few keys, so that they often meet a group push on one.
  const int rounds = 60, singles = 3000;
  std::vector<std::vector<Tensor>> whole(rounds);
  std::vector<Tensor> alone(singles);
  std::vector<int> picked(singles);
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < n; ++i) whole[r].push_back(rng.RandomTensor(DType::kInt64, {3}));
  }
  for (int k = 0; k < singles; ++k) {
    picked[k] = static_cast<int>(rng.Int(0, 3));
    alone[k] = rng.RandomTensor(DType::kInt64, {3});
  }
  std::atomic<int> failures{0};
  std::thread other([&] {
    for (int k = 0; k < singles; ++k) {
      engine->Push(3, 10000 + k, {Incoming(members[picked[k]].key, alone[k])},
                   [&](absl::Status s) { failures += !s.ok(); });
      if (k % 10 == 0 && !engine->Pull(3, {members[picked[k]]}).ok()) ++failures;
    }
  });
  REQUIRE(engine->RegisterGroup(2, 9, members).ok());
  for (int r = 0; r < rounds; ++r) {
    std::vector<uint8_t> bytes;
    for (const Tensor& t : whole[r]) {
      const auto* p = static_cast<const uint8_t*>(t.data());
      bytes.insert(bytes.end(), p, p + t.byte_size());
    }
    engine->PushGroup(2, 2000 + r, 9, Chunks(bytes, 13), [&](absl::Status s) { failures += !s.ok(); });
  }
  other.join();
  REQUIRE(failures == 0);
  REQUIRE(engine->GroupInArena(2, 9));
  for (int k = 0; k < singles; ++k) {
    const auto v = ToDoubles(alone[k]);
    for (int e = 0; e < 3; ++e) expected[picked[k]][e] += v[e];
  }
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < n; ++i) {
      const auto w = ToDoubles(whole[r][i]);
      for (int e = 0; e < 3; ++e) expected[i][e] += w[e];
    }
  }
  // Integers sum exactly, whatever the interleaving.
  for (int i = 0; i < n; ++i) {
    INFO("key " << members[i].key.Quoted());
    REQUIRE(PullAll(*engine, members[i].key, initial[i]) == expected[i]);
  }
}

TEST_CASE("ServerEngine: bad key groups are refused and change nothing", "[server][groups]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = NewEngine(true, {2, 3});
  const TestGroup group = MakeGroup(rng, *engine, 6);
  auto stored = [&] {
    std::vector<std::vector<double>> all;
    for (size_t i = 0; i < group.keys.size(); ++i) {
      all.push_back(PullAll(*engine, group.keys[i], group.like[i]));
    }
    return all;
  };
  const auto before = stored();

  std::vector<ValueSlice> unknown = group.members;
  unknown[2].key = int64_t{999999};
  absl::Status status = engine->RegisterGroup(2, 1, unknown);
  REQUIRE(absl::IsNotFound(status));
  REQUIRE_THAT(std::string(status.message()), Catch::Contains("999999"));

  std::vector<ValueSlice> reshaped = group.members;
  reshaped[4].shape.push_back(2);
  status = engine->RegisterGroup(2, 1, reshaped);
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE_THAT(std::string(status.message()), Catch::Contains(group.keys[4].Quoted()));

  std::vector<ValueSlice> repeated = group.members;
  repeated.push_back(group.members[1]);
  status = engine->RegisterGroup(2, 1, repeated);
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE_THAT(std::string(status.message()), Catch::Contains("twice"));

  REQUIRE(absl::IsPermissionDenied(engine->RegisterGroup(77, 1, group.members)));

  // None of those registered group 1.
  std::vector<Tensor> pushed;
  for (const Tensor& like : group.like) pushed.push_back(rng.RandomTensor(like.dtype(), like.shape()));
  std::vector<uint8_t> bytes = group.Pack(pushed);
  absl::Status got;
  engine->PushGroup(2, 1, 1, Chunks(bytes, 9), [&](absl::Status s) { got = s; });
  REQUIRE(absl::IsFailedPrecondition(got));
  REQUIRE_THAT(std::string(got.message()), Catch::Contains("no key group 1"));
  REQUIRE(absl::IsFailedPrecondition(engine->PullGroup(2, 1).status()));

  REQUIRE(engine->RegisterGroup(2, 1, group.members).ok());
  // Groups belong to the node that registered them.
  REQUIRE(absl::IsFailedPrecondition(engine->PullGroup(3, 1).status()));
  // A byte short.
  std::vector<uint8_t> short_bytes(bytes.begin(), bytes.end() - 1);
  engine->PushGroup(2, 2, 1, Chunks(short_bytes, 9), [&](absl::Status s) { got = s; });
  REQUIRE(absl::IsInvalidArgument(got));
  REQUIRE_THAT(std::string(got.message()), Catch::Contains("key group 1"));
  REQUIRE(stored() == before);

  // A second push in one open round is refused whole.
  bool first_acked = false;
  engine->PushGroup(2, 3, 1, Chunks(bytes, 9), [&](absl::Status s) { first_acked = s.ok(); });
  engine->PushGroup(2, 4, 1, Chunks(bytes, 9), [&](absl::Status s) { got = s; });
  REQUIRE(absl::IsFailedPrecondition(got));
  REQUIRE(!first_acked);
  REQUIRE(stored() == before);
}

}  // namespace
}  // namespace kvstore
