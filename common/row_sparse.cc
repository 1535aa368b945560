#include "common/row_sparse.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/reduce.h"
#include "common/status_macros.h"

namespace kvstore {

int64_t RowElements(const Shape& shape) {
  int64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

Shape RowShape(const Shape& shape, int64_t rows) {
  Shape out = {rows};
  if (shape.size() > 1) out.insert(out.end(), shape.begin() + 1, shape.end());
  return out;
}

absl::Status CheckRowIds(absl::Span<const int64_t> row_ids, int64_t num_rows,
                         absl::string_view what) {
  for (int64_t id : row_ids) {
    if (id < 0 || id >= num_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": row id ", id, " is outside [0, ", num_rows, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RowSparse> RowSparse::Create(Shape shape, std::vector<int64_t> row_ids,
                                            Tensor data) {
  if (shape.empty()) {
    return absl::InvalidArgumentError("a row-sparse value needs a shape of rank >= 1");
  }
  RETURN_IF_ERROR(ValidateShape(shape));
  if (!data.defined() || !data.device().is_cpu()) {
    return absl::InvalidArgumentError("a row-sparse value's rows must be a defined CPU tensor");
  }
  const Shape expected = RowShape(shape, static_cast<int64_t>(row_ids.size()));
  if (data.shape() != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("row-sparse value of shape ", ShapeToString(shape), " with ", row_ids.size(),
                     " row ids needs rows of shape ", ShapeToString(expected), ", got ",
                     ShapeToString(data.shape())));
  }
  if (absl::Status s = CheckRowIds(
          row_ids, shape[0], absl::StrCat("row-sparse value of shape ", ShapeToString(shape)));
      !s.ok()) {
    return s;
  }
  RowSparse value;
  value.shape_ = std::move(shape);
  value.row_ids_ = std::move(row_ids);
  value.data_ = std::move(data);
  return value;
}

RowSparse RowSparse::Empty(DType dtype, Shape shape) {
  RowSparse value;
  value.data_ = Tensor::Zeros(dtype, RowShape(shape, 0));
  value.shape_ = std::move(shape);
  return value;
}

absl::StatusOr<RowSparse> RowSparse::FromDense(const Tensor& dense) {
  if (!dense.defined() || !dense.device().is_cpu() || dense.shape().empty()) {
    return absl::InvalidArgumentError("FromDense needs a defined CPU tensor of rank >= 1");
  }
  const int64_t row = RowElements(dense.shape());
  const size_t row_bytes = static_cast<size_t>(row) * DTypeSize(dense.dtype());
  const auto* base = static_cast<const uint8_t*>(dense.data());
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < dense.shape()[0]; ++r) {
    for (int64_t e = 0; e < row; ++e) {
      if (dense.GetAsDouble(r * row + e) != 0) {
        ids.push_back(r);
        break;
      }
    }
  }
  Tensor data = Tensor::Zeros(dense.dtype(), RowShape(dense.shape(), ids.size()));
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(static_cast<uint8_t*>(data.data()) + i * row_bytes,
                base + static_cast<size_t>(ids[i]) * row_bytes, row_bytes);
  }
  return Create(dense.shape(), std::move(ids), std::move(data));
}

Tensor RowSparse::ToDense() const {
  Tensor dense = Tensor::Zeros(dtype(), shape_);
  const int64_t row = row_elements();
  const size_t element = DTypeSize(dtype());
  for (size_t i = 0; i < row_ids_.size(); ++i) {
    Tensor src =
        Tensor::Borrow(static_cast<uint8_t*>(data_.data()) + i * row * element, dtype(), {row});
    Tensor dst = Tensor::Borrow(
        static_cast<uint8_t*>(dense.data()) + static_cast<size_t>(row_ids_[i]) * row * element,
        dtype(), {row});
    (void)AddInto(src, &dst);  // Same dtype and size: cannot fail.
  }
  return dense;
}

}  // namespace kvstore
