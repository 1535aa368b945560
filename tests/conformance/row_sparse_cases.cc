// Row-sparse values through the SDK: the Perl reference's row_sparse_pull example, random
// multi-device pushes and pulls against a dense float64 reference, and refused requests.
#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

#include "client/dist_store.h"
#include "tests/conformance/store_under_test.h"
#include "tests/test_util.h"

namespace kvstore::testing {
namespace {

bool Mentions(const absl::Status& status, absl::string_view text) {
  return status.message().find(text) != absl::string_view::npos;
}

// Pulls rows `ids` of `key` and returns the output after the operation completed.
RowSparse PullRows(KVStore& kv, const Key& key, DType dtype, const Shape& shape,
                   const std::vector<int64_t>& ids) {
  RowSparse out = RowSparse::Empty(dtype, shape);
  const absl::Status status = kv.RowSparsePull(key, &out, ids);
  INFO(status.ToString());
  REQUIRE(status.ok());
  REQUIRE(kv.WaitAll().ok());
  return out;
}

TEST_CASE("RowSparse: the Perl reference's row_sparse_pull example", "[row_sparse][seeds]") {
  auto kv = NewStore();
  const Shape shape = {3, 3};
  // $kv->init('3', mx->nd->ones($shape)->tostype('row_sparse'))
  const RowSparse ones =
      *RowSparse::Create(shape, {0, 1, 2}, Tensor::Full(DType::kFloat32, {3, 3}, 1));
  REQUIRE(kv->Init(3, ones).ok());
  // row_ids [0, 2]
  RowSparse a = PullRows(*kv, 3, DType::kFloat32, shape, {0, 2});
  CHECK(a.row_ids() == std::vector<int64_t>{0, 2});
  CHECK(a.ToDense().ToString() == "[[1. 1. 1.]\n [0. 0. 0.]\n [1. 1. 1.]]");
  // duplicate row ids [2, 2]
  a = PullRows(*kv, 3, DType::kFloat32, shape, {2, 2});
  CHECK(a.row_ids() == std::vector<int64_t>{2});
  CHECK(a.ToDense().ToString() == "[[0. 0. 0.]\n [0. 0. 0.]\n [1. 1. 1.]]");
  // unsorted row ids [1, 0]
  a = PullRows(*kv, 3, DType::kFloat32, shape, {1, 0});
  CHECK(a.row_ids() == std::vector<int64_t>{0, 1});
  CHECK(a.ToDense().ToString() == "[[1. 1. 1.]\n [1. 1. 1.]\n [0. 0. 0.]]");
  // An empty id list gives no rows.
  a = PullRows(*kv, 3, DType::kFloat32, shape, {});
  CHECK(a.num_rows() == 0);
  CHECK(a.ToDense().ToString() == "[[0. 0. 0.]\n [0. 0. 0.]\n [0. 0. 0.]]");
}

TEST_CASE("RowSparse: random pushes and pulls match a dense float64 reference",
          "[row_sparse][random]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 6; ++trial) {
    auto kv = NewStore();
    const DType dtype = trial % 3 == 2 ? rng.AnyDType() : rng.AnyFloatDType();
    const int64_t rows = rng.Int(1, 12);
    Shape shape = {rows};
    for (int d = static_cast<int>(rng.Int(0, 2)); d > 0; --d) shape.push_back(rng.Int(1, 5));
    INFO("trial " << trial << " " << DTypeName(dtype) << ShapeToString(shape));
    const Key key = 40 + trial;
    const Tensor init = rng.RandomTensor(dtype, shape);
    REQUIRE(kv->Init(key, init).ok());
    std::vector<double> reference = ToDoubles(init);
    const bool accumulate = GetStoreUnderTest().function_updater && trial % 2 == 1;
    if (accumulate) {
      REQUIRE(kv->SetUpdater([](const Key&, const Tensor& received, Tensor* stored) {
                  for (int64_t i = 0; i < stored->num_elements(); ++i) {
                    stored->SetFromDouble(i, stored->GetAsDouble(i) + received.GetAsDouble(i));
                  }
                }).ok());
    }
    const int64_t row = RowElements(shape);
    int terms = 1;
    for (int round = 0; round < 4; ++round) {
      // Several devices, each with unsorted ids that may repeat (or none at all).
      const int devices = static_cast<int>(rng.Int(1, 3));
      std::vector<RowSparse> values;
      std::vector<double> sum(reference.size(), 0.0);
      for (int d = 0; d < devices; ++d) {
        std::vector<int64_t> ids;
        for (int64_t n = rng.Int(0, rows + 2); n > 0; --n) ids.push_back(rng.Int(0, rows - 1));
        const Tensor data = rng.RandomTensor(dtype, RowShape(shape, ids.size()));
        const std::vector<double> v = ToDoubles(data);
        for (size_t i = 0; i < ids.size(); ++i) {
          for (int64_t e = 0; e < row; ++e) sum[ids[i] * row + e] += v[i * row + e];
        }
        values.push_back(*RowSparse::Create(shape, ids, data));
        terms += static_cast<int>(ids.size());
      }
      const std::vector<Key> keys(values.size(), key);
      REQUIRE(kv->Push(keys, values).ok());
      for (size_t i = 0; i < reference.size(); ++i) {
        reference[i] = accumulate ? reference[i] + sum[i] : sum[i];
      }
      // Two outputs with different ids, and the dense value.
      std::vector<std::vector<int64_t>> ids(2);
      for (auto& list : ids) {
        for (int64_t n = rng.Int(0, rows + 1); n > 0; --n) list.push_back(rng.Int(0, rows - 1));
      }
      RowSparse out0 = RowSparse::Empty(dtype, shape), out1 = RowSparse::Empty(dtype, shape);
      std::vector<RowSparse*> outs = {&out0, &out1};
      REQUIRE(kv->RowSparsePull(key, absl::MakeConstSpan(outs), ids).ok());
      Tensor dense = Tensor::Full(dtype, shape, -77);
      REQUIRE(kv->Pull(key, &dense).ok());
      REQUIRE(kv->WaitAll().ok());
      INFO("round " << round);
      const double tolerance = Tolerance(dtype, terms, 4.0 * terms);
      REQUIRE(MaxAbsDiff(ToDoubles(dense), reference) <= tolerance);
      for (size_t o = 0; o < outs.size(); ++o) {
        std::vector<int64_t> expected_ids = ids[o];
        std::sort(expected_ids.begin(), expected_ids.end());
        expected_ids.erase(std::unique(expected_ids.begin(), expected_ids.end()),
                           expected_ids.end());
        REQUIRE(outs[o]->row_ids() == expected_ids);
        // The pulled rows are exactly the stored rows.
        const std::vector<double> got = ToDoubles(outs[o]->data());
        const std::vector<double> stored = ToDoubles(dense);
        for (size_t i = 0; i < expected_ids.size(); ++i) {
          for (int64_t e = 0; e < row; ++e) {
            REQUIRE(got[i * row + e] == stored[expected_ids[i] * row + e]);
          }
        }
      }
    }
  }
}

TEST_CASE("RowSparse: a big value split over servers by rows", "[row_sparse]") {
  // 64 rows of 5 elements: above every test job's big-value bound, so a dist store splits it
  // by rows over its servers (and cuts the parts into chunks that rows cross).
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  const Shape shape = {64, 5};
  const Tensor init = rng.RandomTensor(DType::kFloat64, shape);
  REQUIRE(kv->Init(7, init).ok());
  std::vector<int64_t> ids = {63, 0, 31, 32, 31, 17};
  const Tensor data = rng.RandomTensor(DType::kFloat64, {6, 5});
  auto* dist = dynamic_cast<DistStore*>(kv.get());
  const int64_t sent_before = dist != nullptr ? dist->push_payload_bytes() : 0;
  REQUIRE(kv->Push(7, *RowSparse::Create(shape, ids, data)).ok());
  REQUIRE(kv->WaitAll().ok());
  if (dist != nullptr) {
    // Only the listed rows travel: 6 ids and 6 rows of 5 float64, not 64 rows.
    REQUIRE(dist->push_payload_bytes() - sent_before == 6 * 8 + 6 * 5 * 8);
  }
  std::vector<double> expected(64 * 5, 0.0);
  const std::vector<double> v = ToDoubles(data);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int e = 0; e < 5; ++e) expected[ids[i] * 5 + e] += v[i * 5 + e];
  }
  Tensor dense = Tensor::Zeros(DType::kFloat64, shape);
  REQUIRE(kv->Pull(7, &dense).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(ToDoubles(dense) == expected);  // ASSIGN: the unlisted rows are zero now.
  const RowSparse out = PullRows(*kv, 7, DType::kFloat64, shape, {32, 63, 0, 31, 5});
  REQUIRE(out.row_ids() == std::vector<int64_t>{0, 5, 31, 32, 63});
  REQUIRE(ToDoubles(out.ToDense()) == [&] {
    std::vector<double> rows(64 * 5, 0.0);
    for (int64_t id : {0, 5, 31, 32, 63}) {
      for (int e = 0; e < 5; ++e) rows[id * 5 + e] = expected[id * 5 + e];
    }
    return rows;
  }());
}

