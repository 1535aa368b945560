#include "client/server_caller.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/view_epoch.h"
#include "common/wire_frame.h"
#include "proto/kvstore.pb.h"

namespace kvstore {

std::vector<ServerAddress> ReplicaTargets(const std::vector<ServerAddress>& servers, int replicas) {
  std::vector<ServerAddress> targets = servers;
  if (replicas < 2 || servers.empty()) return targets;
  const size_t n = servers.size();
  for (size_t p = 0; p < n; ++p) {
    const ServerAddress& holder = servers[(p + 1) % n];
    targets.push_back(ServerAddress{static_cast<int>(p), holder.address, true, holder.local_socket,
                                    holder.local_host});
  }
  return targets;
}

ServerCaller::ServerCaller(ServerTransport* transport, std::vector<ServerAddress> servers,
                           CallPolicy policy, Timer* timer)
    : transport_(transport),
      num_servers_(static_cast<int>(servers.size())),
      policy_(policy),
      timer_(timer),
      targets_(ReplicaTargets(servers, policy.replicas)),
      dead_(new std::atomic<bool>[servers.size()]) {
  for (size_t i = 0; i < servers.size(); ++i) dead_[i] = false;
}

std::string ServerCaller::AddressOf(int t) const {
  absl::MutexLock lock(&view_mu_);
  return targets_[t].address;
}

std::shared_ptr<const grpc::ByteBuffer> ServerCaller::Signed(
    int t, ServerMethod method, const std::shared_ptr<const grpc::ByteBuffer>& request,
    uint64_t epoch) const {
  if (signer_ == nullptr) return request;
  const std::string receiver = AddressOf(t);
  return std::make_shared<const grpc::ByteBuffer>(
      signer_->Sign({method, t >= num_servers(), receiver, epoch}, *request));
}

void ServerCaller::MarkDead(int rank, uint64_t epoch) {
  absl::MutexLock lock(&view_mu_);
  if (rank >= 0 && rank < num_servers() && epoch == view_epoch()) dead_[rank] = true;
}

void ServerCaller::Supersede(uint64_t epoch) {
  uint64_t held = superseded_.load(std::memory_order_acquire);
  while (held < epoch && !superseded_.compare_exchange_weak(held, epoch)) {
  }
}

bool ServerCaller::IsDead(int rank) const { return dead_[rank].load(std::memory_order_acquire); }

void ServerCaller::ApplyView(uint64_t epoch, const std::vector<ServerAddress>& servers,
                             const std::vector<int>& dead) {
  absl::MutexLock lock(&view_mu_);
  const uint64_t held = view_epoch();
  if (epoch < held) return;
  if (epoch > held) {
    for (const ServerAddress& server : servers) {
      const int rank = server.rank;
      if (rank < 0 || rank >= num_servers() || targets_[rank].address == server.address) continue;
      // The server's own shard, and with replicas the backup it holds of the previous one.
      std::vector<int> moved = {TargetOf(rank, 0)};
      if (policy_.replicas > 1) {
        moved.push_back(TargetOf((rank + num_servers() - 1) % num_servers(), 1));
      }
      for (int t : moved) {
        const absl::Status retargeted = transport_->Retarget(t, server.address);
        if (!retargeted.ok()) continue;  // Its requests keep failing, naming the old address.
        targets_[t].address = server.address;
      }
    }
    for (int r = 0; r < num_servers(); ++r) {
      dead_[r].store(std::find(dead.begin(), dead.end(), r) != dead.end(),
                     std::memory_order_release);
    }
    view_epoch_.store(epoch, std::memory_order_release);
    return;
  }
  for (int r : dead) {
    if (r >= 0 && r < num_servers()) dead_[r].store(true, std::memory_order_release);
  }
}

absl::Status ServerCaller::ServerError(int t, const absl::Status& status) const {
  absl::MutexLock lock(&view_mu_);
  const ServerAddress& target = targets_[t];
  if (target.backup) {
    return absl::Status(status.code(),
                        absl::StrCat("server ", ServerOf(t), " at ", target.address,
                                     " (backup of shard ", target.rank, "): ", status.message()));
  }
  return absl::Status(status.code(), absl::StrCat("server ", target.rank, " at ", target.address,
                                                  ": ", status.message()));
}

bool ServerCaller::NoLivingCopy(int s) const {
  for (int c = 0; c < policy_.replicas; ++c) {
    if (!IsDead(ServerOf(TargetOf(s, c)))) return false;
  }
  return true;
}

absl::Status ServerCaller::AllCopiesDead(int s) const {
  const int next = (s + 1) % num_servers();
  return absl::UnavailableError(absl::StrCat(
      "shard ", s, " has no living copy: servers ", s, " at ", AddressOf(TargetOf(s, 0)), " and ",
      next, " at ", AddressOf(TargetOf(next, 0)), " are both dead"));
}

void ServerCaller::Call(int s, ServerMethod method, std::shared_ptr<const grpc::ByteBuffer> request,
                        ServerTransport::Done done) {
  if (observer_) {
    const size_t request_bytes = request->Length();
    done = [this, s, method, request_bytes, sent = absl::Now(), done = std::move(done)](
               absl::Status status, grpc::ByteBuffer* reply) {
      observer_(s, method, request_bytes, reply != nullptr ? reply->Length() : 0, sent, absl::Now(),
                status.code());
      done(std::move(status), reply);
    };
  }
  if (policy_.replicas < 2) {
    // Routed by the view the caller was made for (0 until the job's servers change).
    Attempt(s, method, std::move(request), view_epoch(), std::move(done), 0);
  } else {
    Route(s, method, std::move(request), std::move(done), 0);
  }
}

void ServerCaller::Route(int s, ServerMethod method,
                         std::shared_ptr<const grpc::ByteBuffer> request,
                         ServerTransport::Done done, int reroutes) {
  // The epoch first: the copies chosen below are those of this view or a later one.
  const uint64_t epoch = view_epoch();
  ServerTransport::Done rerouted = [this, s, method, request, done, reroutes, epoch](
                                       absl::Status status, grpc::ByteBuffer* reply) {
    const std::optional<uint64_t> needed = RequiredViewEpoch(status);
    if (!needed.has_value() && !status.ok() && reroutes < kMaxReroutes && view_refresh_ &&
        NoLivingCopy(s)) {
      // Every copy is dead in this view: a replacement may have joined since. Ask once.
      timer_->After(absl::ZeroDuration(),
                    [this, s, method, request, done, reroutes, epoch, status = std::move(status)] {
                      view_refresh_().IgnoreError();
                      if (view_epoch() > epoch)
                        return Route(s, method, request, done, reroutes + 1);
                      done(status, nullptr);
                    });
      return;
    }
    if (!needed.has_value() || reroutes >= kMaxReroutes) return done(std::move(status), reply);
    // A copy refused it as routed by an old view: learn the new one (off this thread: it
    // blocks), then send it again, to the copies of that view.
    timer_->After(absl::ZeroDuration(), [this, s, method, request, done, reroutes, needed = *needed,
                                         status = std::move(status)] {
      const absl::Status learned = AwaitView(needed);
      if (!learned.ok()) {
        return done(absl::Status(learned.code(), absl::StrCat(learned.message(),
                                                              " (after: ", status.message(), ")")),
                    nullptr);
      }
      Route(s, method, request, done, reroutes + 1);
    });
  };
  if (Mutates(method)) {
    CallEveryCopy(s, method, std::move(request), epoch, std::move(rerouted));
  } else {
    CallOneCopy(s, 0, method, std::move(request), epoch, std::move(rerouted));
  }
}

absl::Status ServerCaller::AwaitView(uint64_t epoch) {
  const absl::Time give_up = absl::Now() + policy_.rpc_timeout;
  absl::Status asked;
  while (view_epoch() < epoch) {
    if (superseded_.load(std::memory_order_acquire) >= epoch) {
      // A view of other servers: the request's placement is void; its sender places it anew.
      return StaleViewError(view_epoch(), epoch);
    }
    if (absl::Now() >= give_up) {
      return absl::DeadlineExceededError(absl::StrCat(
          "waited ", absl::FormatDuration(policy_.rpc_timeout),
          " for the scheduler to publish "
          "view epoch ",
          epoch, " (a replacement server joining the job); this worker has epoch ", view_epoch(),
          asked.ok() ? "" : absl::StrCat("; asking: ", asked.message())));
    }
    if (view_refresh_) asked = view_refresh_();
    if (view_epoch() < epoch) absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

void ServerCaller::CallOneCopy(int s, int c, ServerMethod method,
                               std::shared_ptr<const grpc::ByteBuffer> request, uint64_t epoch,
                               ServerTransport::Done done) {
  while (c < policy_.replicas && IsDead(ServerOf(TargetOf(s, c)))) ++c;
  if (c == policy_.replicas) return done(AllCopiesDead(s), nullptr);
  const int t = TargetOf(s, c);
  Attempt(
      t, method, request, epoch,
      [this, s, c, t, method, request, epoch, done = std::move(done)](absl::Status status,
                                                                      grpc::ByteBuffer* reply) {
        // A copy whose server died meanwhile: the next copy answers.
        if (!status.ok() && IsDead(ServerOf(t))) {
          return CallOneCopy(s, c + 1, method, request, epoch, done);
        }
        done(std::move(status), reply);
      },
      0);
}

void ServerCaller::CallEveryCopy(int s, ServerMethod method,
                                 std::shared_ptr<const grpc::ByteBuffer> request, uint64_t epoch,
                                 ServerTransport::Done done) {
  struct FanIn {
    absl::Mutex mu;
    int remaining = 0;
    std::vector<absl::Status> errors;  // By copy.
    grpc::ByteBuffer reply;            // The answer of the first copy that answered OK.
    int reply_copy = -1;
    ServerTransport::Done done;
  };
  std::vector<int> living;
  for (int c = 0; c < policy_.replicas; ++c) {
    if (!IsDead(ServerOf(TargetOf(s, c)))) living.push_back(c);
  }
  if (living.empty()) return done(AllCopiesDead(s), nullptr);
  auto fan_in = std::make_shared<FanIn>();
  fan_in->remaining = static_cast<int>(living.size());
  fan_in->errors.resize(policy_.replicas);
  fan_in->done = std::move(done);
  for (int c : living) {
    const int t = TargetOf(s, c);
    Attempt(
        t, method, request, epoch,
        [this, s, c, t, fan_in](absl::Status status, grpc::ByteBuffer* reply) {
          {
            absl::MutexLock lock(&fan_in->mu);
            if (status.ok()) {
              if (fan_in->reply_copy < 0 || c < fan_in->reply_copy) {
                fan_in->reply = *reply;
                fan_in->reply_copy = c;
              }
            } else {
              fan_in->errors[c] = std::move(status);
            }
            if (--fan_in->remaining > 0) return;
          }
          // Every copy has answered. A failure of a copy whose server is dead does not
          // count: the other copy holds the update.
          // A stale-view refusal wins: the call is then sent again to the new view's copies.
          absl::Status result;
          for (size_t copy = 0; copy < fan_in->errors.size(); ++copy) {
            const absl::Status& error = fan_in->errors[copy];
            if (RequiredViewEpoch(error).has_value()) {
              result = error;
              break;
            }
            if (result.ok() && !error.ok() &&
                !IsDead(ServerOf(TargetOf(s, static_cast<int>(copy))))) {
              result = error;
            }
          }
          if (result.ok() && fan_in->reply_copy < 0) result = AllCopiesDead(s);
          fan_in->done(result, result.ok() ? &fan_in->reply : nullptr);
        },
        0);
  }
}

void ServerCaller::Attempt(int t, ServerMethod method,
                           std::shared_ptr<const grpc::ByteBuffer> request, uint64_t epoch,
                           ServerTransport::Done done, int attempt) {
  const absl::Time deadline = absl::Now() + policy_.rpc_timeout;
  transport_->Send(
      t, method, Signed(t, method, request, epoch), deadline, epoch,
      [this, t, method, request, epoch, done = std::move(done), attempt](absl::Status status,
                                                                         grpc::ByteBuffer* reply) {
        if (status.ok()) {
          done(status, reply);
          return;
        }
        // The SDK never cancels its own data calls: a cancelled one was cancelled by the
        // server, which is stopping (SIGTERM, shutdown). Retried as for a server that is down,
        // under the same request id (applied at most once).
        if (absl::IsCancelled(status)) {
          status = absl::UnavailableError(
              absl::StrCat("the server cancelled the call (it is stopping): ", status.message()));
        }
        if (!absl::IsUnavailable(status) || policy_.replicas < 2 || !failover_check_) {
          return Retry(t, method, request, epoch, done, attempt, std::move(status));
        }
        // With replicas, an unreachable server may be dead: the scheduler checks, off this
        // thread (the check blocks), before the call is retried.
        timer_->After(absl::ZeroDuration(), [this, t, method, request, epoch, done, attempt,
                                             status = std::move(status)]() mutable {
          const int server = ServerOf(t);
          if (!IsDead(server)) {
            // Dead as of the view the check started in (a replacement may have joined since).
            const uint64_t asked_in = view_epoch();
            const absl::StatusOr<bool> dead = failover_check_(server, status);
            if (dead.ok() && *dead) MarkDead(server, asked_in);
          }
          if (IsDead(server)) {
            return done(ServerError(t, absl::UnavailableError(absl::StrCat(
                                           "declared dead by the scheduler: ", status.message()))),
                        nullptr);
          }
          Retry(t, method, request, epoch, done, attempt, std::move(status));
        });
      });
}

void ServerCaller::Retry(int t, ServerMethod method,
                         std::shared_ptr<const grpc::ByteBuffer> request, uint64_t epoch,
                         ServerTransport::Done done, int attempt, absl::Status status) {
  if (absl::IsUnavailable(status) && attempt < policy_.max_retries) {
    const absl::Duration backoff =
        std::min(policy_.retry_backoff * (1 << std::min(attempt, 16)), absl::Seconds(2));
    timer_->After(backoff, [this, t, method, request, epoch, done, attempt] {
      Attempt(t, method, request, epoch, done, attempt + 1);
    });
    return;
  }
  if (absl::IsUnavailable(status)) {
    status = absl::UnavailableError(
        absl::StrCat("unreachable after ", attempt + 1, " attempts: ", status.message()));
  } else if (absl::IsDeadlineExceeded(status)) {
    status = absl::DeadlineExceededError(absl::StrCat(
        "no answer within ", absl::FormatDuration(policy_.rpc_timeout), " (",
        GrpcMethodPath(method), "; in dist_sync a push waits for every worker's push of the key)"));
  }
  done(ServerError(t, status), nullptr);
}

absl::Status ServerCaller::WaitForServers(const TransferContext& ctx, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  proto::PullRequest empty;
  SetSender(ctx, &empty);
  const auto request = std::make_shared<const grpc::ByteBuffer>(EncodeMessage(empty));
  const int targets = policy_.replicas > 1 ? 2 * num_servers() : num_servers();
  for (int s = 0; s < targets; ++s) {
    while (true) {
      const absl::Status status =
          transport_->Probe(s, ServerMethod::kPull, *Signed(s, ServerMethod::kPull, request, 0),
                            std::min(give_up, absl::Now() + absl::Seconds(10)));
      if (status.ok()) break;
      if (!absl::IsUnavailable(status) || absl::Now() >= give_up) {
        return ServerError(
            s, absl::Status(status.code(),
                            absl::StrCat("not ready within ", absl::FormatDuration(timeout), ": ",
                                         status.message())));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvstore
