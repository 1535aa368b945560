// ServerEngine: checking requests against what Init stored - the slice, the bytes received,
// the part and the chunk a request names - and row-sparse values: a row-sparse push expanded
// into dense chunks, and PullRows.
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

// ValueElements returns the number of elements of a value of `shape`. InvalidArgument naming
// the key for a negative dimension, or for dimensions whose product overflows int64; zeros
// are left out of that product, so that every part of it (a row's size) fits too.
absl::StatusOr<int64_t> ValueElements(const Key& key, const Shape& shape) {
  int64_t product = 1;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", key.Quoted(), ": negative dimension in shape ", ShapeToString(shape)));
    }
    if (d == 0) {
      empty = true;
    } else if (product > std::numeric_limits<int64_t>::max() / d) {
      return absl::InvalidArgumentError(absl::StrCat("key ", key.Quoted(), ": shape ",
                                                     ShapeToString(shape),
                                                     " has more elements than an int64 counts"));
    } else {
      product *= d;
    }
  }
  return empty ? 0 : product;
}

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

absl::Status ServerEngine::CheckSlice(const ValueSlice& s) const {
  ASSIGN_OR_RETURN(const int64_t total, ValueElements(s.key, s.shape));
  const auto element = static_cast<int64_t>(DTypeSize(s.dtype));
  if (total > options_.max_value_bytes / element) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "key ", s.key.Quoted(), ": a ", DTypeName(s.dtype), ShapeToString(s.shape), " value of ",
        total, " elements is bigger than the largest value this server accepts, ",
        options_.max_value_bytes, " bytes"));
  }
  if (s.offset < 0 || s.count < 0 || s.offset > total || s.count > total - s.offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", s.key.Quoted(), ": slice ", ElementRange(s.offset, s.count),
                     " lies outside a value of shape ", ShapeToString(s.shape)));
  }
  return absl::OkStatus();
}

absl::Status ServerEngine::CheckBytes(const IncomingValue& value) const {
  const ValueSlice& s = value.slice;
  RETURN_IF_ERROR(CheckSlice(s));
  size_t received = 0;
  for (const auto& chunk : value.bytes) received += chunk.size();
  size_t expected = static_cast<size_t>(s.count) * DTypeSize(s.dtype);
  std::string encoding;
  if (value.compression.enabled()) {
    if (s.dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", s.key.Quoted(), ": ", CompressionName(value.compression.type),
                       " compression applies to float32 values, not ", DTypeName(s.dtype)));
    }
    expected = CompressedBytes(value.compression.type, s.count);
    encoding = absl::StrCat(" compressed with ", CompressionName(value.compression.type));
  }
  if (received != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", s.key.Quoted(), ": ", received, " bytes received for ", s.count, " ",
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
    return absl::InvalidArgumentError(
        absl::StrCat("key ", slice.key.Quoted(), ": ", verb, " ", DTypeName(slice.dtype),
                     ShapeToString(slice.shape), " but the stored value is ",
                     DTypeName(stored.dtype), ShapeToString(stored.shape)));
  }
  return it->second.get();
}

absl::StatusOr<ServerEngine::Chunk*> ServerEngine::FindChunk(const ValueSlice& slice,
                                                             absl::string_view verb) const {
  ASSIGN_OR_RETURN(const Part* found, FindPart(slice, verb));
  const Part& part = *found;
  const ValueSlice& stored = part.layout;
  if (slice.offset >= stored.offset && (slice.offset - stored.offset) % part.chunk_elements == 0) {
    const auto index = static_cast<size_t>((slice.offset - stored.offset) / part.chunk_elements);
    if (index < part.chunks.size() && part.chunks[index]->count == slice.count) {
      return part.chunks[index].get();
    }
  }
  std::string chunks;
  if (part.chunks.size() > 1) {
    chunks = absl::StrCat(" in chunks of ", part.chunk_elements, " elements");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "key ", slice.key.Quoted(), ": ", verb, " elements ", ElementRange(slice.offset, slice.count),
      " but this server holds [", stored.offset, ", ", stored.offset + stored.count, ")", chunks));
}

absl::StatusOr<const ServerEngine::Part*> ServerEngine::FindRowPart(const ValueSlice& slice,
                                                                    absl::string_view verb) const {
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
        "key ", slice.key.Quoted(), ": ", verb, " rows of elements ",
        ElementRange(slice.offset, slice.count), " but this server holds [", stored.offset, ", ",
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
  RETURN_IF_ERROR(CheckSender(node_id));
  const Part* part;
  {
    absl::ReaderMutexLock lock(&mu_);
    ASSIGN_OR_RETURN(part, FindRowPart(slice, "pulled"));
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
