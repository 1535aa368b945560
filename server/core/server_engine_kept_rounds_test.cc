// Tests of dist_sync rounds whose pushes are kept as received (IncomingValue::
// bytes_outlive_call) and merged in one pass by the round's last push: the same bits as rounds
// whose pushes are copied into the sum buffer, for every dtype, 2-5 workers, sums, assigns and
// an updater that does not sum in place; pushes kept and copied mixed in one round; a round
// completed by a dropped worker or failed with pushes kept.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <vector>

#include "common/reduce.h"
#include "common/store/updater.h"
#include "server/core/server_engine.h"
#include "server/core/server_engine_test_util.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::Bytes;
using testing::MaxAbsDiff;
using testing::TestRng;
using testing::ToDoubles;

const Key kKey = 9;

// Pushed: elements [chunk.offset, chunk.offset + chunk.count) of `t` as one pushed chunk, cut
// into pieces of `piece` bytes (so that elements straddle pieces as they straddle gRPC slices).
IncomingValue Pushed(const Tensor& t, const Slice& chunk, size_t piece, bool keep) {
  IncomingValue value;
  value.slice = ValueSlice{kKey, t.dtype(), t.shape(), chunk.offset, chunk.count};
  value.bytes_outlive_call = keep;
  const size_t element = DTypeSize(t.dtype());
  const auto* bytes = static_cast<const uint8_t*>(t.data()) + chunk.offset * element;
  const size_t total = static_cast<size_t>(chunk.count) * element;
  for (size_t at = 0; at < total; at += piece) {
    value.bytes.emplace_back(bytes + at, std::min(piece, total - at));
  }
  return value;
}

std::unique_ptr<Updater> MakeUpdater(int which) {
  switch (which) {
    case 0:
      return MakeSumUpdater();
    case 1:
      return MakeAssignUpdater();
    default:
      // Not piecewise, so not summed in place: the kept pushes are summed into the round's
      // buffer first. stored += received, twice.
      return MakeFunctionUpdater("add_twice",
                                 [](const Key&, const Tensor& received, Tensor* stored) {
                                   REQUIRE(AddInto(received, stored).ok());
                                   REQUIRE(AddInto(received, stored).ok());
                                 });
  }
}

std::unique_ptr<ServerEngine> NewEngine(const std::vector<uint64_t>& workers, int64_t chunk_bytes,
                                        int updater) {
  ServerEngineOptions options;
  options.sync = true;
  options.worker_node_ids = workers;
  options.chunk_bytes = chunk_bytes;
  auto engine = ServerEngine::Create(std::move(options), MakeUpdater(updater));
  REQUIRE(engine.ok());
  return std::move(engine).value();
}

// PullBytes pulls the whole value, chunk by chunk (a pull names one chunk), as bytes.
std::vector<uint8_t> PullBytes(ServerEngine& engine, const Tensor& like, int64_t chunk_bytes) {
  std::vector<uint8_t> joined;
  for (const Slice& c :
       ChunkSlice(Slice{0, 0, like.num_elements()}, DTypeSize(like.dtype()), chunk_bytes)) {
    auto pulled = engine.Pull(2, {ValueSlice{kKey, like.dtype(), like.shape(), c.offset, c.count}});
    REQUIRE(pulled.ok());
    const std::vector<uint8_t> bytes = Bytes((*pulled)[0]);
    joined.insert(joined.end(), bytes.begin(), bytes.end());
  }
  return joined;
}

// Acks counts the pushes answered and keeps the errors.
struct Acks {
  int ok = 0;
  std::vector<absl::Status> errors;
  std::function<void(absl::Status)> Callback() {
    return [this](absl::Status status) {
      if (status.ok()) {
        ++ok;
      } else {
        errors.push_back(std::move(status));
      }
    };
  }
};

