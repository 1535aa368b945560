// Shard streams: a shard copied from one kvserver's engine straight into another's, for a
// replacement server's join (controller commands 14 "cut" and "send", 15 "begin", "put" and
// "load"; docs/reliability.md). No snapshot, message or received copy of the values is made:
// the sender reads each page from its engine's chunks as it goes (ShardStreamOut), and the
// receiver copies each page into the chunks of parts it made from the header
// (ShardStreamIn).
//
// A stream's bytes: the header - the shard as a ShardCheckpoint whose values carry no bytes
// (layouts, chunk rounds, updater and its state, tables, requests applied), EncodeShard'd -
// then every value's bytes, in the header's order. A page of values never splits an element.
// The header travels whole before any value (CopySource::head_bytes). Every page carries its
// own CRC-32 (the sender, server/grpc/shard_copy_sender.h) and the header's CRC-32 is checked
// at the load, so that a damaged or missing byte fails the join.
//
// The sender's engine does not change while it is read: the cut refuses every write routed by
// an older view until the copy ends, and the copy is withdrawn when it ends or aborts.
#ifndef KVSTORE_SERVER_CORE_SHARD_STREAM_H_
#define KVSTORE_SERVER_CORE_SHARD_STREAM_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/kvstore.pb.h"
#include "server/core/copy_source.h"
#include "server/core/engine_state.h"
#include "server/core/server_engine.h"

namespace kvstore {

// StreamedParts: where each value's bytes lie in a stream whose header is `head` bytes long.
class StreamedParts {
 public:
  StreamedParts() = default;
  // Of places `parts` one after another from byte `head`; InvalidArgument when their bytes
  // overflow 64 bits or a part has a negative count.
  static absl::StatusOr<StreamedParts> Of(std::vector<ValueSlice> parts, uint64_t head);
  const std::vector<ValueSlice>& parts() const { return parts_; }
  // begin: the stream offset of part i's first byte; end: the stream's length.
  uint64_t begin(size_t i) const { return begins_[i]; }
  uint64_t end() const { return begins_.back(); }
  // PartAt returns the part that holds stream byte `offset` (begin(0) <= offset < end()).
  size_t PartAt(uint64_t offset) const;
  // AlignedEnd returns the largest offset <= `end` (> `begin`) that splits no element, or the
  // end of the element holding `begin` when there is none.
  uint64_t AlignedEnd(uint64_t begin, uint64_t end) const;
  // ForEach calls `each(part, first element, elements, offset into [from, to))` for every
  // stretch of a part within the value bytes [from, to); InvalidArgument naming the key when a
  // boundary splits an element. Stops at the first error `each` returns.
  absl::Status ForEach(uint64_t from, uint64_t to,
                       const std::function<absl::Status(const ValueSlice& part, int64_t first,
                                                        int64_t count, uint64_t at)>& each) const;

 private:
  std::vector<ValueSlice> parts_;
  std::vector<uint64_t> begins_ = {0};  // One per part, then the end.
};

// ShardStreamOut: the stream a server sends, read from its engine page by page.
class ShardStreamOut final : public CopySource {
 public:
  // ShardStreamOut sends `header` (EncodeShard of the shard described, its values without
  // bytes), then the bytes of `parts` (in the header's order), read from `state`, which must
  // outlive it.
  ShardStreamOut(std::string header, StreamedParts parts, const EngineState* state)
      : header_(std::move(header)), parts_(std::move(parts)), state_(*state) {}
  uint64_t size() const override { return parts_.end(); }
  uint64_t head_bytes() const override { return header_.size(); }
  uint64_t PageEnd(uint64_t begin, uint64_t limit) const override;
  // Read: Aborted once withdrawn; ReadStretch's error for a value no longer stored as it was.
  absl::Status Read(uint64_t begin, uint64_t end, char* out) const override;
  // Withdraw makes every later Read fail: the copy ended or was aborted, and writes go on.
  void Withdraw() { withdrawn_.store(true); }
  const std::string& header() const { return header_; }

 private:
  const std::string header_;
  const StreamedParts parts_;
  const EngineState& state_;
  std::atomic<bool> withdrawn_{false};
};

// ShardStreamIn: the stream a server receives, placed into its engine as it arrives.
//
// Threading: thread-safe; Put is called for several pages at once.
class ShardStreamIn {
 public:
  // HeaderCheck checks a stream's header against this server's job and returns its parts (the
  // values' layouts and their chunks' rounds, without bytes), or the error refusing it.
  using HeaderCheck =
      std::function<absl::StatusOr<std::vector<StoredPart>>(const proto::ShardCheckpoint&)>;

  // ShardStreamIn receives a stream of `bytes` bytes whose header is `head_bytes` long into
  // `engine` (which must outlive it and hold nothing); `what` names the copy in errors.
  ShardStreamIn(ServerEngine* engine, uint64_t bytes, uint64_t head_bytes, HeaderCheck check,
                std::string what);
  // ~ShardStreamIn removes the parts it made when it was not finished (abandoned, aborted or
  // refused at the load): the engine is left as it found it.
  ~ShardStreamIn();
  ShardStreamIn(const ShardStreamIn&) = delete;
  ShardStreamIn& operator=(const ShardStreamIn&) = delete;

  // Put takes the page at `offset`. Header bytes are held until the header is whole; then it
  // is decoded and checked, and its parts are made in the engine (a deferred Init, zeros until
  // filled). A page of values is copied into them. OutOfRange for a page past the stream or
  // over bytes already received; FailedPrecondition for values before the whole header;
  // DataLoss for a header that does not decode or whose parts do not add up to the stream;
  // the header check's or the engine's error otherwise.
  absl::Status Put(uint64_t offset, absl::string_view page);
  // Finish checks that all `bytes` arrived and that the header's CRC-32 is `header_crc`, marks
  // the parts restored at their chunks' rounds, and returns the header, for the rest of the
  // shard to be restored from it (updater and its state, requests applied, tables). DataLoss
  // naming what is missing or damaged; FailedPrecondition when called twice.
  absl::StatusOr<proto::ShardCheckpoint> Finish(uint64_t bytes, uint32_t header_crc);

 private:
  absl::Status TakeHeader() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ServerEngine& engine_;
  const uint64_t bytes_;
  const uint64_t head_bytes_;
  const HeaderCheck check_;
  const std::string what_;
  absl::Mutex mu_;
  std::string head_ ABSL_GUARDED_BY(mu_);
  uint64_t head_received_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t head_crc_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t received_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, uint64_t> pages_ ABSL_GUARDED_BY(mu_);  // Received: first byte -> end.
  bool placed_ ABSL_GUARDED_BY(mu_) = false;                 // The header's parts are made.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  proto::ShardCheckpoint header_ ABSL_GUARDED_BY(mu_);
  std::vector<StoredPart> stored_ ABSL_GUARDED_BY(mu_);
  StreamedParts parts_;  // Set once, under mu_, before placed_; read-only after.
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_SHARD_STREAM_H_
