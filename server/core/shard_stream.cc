#include "server/core/shard_stream.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/state_file.h"
#include "common/status_macros.h"
#include "server/core/job_workers.h"
#include "server/core/shard_encoding.h"

namespace kvstore {
namespace {

absl::Status Prefixed(const std::string& what, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

}  // namespace

absl::StatusOr<StreamedParts> StreamedParts::Of(std::vector<ValueSlice> parts, uint64_t head) {
  StreamedParts out;
  out.begins_ = {head};
  for (const ValueSlice& part : parts) {
    const uint64_t element = DTypeSize(part.dtype);
    if (part.count < 0 ||
        static_cast<uint64_t>(part.count) >
            (std::numeric_limits<uint64_t>::max() - out.begins_.back()) / element) {
      return absl::InvalidArgumentError(absl::StrCat("key ", part.key.Quoted(), ": ", part.count,
                                                     " elements do not fit in a stream"));
    }
    out.begins_.push_back(out.begins_.back() + static_cast<uint64_t>(part.count) * element);
  }
  out.parts_ = std::move(parts);
  return out;
}

size_t StreamedParts::PartAt(uint64_t offset) const {
  const auto it = std::upper_bound(begins_.begin(), begins_.end() - 1, offset);
  return static_cast<size_t>(std::distance(begins_.begin(), it)) - 1;
}

uint64_t StreamedParts::AlignedEnd(uint64_t begin, uint64_t end) const {
  if (end >= this->end()) return this->end();
  if (end <= begins_.front()) return end;
  const size_t part = PartAt(end);
  const uint64_t element = DTypeSize(parts_[part].dtype);
  const uint64_t aligned = end - (end - begins_[part]) % element;
  if (aligned > begin) return aligned;
  return begins_[part] + ((begin - begins_[part]) / element + 1) * element;
}

absl::Status StreamedParts::ForEach(
    uint64_t from, uint64_t to,
    const std::function<absl::Status(const ValueSlice&, int64_t, int64_t, uint64_t)>& each) const {
  if (from >= to || parts_.empty()) return absl::OkStatus();
  for (size_t part = PartAt(from); part < parts_.size() && begins_[part] < to; ++part) {
    const uint64_t lo = std::max(from, begins_[part]);
    const uint64_t hi = std::min(to, begins_[part + 1]);
    if (lo >= hi) continue;
    const uint64_t element = DTypeSize(parts_[part].dtype);
    const ValueSlice& slice = parts_[part];
    if ((lo - begins_[part]) % element != 0 || (hi - begins_[part]) % element != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bytes [", from, ", ", to, ") split an element of key ", slice.key.Quoted(),
                       " (", DTypeName(slice.dtype), ", its bytes from ", begins_[part], ")"));
    }
    RETURN_IF_ERROR(each(slice, slice.offset + static_cast<int64_t>((lo - begins_[part]) / element),
                         static_cast<int64_t>((hi - lo) / element), lo - from));
  }
  return absl::OkStatus();
}

uint64_t ShardStreamOut::PageEnd(uint64_t begin, uint64_t limit) const {
  const uint64_t end = std::min(size(), begin + std::max<uint64_t>(limit, 1));
  if (begin < header_.size()) return std::min<uint64_t>(end, header_.size());
  return parts_.AlignedEnd(begin, end);
}

absl::Status ShardStreamOut::Read(uint64_t begin, uint64_t end, char* out) const {
  auto withdrawn = [this] {
    return withdrawn_.load()
               ? absl::AbortedError("the copy was withdrawn (ended or aborted) while it was sent")
               : absl::OkStatus();
  };
  RETURN_IF_ERROR(withdrawn());
  const uint64_t head = header_.size();
  if (begin < head) {
    const uint64_t n = std::min(end, head) - begin;
    std::memcpy(out, header_.data() + begin, n);
  }
  if (end > head) {
    const uint64_t from = std::max(begin, head);
    char* values = out + (from - begin);
    RETURN_IF_ERROR(parts_.ForEach(
        from, end,
        [this, values](const ValueSlice& part, int64_t first, int64_t count, uint64_t at) {
          return state_.ReadStretch(part, first, first + count, values + at);
        }));
  }
  // Withdrawn meanwhile: writes may have gone on while the bytes were read.
  return withdrawn();
}

ShardStreamIn::ShardStreamIn(ServerEngine* engine, uint64_t bytes, uint64_t head_bytes,
                             HeaderCheck check, std::string what)
    : engine_(*engine),
      bytes_(bytes),
      head_bytes_(std::min(head_bytes, bytes)),
      check_(std::move(check)),
      what_(std::move(what)) {
  absl::MutexLock lock(&mu_);
  head_.resize(head_bytes_);
}

ShardStreamIn::~ShardStreamIn() {
  absl::MutexLock lock(&mu_);
  if (!placed_ || finished_) return;
  std::vector<Key> keys;
  for (const StoredPart& part : stored_) keys.push_back(part.layout.key);
  engine_.state().DropUnrestored(keys);
}

