#include "server/core/shard_encoding.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/base/internal/endian.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/key.h"
#include "common/proto_convert.h"

namespace kvstore {
namespace {

constexpr size_t kMagicBytes = sizeof(kFragmentedMagic) - 1;

// Fragments collects the fragments of a shard, each at most `limit` bytes serialized: the open
// one's size is counted as values and parts are added (each with room for its tag and length).
class Fragments {
 public:
  explicit Fragments(size_t limit) : limit_(limit) {
    out_.assign(kFragmentedMagic, kMagicBytes);
    out_.append(8, '\0');  // The number of fragments, written by Take.
  }

  void Add(const proto::ShardCheckpoint& fragment) {
    const std::string bytes = fragment.SerializeAsString();
    const size_t at = out_.size();
    out_.resize(at + 8);
    absl::little_endian::Store64(out_.data() + at, bytes.size());
    out_ += bytes;
    ++count_;
  }
  // Room returns what the open fragment may still take, less room for the updater state's
  // own tag and length.
  size_t Room() const { return limit_ > open_bytes_ + kSlack ? limit_ - open_bytes_ - kSlack : 0; }
  void AddValue(proto::CheckpointValue value) {
    open_bytes_ += value.ByteSizeLong() + kPerItem;
    *open_.add_values() = std::move(value);
    ++items_;
  }
  void AddTable(proto::TableCheckpoint piece) {
    open_bytes_ += piece.ByteSizeLong() + kPerItem;
    *open_.add_tables() = std::move(piece);
    ++items_;
  }
  void AddPart(const proto::PartState& part) {
    open_bytes_ += part.ByteSizeLong() + kPerItem;
    *open_.mutable_updater_state()->add_parts() = part;
    ++items_;
  }
  void Flush() {
    if (items_ == 0) return;
    Add(open_);
    open_.Clear();
    open_bytes_ = 0;
    items_ = 0;
  }
  std::string Take() {
    Flush();
    absl::little_endian::Store64(out_.data() + kMagicBytes, count_);
    return std::move(out_);
  }

  static constexpr size_t kPerItem = 16;  // A field's tag and length, at most.
  static constexpr size_t kSlack = 16;

 private:
  const size_t limit_;
  std::string out_;
  proto::ShardCheckpoint open_;
  size_t open_bytes_ = 0;
  size_t items_ = 0;
  uint64_t count_ = 0;
};

// Bytes a piece of a value costs beyond its data: its header, its flag and the chunk rounds
// (which only the first carries), its tags and lengths.
size_t PieceOverhead(const proto::CheckpointValue& value) {
  proto::CheckpointValue empty;
  *empty.mutable_header() = value.header();
  empty.set_continued(true);
  *empty.mutable_chunk_rounds() = value.chunk_rounds();
  return empty.ByteSizeLong() + Fragments::kPerItem + 16;
}

absl::Status Loss(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("the shard's bytes ", what));
}

}  // namespace

