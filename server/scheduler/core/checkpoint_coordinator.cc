#include "server/scheduler/core/checkpoint_coordinator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/partitioner.h"
#include "common/server_commands.h"
#include "common/state_file.h"
#include "common/status_macros.h"
#include "proto/kvstore.pb.h"

namespace kvstore {
namespace {}  // namespace

CheckpointCoordinator::CheckpointCoordinator(CheckpointCoordinatorOptions options, ServerCall call,
                                             View view, Ready ready)
    : options_(std::move(options)),
      call_(std::move(call)),
      view_(std::move(view)),
      ready_(std::move(ready)) {
  thread_ = std::thread([this] { Loop(); });
}

CheckpointCoordinator::~CheckpointCoordinator() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void CheckpointCoordinator::Request(std::string dir, Done done) {
  absl::MutexLock lock(&mu_);
  queue_.push_back({std::move(dir), std::move(done), nullptr});
}

void CheckpointCoordinator::RunExclusive(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back({"", nullptr, std::move(task)});
}

void CheckpointCoordinator::Loop() {
  for (;;) {
    Pending pending;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.AwaitWithTimeout(absl::Condition(&wake), absl::Milliseconds(100));
      if (stop_) {
        for (Pending& p : queue_) {
          if (!p.done) continue;
          p.done(absl::CancelledError("the scheduler stopped before the checkpoint ran"));
        }
        queue_.clear();
        return;
      }
      if (!queue_.empty()) {
        pending = std::move(queue_.front());
        queue_.pop_front();
      }
      // Before Periodic asks whether the job still runs: a job that ends after that answer
      // sees the coordinator busy (SchedulerCore::SetServersBusy).
      busy_ = true;
    }
    if (pending.task) {
      pending.task();
    } else if (pending.done) {
      pending.done(Checkpoint(pending.dir));
    } else {
      Periodic();
    }
    busy_ = false;
  }
}

absl::StatusOr<int64_t> CheckpointCoordinator::MaxRound(int num_servers) {
  return HighestRound(num_servers, kCommandMaxRound, "");
}

absl::StatusOr<int64_t> CheckpointCoordinator::HighestRound(int num_servers, int head,
                                                            const std::string& body) {
  int64_t max_round = 0;
  for (int rank = 0; rank < num_servers; ++rank) {
    ASSIGN_OR_RETURN(std::string reply, call_(rank, head, body));
    int64_t round = 0;
    if (!absl::SimpleAtoi(reply, &round)) {
      return absl::InternalError(
          absl::StrCat("server ", rank, " replied \"", reply, "\" for its round"));
    }
    max_round = std::max(max_round, round);
  }
  return max_round;
}

void CheckpointCoordinator::Resume() {
  if (!resumed_) return;
  std::optional<std::vector<PublishedCheckpoint>> sets = resumed_();
  if (!sets.has_value()) return;
  const std::string periodic = absl::StrCat(options_.prefix, "/ckpt-");
  for (const PublishedCheckpoint& set : *sets) {
    int64_t n = 0;
    const size_t dash = set.id.rfind('-');
    if (dash != std::string::npos && absl::SimpleAtoi(set.id.substr(dash + 1), &n)) {
      sequence_ = std::max(sequence_, n);
    }
    if (absl::StartsWith(set.dir, periodic) &&
        absl::SimpleAtoi(set.dir.substr(periodic.size()), &n)) {
      periodic_count_ = std::max(periodic_count_, n);
      if (std::find(kept_.begin(), kept_.end(), set.dir) == kept_.end()) kept_.push_back(set.dir);
    }
    last_round_ = std::max(last_round_, set.round);
  }
  spdlog::info(
      "checkpoints: the re-formed job had published {} sets; ids go on after {}, periodic sets "
      "after ckpt-{:06d}, rounds counted from {}",
      sets->size(), sequence_, periodic_count_, last_round_);
}

void CheckpointCoordinator::Periodic() {
  Resume();
  if (options_.every_rounds <= 0 && options_.every_time <= absl::ZeroDuration()) return;
  absl::StatusOr<ClusterView> view = view_();
  if (!view.ok() || !ready_()) {
    last_time_ = absl::Now();
    return;
  }
  bool due =
      options_.every_time > absl::ZeroDuration() && absl::Now() - last_time_ >= options_.every_time;
  if (!due && options_.every_rounds > 0) {
    absl::StatusOr<int64_t> round = MaxRound(view->num_servers);
    if (!round.ok()) return;
    due = *round - last_round_ >= options_.every_rounds;
  }
  if (!due) return;
  char name[32];
  std::snprintf(name, sizeof(name), "ckpt-%06lld", static_cast<long long>(++periodic_count_));
  const std::string dir = absl::StrCat(options_.prefix, "/", name);
  last_time_ = absl::Now();
  absl::StatusOr<std::vector<std::string>> written = Checkpoint(dir);
  if (!written.ok()) {
    spdlog::error("periodic checkpoint into {} failed: {}", dir, written.status().ToString());
    return;
  }
  kept_.push_back(dir);
  while (options_.keep > 0 && static_cast<int>(kept_.size()) > options_.keep) {
    const std::string old = kept_.front();
    kept_.pop_front();
    for (int rank = 0; rank < view->num_servers; ++rank) {
      absl::StatusOr<std::string> removed = call_(rank, kCommandCutAbort, "remove " + old);
      if (!removed.ok()) {
        spdlog::warn("removing the old checkpoint {}: {}", old, removed.status().ToString());
      }
    }
  }
}

