// Controller: the steps of a checkpoint set (commands 7-12, checkpoint_set.h) on one server.
#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/state_file.h"
#include "common/status_macros.h"
#include "server/core/checkpoint_set.h"
#include "server/core/controller.h"
#include "server/core/engine_cuts.h"
#include "server/core/engine_state.h"
#include "server/core/shard_encoding.h"
namespace kvstore {
namespace {

// RemoveIfEmpty removes the directory `dir` below `root` when it is empty (a checkpoint that
// created it and was aborted, or an old set just removed); nothing otherwise.
absl::Status RemoveIfEmpty(const CheckpointRoot& root, std::string dir) {
  while (!dir.empty() && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : dir.substr(0, slash);
  const std::string name = slash == std::string::npos ? dir : dir.substr(slash + 1);
  if (name.empty() || name == ".") return absl::OkStatus();
  absl::StatusOr<ConfinedDirectory> above = root.OpenDirectory(parent, /*create=*/false);
  if (!above.ok()) return above.status();
  const absl::Status removed = above->RemoveEmptySubdirectory(name);
  return absl::IsFailedPrecondition(removed) ? absl::OkStatus() : removed;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> Controller::SplitFields(absl::string_view body, size_t n,
                                                                 absl::string_view usage) {
  std::vector<std::string> fields = absl::StrSplit(body, absl::MaxSplits(' ', n - 1));
  if (fields.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("command body \"", body.substr(0, 80), "\" is not \"", usage, "\""));
  }
  return fields;
}

absl::StatusOr<int64_t> Controller::CutRound(const std::vector<std::string>& fields) {
  int64_t round = 0;
  if (!absl::SimpleAtoi(fields[1], &round)) {
    return absl::InvalidArgumentError(absl::StrCat("not a round: ", fields[1]));
  }
  absl::MutexLock lock(&cut_mu_);
  if (cut_id_ != fields[0]) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", fields[0], " is not being cut here (", cut_id_, " is)"));
  }
  return round;
}

absl::StatusOr<std::string> Controller::RunCut(int head, absl::string_view body) {
  switch (head) {
    case kCommandCutBegin: {
      const std::string id(absl::StripAsciiWhitespace(body));
      ASSIGN_OR_RETURN(int64_t started, engine_->cuts().Begin());
      absl::MutexLock lock(&cut_mu_);
      cut_id_ = id;
      return absl::StrCat(started);
    }
    case kCommandCutLimit: {
      ASSIGN_OR_RETURN(std::vector<std::string> f, SplitFields(body, 2, "ID ROUND"));
      ASSIGN_OR_RETURN(const int64_t round, CutRound(f));
      RETURN_IF_ERROR(engine_->cuts().Limit(round));
      return std::string("limited");
    }
    case kCommandCutWrite:
      return CutWrite(body);
    case kCommandCutCommit: {
      ASSIGN_OR_RETURN(const ConfinedDirectory directory,
                       CheckpointDirectory(std::string(body), /*create=*/false));
      {
        absl::MutexLock lock(&cut_mu_);
        cut_committed_ = true;
      }
      RETURN_IF_ERROR(directory.RemoveFile(kManifestFileName));
      RETURN_IF_ERROR(directory.RenameFile(PendingFileName(rank_), CheckpointFileName(rank_)));
      return directory.PathOf(CheckpointFileName(rank_));
    }
    case kCommandCutPublish:
      return CutPublish(body);
    case kCommandCutAbort:
      return CutAbort(body);
    default:
      return absl::InvalidArgumentError(absl::StrCat("not a checkpoint command: ", head));
  }
}

absl::StatusOr<std::string> Controller::CutWrite(absl::string_view body) {
  ASSIGN_OR_RETURN(std::vector<std::string> f, SplitFields(body, 4, "ID ROUND JOB DIR"));
  ASSIGN_OR_RETURN(const int64_t round, CutRound(f));
  const std::string lagging = engine_->cuts().Lagging();
  if (!lagging.empty()) return absl::StrCat("waiting: ", lagging);
  ASSIGN_OR_RETURN(const ConfinedDirectory directory, CheckpointDirectory(f[3], /*create=*/true));
  RETURN_IF_ERROR(directory.CheckNotLink(CheckpointFileName(rank_)));
  RETURN_IF_ERROR(directory.CheckNotLink(kManifestFileName));
  ASSIGN_OR_RETURN(EngineSnapshot snapshot, engine_->state().Snapshot());
  {
    absl::MutexLock lock(&cut_mu_);
    cut_dir_ = f[3];
    cut_committed_ = false;
  }
  // The cut is in memory: the held pushes go on while the file is written.
  engine_->cuts().End();
  proto::ShardCheckpoint checkpoint = MakeCheckpoint(snapshot);
  checkpoint.set_job_id(f[2]);
  checkpoint.set_checkpoint_id(f[0]);
  checkpoint.set_round(engine_->sync() ? round : -1);
  ASSIGN_OR_RETURN(const std::string payload, EncodeShard(std::move(checkpoint)));
  RETURN_IF_ERROR(
      directory.WriteStateFile(PendingFileName(rank_), StateKind::kShardCheckpoint, payload)
          .status());
  return absl::StrCat("written ", payload.size(), " ", Crc32(payload));
}

absl::StatusOr<std::string> Controller::CutPublish(absl::string_view body) {
  const size_t newline = body.find('\n');
  if (newline == absl::string_view::npos) {
    return absl::InvalidArgumentError("publish: the body is not \"DIR\\nMANIFEST\"");
  }
  proto::CheckpointManifest manifest;
  const absl::string_view bytes = body.substr(newline + 1);
  if (!manifest.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("publish: the manifest does not parse");
  }
  ASSIGN_OR_RETURN(const ConfinedDirectory directory,
                   CheckpointDirectory(std::string(body.substr(0, newline)), false));
  ASSIGN_OR_RETURN(std::string written,
                   directory.WriteStateFile(kManifestFileName, StateKind::kCheckpointManifest,
                                            manifest.SerializeAsString()));
  absl::MutexLock lock(&cut_mu_);
  if (cut_id_ == manifest.checkpoint_id()) {
    cut_id_.clear();
    cut_dir_.clear();
    cut_committed_ = false;
  }
  proto::PublishedCheckpoint set;
  set.set_checkpoint_id(manifest.checkpoint_id());
  set.set_dir(std::string(body.substr(0, newline)));
  set.set_round(manifest.round());
  published_.push_back(std::move(set));
  while (published_.size() > kPublishedKept) published_.pop_front();
  return written;
}

std::vector<proto::PublishedCheckpoint> Controller::published() const {
  absl::MutexLock lock(&cut_mu_);
  return std::vector<proto::PublishedCheckpoint>(published_.begin(), published_.end());
}

absl::StatusOr<std::string> Controller::AbandonCut() {
  std::string copy_id, cut_id, dir;
  bool committed = false;
  {
    absl::MutexLock lock(&cut_mu_);
    copy_id = copy_id_;
    cut_id.swap(cut_id_);
    dir.swap(cut_dir_);
    committed = cut_committed_;
    cut_committed_ = false;
  }
  std::vector<std::string> ended;
  if (!copy_id.empty()) {
    RETURN_IF_ERROR(CopyOutEnd("abort", "abort " + copy_id).status());
    ended.push_back(absl::StrCat("the shard copy ", copy_id));
  }
  // A rescale's parts received or merged here: the next rescale starts from none.
  if (const std::string unstaged = RescaleIn("unstage", "unstage").value();
      unstaged != "unstaged 0 parts") {
    ended.push_back(absl::StrCat("the parts of a rescale (", unstaged, ")"));
  }
  if (!cut_id.empty()) {
    engine_->cuts().End();
    ended.push_back(absl::StrCat("the cut of checkpoint ", cut_id));
  }
  if (!dir.empty()) {
    ASSIGN_OR_RETURN(const ConfinedDirectory directory, CheckpointDirectory(dir, false));
    if (committed) {
      RETURN_IF_ERROR(RemoveCheckpointSetFiles(directory, rank_));
    } else {
      RETURN_IF_ERROR(directory.RemoveFile(PendingFileName(rank_)));
    }
    RETURN_IF_ERROR(RemoveIfEmpty(*checkpoint_root_, dir));
    ended.push_back(absl::StrCat("its unpublished file", committed ? "s" : "", " in ", dir));
  }
  return absl::StrJoin(ended, ", ");
}

absl::StatusOr<std::string> Controller::CutAbort(absl::string_view body) {
  if (absl::ConsumePrefix(&body, "remove ")) {
    const std::string dir(body);
    {
      absl::MutexLock lock(&cut_mu_);
      published_.erase(std::remove_if(published_.begin(), published_.end(),
                                      [&dir](const proto::PublishedCheckpoint& set) {
                                        return set.dir() == dir;
                                      }),
                       published_.end());
    }
    ASSIGN_OR_RETURN(const ConfinedDirectory directory, CheckpointDirectory(dir, false));
    RETURN_IF_ERROR(RemoveCheckpointSetFiles(directory, rank_));
    // The directory itself, once empty (servers sharing it: the last one removes it).
    RETURN_IF_ERROR(RemoveIfEmpty(*checkpoint_root_, dir));
    return absl::StrCat("removed ", directory.path());
  }
  ASSIGN_OR_RETURN(std::vector<std::string> f, SplitFields(body, 2, "ID DIR"));
  {
    absl::MutexLock lock(&cut_mu_);
    if (cut_id_ == f[0]) {
      cut_id_.clear();
      cut_dir_.clear();
      cut_committed_ = false;
    }
  }
  engine_->cuts().End();
  absl::StatusOr<ConfinedDirectory> directory = CheckpointDirectory(f[1], false);
  if (directory.ok()) {
    RETURN_IF_ERROR(directory->RemoveFile(PendingFileName(rank_)));
    RETURN_IF_ERROR(RemoveIfEmpty(*checkpoint_root_, f[1]));
  }
  return std::string("aborted");
}

}  // namespace kvstore