TEST_CASE("RowSparse: bad requests are refused and change nothing", "[row_sparse][errors]") {
  TestRng rng;
  INFO(rng.Describe());
  auto kv = NewStore();
  const Shape shape = {4, 2};
  const Tensor init = rng.RandomTensor(DType::kFloat32, shape);
  REQUIRE(kv->Init(9, init).ok());

  absl::StatusOr<RowSparse> outside =
      RowSparse::Create(shape, {1, 4}, Tensor::Zeros(DType::kFloat32, {2, 2}));
  REQUIRE(absl::IsInvalidArgument(outside.status()));
  REQUIRE(Mentions(outside.status(), "row id 4"));

  // A value whose ids were replaced after creation is checked again by the store.
  RowSparse bad = *RowSparse::Create(shape, {1}, Tensor::Full(DType::kFloat32, {1, 2}, 5));
  bad.Reset({-1}, Tensor::Full(DType::kFloat32, {1, 2}, 5));
  absl::Status status = kv->Push(9, bad);
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE(Mentions(status, "key 9"));
  REQUIRE(Mentions(status, "row id -1"));

  const RowSparse wrong_shape =
      *RowSparse::Create({4, 3}, {0}, Tensor::Zeros(DType::kFloat32, {1, 3}));
  status = kv->Push(9, wrong_shape);
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE(Mentions(status, "(4, 3)"));
  REQUIRE(absl::IsNotFound(
      kv->Push(99, *RowSparse::Create(shape, {0}, Tensor::Zeros(DType::kFloat32, {1, 2})))));

  RowSparse out = RowSparse::Empty(DType::kFloat32, shape);
  status = kv->RowSparsePull(9, &out, {0, 4});
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE(Mentions(status, "row id 4"));
  RowSparse wrong_out = RowSparse::Empty(DType::kFloat64, shape);
  status = kv->RowSparsePull(9, &wrong_out, {0});
  REQUIRE(absl::IsInvalidArgument(status));
  REQUIRE(Mentions(status, "float64"));
  RowSparse* none = nullptr;
  REQUIRE(absl::IsInvalidArgument(kv->RowSparsePull(9, none, {0})));
  std::vector<RowSparse*> two = {&out, &out};
  REQUIRE(absl::IsInvalidArgument(kv->RowSparsePull(
      9, absl::MakeConstSpan(two), std::vector<std::vector<int64_t>>{{0}, {1}, {2}})));
  REQUIRE(kv->WaitAll().ok());

  // Nothing changed.
  Tensor dense = Tensor::Zeros(DType::kFloat32, shape);
  REQUIRE(kv->Pull(9, &dense).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(ToDoubles(dense) == ToDoubles(init));
}

}  // namespace
}  // namespace kvstore::testing
