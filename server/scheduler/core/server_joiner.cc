#include "server/scheduler/core/server_joiner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/server_commands.h"
#include "common/status_macros.h"
#include "server/scheduler/core/server_failover.h"
namespace kvstore {
namespace {

absl::Status Step(absl::string_view step, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(step, ": ", status.message()));
}

}  // namespace

absl::StatusOr<int64_t> ServerJoiner::BeginCopy(int shard, const std::string& id) {
  const std::string what = absl::StrCat("copying shard ", shard);
  absl::StatusOr<std::string> reply = to_shard_(shard, kCommandCutBegin, id);
  int64_t round = 0;
  if (reply.ok() && !absl::SimpleAtoi(*reply, &round)) {
    reply = absl::InternalError(absl::StrCat("replied \"", *reply, "\" for its round"));
  }
  if (!reply.ok()) return Step(what, reply.status());
  reply = to_shard_(shard, kCommandCutLimit, absl::StrCat(id, " ", round));
  if (!reply.ok()) return Step(what, reply.status());
  return round;
}

absl::StatusOr<std::string> ServerJoiner::TakeCopy(int shard, const std::string& id, int64_t round,
                                                   uint64_t epoch, absl::Time deadline) {
  const std::string what = absl::StrCat("copying shard ", shard);
  absl::StatusOr<std::string> reply =
      to_shard_(shard, kCommandCopyOut, absl::StrCat("cut ", id, " ", round, " ", epoch));
  if (!reply.ok()) return Step(what, reply.status());
  if (absl::StartsWith(*reply, "copied ")) return reply;
  if (absl::Now() > deadline) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": its keys did not reach round ", round,
                                                    " within ", absl::FormatDuration(cut_timeout_),
                                                    ": ", *reply));
  }
  return std::string();  // Not yet.
}

absl::Status ServerJoiner::MoveCopy(int shard, const std::string& id, int64_t round,
                                    const std::string& copied, const std::string& address,
                                    bool backup) {
  const std::string what = absl::StrCat("copying shard ", shard);
  const absl::Time started = absl::Now();
  const std::vector<std::string> f = absl::StrSplit(copied, ' ');
  uint64_t bytes = 0;
  if (f.size() != 3 || !absl::SimpleAtoi(f[1], &bytes)) {
    return absl::InternalError(absl::StrCat(what, ": the copy was answered \"", copied, "\""));
  }
  absl::StatusOr<std::string> reply =
      to_address_(address, backup, kCommandCopyIn, absl::StrCat("begin ", bytes));
  if (!reply.ok()) return Step(absl::StrCat(what, " into the new server"), reply.status());
  // kPagesInFlight threads each read the next page from the living copy and put it into the
  // new server, so that the pages' round trips overlap; the first error stops them all.
  const uint64_t pages = (bytes + kPageBytes - 1) / kPageBytes;
  std::atomic<uint64_t> next{0};
  absl::Mutex mu;
  absl::Status failed;
  auto move_pages = [&] {
    for (uint64_t page = next++; page < pages; page = next++) {
      {
        absl::MutexLock lock(&mu);
        if (!failed.ok()) return;
      }
      const uint64_t offset = page * kPageBytes;
      absl::StatusOr<std::string> piece = to_shard_(
          shard, kCommandCopyOut, absl::StrCat("read ", id, " ", offset, " ", kPageBytes));
      absl::Status status = piece.status();
      if (!status.ok()) {
        status = Step(what, status);
      } else {
        status =
            to_address_(address, backup, kCommandCopyIn, absl::StrCat("put ", offset, "\n", *piece))
                .status();
        if (!status.ok()) status = Step(absl::StrCat(what, " into the new server"), status);
      }
      if (!status.ok()) {
        absl::MutexLock lock(&mu);
        if (failed.ok()) failed = status;
        return;
      }
    }
  };
  std::vector<std::thread> movers;
  for (int t = 1; t < kPagesInFlight; ++t) movers.emplace_back(move_pages);
  move_pages();
  for (std::thread& mover : movers) mover.join();
  if (!failed.ok()) return failed;
  reply = to_address_(address, backup, kCommandCopyIn, absl::StrCat("load ", f[1], " ", f[2]));
  if (!reply.ok()) return Step(absl::StrCat(what, " into the new server"), reply.status());
  const absl::Duration took = absl::Now() - started;
  spdlog::info(
      "join: shard {} ({} bytes, every key at round {}) copied into the server at {} in {} "
      "({:.0f} MB/s): {}",
      shard, bytes, round, address, absl::FormatDuration(took),
      bytes / std::max(absl::ToDoubleSeconds(took), 1e-9) / 1e6, *reply);
  return absl::OkStatus();
}

