#include "server/scheduler/core/command_fan_out.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "server/scheduler/core/server_failover.h"
namespace kvstore {
namespace {

// ShardCopy: one copy of a shard: on its own server, or a backup on the next rank's.
struct ShardCopy {
  int shard = 0;
  int server = 0;
  bool backup = false;
};

// LivingCopiesOf lists the copies of every shard on servers not in `dead`: each shard's
// primary, and in a job with replicas its backup.
std::vector<ShardCopy> LivingCopiesOf(const ClusterView& view, const std::vector<int>& dead) {
  const int n = static_cast<int>(view.servers.size());
  auto alive = [&](int rank) { return std::find(dead.begin(), dead.end(), rank) == dead.end(); };
  std::vector<ShardCopy> copies;
  for (int shard = 0; shard < n; ++shard) {
    if (alive(shard)) copies.push_back({shard, shard, false});
    if (view.replicas > 1 && alive((shard + 1) % n)) {
      copies.push_back({shard, (shard + 1) % n, true});
    }
  }
  return copies;
}

}  // namespace

void CommandFanOut::FanOut(int head, const std::string& body, Replies done) {
  absl::StatusOr<ClusterView> view = core_->view();
  if (!view.ok()) return done(view.status());
  const std::vector<ShardCopy> copies = LivingCopiesOf(*view, core_->failover().dead_servers());
  if (copies.empty()) return done(absl::UnavailableError("no server of the job is alive"));
  // The last reply answers, with each shard's reply from its first living copy: primaries'
  // replies first, then backups'.
  struct State {
    absl::Mutex mu;
    int remaining = 0;
    std::vector<std::string> replies;
    absl::Status first_error;
    Replies done;
  };
  auto state = std::make_shared<State>();
  const size_t num_shards = view->servers.size();
  state->remaining = static_cast<int>(copies.size());
  state->replies.resize(2 * num_shards);
  state->done = std::move(done);
  for (const ShardCopy& copy : copies) {
    const ServerEntry server = view->servers[copy.server];
    const size_t i = copy.shard + (copy.backup ? num_shards : 0);
    channel_->Send(
        server.address, copy.backup, head, body,
        [state, server, i, num_shards](absl::StatusOr<std::string> reply) {
          bool last;
          {
            absl::MutexLock lock(&state->mu);
            if (reply.ok()) {
              state->replies[i] = *std::move(reply);
            } else if (state->first_error.ok()) {
              state->first_error =
                  absl::Status(reply.status().code(),
                               absl::StrCat("server ", server.rank, " at ", server.address, ": ",
                                            reply.status().message()));
            }
            last = --state->remaining == 0;
          }
          if (!last) return;
          if (!state->first_error.ok()) return state->done(state->first_error);
          std::vector<std::string> replies;
          replies.reserve(num_shards);
          for (size_t shard = 0; shard < num_shards; ++shard) {
            replies.push_back(state->replies[shard].empty() ? state->replies[shard + num_shards]
                                                            : state->replies[shard]);
          }
          state->done(std::move(replies));
        });
  }
}

absl::StatusOr<std::string> CommandFanOut::Call(const std::string& address, bool backup, int head,
                                                const std::string& body) {
  absl::Notification finished;
  absl::StatusOr<std::string> result;
  channel_->Send(address, backup, head, body, [&](absl::StatusOr<std::string> reply) {
    result = std::move(reply);
    finished.Notify();
  });
  finished.WaitForNotification();
  return result;
}

absl::StatusOr<std::string> CommandFanOut::CallServer(int rank, int head, const std::string& body) {
  // A dead server's shard is served by its backup, on the next rank (a job with replicas).
  ASSIGN_OR_RETURN(const ServerFailover::ShardCopy copy, core_->failover().LivingCopy(rank));
  const ServerEntry& server = copy.server;
  const bool backup = copy.backup;
  absl::StatusOr<std::string> reply = Call(server.address, backup, head, body);
  if (!reply.ok()) {
    return absl::Status(reply.status().code(),
                        absl::StrCat("server ", server.rank, " at ", server.address,
                                     backup ? absl::StrCat(" (backup of shard ", rank, ")") : "",
                                     ": ", reply.status().message()));
  }
  return reply;
}

absl::StatusOr<std::string> CommandFanOut::CallAddress(const std::string& address, bool backup,
                                                       int head, const std::string& body) {
  absl::StatusOr<std::string> reply = Call(address, backup, head, body);
  if (!reply.ok()) {
    return absl::Status(reply.status().code(),
                        absl::StrCat("the server at ", address, backup ? " (its backup shard)" : "",
                                     ": ", reply.status().message()));
  }
  return reply;
}

void CommandFanOut::Pause(bool pause) {
  std::vector<std::function<void()>> held;
  {
    absl::MutexLock lock(&mu_);
    paused_ = pause;
    if (!pause) held.swap(held_);
  }
  for (auto& request : held) request();
}

bool CommandFanOut::HoldWhilePaused(std::function<void()> retry) {
  absl::MutexLock lock(&mu_);
  if (!paused_) return false;
  held_.push_back(std::move(retry));
  return true;
}

}  // namespace kvstore
