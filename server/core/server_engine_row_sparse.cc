// ServerEngine: row-sparse values - a row-sparse push expanded into dense chunks, and PullRows.
#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/reduce.h"
#include "common/row_sparse.h"
#include "common/status_macros.h"
#include "server/core/server_engine.h"
#include "server/core/server_engine_internal.h"

namespace kvstore {
namespace {

using server_engine_internal::ElementRange;
using server_engine_internal::View;

// RowRange returns the rows [first, end) a part of `layout` holds.
std::pair<int64_t, int64_t> RowRange(const ValueSlice& layout) {
  const int64_t row = std::max<int64_t>(1, RowElements(layout.shape));
  return {layout.offset / row, (layout.offset + layout.count) / row};
}

absl::Status CheckPartRows(const Key& key, absl::Span<const int64_t> ids,
                           const ValueSlice& layout) {
  const auto [first, end] = RowRange(layout);
  for (int64_t id : ids) {
    if (id < first || id >= end) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", key.Quoted(), ": row id ", id, " is not held by this server (rows [",
                       first, ", ", end, ") of ", layout.shape.empty() ? 0 : layout.shape[0], ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ServerEngine::ExpandRowSparse(absl::Span<const IncomingValue> values,
                                           std::vector<IncomingValue>* expanded,
                                           std::vector<std::vector<uint8_t>>* storage) const {
  for (const IncomingValue& value : values) {
    if (!value.row_sparse) {
      expanded->push_back(value);
      continue;
    }
    const ValueSlice& slice = value.slice;
    const Part* part;
    {
      absl::ReaderMutexLock lock(&mu_);
      ASSIGN_OR_RETURN(part, parts_.FindRows(slice, "pushed"));
    }
    if (value.compression.enabled()) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", slice.key.Quoted(), ": row-sparse pushes are never compressed"));
    }
    // The shape is the stored one: its rows' sizes fit (Init checked it).
    const int64_t row = RowElements(slice.shape);
    const size_t element = DTypeSize(slice.dtype);
    size_t received = 0;
    for (const auto& chunk : value.bytes) received += chunk.size();
    // Each row travels as its id and its elements: the bytes received say how many there are.
    const size_t per_row = sizeof(int64_t) + static_cast<size_t>(row) * element;
    if (value.num_rows < 0 || received % per_row != 0 ||
        static_cast<uint64_t>(value.num_rows) != received / per_row) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", slice.key.Quoted(), ": ", received, " bytes received for ",
                       value.num_rows, " row ids and rows of ", row, " ", DTypeName(slice.dtype),
                       " elements (", per_row, " bytes per row with its id)"));
    }
    const auto rows = static_cast<size_t>(value.num_rows);
    std::vector<uint8_t> payload(received);
    GatherBytes(value.bytes, payload.data());
    std::vector<int64_t> ids(rows);
    if (rows > 0) std::memcpy(ids.data(), payload.data(), rows * sizeof(int64_t));
    RETURN_IF_ERROR(CheckPartRows(slice.key, ids, part->layout));
    const uint8_t* data = payload.data() + rows * sizeof(int64_t);
    for (const auto& chunk : part->chunks) {
      std::vector<uint8_t>& dense =
          storage->emplace_back(static_cast<size_t>(chunk->count) * element, 0);
      const int64_t lo = chunk->offset, hi = chunk->offset + chunk->count;
      for (size_t i = 0; i < rows; ++i) {
        const int64_t begin = std::max(lo, ids[i] * row);
        const int64_t end = std::min(hi, (ids[i] + 1) * row);
        if (begin >= end) continue;
        const Tensor src =
            View(data + (i * row + (begin - ids[i] * row)) * element, slice.dtype, end - begin);
        Tensor dst = View(dense.data() + static_cast<size_t>(begin - lo) * element, slice.dtype,
                          end - begin);
        RETURN_IF_ERROR(AddInto(src, &dst));
      }
      IncomingValue& out = expanded->emplace_back();
      out.slice = slice;
      out.slice.offset = chunk->offset;
      out.slice.count = chunk->count;
      out.bytes = {absl::MakeConstSpan(dense)};
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ServerEngine::PullRows(uint64_t node_id, const ValueSlice& slice,
                                              absl::Span<const int64_t> row_ids,
                                              int64_t reply_bytes) const {
  RETURN_IF_ERROR(workers_.CheckSender(node_id));
  const Part* part;
  {
    absl::ReaderMutexLock lock(&mu_);
    ASSIGN_OR_RETURN(part, parts_.FindRows(slice, "pulled"));
  }
  RETURN_IF_ERROR(CheckPartRows(slice.key, row_ids, part->layout));
  const int64_t row = RowElements(slice.shape);
  const size_t element = DTypeSize(slice.dtype);
  // Ids may repeat: the reply's size is bounded by the request's length only.
  const int64_t row_bytes = row * static_cast<int64_t>(element);
  const int64_t room =
      std::max<int64_t>(0, options_.max_value_bytes - std::max<int64_t>(0, reply_bytes));
  if (row_bytes > 0 && static_cast<int64_t>(row_ids.size()) > room / row_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("key ", slice.key.Quoted(), ": ", row_ids.size(), " rows of a ",
                     DTypeName(slice.dtype), ShapeToString(slice.shape), " value (", row_bytes,
                     " bytes each) make a reply bigger "
                     "than the largest value this server sends, ",
                     options_.max_value_bytes, " bytes"));
  }
  Tensor rows =
      Tensor::Zeros(slice.dtype, RowShape(slice.shape, static_cast<int64_t>(row_ids.size())));
  auto* out = static_cast<uint8_t*>(rows.data());
  for (size_t i = 0; i < row_ids.size(); ++i) {
    // A row may span chunks: copy it piece by piece, each under its chunk's lock.
    int64_t e = row_ids[i] * row;
    const int64_t end = e + row;
    while (e < end) {
      const Chunk& chunk =
          *part->chunks[static_cast<size_t>((e - part->layout.offset) / part->chunk_elements)];
      const int64_t take = std::min(end, chunk.offset + chunk.count) - e;
      ChunkLock lock(chunk);
      std::memcpy(out,
                  static_cast<const uint8_t*>(chunk.stored.data()) +
                      static_cast<size_t>(e - chunk.offset) * element,
                  static_cast<size_t>(take) * element);
      out += static_cast<size_t>(take) * element;
      e += take;
    }
  }
  return rows;
}

}  // namespace kvstore
