#include "server/scheduler/core/server_joiner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

absl::StatusOr<int64_t> ServerJoiner::FreezeCopy(int shard, const std::string& id) {
  absl::StatusOr<std::string> reply = to_shard_(shard, kCommandCutBegin, id);
  int64_t round = 0;
  if (reply.ok() && !absl::SimpleAtoi(*reply, &round)) {
    reply = absl::InternalError(absl::StrCat("replied \"", *reply, "\" for its round"));
  }
  if (!reply.ok()) return Step(absl::StrCat("copying shard ", shard), reply.status());
  return round;
}

absl::Status ServerJoiner::LimitCopy(int shard, const std::string& id, int64_t round) {
  const absl::StatusOr<std::string> reply =
      to_shard_(shard, kCommandCutLimit, absl::StrCat(id, " ", round));
  if (!reply.ok()) return Step(absl::StrCat("copying shard ", shard), reply.status());
  return absl::OkStatus();
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
  // "copied BYTES CRC32 HEAD": a stream, its header HEAD bytes long (server/core/shard_stream.h).
  if (f.size() != 4 || !absl::SimpleAtoi(f[1], &bytes)) {
    return absl::InternalError(absl::StrCat(what, ": the copy was answered \"", copied, "\""));
  }
  // The server holding the living copy sends it to the new server itself; the new server
  // takes pages from that server only.
  absl::StatusOr<ServerFailover::ShardCopy> holder = core_->failover().LivingCopy(shard);
  if (!holder.ok()) return Step(what, holder.status());
  absl::StatusOr<std::string> reply =
      to_address_(address, backup, kCommandCopyIn,
                  absl::StrCat("begin ", bytes, " ", holder->server.node_id, " ", f[3]));
  if (!reply.ok()) return Step(absl::StrCat(what, " into the new server"), reply.status());
  reply = to_shard_(shard, kCommandCopyOut,
                    absl::StrCat("send ", id, " ", address, " ", backup ? 1 : 0));
  if (!reply.ok()) return Step(what, reply.status());
  const absl::Duration sent = absl::Now() - started;
  reply = to_address_(address, backup, kCommandCopyIn, absl::StrCat("load ", f[1], " ", f[2]));
  if (!reply.ok()) return Step(absl::StrCat(what, " into the new server"), reply.status());
  const absl::Duration took = absl::Now() - started;
  spdlog::info(
      "join: shard {} ({} bytes, every key at round {}) copied from server {} into the server "
      "at {} in {} ({:.0f} MB/s; sent in {}, {:.0f} MB/s): {}",
      shard, bytes, round, holder->server.rank, address, absl::FormatDuration(took),
      bytes / std::max(absl::ToDoubleSeconds(took), 1e-9) / 1e6, absl::FormatDuration(sent),
      bytes / std::max(absl::ToDoubleSeconds(sent), 1e-9) / 1e6, *reply);
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
    absl::StatusOr<int64_t> round = FreezeCopy(shard, ids.back());
    status = round.status();
    if (status.ok()) rounds.push_back(*round);
  }
  // Both at one round, the higher one frozen: a worker's push of that round reaches both
  // shards. Cut at different rounds, the lower one would hold the workers' pushes of the
  // higher round, which fill their windows while the other waits for the rest of them.
  const int64_t cut_round = rounds.empty() ? 0 : *std::max_element(rounds.begin(), rounds.end());
  for (size_t i = 0; i < rounds.size() && status.ok(); ++i) {
    rounds[i] = cut_round;
    status = LimitCopy(shards[i].first, ids[i], cut_round);
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
  if (status.ok()) {
    // Both copies move at once: one's load overlaps the other's sending.
    std::vector<absl::Status> moved(shards.size());
    std::vector<std::thread> movers;
    for (size_t i = 1; i < shards.size(); ++i) {
      movers.emplace_back([&, i] {
        moved[i] =
            MoveCopy(shards[i].first, ids[i], rounds[i], copied[i], address, shards[i].second);
      });
    }
    moved[0] = MoveCopy(shards[0].first, ids[0], rounds[0], copied[0], address, shards[0].second);
    for (std::thread& mover : movers) mover.join();
    for (const absl::Status& one : moved) status.Update(one);
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
