// Tests of workers dropped from an elastic job (ServerEngine::DropWorkers): open rounds that
// then have every remaining worker's push complete at once, a dropped worker's push already in
// a round stays in it, later rounds wait only for the remaining workers, whole-group rounds
// and a checkpoint's cut stop waiting too, and the dropped worker's requests are refused.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "server/core/engine_cuts.h"
#include "server/core/engine_state.h"
#include "server/core/key_groups.h"
#include "server/core/server_engine.h"
#include "server/core/server_engine_test_util.h"
#include "tests/test_util.h"
namespace kvstore {
namespace {

using testing::Incoming;
using testing::NewSumEngine;
using testing::TestRng;
using testing::ToDoubles;

constexpr int64_t kKey = 9;
// 40 int32 elements (sums are exact) in chunks of 32 bytes: 5 chunks, each with a round of its
// own.
const Shape kShape = {40};
constexpr DType kDType = DType::kInt32;
constexpr int64_t kChunkBytes = 32;

// Chunks returns `t` as one request of its chunks, each in 7-byte pieces.
std::vector<IncomingValue> Chunks(const Tensor& t) {
  std::vector<IncomingValue> values;
  for (const Slice& c : ChunkSlice(Slice{0, 0, t.num_elements()}, 4, kChunkBytes)) {
    IncomingValue value;
    value.slice = ValueSlice{kKey, t.dtype(), t.shape(), c.offset, c.count};
    const auto* bytes = static_cast<const uint8_t*>(t.data()) + c.offset * 4;
    const size_t total = static_cast<size_t>(c.count) * 4;
    for (size_t at = 0; at < total; at += 7) {
      value.bytes.emplace_back(bytes + at, std::min<size_t>(7, total - at));
    }
    values.push_back(std::move(value));
  }
  return values;
}

std::vector<double> PullWhole(ServerEngine& engine, uint64_t node) {
  std::vector<ValueSlice> slices;
  for (const Slice& c : ChunkSlice(Slice{0, 0, 40}, 4, kChunkBytes)) {
    slices.push_back(ValueSlice{kKey, kDType, kShape, c.offset, c.count});
  }
  auto pulled = engine.Pull(node, slices);
  REQUIRE(pulled.ok());
  std::vector<double> out;
  for (const Tensor& t : *pulled) {
    for (double v : ToDoubles(t)) out.push_back(v);
  }
  return out;
}

void Add(std::vector<double>* sum, const Tensor& t) {
  const std::vector<double> v = ToDoubles(t);
  for (size_t i = 0; i < v.size(); ++i) (*sum)[i] += v[i];
}

struct Acks {
  int ok = 0;
  std::vector<absl::Status> errors;
  ServerEngine::Done Callback() {
    return [this](absl::Status s) {
      if (s.ok()) {
        ++ok;
      } else {
        errors.push_back(s);
      }
    };
  }
};

TEST_CASE(
    "ServerEngine elastic: an open round with every remaining worker's push completes "
    "when the missing worker is dropped",
    "[server][elastic]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = NewSumEngine(true, {2, 3, 4}, kChunkBytes);
  const Tensor init = rng.RandomTensor(kDType, kShape);
  REQUIRE(engine->Init(2, {Incoming(kKey, init)}).ok());
  std::vector<double> want = ToDoubles(init);
  uint64_t request = 1;
  // Round 1: every worker.
  Acks acks;
  for (uint64_t w : {2, 3, 4}) {
    const Tensor g = rng.RandomTensor(kDType, kShape);
    Add(&want, g);
    engine->Push(w, request++, Chunks(g), acks.Callback());
  }
  REQUIRE(acks.ok == 3);
  // Round 2: workers 2 and 3 push; worker 4 dies before it does.
  for (uint64_t w : {2, 3}) {
    const Tensor g = rng.RandomTensor(kDType, kShape);
    Add(&want, g);
    engine->Push(w, request++, Chunks(g), acks.Callback());
  }
  REQUIRE(acks.ok == 3);
  REQUIRE(engine->DropWorkers({4}) == 5);  // Each chunk's round.
  REQUIRE(acks.ok == 5);
  REQUIRE(acks.errors.empty());
  REQUIRE(PullWhole(*engine, 2) == want);
  REQUIRE(engine->workers().dropped() == 1);
  // Dropping it again, or a node that is no worker, changes nothing.
  REQUIRE(engine->DropWorkers({4, 99}) == 0);
  // Later rounds wait for the two remaining workers only.
  for (int round = 3; round <= 5; ++round) {
    const Tensor a = rng.RandomTensor(kDType, kShape);
    const Tensor b = rng.RandomTensor(kDType, kShape);
    Add(&want, a);
    Add(&want, b);
    engine->Push(3, request++, Chunks(a), acks.Callback());
    REQUIRE(acks.ok == 5 + 2 * (round - 3));
    engine->Push(2, request++, Chunks(b), acks.Callback());
    REQUIRE(acks.ok == 5 + 2 * (round - 2));
    REQUIRE(PullWhole(*engine, 3) == want);
  }
  // The dropped worker's requests are refused, naming it.
  const Tensor late = rng.RandomTensor(kDType, kShape);
  engine->Push(4, request++, Chunks(late), acks.Callback());
  REQUIRE(acks.errors.size() == 1);
  INFO(acks.errors[0].ToString());
  CHECK(absl::IsPermissionDenied(acks.errors[0]));
  CHECK(absl::StrContains(acks.errors[0].message(), "node id 4 (worker 2) has left the job"));
  const absl::Status pull = engine->Pull(4, {ValueSlice{kKey, kDType, kShape, 0, 8}}).status();
  CHECK(absl::IsPermissionDenied(pull));
  CHECK(absl::IsPermissionDenied(engine->workers().CheckSender(4)));
  CHECK(engine->workers().CheckSender(2).ok());
  CHECK(engine->workers().CheckSender(kSchedulerNodeId).ok());
  REQUIRE(PullWhole(*engine, 2) == want);
}

TEST_CASE("ServerEngine elastic: a dropped worker's push already in a round stays in it",
          "[server][elastic]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = NewSumEngine(true, {2, 3, 4}, kChunkBytes);
  const Tensor init = rng.RandomTensor(kDType, kShape);
  REQUIRE(engine->Init(2, {Incoming(kKey, init)}).ok());
  std::vector<double> want = ToDoubles(init);
  Acks acks;
  // Worker 4 pushes, then dies; worker 2 pushes; the round still waits for worker 3.
  const Tensor dead = rng.RandomTensor(kDType, kShape);
  const Tensor a = rng.RandomTensor(kDType, kShape);
  const Tensor b = rng.RandomTensor(kDType, kShape);
  Add(&want, dead);
  Add(&want, a);
  Add(&want, b);
  engine->Push(4, 1, Chunks(dead), acks.Callback());
  engine->Push(2, 1, Chunks(a), acks.Callback());
  REQUIRE(engine->DropWorkers({4}) == 0);
  REQUIRE(acks.ok == 0);
  // A retry of the dropped worker's push is refused and changes nothing.
  engine->Push(4, 1, Chunks(dead), acks.Callback());
  REQUIRE(acks.ok == 0);
  REQUIRE(acks.errors.size() == 1);
  CHECK(absl::IsPermissionDenied(acks.errors[0]));
  engine->Push(3, 1, Chunks(b), acks.Callback());
  REQUIRE(acks.ok == 3);  // The dropped worker's push is answered with the round.
  REQUIRE(acks.errors.size() == 1);
  REQUIRE(PullWhole(*engine, 2) == want);
  // The next round: workers 2 and 3.
  const Tensor c = rng.RandomTensor(kDType, kShape);
  const Tensor d = rng.RandomTensor(kDType, kShape);
  Add(&want, c);
  Add(&want, d);
  const int before = acks.ok;
  engine->Push(2, 2, Chunks(c), acks.Callback());
  REQUIRE(acks.ok == before);
  engine->Push(3, 2, Chunks(d), acks.Callback());
  REQUIRE(acks.ok == before + 2);
  REQUIRE(PullWhole(*engine, 3) == want);
}

TEST_CASE(
    "ServerEngine elastic: a checkpoint's cut waiting for a round stops waiting for the "
    "dropped worker",
    "[server][elastic]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = NewSumEngine(true, {2, 3, 4}, kChunkBytes);
  const Tensor init = rng.RandomTensor(kDType, kShape);
  REQUIRE(engine->Init(2, {Incoming(kKey, init)}).ok());
  std::vector<double> want = ToDoubles(init);
  Acks acks;
  for (uint64_t w : {2, 3}) {
    const Tensor g = rng.RandomTensor(kDType, kShape);
    Add(&want, g);
    engine->Push(w, 1, Chunks(g), acks.Callback());
  }
  auto started = engine->cuts().Begin();
  REQUIRE(started.ok());
  REQUIRE(*started == 1);
  REQUIRE(engine->cuts().Limit(1).ok());
  CHECK(absl::StrContains(engine->cuts().Lagging(), "(the next one open)"));
  REQUIRE(engine->DropWorkers({4}) == 5);
  REQUIRE(acks.ok == 2);
  // Every key is at the cut's round: a snapshot now is the cut.
  CHECK(engine->cuts().Lagging().empty());
  auto snapshot = engine->state().Snapshot();
  REQUIRE(snapshot.ok());
  engine->cuts().End();
  REQUIRE(PullWhole(*engine, 2) == want);
}

TEST_CASE(
    "ServerEngine elastic: an open whole-group round completes when the missing worker "
    "is dropped; later group pushes go member by member",
    "[server][elastic][groups]") {
  TestRng rng;
  INFO(rng.Describe());
  auto engine = NewSumEngine(true, {2, 3, 4}, 1 << 20);
  // Ten small float32 keys, one group per worker.
  std::vector<ValueSlice> members;
  std::vector<double> want;
  for (int64_t k = 0; k < 10; ++k) {
    Tensor init = Tensor::Zeros(DType::kFloat32, {3});  // Small integers: sums are exact.
    for (int64_t i = 0; i < 3; ++i) init.SetFromDouble(i, static_cast<double>(rng.Int(-50, 50)));
    REQUIRE(engine->Init(2, {Incoming(100 + k, init)}).ok());
    members.push_back(ValueSlice{100 + k, DType::kFloat32, {3}, 0, 3});
    for (double v : ToDoubles(init)) want.push_back(v);
  }
  for (uint64_t w : {2, 3, 4}) REQUIRE(engine->groups().Register(w, 7, members).ok());
  REQUIRE(engine->groups().InArena(2, 7));
  auto push = [&](uint64_t w, uint64_t request, Acks* acks) {
    std::vector<float> values(30);
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = static_cast<float>(rng.Int(-8, 8));
      want[i] += values[i];
    }
    std::vector<uint8_t> bytes(reinterpret_cast<const uint8_t*>(values.data()),
                               reinterpret_cast<const uint8_t*>(values.data()) + 120);
    engine->groups().Push(w, request, 7, {absl::MakeConstSpan(bytes)}, acks->Callback());
  };
  auto pulled = [&] {
    auto packed = engine->groups().Pull(2, 7);
    REQUIRE(packed.ok());
    std::vector<double> out;
    const auto* f = static_cast<const float*>(packed->buffer.data());
    for (size_t i = 0; i < 30; ++i) out.push_back(f[i]);
    return out;
  };
  Acks acks;
  for (uint64_t w : {2, 3, 4}) push(w, 1, &acks);
  REQUIRE(acks.ok == 3);
  REQUIRE(engine->groups().rounds_done() == 1);
  push(2, 2, &acks);
  push(3, 2, &acks);
  REQUIRE(acks.ok == 3);
  REQUIRE(engine->DropWorkers({4}) == 10);  // The group round, member by member.
  REQUIRE(acks.ok == 5);
  REQUIRE(pulled() == want);
  for (uint64_t request = 3; request < 6; ++request) {
    push(3, request, &acks);
    push(2, request, &acks);
  }
  REQUIRE(acks.ok == 11);
  CHECK(acks.errors.empty());
  CHECK(engine->groups().rounds_done() == 1);
  REQUIRE(pulled() == want);
}

TEST_CASE(
    "ServerEngine elastic: a drop while the other workers push from threads of their "
    "own; every value exact",
    "[server][elastic][threads]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int iteration = 0; iteration < 20; ++iteration) {
    auto engine = NewSumEngine(true, {2, 3, 4, 5}, kChunkBytes);
    const Tensor init = rng.RandomTensor(kDType, kShape);
    REQUIRE(engine->Init(2, {Incoming(kKey, init)}).ok());
    constexpr int kRounds = 12;
    const int last = static_cast<int>(rng.Int(1, kRounds - 2));  // Worker 5's last round.
    const auto delay = std::chrono::microseconds(rng.Int(0, 2000));
    INFO("iteration " << iteration << ": worker 5 pushes rounds 1.." << last << ", dropped after "
                      << delay.count() << " us");
    // Every worker's gradients, drawn up front.
    std::vector<std::vector<Tensor>> grads(4);
    std::vector<double> want = ToDoubles(init);
    for (int w = 0; w < 4; ++w) {
      for (int r = 1; r <= kRounds; ++r) {
        grads[w].push_back(rng.RandomTensor(kDType, kShape));
        if (w < 3 || r <= last) Add(&want, grads[w].back());
      }
    }
    std::atomic<int> failures{0};
    // Push waits for the acknowledgement of `w`'s push of round r (1-based).
    auto push = [&](int w, int r, bool wait) {
      auto acked = std::make_shared<absl::Notification>();
      engine->Push(static_cast<uint64_t>(2 + w), static_cast<uint64_t>(r), Chunks(grads[w][r - 1]),
                   [acked, &failures](absl::Status s) {
                     if (!s.ok()) ++failures;
                     acked->Notify();
                   });
      if (wait && !acked->WaitForNotificationWithTimeout(absl::Seconds(20))) ++failures;
    };
    std::vector<std::thread> workers;
    for (int w = 0; w < 3; ++w) {
      workers.emplace_back([&, w] {
        for (int r = 1; r <= kRounds; ++r) push(w, r, true);
      });
    }
    // Worker 5: rounds 1..last-1 acknowledged, its push of round `last` sent and then it dies.
    std::thread dying([&] {
      for (int r = 1; r <= last; ++r) push(3, r, r < last);
    });
    dying.join();
    std::this_thread::sleep_for(delay);
    engine->DropWorkers({5});
    for (std::thread& t : workers) t.join();
    REQUIRE(failures == 0);
    REQUIRE(PullWhole(*engine, 2) == want);
  }
}

}  // namespace
}  // namespace kvstore
