// Controller: the copy of a shard a replacement server takes from a survivor (command 14) and
// loads (command 15), in a job with replicas; and the parts of every server's copy that the
// servers of a job with more or fewer servers merge (a rescale: the verbs after CopyOutEnd).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/state_file.h"
#include "common/status_macros.h"
#include "common/store/updater_state.h"
#include "common/view_epoch.h"
#include "server/core/checkpoint_reshard.h"
#include "server/core/controller.h"
#include "server/core/engine_cuts.h"
#include "server/core/engine_state.h"
#include "server/core/shard_encoding.h"
namespace kvstore {
namespace {

absl::StatusOr<uint64_t> Number(const std::string& field, absl::string_view what) {
  uint64_t n = 0;
  if (!absl::SimpleAtoi(field, &n)) {
    return absl::InvalidArgumentError(absl::StrCat("not ", what, ": \"", field, "\""));
  }
  return n;
}

}  // namespace

absl::StatusOr<std::string> Controller::RunCopy(int head, absl::string_view body) {
  if (head == kCommandCopyIn) return CopyIn(body);
  const std::string verb(body.substr(0, body.find(' ')));
  if (verb == "cut" || verb == "cutparts") return CopyOutCut(body);
  if (verb == "part" || verb == "sendpart" || verb == "keeppart") return CopyOutParts(verb, body);
  if (verb == "send") return CopyOutSend(body);
  if (verb == "end" || verb == "abort") return CopyOutEnd(verb, body);
  return absl::InvalidArgumentError(absl::StrCat(
      "copy-out command \"", verb, "\" is not cut, send, end, abort, cutparts, part or sendpart"));
}

absl::StatusOr<std::string> Controller::CopyIn(absl::string_view body) {
  const std::string what = absl::StrCat("the copy of shard ", rank_);
  if (absl::ConsumePrefix(&body, "put ")) {
    // "put OFFSET [CRC32]\n" + bytes: a page, in any order (several are in flight).
    const size_t newline = body.find('\n');
    if (newline == absl::string_view::npos) {
      return absl::InvalidArgumentError("copy-in \"put\" is \"put OFFSET [CRC32]\\n\" + bytes");
    }
    const std::vector<std::string> fields =
        absl::StrSplit(body.substr(0, newline), ' ', absl::SkipEmpty());
    if (fields.empty() || fields.size() > 2) {
      return absl::InvalidArgumentError("copy-in \"put\" is \"put OFFSET [CRC32]\\n\" + bytes");
    }
    ASSIGN_OR_RETURN(const uint64_t offset, Number(fields[0], "an offset"));
    const absl::string_view page = body.substr(newline + 1);
    if (fields.size() == 2) {
      ASSIGN_OR_RETURN(const uint64_t crc, Number(fields[1], "a CRC-32"));
      if (const uint32_t got = Crc32(page); got != crc) {
        return absl::DataLossError(absl::StrCat(what, ": the page of ", page.size(), " bytes at ",
                                                offset, " has CRC-32 ", got, "; it was sent with ",
                                                crc));
      }
    }
    std::shared_ptr<ShardStreamIn> stream;
    {
      absl::MutexLock lock(&cut_mu_);
      stream = stream_in_;
      if (stream == nullptr) {
        if (offset > copy_in_bytes_ || page.size() > copy_in_bytes_ - offset) {
          return absl::OutOfRangeError(absl::StrCat(what, ": a page of ", page.size(), " bytes at ",
                                                    offset, " lies past the ", copy_in_bytes_,
                                                    " bytes begun"));
        }
        std::memcpy(copy_in_.get() + offset, page.data(), page.size());
        copy_in_received_ += page.size();
        return absl::StrCat("received ", copy_in_received_);
      }
    }
    // Streamed into the engine outside the lock: the other pages in flight go on meanwhile.
    RETURN_IF_ERROR(stream->Put(offset, page));
    return absl::StrCat("placed ", page.size());
  }
  const std::string verb(body.substr(0, body.find(' ')));
  if (verb == "stage" || verb == "merge" || verb == "swap" || verb == "retire" ||
      verb == "unstage") {
    return RescaleIn(verb, body);
  }
  if (verb != "begin" && verb != "load") {
    return absl::InvalidArgumentError(
        absl::StrCat("copy-in command \"", verb, "\" is not begin, put or load"));
  }
  const std::vector<std::string> f = absl::StrSplit(body, ' ', absl::SkipEmpty());
  if (verb == "begin" ? f.size() != 3 && f.size() != 4 : f.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy-in \"", verb, "\" is \"",
                     verb == "begin" ? "begin BYTES FROM [HEAD]" : "load BYTES CRC32", "\", not \"",
                     body, "\""));
  }
  ASSIGN_OR_RETURN(const uint64_t bytes, Number(f[1], "a byte count"));
  if (verb == "begin") {
    ASSIGN_OR_RETURN(const uint64_t from, Number(f[2], "a node id"));
    // The copy is held whole before it is loaded: bounded by what this server may hold.
    const int64_t budget = engine_->options().memory_budget_bytes;
    if (budget != kUnlimitedBytes && bytes > static_cast<uint64_t>(budget)) {
      return absl::ResourceExhaustedError(absl::StrCat(what, ": ", bytes, " bytes exceed the ",
                                                       budget, " bytes this server may hold"));
    }
    if (f.size() == 4) {
      ASSIGN_OR_RETURN(const uint64_t head, Number(f[3], "a header length"));
      return BeginStream(bytes, head, from);
    }
    absl::MutexLock lock(&cut_mu_);
    // Not zeroed: every byte is written by a page before the load reads any (it checks).
    copy_in_.reset(new char[bytes]);
    copy_in_bytes_ = bytes;
    copy_in_received_ = 0;
    copy_in_from_ = from;
    stream_in_.reset();
    return absl::StrCat("begun ", bytes);
  }
  ASSIGN_OR_RETURN(const uint64_t crc, Number(f[2], "a CRC-32"));
  std::shared_ptr<ShardStreamIn> stream;
  {
    absl::MutexLock lock(&cut_mu_);
    stream.swap(stream_in_);
    if (stream != nullptr) copy_in_from_ = 0;
  }
  if (stream != nullptr) {
    // Its values are in the engine already; the rest of the shard comes from its header.
    ASSIGN_OR_RETURN(const proto::ShardCheckpoint header,
                     stream->Finish(bytes, static_cast<uint32_t>(crc)));
    absl::StatusOr<UpdaterStateData> state = UpdaterStateFromProto(header.updater_state());
    if (!state.ok()) {
      return absl::DataLossError(absl::StrCat(what, ": ", state.status().message()));
    }
    RETURN_IF_ERROR(RestoreRest(header, *state, what));
    return absl::StrCat("loaded ", header.values_size(), " keys");
  }
  ASSIGN_OR_RETURN(const proto::ShardCheckpoint checkpoint, TakeCopyIn(bytes, crc));
  const size_t tables = tables_ == nullptr ? 0 : tables_->Tables().size();
  if (engine_->stats().num_keys > 0 || tables > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": this server already holds ", engine_->stats().num_keys, " keys and ",
                     tables, " tables; a copy is loaded into an empty server only"));
  }
  RETURN_IF_ERROR(RestoreShard(checkpoint, what));
  return absl::StrCat("loaded ", checkpoint.values_size(), " keys");
}

