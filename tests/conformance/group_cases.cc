// Calls with long lists of small keys (which distributed stores send as key groups: one packed
// array per server), in any order with calls on single keys, against a float64 reference.
#include <vector>

#include <catch2/catch.hpp>

#include "common/reduce.h"
#include "tests/conformance/store_under_test.h"
#include "tests/test_util.h"

namespace kvstore::testing {
namespace {

struct ManyKeys {
  std::vector<Key> keys;
  std::vector<Tensor> like;
  std::vector<std::vector<double>> reference;
  bool accumulate = false;

  // Random values for every key, applied to the reference as the store applies them.
  std::vector<Tensor> Next(TestRng& rng) {
    std::vector<Tensor> values;
    for (size_t k = 0; k < keys.size(); ++k) {
      values.push_back(rng.RandomTensor(like[k].dtype(), like[k].shape()));
      Apply(k, values.back());
    }
    return values;
  }
  void Apply(size_t k, const Tensor& value) {
    const std::vector<double> v = ToDoubles(value);
    for (size_t i = 0; i < v.size(); ++i) {
      reference[k][i] = accumulate ? reference[k][i] + v[i] : v[i];
    }
  }
  std::vector<Tensor> Outputs() const {
    std::vector<Tensor> outs;
    for (const Tensor& t : like) outs.push_back(Tensor::Zeros(t.dtype(), t.shape()));
    return outs;
  }
  void Check(const std::vector<Tensor>& outs, int updates) const {
    for (size_t k = 0; k < keys.size(); ++k) {
      INFO("key " << keys[k].Quoted() << " " << DTypeName(like[k].dtype())
                  << ShapeToString(like[k].shape()));
      REQUIRE(MaxAbsDiff(ToDoubles(outs[k]), reference[k]) <=
              Tolerance(like[k].dtype(), updates + 1, 4));
    }
  }
};

std::vector<Tensor*> Pointers(std::vector<Tensor>& outs) {
  std::vector<Tensor*> ptrs;
  for (Tensor& t : outs) ptrs.push_back(&t);
  return ptrs;
}

// Init stores `n` small keys (at most 4 elements each; with `big`, one more of 40).
ManyKeys Init(TestRng& rng, KVStore& kv, int n, bool big) {
  ManyKeys m;
  std::vector<Tensor> initial;
  for (int i = 0; i < n; ++i) {
    m.keys.push_back(int64_t{20000 + 7 * i});
    initial.push_back(rng.RandomTensor(rng.AnyDType(), rng.AnyShape(2, 2)));
  }
  if (big) {
    m.keys.push_back(int64_t{19999});
    initial.push_back(rng.RandomTensor(DType::kFloat32, {5, 8}));
  }
  for (const Tensor& t : initial) {
    m.like.push_back(t);
    m.reference.push_back(ToDoubles(t));
  }
  REQUIRE(kv.Init(m.keys, initial).ok());
  if (GetStoreUnderTest().function_updater && rng.Int(0, 1) == 1) {
    m.accumulate = true;
    REQUIRE(kv.SetUpdater([](const Key&, const Tensor& received, Tensor* stored) {
      REQUIRE(AddInto(received, stored).ok());
    }).ok());
  }
  return m;
}

TEST_CASE("Many keys: repeated pushes and pulls of one long list", "[groups]") {
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  const bool big = rng.Int(0, 2) == 0;  // One split key sends the whole list key by key.
  ManyKeys m = Init(rng, *kv, static_cast<int>(rng.Int(70, 160)), big);
  INFO(m.keys.size() << " keys, accumulate " << m.accumulate);
  std::vector<Tensor> outs = m.Outputs();
  const std::vector<Tensor*> ptrs = Pointers(outs);
  for (int round = 0; round < 4; ++round) {
    const std::vector<Tensor> values = m.Next(rng);
    if (rng.Int(0, 1) == 0) {
      REQUIRE(kv->Push(m.keys, values).ok());
      REQUIRE(kv->Pull(m.keys, ptrs).ok());
    } else {
      REQUIRE(kv->PushPull(m.keys, values, ptrs).ok());
    }
    REQUIRE(kv->WaitAll().ok());
    m.Check(outs, round + 1);
  }
}

TEST_CASE("Many keys: a long list and single keys keep per-key order", "[groups][order]") {
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  ManyKeys m = Init(rng, *kv, 100, false);
  const size_t k = static_cast<size_t>(rng.Int(0, 99));
  INFO("single key " << m.keys[k].Quoted() << ", accumulate " << m.accumulate);
  // single push, list push, single pull: the pull sees both pushes.
  const Tensor first = rng.RandomTensor(m.like[k].dtype(), m.like[k].shape());
  REQUIRE(kv->Push(m.keys[k], first).ok());
  m.Apply(k, first);
  const std::vector<Tensor> values = m.Next(rng);
  REQUIRE(kv->Push(m.keys, values).ok());
  Tensor one = Tensor::Zeros(m.like[k].dtype(), m.like[k].shape());
  REQUIRE(kv->Pull(m.keys[k], &one).ok());
  REQUIRE(kv->Wait({m.keys[k]}).ok());
  REQUIRE(MaxAbsDiff(ToDoubles(one), m.reference[k]) <= Tolerance(one.dtype(), 3, 4));
  // list push, single push, list pull: the list pull sees the single push.
  const std::vector<Tensor> again = m.Next(rng);
  REQUIRE(kv->Push(m.keys, again).ok());
  const Tensor last = rng.RandomTensor(m.like[k].dtype(), m.like[k].shape());
  REQUIRE(kv->Push(m.keys[k], last).ok());
  m.Apply(k, last);
  std::vector<Tensor> outs = m.Outputs();
  REQUIRE(kv->Pull(m.keys, Pointers(outs)).ok());
  REQUIRE(kv->WaitAll().ok());
  m.Check(outs, 4);
}

TEST_CASE("Many keys: one bad value refuses the whole list", "[groups][errors]") {
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  ManyKeys m = Init(rng, *kv, 80, false);
  std::vector<Tensor> outs = m.Outputs();
  REQUIRE(kv->Pull(m.keys, Pointers(outs)).ok());  // The list is known from now on.
  REQUIRE(kv->WaitAll().ok());
  const ManyKeys before = m;
  std::vector<Tensor> values = m.Next(rng);
  const size_t bad = static_cast<size_t>(rng.Int(0, 79));
  Shape wrong = m.like[bad].shape();
  wrong.push_back(2);
  values[bad] = rng.RandomTensor(m.like[bad].dtype(), wrong);
  const absl::Status status = kv->Push(m.keys, values);
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE_THAT(std::string(status.message()), Catch::Contains("key " + m.keys[bad].Quoted()));
  Tensor wrong_out = Tensor::Zeros(m.like[bad].dtype(), wrong);
  std::vector<Tensor*> ptrs = Pointers(outs);
  ptrs[bad] = &wrong_out;
  REQUIRE(absl::IsInvalidArgument(kv->Pull(m.keys, ptrs)));
  outs = m.Outputs();
  REQUIRE(kv->Pull(m.keys, Pointers(outs)).ok());
  REQUIRE(kv->WaitAll().ok());
  before.Check(outs, 1);  // Nothing was applied.
}

}  // namespace
}  // namespace kvstore::testing