absl::Status ServerJoiner::Join(const Registration& registration, const std::string& address) {
  const int rank = registration.rank;
  const int n = registration.view.num_servers;
  const uint64_t epoch = registration.join_epoch;
  const absl::Time started = absl::Now();
  // The shard the new server holds as primary, then the one it backs up.
  const std::vector<std::pair<int, bool>> shards = {{rank, false}, {(rank + n - 1) % n, true}};
  spdlog::info(
      "join: server {} at {} (node {}) replaces the dead server of rank {}: copying "
      "shard {} from server {} and shard {} from server {}",
      rank, address, registration.node_id, rank, rank, (rank + 1) % n, shards[1].first,
      shards[1].first);
  // The new server serves once it has set itself up after registering.
  absl::Status status;
  for (;;) {
    status = to_address_(address, false, kCommandPing, "join").status();
    if (status.ok() || !absl::IsUnavailable(status) || absl::Now() - started > cut_timeout_) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (!status.ok()) status = Step("waiting for the new server to serve", status);
  const absl::Duration to_serve = absl::Now() - started;
  pause_(true);
  // Both living copies are cut first, then copied as each reaches its round: the two waits
  // for a round to complete overlap.
  std::vector<std::string> ids;
  std::vector<int64_t> rounds;
  for (const auto& [shard, backup] : shards) {
    if (!status.ok()) break;
    ids.push_back(absl::StrCat("join-", epoch, "-", shard));
    absl::StatusOr<int64_t> round = BeginCopy(shard, ids.back());
    status = round.status();
    if (status.ok()) rounds.push_back(*round);
  }
  std::vector<std::string> copied(shards.size());
  const absl::Time deadline = absl::Now() + cut_timeout_;
  for (bool waiting = status.ok(); waiting && status.ok();) {
    waiting = false;
    for (size_t i = 0; i < shards.size() && status.ok(); ++i) {
      if (!copied[i].empty()) continue;
      absl::StatusOr<std::string> reply =
          TakeCopy(shards[i].first, ids[i], rounds[i], epoch, deadline);
      status = reply.status();
      if (status.ok() && !reply->empty()) copied[i] = *reply;
      waiting |= status.ok() && copied[i].empty();
    }
    if (waiting) absl::SleepFor(absl::Milliseconds(2));
  }
  if (status.ok()) {
    spdlog::info("join: the new server served {} after registration, both copies cut {} after",
                 absl::FormatDuration(to_serve), absl::FormatDuration(absl::Now() - started));
  }
  for (size_t i = 0; i < shards.size() && status.ok(); ++i) {
    status = MoveCopy(shards[i].first, ids[i], rounds[i], copied[i], address, shards[i].second);
  }
  if (status.ok()) status = core_->failover().CompleteJoin(registration.node_id);
  for (size_t i = 0; i < ids.size(); ++i) {
    const absl::StatusOr<std::string> ended = to_shard_(
        shards[i].first, kCommandCopyOut, absl::StrCat(status.ok() ? "end " : "abort ", ids[i]));
    if (!ended.ok()) {
      spdlog::warn("join: ending the copy of shard {}: {}", shards[i].first,
                   ended.status().ToString());
    }
  }
  pause_(false);
  if (!status.ok()) {
    core_->failover().FailJoin(registration.node_id, std::string(status.message()));
    spdlog::error(
        "join: server {} at {} could not join: {}; its shards stay with their "
        "other copies",
        rank, address, status.ToString());
    return status;
  }
  spdlog::info("join: server {} at {} serves shards {} and {} again, view epoch {} ({})", rank,
               address, rank, shards[1].first, epoch, absl::FormatDuration(absl::Now() - started));
  return absl::OkStatus();
}

}  // namespace kvstore