absl::StatusOr<std::string> Controller::BeginStream(uint64_t bytes, uint64_t head, uint64_t from) {
  const std::string what = absl::StrCat("the copy of shard ", rank_);
  {
    // A stream begun before and never loaded (its join failed) goes first, with the parts it
    // made (~ShardStreamIn), unless a page of it is still being placed.
    std::shared_ptr<ShardStreamIn> earlier;
    absl::MutexLock lock(&cut_mu_);
    earlier.swap(stream_in_);
    copy_in_from_ = 0;
  }
  const size_t tables = tables_ == nullptr ? 0 : tables_->Tables().size();
  if (engine_->stats().num_keys > 0 || tables > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": this server already holds ", engine_->stats().num_keys, " keys and ",
                     tables, " tables; a copy is streamed into an empty server only"));
  }
  if (head > bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a header of ", head, " bytes in a copy of ", bytes));
  }
  auto check =
      [this,
       what](const proto::ShardCheckpoint& header) -> absl::StatusOr<std::vector<StoredPart>> {
    RETURN_IF_ERROR(CheckShard(header, what));
    return PartsOf(header, what, /*with_data=*/false);
  };
  auto stream = std::make_shared<ShardStreamIn>(engine_, bytes, head, std::move(check), what);
  absl::MutexLock lock(&cut_mu_);
  copy_in_.reset();
  copy_in_bytes_ = copy_in_received_ = 0;
  copy_in_from_ = from;
  stream_in_ = std::move(stream);
  return absl::StrCat("begun ", bytes, " streamed");
}

