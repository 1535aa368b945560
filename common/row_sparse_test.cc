#include "common/row_sparse.h"

#include <catch2/catch.hpp>

#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

TEST_CASE("RowSparse: Create checks the layout and the ids", "[row_sparse]") {
  const Tensor rows = Tensor::Full(DType::kFloat32, {2, 3}, 1);
  REQUIRE(RowSparse::Create({4, 3}, {3, 0}, rows).ok());
  CHECK(absl::IsInvalidArgument(RowSparse::Create({4, 3}, {4, 0}, rows).status()));
  CHECK(absl::IsInvalidArgument(RowSparse::Create({4, 3}, {-1, 0}, rows).status()));
  CHECK(absl::IsInvalidArgument(RowSparse::Create({4, 3}, {0}, rows).status()));
  CHECK(absl::IsInvalidArgument(RowSparse::Create({4, 2}, {0, 1}, rows).status()));
  CHECK(absl::IsInvalidArgument(RowSparse::Create({}, {}, rows).status()));
  CHECK(absl::IsInvalidArgument(RowSparse::Create({4, 3}, {0, 1}, Tensor()).status()));
  CHECK(RowElements({4, 3, 2}) == 6);
  CHECK(RowElements({7}) == 1);
  CHECK(RowShape({4, 3, 2}, 5) == Shape{5, 3, 2});
}

TEST_CASE("RowSparse: ToDense sums repeated rows; FromDense lists the non-zero rows",
          "[row_sparse]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 20; ++trial) {
    const DType dtype = rng.AnyDType();
    const Shape shape = {rng.Int(1, 9), rng.Int(1, 4)};
    std::vector<int64_t> ids;
    for (int64_t n = rng.Int(0, 12); n > 0; --n) ids.push_back(rng.Int(0, shape[0] - 1));
    const Tensor data = rng.RandomTensor(dtype, RowShape(shape, ids.size()));
    const RowSparse value = *RowSparse::Create(shape, ids, data);
    std::vector<double> expected(NumElements(shape), 0.0);
    const auto v = testing::ToDoubles(data);
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t e = 0; e < shape[1]; ++e) expected[ids[i] * shape[1] + e] += v[i * shape[1] + e];
    }
    const Tensor dense = value.ToDense();
    INFO(DTypeName(dtype) << ShapeToString(shape));
    REQUIRE(testing::MaxAbsDiff(testing::ToDoubles(dense), expected) <=
            testing::Tolerance(dtype, static_cast<int>(ids.size()) + 1, 4.0 * (ids.size() + 1)));
    const RowSparse back = *RowSparse::FromDense(dense);
    REQUIRE(testing::ToDoubles(back.ToDense()) == testing::ToDoubles(dense));
    for (int64_t id : back.row_ids()) {
      bool nonzero = false;
      for (int64_t e = 0; e < shape[1]; ++e) nonzero |= dense.GetAsDouble(id * shape[1] + e) != 0;
      REQUIRE(nonzero);
    }
  }
}

}  // namespace
}  // namespace kvstore
