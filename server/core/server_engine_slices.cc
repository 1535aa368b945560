// ServerEngine: checking requests against what Init stored - the slice, the bytes received,
// the part and the chunk a request names - and row-sparse values: a row-sparse push expanded
// into dense chunks, and PullRows.
#include "server/core/server_engine.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/reduce.h"
#include "common/row_sparse.h"
#include "common/status_macros.h"
#include "server/core/server_engine_internal.h"

namespace kvstore {
namespace {

using server_engine_internal::NumElementsOf;
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
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", key.Quoted(), ": row id ", id, " is not held by this server (rows [", first,
          ", ", end, ") of ", layout.shape.empty() ? 0 : layout.shape[0], ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ServerEngine::CheckSlice(const ValueSlice& s) {
  for (int64_t d : s.shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", s.key.Quoted(), ": negative dimension in shape ",
                       ShapeToString(s.shape)));
    }
  }
  const int64_t total = NumElementsOf(s.shape);
  if (s.offset < 0 || s.count < 0 || s.offset > total || s.count > total - s.offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", s.key.Quoted(), ": slice [", s.offset, ", ", s.offset + s.count,
        ") lies outside a value of shape ", ShapeToString(s.shape)));
  }
  return absl::OkStatus();
}

absl::Status ServerEngine::CheckBytes(const IncomingValue& value) {
  const ValueSlice& s = value.slice;
  RETURN_IF_ERROR(CheckSlice(s));
  size_t received = 0;
  for (const auto& chunk : value.bytes) received += chunk.size();
  size_t expected = static_cast<size_t>(s.count) * DTypeSize(s.dtype);
  std::string encoding;
  if (value.compression.enabled()) {
    if (s.dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", s.key.Quoted(), ": ", CompressionName(value.compression.type),
          " compression applies to float32 values, not ", DTypeName(s.dtype)));
    }
    expected = CompressedBytes(value.compression.type, s.count);
    encoding = absl::StrCat(" compressed with ", CompressionName(value.compression.type));
  }
  if (received != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", s.key.Quoted(), ": ", received, " bytes received for ", s.count, " ",
        DTypeName(s.dtype), " elements", encoding, " (", expected, " bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const ServerEngine::Part*> ServerEngine::FindPart(const ValueSlice& slice,
                                                                 absl::string_view verb) const {
  auto it = parts_.find(slice.key);
  if (it == parts_.end()) {
    return absl::NotFoundError(
        absl::StrCat("key ", slice.key.Quoted(), " was never initialised on this server"));
  }
  const ValueSlice& stored = it->second->layout;
  if (slice.dtype != stored.dtype || slice.shape != stored.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", slice.key.Quoted(), ": ", verb, " ", DTypeName(slice.dtype),
        ShapeToString(slice.shape), " but the stored value is ", DTypeName(stored.dtype),
        ShapeToString(stored.shape)));
  }
  return it->second.get();
}

absl::StatusOr<ServerEngine::Chunk*> ServerEngine::FindChunk(const ValueSlice& slice,
                                                             absl::string_view verb) const {
  ASSIGN_OR_RETURN(const Part* found, FindPart(slice, verb));
  const Part& part = *found;
  const ValueSlice& stored = part.layout;
  const int64_t relative = slice.offset - stored.offset;
  if (relative >= 0 && relative % part.chunk_elements == 0) {
    const size_t index = static_cast<size_t>(relative / part.chunk_elements);
    if (index < part.chunks.size() && part.chunks[index]->count == slice.count) {
      return part.chunks[index].get();
    }
  }
  std::string chunks;
  if (part.chunks.size() > 1) {
    chunks = absl::StrCat(" in chunks of ", part.chunk_elements, " elements");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "key ", slice.key.Quoted(), ": ", verb, " elements [", slice.offset, ", ",
      slice.offset + slice.count, ") but this server holds [", stored.offset, ", ",
      stored.offset + stored.count, ")", chunks));
}

absl::StatusOr<const ServerEngine::Part*> ServerEngine::FindRowPart(
    const ValueSlice& slice, absl::string_view verb) const {
  ASSIGN_OR_RETURN(const Part* part, FindPart(slice, verb));
  const ValueSlice& stored = part->layout;
  if (stored.shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", slice.key.Quoted(), " holds a scalar, which has no rows"));
  }
  const int64_t row = RowElements(stored.shape);
  if (slice.offset != stored.offset || slice.count != stored.count ||
      (row > 0 && (stored.offset % row != 0 || stored.count % row != 0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", slice.key.Quoted(), ": ", verb, " rows of elements [", slice.offset, ", ",
        slice.offset + slice.count, ") but this server holds [", stored.offset, ", ",
        stored.offset + stored.count, ") in rows of ", row, " elements"));
  }
  return part;
}

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
      ASSIGN_OR_RETURN(part, FindRowPart(slice, "pushed"));
    }
    if (value.compression.enabled()) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", slice.key.Quoted(), ": row-sparse pushes are never compressed"));
    }
    const int64_t row = RowElements(slice.shape);
    const size_t element = DTypeSize(slice.dtype);
    size_t received = 0;
    for (const auto& chunk : value.bytes) received += chunk.size();
    const size_t rows = static_cast<size_t>(std::max<int64_t>(0, value.num_rows));
    const size_t expected = rows * (sizeof(int64_t) + static_cast<size_t>(row) * element);
    if (value.num_rows < 0 || received != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", slice.key.Quoted(), ": ", received, " bytes received for ", value.num_rows,
          " row ids and rows of ", row, " ", DTypeName(slice.dtype), " elements (", expected,
          " bytes)"));
    }
    std::vector<uint8_t> payload(expected);
    GatherBytes(value.bytes, payload.data());
    std::vector<int64_t> ids(rows);
    if (rows > 0) std::memcpy(ids.data(), payload.data(), rows * sizeof(int64_t));
    RETURN_IF_ERROR(CheckPartRows(slice.key, ids, part->layout));
    const uint8_t* data = payload.data() + rows * sizeof(int64_t);
    for (const auto& chunk : part->chunks) {
      std::vector<uint8_t>& dense = storage->emplace_back(
          static_cast<size_t>(chunk->count) * element, 0);
      const int64_t lo = chunk->offset, hi = chunk->offset + chunk->count;
      for (size_t i = 0; i < rows; ++i) {
        const int64_t begin = std::max(lo, ids[i] * row);
        const int64_t end = std::min(hi, (ids[i] + 1) * row);
        if (begin >= end) continue;
        const Tensor src = View(data + (i * row + (begin - ids[i] * row)) * element,
                                slice.dtype, end - begin);
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
                                              absl::Span<const int64_t> row_ids) const {
  RETURN_IF_ERROR(CheckSender(node_id));
  const Part* part;
  {
    absl::ReaderMutexLock lock(&mu_);
    ASSIGN_OR_RETURN(part, FindRowPart(slice, "pulled"));
  }
  RETURN_IF_ERROR(CheckPartRows(slice.key, row_ids, part->layout));
  const int64_t row = RowElements(slice.shape);
  const size_t element = DTypeSize(slice.dtype);
  Tensor rows = Tensor::Zeros(slice.dtype, RowShape(slice.shape,
                                                    static_cast<int64_t>(row_ids.size())));
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
      std::memcpy(out, static_cast<const uint8_t*>(chunk.stored.data()) +
                           static_cast<size_t>(e - chunk.offset) * element,
                  static_cast<size_t>(take) * element);
      out += static_cast<size_t>(take) * element;
      e += take;
    }
  }
  return rows;
}

}  // namespace kvstore