void CheckpointCoordinator::Abort(int num_servers, const std::string& id, const std::string& dir,
                                  bool committed) {
  for (int rank = 0; rank < num_servers; ++rank) {
    absl::StatusOr<std::string> aborted = call_(rank, kCommandCutAbort, absl::StrCat(id, " ", dir));
    if (committed && aborted.ok()) aborted = call_(rank, kCommandCutAbort, "remove " + dir);
    if (!aborted.ok()) {
      spdlog::warn("checkpoint {}: aborting on server {}: {}", id, rank,
                   aborted.status().ToString());
    }
  }
}

absl::Status CheckpointCoordinator::WriteFile(int rank, const std::string& id, int64_t round,
                                              const std::string& dir, absl::Time deadline,
                                              proto::CheckpointManifest* manifest) {
  for (;;) {
    ASSIGN_OR_RETURN(const std::string reply,
                     call_(rank, kCommandCutWrite,
                           absl::StrCat(id, " ", round, " ", manifest->job_id(), " ", dir)));
    if (absl::StartsWith(reply, "written ")) {
      std::vector<std::string> f = absl::StrSplit(reply, ' ');
      uint64_t bytes = 0;
      uint32_t crc = 0;
      if (f.size() != 3 || !absl::SimpleAtoi(f[1], &bytes) || !absl::SimpleAtoi(f[2], &crc)) {
        return absl::InternalError(
            absl::StrCat("server ", rank, " replied \"", reply, "\" to the write"));
      }
      proto::CheckpointManifest::File* file = manifest->add_files();
      file->set_name(absl::StrCat("server-", rank, ".ckpt"));
      file->set_rank(rank);
      file->set_payload_bytes(bytes);
      file->set_payload_crc32(crc);
      return absl::OkStatus();
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "checkpoint ", id, " into ", dir, ": server ", rank, " did not reach round ", round,
          " within ", absl::FormatDuration(options_.cut_timeout), ": ", reply,
          " (a checkpoint cuts every key at one round: keys pushed less often than the "
          "others hold it back)"));
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
}

absl::StatusOr<std::vector<std::string>> CheckpointCoordinator::Checkpoint(const std::string& dir) {
  Resume();
  const std::string trimmed(absl::StripAsciiWhitespace(dir));
  if (trimmed.empty()) {
    return absl::InvalidArgumentError("checkpoint: name a directory below the servers' roots");
  }
  ASSIGN_OR_RETURN(const ClusterView view, view_());
  // The job's id names the job in every manifest and server file.
  const std::string id = absl::StrCat(view.job_id, "-", ++sequence_);
  const int num_servers = view.num_servers;
  const absl::Time started = absl::Now();
  bool committed = false;
  auto fail = [&](absl::Status status) -> absl::Status {
    Abort(num_servers, id, trimmed, committed);
    spdlog::warn("checkpoint {} into {} refused: {}", id, trimmed, status.ToString());
    return status;
  };
  // 1. Freeze every server; the cut's round is the highest any has started.
  const absl::StatusOr<int64_t> frozen = HighestRound(num_servers, kCommandCutBegin, id);
  if (!frozen.ok()) return fail(frozen.status());
  const int64_t round = *frozen;
  // 2. Let every key go on up to that round, and no further.
  for (int rank = 0; rank < num_servers; ++rank) {
    absl::StatusOr<std::string> reply = call_(rank, kCommandCutLimit, absl::StrCat(id, " ", round));
    if (!reply.ok()) return fail(reply.status());
  }
  // 3. Each server writes its file once its keys are there.
  proto::CheckpointManifest manifest;
  manifest.set_job_id(view.job_id);
  manifest.set_checkpoint_id(id);
  manifest.set_round(view.mode == "dist_async" ? -1 : round);
  manifest.set_num_servers(num_servers);
  manifest.set_mode(view.mode);
  manifest.set_chunk_bytes(view.chunk_bytes);
  manifest.set_placement(kPlacement);
  const absl::Time deadline = started + options_.cut_timeout;
  for (int rank = 0; rank < num_servers; ++rank) {
    const absl::Status written = WriteFile(rank, id, round, trimmed, deadline, &manifest);
    if (!written.ok()) return fail(written);
  }
  // 4. and 5. Put the files in place, then the manifest, last.
  committed = true;
  std::vector<std::string> paths;
  for (int rank = 0; rank < num_servers; ++rank) {
    absl::StatusOr<std::string> reply = call_(rank, kCommandCutCommit, trimmed);
    if (!reply.ok()) return fail(reply.status());
    paths.push_back(*reply);
  }
  manifest.set_written_unix_ms(absl::ToUnixMillis(absl::Now()));
  const std::string body = absl::StrCat(trimmed, "\n", manifest.SerializeAsString());
  for (int rank = 0; rank < num_servers; ++rank) {
    absl::StatusOr<std::string> reply = call_(rank, kCommandCutPublish, body);
    if (!reply.ok()) return fail(reply.status());
  }
  last_round_ = std::max(last_round_, round);
  spdlog::info("checkpoint {} into {}: every key at round {} ({} servers, {})", id, trimmed, round,
               num_servers, absl::FormatDuration(absl::Now() - started));
  return paths;
}

}  // namespace kvstore
