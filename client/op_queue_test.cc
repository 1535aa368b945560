#include "client/op_queue.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

// Started records the operations a queue starts and holds their completions until Release.
struct Started {
  absl::Mutex mu;
  std::vector<std::vector<Key>> ops;  // Each started operation's keys.
  std::vector<OpDone> held;
  OpQueue::Start Start() {
    return [this](Op op, OpDone done) {
      absl::MutexLock lock(&mu);
      std::vector<Key> keys;
      for (const KeyWork& entry : op.work) keys.push_back(entry.key);
      ops.push_back(std::move(keys));
      held.push_back(std::move(done));
    };
  }
  // WaitFor waits (at most 10 s) until `n` operations have started.
  bool WaitFor(size_t n) {
    absl::MutexLock lock(&mu);
    std::pair<Started*, size_t> arg(this, n);
    return mu.AwaitWithTimeout(
        absl::Condition(
            +[](std::pair<Started*, size_t>* a) { return a->first->ops.size() >= a->second; },
            &arg),
        absl::Seconds(10));
  }
  void ReleaseAll() {
    std::vector<OpDone> done;
    {
      absl::MutexLock lock(&mu);
      done.swap(held);
    }
    for (OpDone& d : done) d(absl::OkStatus());
  }
};

Op OneKey(Kind kind, int64_t key) {
  Op op;
  op.kind = kind;
  op.bytes = 16;
  op.keys = {key};
  op.work.push_back(KeyWork{Key(key)});
  return op;
}

TEST_CASE(
    "OpQueue: ready pushes of separate calls are fused only when fuse_pushes; pulls "
    "always",
    "[client][queue]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  for (const bool fuse_pushes : {true, false}) {
    for (const Kind kind : {Kind::kPush, Kind::kPushPull, Kind::kPull}) {
      INFO("fuse_pushes " << fuse_pushes << ", kind " << static_cast<int>(kind));
      Started started;
      // One operation in flight at a time: while the first is held, the others queue up.
      OpQueue queue(OpQueue::Options{1, 1 << 20, fuse_pushes}, started.Start());
      const int n = static_cast<int>(rng.Int(3, 9));
      queue.Enqueue(OneKey(kind, int64_t{0}));
      REQUIRE(started.WaitFor(1));
      for (int k = 1; k < n; ++k) queue.Enqueue(OneKey(kind, k));
      started.ReleaseAll();
      const bool fused = kind == Kind::kPull || fuse_pushes;
      // Fused: the n - 1 queued operations start as one; else one by one, each released.
      for (size_t expected = 2; expected <= (fused ? 2u : static_cast<size_t>(n)); ++expected) {
        REQUIRE(started.WaitFor(expected));
        started.ReleaseAll();
      }
      REQUIRE(queue.WaitAll().ok());
      absl::MutexLock lock(&started.mu);
      CHECK(started.ops.size() == (fused ? 2u : static_cast<size_t>(n)));
      CHECK(started.ops[0] == std::vector<Key>{Key(int64_t{0})});
      size_t keys = 0;
      for (const auto& op : started.ops) keys += op.size();
      CHECK(keys == static_cast<size_t>(n));
    }
  }
}

}  // namespace
}  // namespace kvstore