absl::StatusOr<proto::ShardCheckpoint> Controller::TakeCopyIn(uint64_t bytes, uint64_t crc) {
  const std::string what = absl::StrCat("the copy of shard ", rank_);
  std::unique_ptr<char[]> copy;
  uint64_t begun = 0, received = 0;
  {
    absl::MutexLock lock(&cut_mu_);
    copy.swap(copy_in_);
    begun = copy_in_bytes_;
    received = copy_in_received_;
    copy_in_bytes_ = copy_in_received_ = 0;
    copy_in_from_ = 0;
  }
  if (begun != bytes || received != bytes) {
    return absl::DataLossError(absl::StrCat(what, ": received ", received, " bytes of ", begun,
                                            " begun; ", bytes, " were sent"));
  }
  const absl::string_view whole(copy.get(), begun);
  if (const uint32_t got = Crc32(whole); got != crc) {
    return absl::DataLossError(absl::StrCat(what, ": the ", bytes, " bytes received have CRC-32 ",
                                            got, "; they were sent with ", crc));
  }
  absl::StatusOr<proto::ShardCheckpoint> checkpoint = DecodeShard(whole);
  if (!checkpoint.ok()) {
    return absl::DataLossError(absl::StrCat(what, ": ", checkpoint.status().message()));
  }
  return checkpoint;  // Parsed: the bytes are freed while the engine loads it.
}

absl::StatusOr<std::string> Controller::CopyOutCut(absl::string_view body) {
  const bool whole = absl::StartsWith(body, "cutparts ");
  ASSIGN_OR_RETURN(std::vector<std::string> f, SplitFields(body, 4, "cut ID ROUND EPOCH"));
  ASSIGN_OR_RETURN(const int64_t round, CutRound({f[1], f[2]}));
  ASSIGN_OR_RETURN(const uint64_t epoch, Number(f[3], "a view epoch"));
  const std::string lagging = engine_->cuts().Lagging();
  if (!lagging.empty()) return absl::StrCat("waiting: ", lagging);
  // A rescale's parts are cut from a snapshot; a join's copy is streamed from the engine,
  // which takes no write routed by an older view from here until the copy ends.
  ASSIGN_OR_RETURN(EngineSnapshot snapshot,
                   whole ? engine_->state().Snapshot() : engine_->state().Describe());
  // From here on writes routed by an older view would miss the new copy: refused, the held
  // pushes too; their senders send them again to both copies once they know the new view.
  const uint64_t before = engine_->view_floor().epoch();
  engine_->view_floor().Set(epoch, /*reads_too=*/false);
  engine_->cuts().End(StaleViewError(epoch - 1, epoch));
  // Table pushes waiting for a round are sent again, to both copies, once refused; those
  // applied before are in the tables' snapshot, taken after this (TableEngine::Push).
  if (tables_ != nullptr) tables_->FailRounds(StaleViewError(epoch - 1, epoch));
  proto::ShardCheckpoint checkpoint = MakeCheckpoint(snapshot);
  checkpoint.set_checkpoint_id(f[1]);
  checkpoint.set_round(engine_->sync() ? round : -1);
  std::vector<ValueSlice> layouts;
  for (int i = 0; i < checkpoint.values_size(); ++i) {
    for (int64_t r : snapshot.parts[i].chunk_rounds) {
      checkpoint.mutable_values(i)->add_chunk_rounds(r);
    }
    layouts.push_back(snapshot.parts[i].layout);
  }
  AppliedToProto(engine_->state().Applied(), checkpoint.mutable_applied());
  if (tables_ != nullptr) AppliedToProto(tables_->Applied(), checkpoint.mutable_table_applied());
  absl::MutexLock lock(&cut_mu_);
  if (cut_id_ == f[1]) cut_id_.clear();
  copy_id_ = f[1];
  copy_floor_before_ = before;
  if (whole) {
    const int keys = checkpoint.values_size();
    parts_from_ = std::make_shared<const proto::ShardCheckpoint>(std::move(checkpoint));
    parts_out_.clear();
    return absl::StrCat("cut ", keys, " keys");
  }
  ASSIGN_OR_RETURN(std::string header, EncodeShard(std::move(checkpoint)));
  const uint64_t head = header.size();
  const uint32_t crc = Crc32(header);
  ASSIGN_OR_RETURN(StreamedParts parts, StreamedParts::Of(std::move(layouts), head));
  if (copy_out_ != nullptr) copy_out_->Withdraw();
  copy_out_ =
      std::make_shared<ShardStreamOut>(std::move(header), std::move(parts), &engine_->state());
  return absl::StrCat("copied ", copy_out_->size(), " ", crc, " ", head);
}

