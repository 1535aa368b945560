// RowSparse: MXNet's RowSparseNDArray - a value whose rows are zero except the listed ones.
//
// A RowSparse value has a full `shape` (rank >= 1; a row is one index of the first dimension,
// i.e. RowElements(shape) elements, a single element for rank 1), a list of `row_ids` and
// `data` holding those rows: a CPU tensor of shape {row_ids.size(), shape[1], ...}. Row i of
// `data` is row row_ids[i] of the value. Ids need not be sorted; an id listed twice stands for
// the sum of its rows (that is how pushes treat it).
//
//   // Rows 0 and 2 of a (3, 3) value are ones:
//   auto rsp = RowSparse::Create({3, 3}, {0, 2}, Tensor::Full(DType::kFloat32, {2, 3}, 1));
//   Tensor dense = rsp->ToDense();  // [[1 1 1] [0 0 0] [1 1 1]]
//
// RowSparsePull fills an output RowSparse with the requested rows: the ids sorted and without
// duplicates, and `data` allocated to match.
#ifndef KVSTORE_COMMON_ROW_SPARSE_H_
#define KVSTORE_COMMON_ROW_SPARSE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"

namespace kvstore {

// RowElements returns the elements per row of a value of `shape`: the product of the dimensions
// after the first (1 for rank 1 and for a scalar).
int64_t RowElements(const Shape& shape);

class RowSparse {
 public:
  // An empty value of shape {0}.
  RowSparse() = default;

  // Create checks that `shape` has rank >= 1, every id lies in [0, shape[0]), and `data` is a
  // defined CPU tensor of shape {row_ids.size(), shape[1:]...}; InvalidArgument naming what is
  // wrong otherwise.
  static absl::StatusOr<RowSparse> Create(Shape shape, std::vector<int64_t> row_ids, Tensor data);
  // Empty returns a value with no rows (all zeros): the form of an output for RowSparsePull.
  static RowSparse Empty(DType dtype, Shape shape);
  // FromDense lists the rows of `dense` that hold any non-zero element (a CPU tensor of rank
  // >= 1).
  static absl::StatusOr<RowSparse> FromDense(const Tensor& dense);

  const Shape& shape() const { return shape_; }
  DType dtype() const { return data_.dtype(); }
  const std::vector<int64_t>& row_ids() const { return row_ids_; }
  const Tensor& data() const { return data_; }
  int64_t num_rows() const { return static_cast<int64_t>(row_ids_.size()); }
  int64_t row_elements() const { return RowElements(shape_); }

  // ToDense returns the full value as an owning CPU tensor (rows listed twice are summed).
  Tensor ToDense() const;

  // Reset sets the rows (used by RowSparsePull): `data` must have the layout Create requires.
  void Reset(std::vector<int64_t> row_ids, Tensor data) {
    row_ids_ = std::move(row_ids);
    data_ = std::move(data);
  }

 private:
  Shape shape_ = {0};
  std::vector<int64_t> row_ids_;
  Tensor data_ = Tensor::Zeros(DType::kFloat32, {0});
};

// RowShape returns {rows, shape[1:]...}: the shape of `rows` rows of a value of `shape`.
Shape RowShape(const Shape& shape, int64_t rows);

// CheckRowIds returns InvalidArgument naming the first id outside [0, num_rows); `what`
// prefixes the message (e.g. "key 3").
absl::Status CheckRowIds(absl::Span<const int64_t> row_ids, int64_t num_rows,
                         absl::string_view what);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_ROW_SPARSE_H_