TEST_CASE("Kept rounds: the same bits as copied rounds", "[server][chunks][kept]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 40; ++trial) {
    const size_t k = static_cast<size_t>(rng.Int(2, 5));
    std::vector<uint64_t> workers(k);
    std::iota(workers.begin(), workers.end(), 2);
    const DType dtype =
        rng.Int(0, 3) == 0 ? (rng.Int(0, 1) ? DType::kInt32 : DType::kInt64) : rng.AnyFloatDType();
    const int updater = static_cast<int>(rng.Int(0, 2));
    const Shape shape = {rng.Int(1, 60)};
    const int64_t chunk_bytes = rng.Int(1, 64);
    // How the rounds' pushes are marked: all kept, none, or each at random.
    const int marking = static_cast<int>(rng.Int(0, 2));
    INFO("trial " << trial << ": " << k << " workers, " << DTypeName(dtype) << ShapeToString(shape)
                  << ", updater " << updater << ", chunks of " << chunk_bytes << " bytes, marking "
                  << marking);
    const int64_t n = shape[0];
    const std::vector<Slice> chunks = ChunkSlice(Slice{0, 0, n}, DTypeSize(dtype), chunk_bytes);
    auto kept = NewEngine(workers, chunk_bytes, updater);
    auto copied = NewEngine(workers, chunk_bytes, updater);
    const Tensor init = rng.RandomTensor(dtype, shape);
    REQUIRE(kept->Init(2, {testing::Incoming(kKey, init)}).ok());
    REQUIRE(copied->Init(2, {testing::Incoming(kKey, init)}).ok());
    std::vector<double> reference = ToDoubles(init);
    for (int round = 0; round < 3; ++round) {
      std::vector<Tensor> pushes;
      for (size_t w = 0; w < k; ++w) pushes.push_back(rng.RandomTensor(dtype, shape));
      std::vector<size_t> order(k);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng.engine());
      Acks kept_acks, copied_acks;
      for (size_t c = 0; c < chunks.size(); ++c) {
        for (size_t w : order) {
          const size_t piece = static_cast<size_t>(rng.Int(1, 24));
          const bool keep = marking == 0 || (marking == 2 && rng.Int(0, 1) == 1);
          const uint64_t request = 1000 * round + c;
          kept->Push(workers[w], request, {Pushed(pushes[w], chunks[c], piece, keep)},
                     kept_acks.Callback());
          copied->Push(workers[w], request, {Pushed(pushes[w], chunks[c], piece, false)},
                       copied_acks.Callback());
        }
      }
      REQUIRE(kept_acks.errors.empty());
      REQUIRE(kept_acks.ok == static_cast<int>(k * chunks.size()));
      REQUIRE(copied_acks.ok == kept_acks.ok);
      REQUIRE(PullBytes(*kept, init, chunk_bytes) == PullBytes(*copied, init, chunk_bytes));
      if (updater == 0 && dtype != DType::kFloat16 && dtype != DType::kBFloat16) {
        // The sum against float64 (integers exactly: small values, no wrap).
        for (const Tensor& p : pushes) {
          const std::vector<double> v = ToDoubles(p);
          for (int64_t i = 0; i < n; ++i) reference[i] += v[i];
        }
        const std::vector<uint8_t> bytes = PullBytes(*kept, init, chunk_bytes);
        Tensor pulled = Tensor::Zeros(dtype, shape);
        std::memcpy(pulled.data(), bytes.data(), bytes.size());
        const double tolerance = dtype == DType::kFloat32   ? 1e-3
                                 : dtype == DType::kFloat64 ? 1e-9
                                                            : 0.0;
        CHECK(MaxAbsDiff(ToDoubles(pulled), reference) <= tolerance);
      }
    }
  }
}

