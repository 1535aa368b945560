#include "server/core/part_table.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/partitioner.h"
#include "common/row_sparse.h"
#include "common/status_macros.h"
#include "server/core/server_engine_internal.h"

namespace kvstore {
namespace {

using engine::Chunk;
using engine::ChunkLock;
using engine::Part;
using server_engine_internal::CopyBytes;
using server_engine_internal::ElementRange;
using server_engine_internal::NumElementsOf;
using server_engine_internal::SaturatingAdd;

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

}  // namespace

absl::Status PartTable::CheckSlice(const ValueSlice& s) const {
  ASSIGN_OR_RETURN(const int64_t total, ValueElements(s.key, s.shape));
  const auto element = static_cast<int64_t>(DTypeSize(s.dtype));
  if (total > max_value_bytes_ / element) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "key ", s.key.Quoted(), ": a ", DTypeName(s.dtype), ShapeToString(s.shape), " value of ",
        total, " elements is bigger than the largest value this server accepts, ", max_value_bytes_,
        " bytes"));
  }
  if (s.offset < 0 || s.count < 0 || s.offset > total || s.count > total - s.offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", s.key.Quoted(), ": slice ", ElementRange(s.offset, s.count),
                     " lies outside a value of shape ", ShapeToString(s.shape)));
  }
  return absl::OkStatus();
}

absl::Status PartTable::CheckBytes(const IncomingValue& value) const {
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

absl::StatusOr<bool> PartTable::CheckInit(const IncomingValue& value, bool deferred,
                                          const Key& first) const {
  const Key& key = value.slice.key;
  if (value.compression.enabled()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", key.Quoted(), ": Init values are never compressed"));
  }
  if (!deferred) {
    RETURN_IF_ERROR(CheckBytes(value));
  } else {
    RETURN_IF_ERROR(CheckSlice(value.slice));
    size_t received = 0;
    for (const auto& bytes : value.bytes) received += bytes.size();
    if (received != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", key.Quoted(), ": a deferred Init carries no bytes (they follow in fills), got ",
          received));
    }
  }
  const bool expected = int_keys_.value_or(first.is_int());
  if (key.is_int() != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", key.Quoted(), " is a ", key.KindName(), " key but this server holds ",
                     expected ? "int" : "string", " keys; int and string keys cannot be mixed"));
  }
  const Part* held = Get(key);
  if (held == nullptr) return true;
  if (!held->restored) {
    return absl::AlreadyExistsError(absl::StrCat("key ", key.Quoted(), " is already initialised"));
  }
  const ValueSlice& stored = held->layout;
  const ValueSlice& given = value.slice;
  if (stored.dtype != given.dtype || stored.shape != given.shape || stored.offset != given.offset ||
      stored.count != given.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", key.Quoted(), ": initialised as ", DTypeName(given.dtype),
                     ShapeToString(given.shape), " but restored from the checkpoint as ",
                     DTypeName(stored.dtype), ShapeToString(stored.shape)));
  }
  return false;
}

void PartTable::Add(const IncomingValue& value, Fill fill, uint64_t node_id) {
  const bool deferred = fill != Fill::kNone;
  const ValueSlice& slice = value.slice;
  auto part = std::make_unique<Part>();
  part->layout = slice;
  const size_t element = DTypeSize(slice.dtype);
  part->chunk_elements = ChunkElements(element, chunk_bytes_);
  const bool whole = slice.offset == 0 && slice.count == NumElementsOf(slice.shape);
  for (const Slice& c : ChunkSlice(Slice{0, slice.offset, slice.count}, element, chunk_bytes_)) {
    auto chunk = std::make_unique<Chunk>();
    chunk->offset = c.offset;
    chunk->count = c.count;
    ChunkLock chunk_lock(*chunk);
    Shape shape = whole && c.count == slice.count ? slice.shape : Shape{c.count};
    chunk->stored = fill == Fill::kUnset ? Tensor::Unset(slice.dtype, std::move(shape))
                                         : Tensor::Zeros(slice.dtype, std::move(shape));
    if (!deferred) {
      CopyBytes(value.bytes, static_cast<size_t>(c.offset - slice.offset) * element,
                chunk->stored.byte_size(), chunk->stored.data());
    }
    part->chunks.push_back(std::move(chunk));
  }
  if (deferred && !part->chunks.empty()) {
    part->filling_node = node_id;
    part->filled.assign(part->chunks.size(), false);
    part->unfilled = part->chunks.size();
  }
  num_bytes_ += static_cast<int64_t>(static_cast<size_t>(slice.count) * element);
  int_keys_ = slice.key.is_int();
  parts_.emplace(slice.key, std::move(part));
}

void PartTable::Remove(const Key& key) {
  auto it = parts_.find(key);
  if (it == parts_.end()) return;
  const ValueSlice& slice = it->second->layout;
  num_bytes_ -= static_cast<int64_t>(static_cast<size_t>(slice.count) * DTypeSize(slice.dtype));
  parts_.erase(it);
}

int64_t PartTable::HeldBytes(const ValueSlice& slice) const {
  const auto element = static_cast<int64_t>(DTypeSize(slice.dtype));
  const int64_t per_chunk = ChunkElements(static_cast<size_t>(element), chunk_bytes_);
  const int64_t chunks =
      std::max<int64_t>(1, slice.count / per_chunk + (slice.count % per_chunk != 0));
  const int64_t key_bytes =
      slice.key.is_int() ? 0 : static_cast<int64_t>(slice.key.str_key().size());
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t chunk_bytes =
      chunks > kMax / kChunkOverheadBytes ? kMax : chunks * kChunkOverheadBytes;
  return SaturatingAdd(SaturatingAdd(slice.count * element, kPartOverheadBytes + key_bytes),
                       chunk_bytes);
}

Part* PartTable::Get(const Key& key) const {
  auto it = parts_.find(key);
  return it == parts_.end() ? nullptr : it->second.get();
}

absl::StatusOr<Part*> PartTable::Find(const ValueSlice& slice, absl::string_view verb) const {
  Part* part = Get(slice.key);
  if (part == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("key ", slice.key.Quoted(), " was never initialised on this server"));
  }
  const ValueSlice& stored = part->layout;
  if (slice.dtype != stored.dtype || slice.shape != stored.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", slice.key.Quoted(), ": ", verb, " ", DTypeName(slice.dtype),
                     ShapeToString(slice.shape), " but the stored value is ",
                     DTypeName(stored.dtype), ShapeToString(stored.shape)));
  }
  return part;
}

absl::StatusOr<Chunk*> PartTable::FindChunk(const ValueSlice& slice, absl::string_view verb) const {
  ASSIGN_OR_RETURN(const Part* found, Find(slice, verb));
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

absl::StatusOr<Part*> PartTable::FindRows(const ValueSlice& slice, absl::string_view verb) const {
  ASSIGN_OR_RETURN(Part * part, Find(slice, verb));
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

}  // namespace kvstore
