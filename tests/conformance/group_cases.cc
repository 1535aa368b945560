// Calls with long lists of small keys (which distributed stores send as key groups: one packed
// array per server), in any order with calls on single keys, against a float64 reference.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "common/partitioner.h"
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

// ViewsOfBucket returns one view per tensor of `like` (of its shape), back to back in a new
// bucket of `total` elements of their dtype.
std::vector<Tensor> ViewsOfBucket(const std::vector<Tensor>& like, int64_t total) {
  const Tensor bucket = Tensor::Zeros(like.front().dtype(), {total});
  std::vector<Tensor> views;
  size_t offset = 0;
  for (const Tensor& t : like) {
    views.push_back(*bucket.View(offset, t.dtype(), t.shape()));
    offset += t.byte_size();
  }
  return views;
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

// KnownList stores 80 small keys and pulls them once as a list, so that the store knows it.
ManyKeys KnownList(TestRng& rng, KVStore& kv) {
  ManyKeys m = Init(rng, kv, 80, false);
  std::vector<Tensor> outs = m.Outputs();
  REQUIRE(kv.Pull(m.keys, Pointers(outs)).ok());
  REQUIRE(kv.WaitAll().ok());
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

TEST_CASE("Many keys: the same keys listed in another order are other lists", "[groups]") {
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  // One dtype and shape for every key, so that only the order tells the lists apart.
  const DType dtype = rng.AnyDType();
  const Shape shape = rng.AnyShape(2, 2);
  ManyKeys m;
  std::vector<Tensor> initial;
  for (int i = 0; i < 90; ++i) {
    m.keys.push_back(int64_t{70000 + 11 * i});
    initial.push_back(rng.RandomTensor(dtype, shape));
    m.like.push_back(initial.back());
    m.reference.push_back(ToDoubles(initial.back()));
  }
  REQUIRE(kv->Init(m.keys, initial).ok());
  INFO(DTypeName(dtype) << ShapeToString(shape));
  for (int round = 0; round < 4; ++round) {
    // Forward, reversed, forward, rotated by one: each list pushed and pulled in its order.
    ManyKeys listed = m;
    if (round == 1) {
      std::reverse(listed.keys.begin(), listed.keys.end());
      std::reverse(listed.like.begin(), listed.like.end());
      std::reverse(listed.reference.begin(), listed.reference.end());
    } else if (round == 3) {
      std::rotate(listed.keys.begin(), listed.keys.begin() + 1, listed.keys.end());
      std::rotate(listed.like.begin(), listed.like.begin() + 1, listed.like.end());
      std::rotate(listed.reference.begin(), listed.reference.begin() + 1, listed.reference.end());
    }
    const std::vector<Tensor> values = listed.Next(rng);
    std::vector<Tensor> outs = listed.Outputs();
    REQUIRE(kv->Push(listed.keys, values).ok());
    REQUIRE(kv->Pull(listed.keys, Pointers(outs)).ok());
    REQUIRE(kv->WaitAll().ok());
    INFO("round " << round);
    listed.Check(outs, round + 1);
    // Carry the reference back to list order, and check each key alone.
    for (size_t k = 0; k < listed.keys.size(); ++k) {
      const size_t at = static_cast<size_t>(
          std::find(m.keys.begin(), m.keys.end(), listed.keys[k]) - m.keys.begin());
      m.reference[at] = listed.reference[k];
    }
    for (size_t k = 0; k < m.keys.size(); ++k) {
      Tensor one = Tensor::Zeros(dtype, shape);
      REQUIRE(kv->Pull(m.keys[k], &one).ok());
      REQUIRE(kv->Wait({m.keys[k]}).ok());
      INFO("key " << m.keys[k].Quoted() << " alone");
      REQUIRE(MaxAbsDiff(ToDoubles(one), m.reference[k]) <= Tolerance(dtype, round + 2, 4));
    }
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

TEST_CASE("Many keys: values and outputs that are views of one bucket", "[groups][bucket]") {
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  const DType dtype = rng.AnyDType();
  const int n = static_cast<int>(rng.Int(70, 130));
  std::vector<Key> keys;
  for (int i = 0; i < n; ++i) keys.push_back(int64_t{30000 + 5 * i});
  // A distributed store sends a server's members straight from the bucket when they lie back
  // to back in it: order the list by server, as a framework would lay out its buckets.
  const int servers = GetStoreUnderTest().num_servers;
  if (servers > 0) {
    auto partitioner = Partitioner::Create(servers);
    REQUIRE(partitioner.ok());
    std::stable_sort(keys.begin(), keys.end(), [&](const Key& a, const Key& b) {
      return partitioner->ServerOf(a) < partitioner->ServerOf(b);
    });
  }
  ManyKeys m;
  m.keys = keys;
  std::vector<Tensor> initial;
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    // At most 4 elements: whole on one server (the distributed suite splits above 8).
    initial.push_back(rng.RandomTensor(dtype, rng.AnyShape(2, 2)));
    m.like.push_back(initial.back());
    m.reference.push_back(ToDoubles(initial.back()));
    total += initial.back().num_elements();
  }
  REQUIRE(kv->Init(m.keys, initial).ok());
  INFO(n << " keys of " << DTypeName(dtype) << ", " << servers << " servers");
  // One bucket for the values, one for the outputs; each key a view of its own stretch.
  std::vector<Tensor> values = ViewsOfBucket(m.like, total);
  std::vector<Tensor> outs = ViewsOfBucket(m.like, total);
  const std::vector<Tensor*> ptrs = Pointers(outs);
  std::vector<Tensor*> in_place = Pointers(values);
  for (int round = 0; round < 5; ++round) {
    const std::vector<Tensor> next = m.Next(rng);
    for (int i = 0; i < n; ++i) {
      std::memcpy(values[i].data(), next[i].data(), next[i].byte_size());
    }
    INFO("round " << round);
    switch (round) {
      case 0:
      case 1:
        REQUIRE(kv->Push(m.keys, values).ok());
        REQUIRE(kv->Pull(m.keys, ptrs).ok());
        REQUIRE(kv->WaitAll().ok());
        m.Check(outs, round + 1);
        break;
      case 2:
        REQUIRE(kv->PushPull(m.keys, values, ptrs).ok());
        REQUIRE(kv->WaitAll().ok());
        m.Check(outs, round + 1);
        break;
      case 3:  // Pulled into the pushed bucket itself.
        REQUIRE(kv->PushPull(m.keys, values, in_place).ok());
        REQUIRE(kv->WaitAll().ok());
        m.Check(values, round + 1);
        break;
      default: {  // The same views listed out of bucket order: packed as usual.
        ManyKeys shuffled = m;
        std::vector<Tensor> listed = values;
        std::vector<Tensor> listed_outs = outs;
        for (int i = n - 1; i > 0; --i) {
          const int j = static_cast<int>(rng.Int(0, i));
          std::swap(shuffled.keys[i], shuffled.keys[j]);
          std::swap(shuffled.like[i], shuffled.like[j]);
          std::swap(shuffled.reference[i], shuffled.reference[j]);
          std::swap(listed[i], listed[j]);
          std::swap(listed_outs[i], listed_outs[j]);
        }
        REQUIRE(kv->Push(shuffled.keys, listed).ok());
        REQUIRE(kv->Pull(shuffled.keys, Pointers(listed_outs)).ok());
        REQUIRE(kv->WaitAll().ok());
        shuffled.Check(listed_outs, round + 1);
      }
    }
  }
}

// Keys of one dtype, each at most 4 elements (whole on one server), ordered by server when
// `by_server` (so that a distributed store sends each server's keys straight from a bucket).
ManyKeys BucketKeys(TestRng& rng, KVStore& kv, int n, int first, DType dtype, bool by_server,
                    bool one_shape = false, int step = 3) {
  ManyKeys m;
  for (int i = 0; i < n; ++i) m.keys.push_back(int64_t{first + step * i});
  const int servers = GetStoreUnderTest().num_servers;
  if (by_server && servers > 0) {
    auto partitioner = Partitioner::Create(servers);
    REQUIRE(partitioner.ok());
    std::stable_sort(m.keys.begin(), m.keys.end(), [&](const Key& a, const Key& b) {
      return partitioner->ServerOf(a) < partitioner->ServerOf(b);
    });
  }
  std::vector<Tensor> initial;
  // One shape: at most 12 bytes, so that no key is cut in chunks by a distributed store under
  // test (its chunk size).
  // Of rank 1 to 3: a rank-3 shape has no ShapeCode, so its dimensions are compared.
  Shape shape(static_cast<size_t>(rng.Int(1, 3)), 1);
  shape.back() = rng.Int(1, std::max<int64_t>(1, 12 / DTypeSize(dtype)));
  for (int i = 0; i < n; ++i) {
    initial.push_back(rng.RandomTensor(dtype, one_shape ? shape : rng.AnyShape(2, 2)));
    m.like.push_back(initial.back());
    m.reference.push_back(ToDoubles(initial.back()));
  }
  REQUIRE(kv.Init(m.keys, initial).ok());
  return m;
}

// Bucket returns the values as one bucket (key after key) and CheckBucket compares one.
Tensor Bucket(const ManyKeys& m, const std::vector<Tensor>& values) {
  int64_t total = 0;
  for (const Tensor& v : values) total += v.num_elements();
  Tensor bucket = Tensor::Zeros(values.front().dtype(), {total});
  size_t offset = 0;
  for (const Tensor& v : values) {
    std::memcpy(static_cast<uint8_t*>(bucket.data()) + offset, v.data(), v.byte_size());
    offset += v.byte_size();
  }
  return bucket;
}

void CheckBucket(const ManyKeys& m, const Tensor& bucket, int updates) {
  size_t offset = 0;
  for (size_t k = 0; k < m.keys.size(); ++k) {
    INFO("key " << m.keys[k].Quoted() << " " << DTypeName(m.like[k].dtype()));
    const Tensor view = *bucket.View(offset, m.like[k].dtype(), m.like[k].shape());
    REQUIRE(MaxAbsDiff(ToDoubles(view), m.reference[k]) <=
            Tolerance(m.like[k].dtype(), updates + 1, 4));
    offset += view.byte_size();
  }
  REQUIRE(offset == bucket.byte_size());
}

TEST_CASE("Buckets: push, pull and pushpull the keys of one bucket", "[groups][bucket]") {
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  const DType dtype = rng.AnyDType();
  // A long list (a key group in distributed stores), in server order or not, and a short one.
  const int mode = GENERATE(0, 1, 2);
  const int n = mode == 2 ? 6 : 100;
  const bool by_server = mode != 1;
  ManyKeys m = BucketKeys(rng, *kv, n, 40000, dtype, by_server);
  INFO(n << " keys of " << DTypeName(dtype) << (by_server ? ", by server" : ", mixed"));
  // The list also as integers (first before the list of Keys is ever used, then after).
  std::vector<int64_t> ints;
  for (const Key& key : m.keys) ints.push_back(key.int_key());
  Tensor out = Tensor::Zeros(dtype, {Bucket(m, m.like).num_elements()});
  for (int round = 0; round < 8; ++round) {
    const bool as_ints = round == 0 || round % 2 == 1;
    INFO("round " << round << (as_ints ? ", keys as integers" : ""));
    Tensor bucket = Bucket(m, m.Next(rng));
    auto push = [&] {
      return as_ints ? kv->PushBucket(ints, bucket) : kv->PushBucket(m.keys, bucket);
    };
    auto pull = [&] { return as_ints ? kv->PullBucket(ints, &out) : kv->PullBucket(m.keys, &out); };
    auto pushpull = [&](Tensor* into) {
      return as_ints ? kv->PushPullBucket(ints, bucket, into)
                     : kv->PushPullBucket(m.keys, bucket, into);
    };
    switch (round % 4) {
      case 0:
      case 1:
        REQUIRE(push().ok());
        REQUIRE(pull().ok());
        REQUIRE(kv->WaitAll().ok());
        CheckBucket(m, out, round + 1);
        break;
      case 2:
        REQUIRE(pushpull(&out).ok());
        REQUIRE(kv->WaitAll().ok());
        CheckBucket(m, out, round + 1);
        break;
      default:  // Into the pushed bucket itself.
        REQUIRE(pushpull(&bucket).ok());
        REQUIRE(kv->WaitAll().ok());
        CheckBucket(m, bucket, round + 1);
    }
  }
  // The same keys key by key see the bucket's updates.
  std::vector<Tensor> outs = m.Outputs();
  REQUIRE(kv->Pull(m.keys, Pointers(outs)).ok());
  REQUIRE(kv->WaitAll().ok());
  m.Check(outs, 8);
}

TEST_CASE("Buckets: a bucket that does not fit is refused and changes nothing",
          "[groups][bucket][errors]") {
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  const DType dtype = GENERATE(DType::kFloat32, DType::kInt64);
  ManyKeys m = BucketKeys(rng, *kv, 90, 60000, dtype, true);
  const Tensor good = Bucket(m, m.like);
  Tensor out_before = Tensor::Zeros(dtype, {good.num_elements()});
  // One key of another dtype.
  const Key odd = int64_t{59999};
  REQUIRE(kv->Init(odd, rng.RandomTensor(DType::kFloat64, {2})).ok());
  std::vector<Key> with_odd = m.keys;
  with_odd[37] = odd;
  absl::Status status = kv->PushBucket(with_odd, good);
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE_THAT(std::string(status.message()), Catch::Contains("key 59999"));
  // One element too many, and another dtype.
  const Tensor longer = Tensor::Zeros(dtype, {good.num_elements() + 1});
  status = kv->PushBucket(m.keys, longer);
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE_THAT(std::string(status.message()), Catch::Contains(std::to_string(good.num_elements())));
  Tensor other = Tensor::Zeros(dtype == DType::kFloat32 ? DType::kInt32 : DType::kFloat64,
                               {good.num_elements()});
  REQUIRE(absl::IsInvalidArgument(kv->PullBucket(m.keys, &other)));
  Tensor pulled_longer = longer;
  REQUIRE(absl::IsInvalidArgument(kv->PushPullBucket(m.keys, good, &pulled_longer)));
  // A key never initialised; a missing bucket.
  std::vector<Key> unknown = m.keys;
  unknown[5] = int64_t{123456789};
  status = kv->PushBucket(unknown, good);
  REQUIRE(absl::IsNotFound(status));
  REQUIRE_THAT(std::string(status.message()), Catch::Contains("123456789"));
  REQUIRE(absl::IsInvalidArgument(kv->PushBucket(m.keys, Tensor())));
  REQUIRE(absl::IsInvalidArgument(kv->PullBucket(m.keys, nullptr)));
  // The same refusals with the keys as integers, after the list has formed a group.
  std::vector<int64_t> ints, unknown_ints;
  for (const Key& key : m.keys) ints.push_back(key.int_key());
  for (const Key& key : unknown) unknown_ints.push_back(key.int_key());
  REQUIRE(kv->PullBucket(ints, &out_before).ok());
  status = kv->PushBucket(ints, longer);
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE_THAT(std::string(status.message()), Catch::Contains(std::to_string(good.num_elements())));
  REQUIRE(absl::IsInvalidArgument(kv->PullBucket(ints, &other)));
  REQUIRE(absl::IsInvalidArgument(kv->PushPullBucket(ints, good, &pulled_longer)));
  status = kv->PushBucket(unknown_ints, good);
  REQUIRE(absl::IsNotFound(status));
  REQUIRE_THAT(std::string(status.message()), Catch::Contains("123456789"));
  REQUIRE(absl::IsInvalidArgument(kv->PushBucket(ints, Tensor())));
  REQUIRE(kv->WaitAll().ok());
  Tensor out = Tensor::Zeros(dtype, {good.num_elements()});
  REQUIRE(kv->PullBucket(m.keys, &out).ok());
  REQUIRE(kv->WaitAll().ok());
  CheckBucket(m, out, 0);  // Nothing was applied.
  CheckBucket(m, out_before, 0);
  REQUIRE(ToDoubles(other) == std::vector<double>(good.num_elements(), 0.0));
}

TEST_CASE("Many keys: an undefined value refuses the call, naming its key", "[groups][errors]") {
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  ManyKeys m = KnownList(rng, *kv);
  std::vector<Tensor> outs = m.Outputs();
  const ManyKeys before = m;
  std::vector<Tensor> values = m.Next(rng);
  const size_t bad = static_cast<size_t>(rng.Int(0, 79));
  values[bad] = Tensor();
  for (int call = 0; call < 3; ++call) {
    INFO("call " << call);
    absl::Status status;
    switch (call) {
      case 0:
        status = kv->Push(m.keys, values);
        break;
      case 1:
        status = kv->PushPull(m.keys, values, Pointers(outs));
        break;
      default:
        status = kv->Push(m.keys[bad], values[bad]);  // Alone.
    }
    REQUIRE(absl::IsInvalidArgument(status));
    REQUIRE_THAT(std::string(status.message()), Catch::Contains("key " + m.keys[bad].Quoted()));
    REQUIRE_THAT(std::string(status.message()), Catch::Contains("undefined"));
  }
  REQUIRE(absl::IsInvalidArgument(kv->Init(int64_t{77777}, Tensor())));
  outs = m.Outputs();
  REQUIRE(kv->Pull(m.keys, Pointers(outs)).ok());
  REQUIRE(kv->WaitAll().ok());
  before.Check(outs, 1);  // Nothing was applied.
}

TEST_CASE("Many keys: one bad value refuses the whole list", "[groups][errors]") {
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  ManyKeys m = KnownList(rng, *kv);
  std::vector<Tensor> outs = m.Outputs();
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

TEST_CASE("Many keys: a list long enough to be checked on two threads", "[groups][bucket]") {
  // Over 16,384 keys a distributed store checks a call on two threads, block by block: each
  // block must see a view from another buffer, a view out of place, a key that is not the
  // list's, or a bad value.
  // Keys of one shape and dtype, grouped by server, are checked by a loop of their own, which
  // computes consecutive keys (step 1; with one server, still consecutive once grouped).
  TestRng rng;
  INFO(rng.Describe());
  const bool one_shape = GENERATE(false, true);
  const int step = GENERATE(1, 3);
  auto kv = NewStore();
  const DType dtype = rng.AnyDType();
  const int n = static_cast<int>(rng.Int(20000, 30000));
  ManyKeys m = BucketKeys(rng, *kv, n, 100000, dtype, true, one_shape, step);
  INFO(n << " keys of " << DTypeName(dtype) << (one_shape ? ", one shape" : ", many shapes")
         << ", keys " << step << " apart");
  // One key more, of the shape of the key it stands in for in a second list of n keys.
  const size_t swapped = static_cast<size_t>(rng.Int(0, n - 1));
  const Key extra = int64_t{99999};
  Tensor extra_value = rng.RandomTensor(dtype, m.like[swapped].shape());
  std::vector<double> extra_reference = ToDoubles(extra_value);
  REQUIRE(kv->Init(extra, extra_value).ok());
  int64_t total = 0;
  for (const Tensor& t : m.like) total += t.num_elements();
  std::vector<Tensor> values = ViewsOfBucket(m.like, total);
  std::vector<Tensor> outs = ViewsOfBucket(m.like, total);
  const std::vector<Tensor*> ptrs = Pointers(outs);
  for (int round = 0; round < 5; ++round) {
    INFO("round " << round);
    const ManyKeys before = m;
    const std::vector<Tensor> next = m.Next(rng);
    for (int i = 0; i < n; ++i) {
      std::memcpy(values[i].data(), next[i].data(), next[i].byte_size());
    }
    const size_t at = static_cast<size_t>(rng.Int(0, n - 1));
    INFO("position " << at << " (" << m.keys[at].Quoted() << ")");
    std::vector<Tensor> listed = values;
    std::vector<Key> keys = m.keys;
    switch (round) {
      case 0:  // Views of one bucket: sent from it as they are.
        break;
      case 1:  // One value in a buffer of its own (other numbers): the list is packed.
        listed[at] = rng.RandomTensor(dtype, m.like[at].shape());
        m.Apply(at, listed[at]);
        break;
      case 2: {  // As many keys, one of them another: that list's own group.
        keys[swapped] = extra;
        listed[swapped] = rng.RandomTensor(dtype, m.like[swapped].shape());
        extra_reference = ToDoubles(listed[swapped]);
        m.reference[swapped] = before.reference[swapped];
        break;
      }
      case 3: {  // Views of the one bucket, two of one shape swapped: the list is packed.
        size_t other = at;
        for (size_t j = 1; j < static_cast<size_t>(n) && other == at; ++j) {
          const size_t c = (at + j) % n;
          if (m.like[c].shape() == m.like[at].shape()) other = c;
        }
        REQUIRE(other != at);
        INFO("swapped with " << m.keys[other].Quoted());
        std::swap(listed[at], listed[other]);
        m.Apply(at, next[other]);
        m.Apply(other, next[at]);
        break;
      }
      default: {  // A value of the wrong shape: refused, nothing applied.
        Shape wrong = m.like[at].shape();
        wrong.push_back(3);
        listed[at] = rng.RandomTensor(dtype, wrong);
        const absl::Status status = kv->Push(keys, listed);
        REQUIRE(absl::IsInvalidArgument(status));
        REQUIRE_THAT(std::string(status.message()), Catch::Contains("key " + m.keys[at].Quoted()));
        m = before;
        break;
      }
    }
    if (round < 4) REQUIRE(kv->Push(keys, listed).ok());
    REQUIRE(kv->Pull(m.keys, ptrs).ok());
    Tensor extra_out = Tensor::Zeros(dtype, m.like[swapped].shape());
    REQUIRE(kv->Pull(extra, &extra_out).ok());
    REQUIRE(kv->WaitAll().ok());
    m.Check(outs, round + 1);
    REQUIRE(MaxAbsDiff(ToDoubles(extra_out), extra_reference) <= Tolerance(dtype, 2, 4));
  }
}

}  // namespace
}  // namespace kvstore::testing