TEST_CASE("Kept rounds: a kept push is read when its round completes", "[server][chunks][kept]") {
  // The engine keeps a marked push's bytes, so what they hold when the last push arrives is what
  // is merged; an unmarked push is copied during its call. (A transport keeps the bytes as they
  // were: this only shows which path ran.)
  TestRng rng;
  INFO(rng.Describe());
  const Shape shape = {rng.Int(4, 40)};
  const Slice whole{0, 0, shape[0]};
  for (bool keep : {true, false}) {
    INFO("kept " << keep);
    auto engine = NewEngine({2, 3}, 1 << 20, /*updater=*/0);
    const Tensor init = rng.RandomTensor(DType::kFloat64, shape);
    REQUIRE(engine->Init(2, {testing::Incoming(kKey, init)}).ok());
    Tensor first = rng.RandomTensor(DType::kFloat64, shape);
    const Tensor as_pushed = first.Clone();
    const Tensor later = rng.RandomTensor(DType::kFloat64, shape);
    const Tensor second = rng.RandomTensor(DType::kFloat64, shape);
    Acks acks;
    engine->Push(2, 1, {Pushed(first, whole, 5, keep)}, acks.Callback());
    REQUIRE(acks.ok == 0);
    std::memcpy(first.data(), later.data(), later.byte_size());
    engine->Push(3, 1, {Pushed(second, whole, 3, keep)}, acks.Callback());
    REQUIRE(acks.ok == 2);
    std::vector<double> want = ToDoubles(init);
    const std::vector<double> a = ToDoubles(keep ? later : as_pushed), b = ToDoubles(second);
    for (size_t i = 0; i < want.size(); ++i) want[i] += a[i] + b[i];
    CHECK(MaxAbsDiff(testing::PullAll(*engine, kKey, init), want) <= 1e-12);
  }
}

TEST_CASE("Kept rounds: a dropped worker completes a round of kept pushes; a failed one drops them",
          "[server][chunks][kept]") {
  TestRng rng;
  INFO(rng.Describe());
  const DType dtype = rng.AnyFloatDType();
  const Shape shape = {rng.Int(8, 50)};
  const int64_t chunk_bytes = rng.Int(8, 40);
  INFO(DTypeName(dtype) << ShapeToString(shape) << ", chunks of " << chunk_bytes << " bytes");
  const std::vector<Slice> chunks =
      ChunkSlice(Slice{0, 0, shape[0]}, DTypeSize(dtype), chunk_bytes);
  const Tensor init = rng.RandomTensor(dtype, shape);
  const Tensor a = rng.RandomTensor(dtype, shape), b = rng.RandomTensor(dtype, shape);

  // The same round with copied pushes gives the bits to expect.
  auto copied = NewEngine({2, 3, 4}, chunk_bytes, /*updater=*/0);
  auto kept = NewEngine({2, 3, 4}, chunk_bytes, /*updater=*/0);
  for (ServerEngine* engine : {copied.get(), kept.get()}) {
    const bool keep = engine == kept.get();
    Acks acks;
    REQUIRE(engine->Init(2, {testing::Incoming(kKey, init)}).ok());
    for (size_t c = 0; c < chunks.size(); ++c) {
      engine->Push(2, c, {Pushed(a, chunks[c], 6, keep)}, acks.Callback());
      engine->Push(3, c, {Pushed(b, chunks[c], 5, keep)}, acks.Callback());
    }
    REQUIRE(acks.ok == 0);
    REQUIRE(engine->DropWorkers({4}) == static_cast<int64_t>(chunks.size()));
    REQUIRE(acks.errors.empty());
    REQUIRE(acks.ok == static_cast<int>(2 * chunks.size()));
  }
  REQUIRE(PullBytes(*kept, init, chunk_bytes) == PullBytes(*copied, init, chunk_bytes));

  // A round that fails with kept pushes answers them Aborted and leaves the value as it was.
  const std::vector<uint8_t> before = PullBytes(*kept, init, chunk_bytes);
  Acks failed;
  for (size_t c = 0; c < chunks.size(); ++c) {
    kept->Push(2, 100 + c, {Pushed(b, chunks[c], 4, true)}, failed.Callback());
  }
  kept->FailRounds("worker 3 died");
  REQUIRE(failed.ok == 0);
  REQUIRE(failed.errors.size() == chunks.size());
  for (const absl::Status& status : failed.errors) CHECK(absl::IsAborted(status));
  CHECK(PullBytes(*kept, init, chunk_bytes) == before);
}

}  // namespace
}  // namespace kvstore