absl::StatusOr<std::string> EncodeShard(proto::ShardCheckpoint shard, size_t max_fragment_bytes) {
  if (max_fragment_bytes < 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("fragments of ", max_fragment_bytes, " bytes are too small"));
  }
  if (shard.ByteSizeLong() <= max_fragment_bytes) return shard.SerializeAsString();
  Fragments fragments(max_fragment_bytes);
  // The head: the shard without its values and the updater's parts (moved out, not copied).
  google::protobuf::RepeatedPtrField<proto::CheckpointValue> values;
  values.Swap(shard.mutable_values());
  google::protobuf::RepeatedPtrField<proto::PartState> parts;
  parts.Swap(shard.mutable_updater_state()->mutable_parts());
  google::protobuf::RepeatedPtrField<proto::TableCheckpoint> tables;
  tables.Swap(shard.mutable_tables());
  fragments.Add(shard);
  for (const proto::CheckpointValue& value : values) {
    const size_t bytes = value.ByteSizeLong() + Fragments::kPerItem;
    if (bytes > fragments.Room() && bytes <= max_fragment_bytes - Fragments::kSlack) {
      fragments.Flush();  // Whole in a fragment of its own.
    }
    if (bytes <= fragments.Room()) {
      fragments.AddValue(value);
      continue;
    }
    // Too big for any fragment: cut into pieces that fill fragments; the chunk rounds travel
    // with the first.
    const size_t overhead = PieceOverhead(value);
    if (overhead + 1 > max_fragment_bytes - Fragments::kSlack) {
      return absl::InvalidArgumentError(
          absl::StrCat("fragments of ", max_fragment_bytes, " bytes cannot hold a value's header"));
    }
    size_t offset = 0;
    bool first = true;
    do {
      if (fragments.Room() <= overhead) fragments.Flush();
      const size_t take = std::min(value.data().size() - offset, fragments.Room() - overhead);
      proto::CheckpointValue piece;
      *piece.mutable_header() = value.header();
      if (first) *piece.mutable_chunk_rounds() = value.chunk_rounds();
      piece.set_data(value.data().substr(offset, take));
      offset += take;
      piece.set_continued(offset < value.data().size());
      fragments.AddValue(std::move(piece));
      first = false;
    } while (offset < value.data().size());
  }
  for (const proto::PartState& part : parts) {
    const size_t bytes = part.ByteSizeLong() + 16;
    if (bytes > max_fragment_bytes / 2) {
      absl::StatusOr<Key> key = KeyFromProto(part.key());
      return absl::ResourceExhaustedError(
          absl::StrCat("the optimizer state of key ", key.ok() ? key->Quoted() : std::string("?"),
                       " at element ", part.offset(), " is ", bytes,
                       " bytes, more than a fragment of ", max_fragment_bytes / 2, " may hold"));
    }
    if (bytes > fragments.Room()) fragments.Flush();
    fragments.AddPart(part);
  }
  // Tables travel as pieces (kTablePieceBytes of rows at most, TablePieces), in order.
  for (proto::TableCheckpoint& piece : tables) {
    const size_t bytes = piece.ByteSizeLong() + 16;
    if (bytes > max_fragment_bytes / 2) {
      absl::StatusOr<Key> key = KeyFromProto(piece.key());
      return absl::ResourceExhaustedError(absl::StrCat(
          "a piece of table ", key.ok() ? key->Quoted() : std::string("?"), " is ", bytes,
          " bytes, more than a fragment of ", max_fragment_bytes / 2, " may hold"));
    }
    if (bytes > fragments.Room()) fragments.Flush();
    fragments.AddTable(std::move(piece));
  }
  return fragments.Take();
}

absl::StatusOr<proto::ShardCheckpoint> DecodeShard(absl::string_view bytes) {
  proto::ShardCheckpoint shard;
  if (!absl::StartsWith(bytes, absl::string_view(kFragmentedMagic, kMagicBytes))) {
    if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
        !shard.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return Loss(absl::StrCat("(", bytes.size(), ") do not parse"));
    }
    return shard;
  }
  if (bytes.size() < kMagicBytes + 8) return Loss("end inside the number of fragments");
  const uint64_t count = absl::little_endian::Load64(bytes.data() + kMagicBytes);
  size_t at = kMagicBytes + 8;
  uint64_t fragment = 0;
  for (; at < bytes.size(); ++fragment) {
    if (bytes.size() - at < 8)
      return Loss(absl::StrCat("end inside fragment ", fragment, "'s length"));
    const uint64_t length = absl::little_endian::Load64(bytes.data() + at);
    at += 8;
    if (length > bytes.size() - at ||
        length > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      return Loss(absl::StrCat("end inside fragment ", fragment, " (", length, " bytes at ", at,
                               " of ", bytes.size(), ")"));
    }
    proto::ShardCheckpoint part;
    if (!part.ParseFromArray(bytes.data() + at, static_cast<int>(length))) {
      return Loss(absl::StrCat("of fragment ", fragment, " do not parse"));
    }
    at += length;
    if (fragment == 0) {
      shard = std::move(part);
      continue;
    }
    for (proto::CheckpointValue& value : *part.mutable_values()) {
      const int n = shard.values_size();
      proto::CheckpointValue* open = n > 0 ? shard.mutable_values(n - 1) : nullptr;
      if (open == nullptr || !open->continued()) {
        *shard.add_values() = std::move(value);
        continue;
      }
      if (value.header().key().SerializeAsString() != open->header().key().SerializeAsString()) {
        return Loss(absl::StrCat("of fragment ", fragment, " continue a value with another key's"));
      }
      open->mutable_data()->append(value.data());
      for (int64_t r : value.chunk_rounds()) open->add_chunk_rounds(r);
      open->set_continued(value.continued());
    }
    for (proto::PartState& state : *part.mutable_updater_state()->mutable_parts()) {
      *shard.mutable_updater_state()->add_parts() = std::move(state);
    }
    for (proto::TableCheckpoint& piece : *part.mutable_tables()) {
      *shard.add_tables() = std::move(piece);
    }
  }
  if (fragment != count || count == 0) {
    return Loss(absl::StrCat("hold ", fragment, " fragments of the ", count, " written"));
  }
  if (shard.values_size() > 0 && shard.values(shard.values_size() - 1).continued()) {
    return Loss("end inside a value");
  }
  return shard;
}

}  // namespace kvstore