absl::Status ShardStreamIn::Put(uint64_t offset, absl::string_view page) {
  const uint64_t size = page.size();
  {
    absl::MutexLock lock(&mu_);
    if (finished_) {
      return absl::FailedPreconditionError(absl::StrCat(what_, ": the copy is loaded already"));
    }
    if (offset > bytes_ || size > bytes_ - offset) {
      return absl::OutOfRangeError(absl::StrCat(what_, ": a page of ", size, " bytes at ", offset,
                                                " lies past the ", bytes_, " bytes begun"));
    }
    if (size == 0) return absl::OkStatus();
    const auto next = pages_.upper_bound(offset);
    const bool overlaps_before = next != pages_.begin() && std::prev(next)->second > offset;
    if (overlaps_before || (next != pages_.end() && next->first < offset + size)) {
      return absl::OutOfRangeError(absl::StrCat(what_, ": a page of ", size, " bytes at ", offset,
                                                " overlaps bytes received already"));
    }
    if (offset < head_bytes_) {
      if (offset + size > head_bytes_) {
        return absl::InvalidArgumentError(absl::StrCat(what_, ": a page of ", size, " bytes at ",
                                                       offset, " crosses the header's end at ",
                                                       head_bytes_));
      }
      std::memcpy(head_.data() + offset, page.data(), size);
      pages_[offset] = offset + size;
      received_ += size;
      head_received_ += size;
      if (head_received_ == head_bytes_) return TakeHeader();
      return absl::OkStatus();
    }
    if (!placed_) {
      return absl::FailedPreconditionError(
          absl::StrCat(what_, ": values at byte ", offset, " arrived before the whole header (",
                       head_received_, " of its ", head_bytes_, " bytes)"));
    }
    pages_[offset] = offset + size;
    received_ += size;
  }
  // Copied into the parts outside the lock: other pages go on meanwhile.
  std::vector<IncomingValue> values;
  absl::Status status = parts_.ForEach(
      offset, offset + size,
      [&values, &page](const ValueSlice& part, int64_t first, int64_t count, uint64_t at) {
        IncomingValue value;
        value.slice = part;
        value.slice.offset = first;
        value.slice.count = count;
        value.bytes = {
            absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(page.data()) + at,
                                      static_cast<size_t>(count) * DTypeSize(part.dtype))};
        values.push_back(std::move(value));
        return absl::OkStatus();
      });
  if (status.ok()) status = engine_.InitFill(kSchedulerNodeId, values);
  if (!status.ok()) {
    absl::MutexLock lock(&mu_);
    pages_.erase(offset);
    received_ -= size;
    return Prefixed(what_, status);
  }
  return absl::OkStatus();
}

absl::Status ShardStreamIn::TakeHeader() {
  head_crc_ = Crc32(head_);
  absl::StatusOr<proto::ShardCheckpoint> header = DecodeShard(head_);
  if (!header.ok()) {
    return absl::DataLossError(absl::StrCat(what_, ": its header: ", header.status().message()));
  }
  std::string().swap(head_);
  ASSIGN_OR_RETURN(std::vector<StoredPart> stored, check_(*header));
  std::vector<ValueSlice> layouts;
  std::vector<IncomingValue> values;
  for (const StoredPart& part : stored) {
    layouts.push_back(part.layout);
    IncomingValue value;
    value.slice = part.layout;
    values.push_back(std::move(value));
  }
  absl::StatusOr<StreamedParts> parts = StreamedParts::Of(std::move(layouts), head_bytes_);
  if (!parts.ok()) return absl::DataLossError(Prefixed(what_, parts.status()).message());
  if (parts->end() != bytes_) {
    return absl::DataLossError(absl::StrCat(what_, ": its header's values hold ",
                                            parts->end() - head_bytes_, " bytes; ",
                                            bytes_ - head_bytes_, " follow it"));
  }
  if (!values.empty()) {
    // Not zeroed: the pages fill every byte (Finish checks) before any is read.
    if (absl::Status s = engine_.state().InitUnset(values); !s.ok()) {
      return Prefixed(what_, s);
    }
  }
  parts_ = *std::move(parts);
  header_ = *std::move(header);
  stored_ = std::move(stored);
  placed_ = true;
  return absl::OkStatus();
}

absl::StatusOr<proto::ShardCheckpoint> ShardStreamIn::Finish(uint64_t bytes, uint32_t header_crc) {
  absl::MutexLock lock(&mu_);
  if (finished_) {
    return absl::FailedPreconditionError(absl::StrCat(what_, ": the copy is loaded already"));
  }
  if (bytes != bytes_ || received_ != bytes_ || !placed_) {
    return absl::DataLossError(absl::StrCat(what_, ": received ", received_, " bytes of ", bytes_,
                                            " begun; ", bytes, " were sent"));
  }
  if (head_crc_ != header_crc) {
    return absl::DataLossError(absl::StrCat(what_, ": its header of ", head_bytes_,
                                            " bytes has CRC-32 ", head_crc_, "; it was sent with ",
                                            header_crc));
  }
  if (absl::Status s = engine_.state().MarkRestored(stored_); !s.ok()) return Prefixed(what_, s);
  finished_ = true;
  return std::move(header_);
}

}  // namespace kvstore