absl::StatusOr<std::string> Controller::CopyOutSend(absl::string_view body) {
  ASSIGN_OR_RETURN(std::vector<std::string> f, SplitFields(body, 4, "send ID ADDRESS BACKUP"));
  if (f[3] != "0" && f[3] != "1") {
    return absl::InvalidArgumentError(absl::StrCat("BACKUP is 0 or 1, not \"", f[3], "\""));
  }
  if (!copy_sender_) {
    return absl::FailedPreconditionError("this server has no way to send a copy to another");
  }
  std::shared_ptr<const ShardStreamOut> copy;
  {
    absl::MutexLock lock(&cut_mu_);
    if (copy_id_ != f[1] || copy_out_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("no copy ", f[1], " is held here (", copy_id_, " is)"));
    }
    copy = copy_out_;
  }
  RETURN_IF_ERROR(copy_sender_(f[2], f[3] == "1", *copy));
  return absl::StrCat("sent ", copy->size());
}

absl::StatusOr<std::string> Controller::CopyOutEnd(const std::string& verb,
                                                   absl::string_view body) {
  ASSIGN_OR_RETURN(std::vector<std::string> f, SplitFields(body, 2, "end|abort ID"));
  bool ended_cut = false;
  bool copied = false;
  uint64_t floor_before = 0;
  {
    absl::MutexLock lock(&cut_mu_);
    if (copy_id_ == f[1]) {
      copied = true;
      floor_before = copy_floor_before_;
      copy_id_.clear();
      if (copy_out_ != nullptr) copy_out_->Withdraw();
      copy_out_.reset();
      parts_from_.reset();
      parts_out_.clear();
    }
    if (verb == "abort" && cut_id_ == f[1]) {
      cut_id_.clear();
      ended_cut = true;
    }
  }
  if (verb == "abort") {
    // The join failed: what the cut refused is accepted again (the scheduler moves the view
    // to the join's epoch unchanged, so that refused writers send them again here).
    if (copied) engine_->view_floor().Set(floor_before, false);
    if (ended_cut) engine_->cuts().End();
  }
  return verb == "end" ? std::string("ended") : std::string("aborted");
}

absl::StatusOr<Partitioner> Controller::PlacementOf(uint64_t rank,
                                                    const std::string& servers_field) const {
  ASSIGN_OR_RETURN(const uint64_t servers, Number(servers_field, "a number of servers"));
  if (servers < 1 || rank >= servers || servers > 1 << 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " of ", servers, " servers is out of range"));
  }
  return Partitioner::Create(static_cast<int>(servers), job_.big_value_bound);
}

absl::StatusOr<std::string> Controller::CopyOutParts(const std::string& verb,
                                                     absl::string_view body) {
  ASSIGN_OR_RETURN(std::vector<std::string> f,
                   verb == "sendpart" ? SplitFields(body, 5, "sendpart ID RANK ADDRESS BACKUP")
                                      : SplitFields(body, 4, "part|keeppart ID RANK SERVERS"));
  ASSIGN_OR_RETURN(const uint64_t rank, Number(f[2], "a rank"));
  std::shared_ptr<const proto::ShardCheckpoint> from;
  std::shared_ptr<const std::string> part;
  {
    absl::MutexLock lock(&cut_mu_);
    if (copy_id_ != f[1] || parts_from_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("no copy ", f[1], " is held here whole (", copy_id_, " is)"));
    }
    from = parts_from_;
    auto it = parts_out_.find(static_cast<int>(rank));
    if (it != parts_out_.end()) part = it->second;
  }
  if (verb == "part" || verb == "keeppart") {
    ASSIGN_OR_RETURN(const Partitioner partitioner, PlacementOf(rank, f[3]));
    ASSIGN_OR_RETURN(proto::ShardCheckpoint piece,
                     CheckpointPartFor(*from, static_cast<int>(rank), partitioner));
    if (verb == "keeppart") {
      // This server's own part (it stays a server): staged here, not sent.
      const int values = piece.values_size();
      absl::MutexLock lock(&cut_mu_);
      staged_.push_back(std::move(piece));
      return absl::StrCat("staged ", values, " values (", staged_.size(), " parts)");
    }
    ASSIGN_OR_RETURN(std::string encoded, EncodeShard(std::move(piece)));
    auto kept = std::make_shared<const std::string>(std::move(encoded));
    const std::string reply = absl::StrCat("part ", kept->size(), " ", Crc32(*kept));
    absl::MutexLock lock(&cut_mu_);
    parts_out_[static_cast<int>(rank)] = std::move(kept);
    return reply;
  }
  if (part == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no part of copy ", f[1], " for server ", rank, " is cut here"));
  }
  if (f[4] != "0" && f[4] != "1") {
    return absl::InvalidArgumentError(absl::StrCat("BACKUP is 0 or 1, not \"", f[4], "\""));
  }
  if (!copy_sender_) {
    return absl::FailedPreconditionError("this server has no way to send a copy to another");
  }
  // Kept until the copy ends: with replicas the same part goes to a shard's two copies.
  RETURN_IF_ERROR(copy_sender_(f[3], f[4] == "1", BytesSource(*part)));
  return absl::StrCat("sent ", part->size());
}

