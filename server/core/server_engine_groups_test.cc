// Tests of key groups: a group push is the push of its members (rounds, request ids, bits),
// arenas stay coherent with their members under concurrent pushes and pulls, and bad groups
// are refused.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "server/core/engine_state.h"
#include "server/core/key_groups.h"
#include "server/core/server_engine.h"
#include "server/core/server_engine_test_util.h"
#include "tests/test_util.h"
namespace kvstore {
namespace {

using testing::Bytes;
using testing::Incoming;
using testing::MaxAbsDiff;
using testing::NewEngine;
using testing::NewSumEngine;
using testing::PullAll;
using testing::TestRng;
using testing::ToDoubles;

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
  REQUIRE(engine->groups().Register(2, 7, group.members).ok());
  REQUIRE(engine->groups().Register(4, 1, group.members).ok());
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
        engine->groups().Push(w, 50 + round, w == 2 ? 7 : 1, Chunks(bytes, 5), ack);
      }
      REQUIRE(acknowledged == (w == workers.back() ? 3 : 0));
    }
    auto packed = engine->groups().Pull(2, 7);
    REQUIRE(packed.ok());
    size_t offset = 0;
    for (size_t i = 0; i < group.keys.size(); ++i) {
      const Tensor& like = group.like[i];
      INFO("key " << group.keys[i].Quoted() << " " << DTypeName(like.dtype()));
      const std::vector<double> pulled = PullAll(*engine, group.keys[i], like);
      // Integers wrap and sum exactly; floats within the dtype's tolerance of 4 summed terms
      // (the stored value and 3 pushes), whose partial sums reach |stored| + 12 <= 4 * (1 + 3
      // * (round + 1)): each term lies in [-4, 4].
      REQUIRE(MaxAbsDiff(pulled, expected[i]) <=
              testing::Tolerance(like.dtype(), 4, 4.0 * (1 + 3 * (round + 1))));
      expected[i] = pulled;  // The next round starts from what is stored.
      const Tensor view = Tensor::Borrow(static_cast<uint8_t*>(packed->buffer.data()) + offset,
                                         like.dtype(), like.shape());
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
  REQUIRE(engine->groups().Register(2, 3, group.members).ok());
  std::vector<std::vector<double>> expected;
  for (const Tensor& t : group.like) expected.push_back(ToDoubles(t));
  const std::vector<uint8_t> bytes = group.Draw(rng, &expected);
  int acks = 0;
  // The same request id twice: applied once.
  for (int attempt = 0; attempt < 2; ++attempt) {
    engine->groups().Push(2, 8, 3, Chunks(bytes, 64), [&](absl::Status s) { acks += s.ok(); });
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
  REQUIRE(engine->groups().Register(2, 5, group.members).ok());
  REQUIRE(engine->groups().InArena(2, 5));
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
    engine->groups().Push(
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
      // 2 + round terms in [-4, 4]: partial sums up to 4 * (2 + round).
      REQUIRE(MaxAbsDiff(seen[i], expected[i]) <=
              testing::Tolerance(group.like[i].dtype(), 2 + round, 4.0 * (2 + round)));
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
  std::vector<Group> groups = {
      {2, 1, {}, true}, {other, 2, {}, true}, {2, 3, {}, true}, {other, 4, {}, false}};
  for (size_t i = 0; i < n; ++i) groups[0].index.push_back(i);
  groups[1].index = groups[0].index;  // The same list from another worker: the same arena.
  for (size_t i = 10; i < 35; ++i) groups[2].index.push_back(i);  // A stretch of it.
  for (size_t i = n; i-- > 0;) groups[3].index.push_back(i);      // Another order: no arena.
  for (const Group& g : groups) {
    std::vector<ValueSlice> list;
    for (size_t i : g.index) list.push_back(members[i]);
    REQUIRE(engine->groups().Register(g.node, g.id, list).ok());
    INFO("group " << g.id);
    REQUIRE(engine->groups().InArena(g.node, g.id) == g.arena);
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
      engine->SetUpdater(
          MakeFunctionUpdater("subtract", [](const Key&, const Tensor& received, Tensor* stored) {
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
        engine->groups().Push(g.node, request++, g.id, Chunks(bytes, rng.Int(3, 41)), ack);
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
        auto packed = engine->groups().Pull(g.node, g.id);
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
  auto snapshot = engine->state().Snapshot();
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
  for (uint64_t node : nodes) REQUIRE(grouped->groups().Register(node, 9, members).ok());
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
      grouped->groups().Push(node, 10 * round, 9, chunks, [&](absl::Status s) { b = s; });
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
  REQUIRE(engine->groups().Register(2, 9, members).ok());
  for (int r = 0; r < rounds; ++r) {
    std::vector<uint8_t> bytes;
    for (const Tensor& t : whole[r]) {
      const auto* p = static_cast<const uint8_t*>(t.data());
      bytes.insert(bytes.end(), p, p + t.byte_size());
    }
    engine->groups().Push(2, 2000 + r, 9, Chunks(bytes, 13),
                          [&](absl::Status s) { failures += !s.ok(); });
  }
  other.join();
  REQUIRE(failures == 0);
  REQUIRE(engine->groups().InArena(2, 9));
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
  absl::Status status = engine->groups().Register(2, 1, unknown);
  REQUIRE(absl::IsNotFound(status));
  REQUIRE_THAT(std::string(status.message()), Catch::Contains("999999"));

  std::vector<ValueSlice> reshaped = group.members;
  reshaped[4].shape.push_back(2);
  status = engine->groups().Register(2, 1, reshaped);
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE_THAT(std::string(status.message()), Catch::Contains(group.keys[4].Quoted()));

  std::vector<ValueSlice> repeated = group.members;
  repeated.push_back(group.members[1]);
  status = engine->groups().Register(2, 1, repeated);
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE_THAT(std::string(status.message()), Catch::Contains("twice"));

  REQUIRE(absl::IsPermissionDenied(engine->groups().Register(77, 1, group.members)));

  // None of those registered group 1.
  std::vector<Tensor> pushed;
  for (const Tensor& like : group.like)
    pushed.push_back(rng.RandomTensor(like.dtype(), like.shape()));
  std::vector<uint8_t> bytes = group.Pack(pushed);
  absl::Status got;
  engine->groups().Push(2, 1, 1, Chunks(bytes, 9), [&](absl::Status s) { got = s; });
  REQUIRE(absl::IsFailedPrecondition(got));
  REQUIRE_THAT(std::string(got.message()), Catch::Contains("no key group 1"));
  REQUIRE(absl::IsFailedPrecondition(engine->groups().Pull(2, 1).status()));

  REQUIRE(engine->groups().Register(2, 1, group.members).ok());
  // Groups belong to the node that registered them.
  REQUIRE(absl::IsFailedPrecondition(engine->groups().Pull(3, 1).status()));
  // A byte short.
  std::vector<uint8_t> short_bytes(bytes.begin(), bytes.end() - 1);
  engine->groups().Push(2, 2, 1, Chunks(short_bytes, 9), [&](absl::Status s) { got = s; });
  REQUIRE(absl::IsInvalidArgument(got));
  REQUIRE_THAT(std::string(got.message()), Catch::Contains("key group 1"));
  REQUIRE(stored() == before);

  // A second push in one open round is refused whole.
  bool first_acked = false;
  engine->groups().Push(2, 3, 1, Chunks(bytes, 9), [&](absl::Status s) { first_acked = s.ok(); });
  engine->groups().Push(2, 4, 1, Chunks(bytes, 9), [&](absl::Status s) { got = s; });
  REQUIRE(absl::IsFailedPrecondition(got));
  REQUIRE(!first_acked);
  REQUIRE(stored() == before);
}

}  // namespace
}  // namespace kvstore
