// ServerFailover: a server restarted into the running job (ReplaceServer), the registrations
// held until the server they replace counts as dead, and the data loss the workers are told of.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/scheduler/core/server_failover.h"

namespace kvstore {

std::optional<Registration> ServerFailover::ReplaceServer(int rank, const std::string& address,
                                                          const std::string& hostname,
                                                          absl::Time now) {
  NodeInfo* old = core_.nodes_.ServerOfRank(rank);
  if (old == nullptr || HeardFrom(*old, now)) return std::nullopt;  // Alive.
  const int64_t replaced_round = old->max_round;
  NodeInfo& node = core_.nodes_.TakeOver(*old, address, hostname, now);
  node.replaced_round = replaced_round;
  Registration registration = RegistrationOf(node);
  registration.replaced_address = node.replaced_address;
  return registration;
}

void ServerFailover::HoldReplacement(const NodeInfo& holder, int rank, std::string address,
                                     std::string hostname, absl::Time now, RegisterDone done) {
  spdlog::info(
      "a kvserver at {} asks for server rank {}, held by node {} at {}, which answered a "
      "heartbeat {} ago; waiting up to {} for it to be silent for {} (dead) before the new one "
      "takes the rank",
      address, rank, holder.node_id, holder.address,
      absl::FormatDuration(absl::Trunc(now - holder.last_heartbeat, absl::Milliseconds(1))),
      absl::FormatDuration(ReplacementWait()),
      absl::FormatDuration(2 * core_.options_.heartbeat_interval));
  pending_replacements_.push_back(PendingReplacement{rank, std::move(address), std::move(hostname),
                                                     now + ReplacementWait(), std::move(done)});
}

void ServerFailover::RetryReplacements(absl::Time now,
                                       std::vector<std::pair<RegisterDone, Registration>>* replaced,
                                       std::vector<std::pair<RegisterDone, absl::Status>>* failed) {
  core_.mu_.AssertHeld();
  for (auto it = pending_replacements_.begin(); it != pending_replacements_.end();) {
    PendingReplacement& pending = *it;
    if (core_.ShutdownLocked()) {
      failed->emplace_back(std::move(pending.done),
                           absl::AbortedError("the job is over; no server joins it any more"));
      it = pending_replacements_.erase(it);
      continue;
    }
    const NodeInfo* holder = core_.nodes_.ServerOfRank(pending.rank);
    std::optional<Registration> registration;
    if (holder == nullptr || !HeardFrom(*holder, now)) {
      if (core_.options_.replicas > 1) {
        // Its shards live on in their other copies: the replacement copies them (JoinServer).
        absl::StatusOr<Registration> joined =
            JoinServer(pending.rank, pending.address, pending.hostname, now);
        if (!joined.ok()) {
          failed->emplace_back(std::move(pending.done), joined.status());
          it = pending_replacements_.erase(it);
          continue;
        }
        registration = *std::move(joined);
      } else {
        registration = ReplaceServer(pending.rank, pending.address, pending.hostname, now);
      }
    }
    if (registration.has_value()) {
      spdlog::info("the kvserver at {} takes server rank {} (node {})", pending.address,
                   pending.rank, registration->node_id);
      replaced->emplace_back(std::move(pending.done), *std::move(registration));
      it = pending_replacements_.erase(it);
      continue;
    }
    if (now > pending.deadline) {
      failed->emplace_back(
          std::move(pending.done),
          absl::FailedPreconditionError(absl::StrCat(
              "server rank ", pending.rank, " is alive",
              holder == nullptr
                  ? std::string()
                  : absl::StrCat(" (node ", holder->node_id, " at ", holder->address,
                                 " answered a heartbeat ",
                                 absl::FormatDuration(absl::Trunc(now - holder->last_heartbeat,
                                                                  absl::Milliseconds(1))),
                                 " ago)"),
              ": waited ", absl::FormatDuration(ReplacementWait()),
              " for it to stop; a second kvserver cannot take its rank")));
      it = pending_replacements_.erase(it);
      continue;
    }
    ++it;
  }
}

Registration ServerFailover::RegistrationOf(const NodeInfo& node) const {
  Registration registration;
  registration.node_id = node.node_id;
  registration.rank = node.rank;
  registration.view = core_.ViewLocked();  // view() takes the lock itself.
  registration.join_epoch = node.joining ? node.join_epoch : 0;
  return registration;
}

std::vector<LostUpdates> ServerFailover::data_loss() const {
  absl::ReaderMutexLock lock(&core_.mu_);
  return data_loss_;
}

void ServerFailover::ProgressLines(std::vector<std::string>* lines) const {
  core_.mu_.AssertReaderHeld();
  for (const PendingReplacement& pending : pending_replacements_) {
    const NodeInfo* holder = core_.nodes_.ServerOfRank(pending.rank);
    lines->push_back(absl::StrCat(
        "the kvserver at ", pending.address, " waits to take server rank ", pending.rank,
        holder == nullptr ? std::string()
                          : absl::StrCat(" from node ", holder->node_id, " at ", holder->address),
        " once that one has been silent for ",
        absl::FormatDuration(2 * core_.options_.heartbeat_interval), " (dead)"));
  }
}

}  // namespace kvstore