absl::StatusOr<std::string> Controller::RescaleIn(const std::string& verb, absl::string_view body) {
  if (verb == "unstage") {
    absl::MutexLock lock(&cut_mu_);
    const size_t dropped = staged_.size();
    staged_.clear();
    merged_.reset();
    copy_in_.reset();
    stream_in_.reset();
    copy_in_bytes_ = copy_in_received_ = copy_in_from_ = 0;
    return absl::StrCat("unstaged ", dropped, " parts");
  }
  if (verb == "stage") {
    ASSIGN_OR_RETURN(std::vector<std::string> f, SplitFields(body, 3, "stage BYTES CRC32"));
    ASSIGN_OR_RETURN(const uint64_t bytes, Number(f[1], "a byte count"));
    ASSIGN_OR_RETURN(const uint64_t crc, Number(f[2], "a CRC-32"));
    ASSIGN_OR_RETURN(proto::ShardCheckpoint part, TakeCopyIn(bytes, crc));
    const int values = part.values_size();
    absl::MutexLock lock(&cut_mu_);
    staged_.push_back(std::move(part));
    return absl::StrCat("staged ", values, " values (", staged_.size(), " parts)");
  }
  if (verb == "merge") {
    ASSIGN_OR_RETURN(std::vector<std::string> f, SplitFields(body, 3, "merge RANK SERVERS"));
    ASSIGN_OR_RETURN(const uint64_t rank, Number(f[1], "a rank"));
    ASSIGN_OR_RETURN(const Partitioner partitioner, PlacementOf(rank, f[2]));
    std::vector<proto::ShardCheckpoint> staged;
    {
      absl::MutexLock lock(&cut_mu_);
      staged.swap(staged_);
    }
    if (staged.empty()) return absl::FailedPreconditionError("no parts are staged to merge");
    ASSIGN_OR_RETURN(proto::ShardCheckpoint merged,
                     ReshardCheckpoint(staged, static_cast<int>(rank), partitioner,
                                       job_.chunk_bytes, /*pieces=*/true));
    const int keys = merged.values_size();
    absl::MutexLock lock(&cut_mu_);
    merged_ = std::move(merged);
    return absl::StrCat("merged ", keys, " keys from ", staged.size(), " parts");
  }
  ASSIGN_OR_RETURN(std::vector<std::string> f, SplitFields(body, 2, "swap|retire EPOCH"));
  ASSIGN_OR_RETURN(const uint64_t epoch, Number(f[1], "a view epoch"));
  if (verb == "retire") {
    engine_->view_floor().Set(epoch, /*reads_too=*/true);
    return absl::StrCat("retired at view epoch ", epoch);
  }
  std::optional<proto::ShardCheckpoint> merged;
  {
    absl::MutexLock lock(&cut_mu_);
    merged.swap(merged_);
  }
  if (!merged.has_value()) return absl::FailedPreconditionError("no merged shard to swap in");
  if (!swapper_) return absl::FailedPreconditionError("this server cannot swap its shard");
  // The merge made it for its rank and count of servers.
  const int keys = merged->values_size(), rank = merged->server_rank();
  const int servers = merged->num_servers();
  RETURN_IF_ERROR(swapper_(*merged, rank, servers, epoch));
  return absl::StrCat("swapped in ", keys, " keys as server ", rank, " of ", servers);
}

}  // namespace kvstore
