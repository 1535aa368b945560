#include "tests/in_process/in_process_transport.h"

#include <deque>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/named_thread.h"
#include "server/core/request_handler.h"

namespace kvstore {

void InProcessServer::SetBackend(std::shared_ptr<ServerBackend> backend) {
  absl::MutexLock lock(&mu_);
  backend_ = std::move(backend);
}

std::shared_ptr<ServerBackend> InProcessServer::backend() const {
  absl::MutexLock lock(&mu_);
  return backend_;
}

// Completions: the calls in flight and the answers waiting for the completion thread.
struct InProcessServerTransport::Completions {
  struct Call {
    grpc::ByteBuffer response;
    Done done;
    absl::Time deadline;
  };
  using Pending = std::multimap<absl::Time, std::shared_ptr<Call>>;

  absl::Mutex mu;
  Pending pending ABSL_GUARDED_BY(mu);  // Unanswered calls by deadline.
  std::deque<std::pair<std::shared_ptr<Call>, absl::Status>> answered ABSL_GUARDED_BY(mu);
  bool closed ABSL_GUARDED_BY(mu) = false;

  // Answer queues a call's outcome, unless the call has completed already (its deadline).
  void Answer(const std::shared_ptr<Call>& call, absl::Status status) {
    absl::MutexLock lock(&mu);
    auto [first, last] = pending.equal_range(call->deadline);
    for (auto it = first; it != last; ++it) {
      if (it->second != call) continue;
      pending.erase(it);
      answered.emplace_back(call, std::move(status));
      return;
    }
  }

  // Run completes answered and expired calls until Close.
  void Run() {
    mu.Lock();
    while (true) {
      const absl::Time first = pending.empty() ? absl::InfiniteFuture() : pending.begin()->first;
      const auto ready = [this, first]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
        return closed || !answered.empty() || (!pending.empty() && pending.begin()->first < first);
      };
      if (answered.empty() && !closed && first > absl::Now()) {
        mu.AwaitWithDeadline(absl::Condition(&ready), first);
      }
      if (closed && answered.empty()) break;
      std::vector<std::pair<std::shared_ptr<Call>, absl::Status>> batch(answered.begin(),
                                                                        answered.end());
      answered.clear();
      const absl::Time now = absl::Now();
      while (!pending.empty() && pending.begin()->first <= now) {
        batch.emplace_back(pending.begin()->second,
                           absl::DeadlineExceededError("no answer before the call's deadline"));
        pending.erase(pending.begin());
      }
      mu.Unlock();
      for (auto& [call, status] : batch) {
        call->done(status, status.ok() ? &call->response : nullptr);
      }
      mu.Lock();
    }
    mu.Unlock();
  }
};

InProcessServerTransport::InProcessServerTransport(std::vector<const InProcessServer*> servers)
    : servers_(std::move(servers)), completions_(std::make_shared<Completions>()) {
  completer_ = NamedThread("kv-completion", [c = completions_] { c->Run(); });
}

InProcessServerTransport::~InProcessServerTransport() { Close(); }

void InProcessServerTransport::Close() {
  {
    absl::MutexLock lock(&completions_->mu);
    completions_->closed = true;
  }
  if (completer_.joinable()) completer_.join();
}

void InProcessServerTransport::Send(int s, ServerMethod method,
                                    std::shared_ptr<const grpc::ByteBuffer> request,
                                    absl::Time deadline, uint64_t view_epoch, Done done) {
  auto call = std::make_shared<Completions::Call>();
  call->done = std::move(done);
  call->deadline = deadline;
  {
    absl::MutexLock lock(&completions_->mu);
    completions_->pending.emplace(deadline, call);
  }
  HandleServerRequest(
      servers_[s]->backend(), method, *request, &call->response,
      [completions = completions_, call](absl::Status status) {
        completions->Answer(call, std::move(status));
      },
      /*peers=*/nullptr, view_epoch);
}

absl::Status InProcessServerTransport::Probe(int s, ServerMethod method,
                                             const grpc::ByteBuffer& request, absl::Time deadline) {
  struct Outcome {
    grpc::ByteBuffer response;
    absl::Status status;
    absl::Notification done;
  };
  auto outcome = std::make_shared<Outcome>();
  HandleServerRequest(servers_[s]->backend(), method, request, &outcome->response,
                      [outcome](absl::Status status) {
                        outcome->status = std::move(status);
                        outcome->done.Notify();
                      });
  if (!outcome->done.WaitForNotificationWithDeadline(deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("no answer from in-process server ", s, " before the deadline"));
  }
  return outcome->status;
}

}  // namespace kvstore
