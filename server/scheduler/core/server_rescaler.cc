#include "server/scheduler/core/server_rescaler.h"

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

namespace kvstore {
namespace {

// Field returns the `i`th space-separated field of `reply` ("" when it has fewer).
std::string Field(const std::string& reply, size_t i) {
  const std::vector<std::string> f = absl::StrSplit(reply, ' ');
  return i < f.size() ? f[i] : std::string();
}

}  // namespace

absl::StatusOr<std::string> ServerRescaler::Call(const Engine& engine, int head,
                                                 const std::string& body, const std::string& step) {
  absl::StatusOr<std::string> reply = call_(engine.server.address, engine.backup, head, body);
  if (!reply.ok()) {
    return absl::Status(reply.status().code(),
                        absl::StrCat(step, " (", Name(engine), "): ", reply.status().message()));
  }
  return reply;
}

std::string ServerRescaler::Name(const Engine& engine) {
  return absl::StrCat("server ", engine.server.rank, " at ", engine.server.address, " (node ",
                      engine.server.node_id, ")",
                      engine.backup ? absl::StrCat(", its backup of shard ", engine.shard) : "");
}

std::vector<ServerRescaler::Engine> ServerRescaler::Engines(const std::vector<ServerEntry>& servers,
                                                            int replicas) {
  const int n = static_cast<int>(servers.size());
  std::vector<Engine> engines;
  for (const ServerEntry& server : servers) {
    engines.push_back(Engine{server, false, server.rank});
    if (replicas > 1) engines.push_back(Engine{server, true, (server.rank + n - 1) % n});
  }
  return engines;
}

absl::StatusOr<int64_t> ServerRescaler::Cut(const RescalePlan& plan, const std::string& id) {
  // Every engine is cut, the backups too (they take every write): only the primaries' copies
  // are sent.
  const std::vector<Engine> engines = Engines(plan.before, plan.replicas);
  int64_t round = 0;
  for (const Engine& engine : engines) {
    ASSIGN_OR_RETURN(const std::string reply, Call(engine, kCommandCutBegin, id, "freezing"));
    int64_t started = 0;
    if (!absl::SimpleAtoi(reply, &started)) {
      return absl::InternalError(
          absl::StrCat("freezing ", Name(engine), ": replied \"", reply, "\" for its round"));
    }
    round = std::max(round, started);
  }
  for (const Engine& engine : engines) {
    RETURN_IF_ERROR(
        Call(engine, kCommandCutLimit, absl::StrCat(id, " ", round), "limiting").status());
  }
  std::vector<bool> cut(engines.size(), false);
  const absl::Time deadline = absl::Now() + cut_timeout_;
  for (;;) {
    bool waiting = false;
    std::string behind;
    for (size_t i = 0; i < engines.size(); ++i) {
      if (cut[i]) continue;
      ASSIGN_OR_RETURN(const std::string reply,
                       Call(engines[i], kCommandCopyOut,
                            absl::StrCat("cutparts ", id, " ", round, " ", plan.epoch), "cutting"));
      cut[i] = absl::StartsWith(reply, "cut ");
      if (!cut[i]) {
        waiting = true;
        behind = absl::StrCat(Name(engines[i]), ": ", reply);
      }
    }
    if (!waiting) return round;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("cutting: the keys did not reach round ", round, " within ",
                       absl::FormatDuration(cut_timeout_), " (", behind, ")"));
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
}

absl::Status ServerRescaler::Move(const RescalePlan& plan, const std::string& id, const Engine& to,
                                  int64_t* between) {
  const int servers = static_cast<int>(plan.after.size());
  for (const ServerEntry& server : plan.before) {
    const Engine from{server, false, server.rank};
    const std::string step = absl::StrCat("moving the part of ", Name(from), " for ", Name(to));
    if (!to.backup && from.server.node_id == to.server.node_id) {
      // A server staying keeps its own part where it is.
      RETURN_IF_ERROR(Call(from, kCommandCopyOut,
                           absl::StrCat("keeppart ", id, " ", to.shard, " ", servers), step)
                          .status());
      continue;
    }
    ASSIGN_OR_RETURN(
        const std::string part,
        Call(from, kCommandCopyOut, absl::StrCat("part ", id, " ", to.shard, " ", servers), step));
    const std::string bytes = Field(part, 1), crc = Field(part, 2);
    int64_t count = 0;
    if (!absl::StartsWith(part, "part ") || !absl::SimpleAtoi(bytes, &count) || crc.empty()) {
      return absl::InternalError(absl::StrCat(step, ": the part was answered \"", part, "\""));
    }
    *between += count;
    RETURN_IF_ERROR(
        Call(to, kCommandCopyIn, absl::StrCat("begin ", bytes, " ", from.server.node_id), step)
            .status());
    RETURN_IF_ERROR(Call(from, kCommandCopyOut,
                         absl::StrCat("sendpart ", id, " ", to.shard, " ", to.server.address, " ",
                                      to.backup ? 1 : 0),
                         step)
                        .status());
    RETURN_IF_ERROR(
        Call(to, kCommandCopyIn, absl::StrCat("stage ", bytes, " ", crc), step).status());
  }
  ASSIGN_OR_RETURN(const std::string merged,
                   Call(to, kCommandCopyIn, absl::StrCat("merge ", to.shard, " ", servers),
                        absl::StrCat("merging the parts for ", Name(to))));
  spdlog::info("rescale: {}: {}", Name(to), merged);
  return absl::OkStatus();
}

absl::Status ServerRescaler::Run(const RescalePlan& plan) {
  const absl::Time started = absl::Now();
  const std::string id = absl::StrCat("rescale-", plan.epoch);
  const std::vector<Engine> before = Engines(plan.before, plan.replicas);
  const std::vector<Engine> after = Engines(plan.after, plan.replicas);
  absl::Status status;
  // A joining server serves once it has set itself up after registering.
  for (const ServerEntry& server : plan.after) {
    if (server.node_id != plan.joining) continue;
    for (;;) {
      status = call_(server.address, false, kCommandPing, "rescale").status();
      if (status.ok() || !absl::IsUnavailable(status) || absl::Now() - started > cut_timeout_) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (!status.ok()) {
      status = absl::Status(status.code(), absl::StrCat("waiting for the joining server to serve: ",
                                                        status.message()));
    }
  }
  pause_(true);
  absl::StatusOr<int64_t> round = status.ok() ? Cut(plan, id) : status;
  status = round.status();
  const absl::Time cut = absl::Now();
  int64_t between = 0;
  if (status.ok()) {
    spdlog::info("rescale: every server cut at round {} in {}; moving the parts", *round,
                 absl::FormatDuration(cut - started));
    std::vector<absl::Status> moved(after.size());
    std::vector<int64_t> moved_between(after.size());
    std::vector<std::thread> movers;
    for (size_t r = 0; r < after.size(); ++r) {
      movers.emplace_back([&, r] { moved[r] = Move(plan, id, after[r], &moved_between[r]); });
    }
    for (std::thread& mover : movers) mover.join();
    for (const absl::Status& one : moved) status.Update(one);
    for (int64_t bytes : moved_between) between += bytes;
  }
  const absl::Time merged = absl::Now();
  if (!status.ok()) {
    for (const Engine& engine : before) {
      const absl::Status ended =
          Call(engine, kCommandCopyOut, absl::StrCat("abort ", id), "aborting").status();
      if (!ended.ok()) spdlog::warn("rescale: {}", ended.ToString());
    }
    for (const Engine& engine : after) {
      const absl::Status dropped =
          Call(engine, kCommandCopyIn, "unstage", "dropping the parts staged").status();
      if (!dropped.ok()) spdlog::warn("rescale: {}", dropped.ToString());
    }
    core_->scaling().Fail(plan, std::string(status.message()));
    pause_(false);
    return status;
  }
  // From the first swap on there is no way back.
  absl::Status swapped;
  for (const Engine& engine : after) {
    swapped.Update(
        Call(engine, kCommandCopyIn, absl::StrCat("swap ", plan.epoch), "swapping").status());
  }
  for (const Engine& engine : before) {
    if (engine.server.node_id != plan.draining) continue;
    swapped.Update(
        Call(engine, kCommandCopyIn, absl::StrCat("retire ", plan.epoch), "retiring").status());
  }
  if (swapped.ok()) swapped = core_->scaling().Complete(plan, absl::Now());
  for (const Engine& engine : before) {
    const absl::Status ended =
        Call(engine, kCommandCopyOut, absl::StrCat("end ", id), "ending the copy").status();
    if (!ended.ok()) spdlog::warn("rescale: {}", ended.ToString());
  }
  pause_(false);
  if (!swapped.ok()) {
    const std::string reason =
        absl::StrCat("a rescale failed half done (", plan.what, "): ", swapped.message());
    core_->scaling().Fail(plan, reason);
    core_->FailJob(reason, absl::Now());
    return absl::InternalError(reason);
  }
  spdlog::info(
      "rescale: {} at view epoch {}, every key cut at round {}: cut in {}, moved and merged in "
      "{} ({} bytes between servers), swapped and published in {} ({} in all)",
      plan.what, plan.epoch, *round, absl::FormatDuration(cut - started),
      absl::FormatDuration(merged - cut), between, absl::FormatDuration(absl::Now() - merged),
      absl::FormatDuration(absl::Now() - started));
  return absl::OkStatus();
}

}  // namespace kvstore
