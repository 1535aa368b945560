#include "common/grpc_health.h"

#include <grpcpp/support/async_stream.h>
#include <grpcpp/support/async_unary_call.h>

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/serving_tag.h"

namespace kvstore {
namespace {
using grpc::health::v1::HealthCheckResponse;
}  // namespace

// One Check call: asked for, then answered, then deleted once the answer is sent.
class DaemonHealth::CheckCall final : public ServingTag {
 public:
  static void Ask(DaemonHealth* health, grpc::ServerCompletionQueue* cq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(health->mu_) {
    auto* call = new CheckCall(health, cq);
    health->async_.RequestCheck(&call->context_, &call->request_, &call->responder_, cq, cq,
                                static_cast<ServingTag*>(call));
  }

  Event Proceed(bool ok) override {
    absl::MutexLock lock(&health_->mu_);
    if (answered_ || !ok || health_->stopped_) {
      delete this;
      return Event::kOther;
    }
    Ask(health_, cq_);  // The next Check.
    answered_ = true;
    const Status status = health_->Lookup(request_.service());
    if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
      responder_.FinishWithError(
          grpc::Status(grpc::StatusCode::NOT_FOUND,
                       absl::StrCat("no health service named \"", request_.service(), "\"")),
          static_cast<ServingTag*>(this));
    } else {
      response_.set_status(status);
      responder_.Finish(response_, grpc::Status::OK, static_cast<ServingTag*>(this));
    }
    return Event::kOther;
  }

 private:
  CheckCall(DaemonHealth* health, grpc::ServerCompletionQueue* cq)
      : health_(health), cq_(cq), responder_(&context_) {}

  DaemonHealth* const health_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ServerContext context_;
  grpc::health::v1::HealthCheckRequest request_;
  HealthCheckResponse response_;
  grpc::ServerAsyncResponseWriter<HealthCheckResponse> responder_;
  bool answered_ = false;
};

// One Watch call: a stream that gets the service's state, then each change, until the client
// leaves or the daemon stops (then, after NOT_SERVING, it ends with CANCELLED as grpc++'s own
// service does). Its tags: the call itself for its arrival and each write (one at a time), and
// done_ for gRPC's notice that the call is over. It is deleted when no tag is outstanding.
class DaemonHealth::WatchCall final : public ServingTag {
 public:
  static void Ask(DaemonHealth* health, grpc::ServerCompletionQueue* cq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(health->mu_) {
    auto* call = new WatchCall(health, cq);
    call->context_.AsyncNotifyWhenDone(static_cast<ServingTag*>(&call->done_));
    // The arrival, and the done notice if the call arrives (in either order: a queue's
    // events are not ordered).
    call->pending_ = 2;
    health->async_.RequestWatch(&call->context_, &call->request_, &call->writer_, cq, cq,
                                static_cast<ServingTag*>(call));
  }

  // The arrival, or the end of a write or of the finish.
  Event Proceed(bool ok) override {
    absl::MutexLock lock(&health_->mu_);
    if (!started_) {
      started_ = true;
      pending_ -= ok ? 1 : 2;  // No done notice for a call that never arrived.
      if (ok && !health_->stopped_) {
        Ask(health_, cq_);  // The next Watch.
        if (!done_called_) {
          health_->watching_.insert(this);
          want_ = health_->Lookup(request_.service());
          Send();
        }
      }
    } else {
      --pending_;
      writing_ = false;
      if (ok) Send();
    }
    DeleteIfIdle();
    return Event::kOther;
  }

  const std::string& service() const { return request_.service(); }

  // Want makes `status` the next state to send. The caller holds the health's mu_ (checked at
  // run time: the analysis cannot tell that the caller's mu_ is health_->mu_).
  void Want(Status status) {
    health_->mu_.AssertHeld();
    want_ = status;
    Send();
  }

  // Send starts the next write (or, once the daemon is stopping and all is sent, the finish)
  // unless one is under way or the call is over.
  void Send() ABSL_EXCLUSIVE_LOCKS_REQUIRED(health_->mu_) {
    if (writing_ || finishing_ || done_called_ || health_->stopped_) return;
    if (!sent_.has_value() || *sent_ != want_) {
      response_.set_status(want_);
      sent_ = want_;
      writing_ = true;
      ++pending_;
      writer_.Write(response_, static_cast<ServingTag*>(this));
    } else if (health_->stopping_) {
      finishing_ = true;
      writing_ = true;
      ++pending_;
      writer_.Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the daemon is stopping"),
                     static_cast<ServingTag*>(this));
    }
  }

 private:
  // The done notice's tag.
  class Done final : public ServingTag {
   public:
    explicit Done(WatchCall* call) : call_(call) {}
    Event Proceed(bool) override {
      absl::MutexLock lock(&call_->health_->mu_);
      --call_->pending_;
      call_->done_called_ = true;
      call_->health_->watching_.erase(call_);
      call_->DeleteIfIdle();
      return Event::kOther;
    }

   private:
    WatchCall* const call_;
  };

  WatchCall(DaemonHealth* health, grpc::ServerCompletionQueue* cq)
      : health_(health), cq_(cq), writer_(&context_), done_(this) {}

  void DeleteIfIdle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(health_->mu_) {
    if (pending_ > 0) return;
    health_->watching_.erase(this);
    delete this;
  }

  DaemonHealth* const health_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ServerContext context_;
  grpc::health::v1::HealthCheckRequest request_;
  HealthCheckResponse response_;
  grpc::ServerAsyncWriter<HealthCheckResponse> writer_;
  Done done_;
  int pending_ = 0;  // Tags gRPC still owes.
  bool started_ = false;
  bool writing_ = false;  // A write or the finish is under way.
  bool finishing_ = false;
  bool done_called_ = false;
  Status want_ = HealthCheckResponse::UNKNOWN;
  std::optional<Status> sent_;
};

DaemonHealth::DaemonHealth(std::string service) : service_(std::move(service)) {
  absl::MutexLock lock(&mu_);
  states_[""] = HealthCheckResponse::NOT_SERVING;
  states_[service_] = HealthCheckResponse::NOT_SERVING;
  states_[kAliveHealthService] = HealthCheckResponse::SERVING;
}

void DaemonHealth::AddTo(grpc::ServerBuilder* builder) { builder->RegisterService(&async_); }

void DaemonHealth::Ask(grpc::ServerCompletionQueue* cq) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  CheckCall::Ask(this, cq);
  WatchCall::Ask(this, cq);
}

void DaemonHealth::Serve(grpc::ServerCompletionQueue* cq) {
  Ask(cq);
  void* tag;
  bool ok;
  while (cq->Next(&tag, &ok)) static_cast<ServingTag*>(tag)->Proceed(ok);
}

void DaemonHealth::StopServing() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

void DaemonHealth::SetServing(bool serving) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  const Status status = serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
  SetLocked("", status);
  SetLocked(service_, status);
}

void DaemonHealth::Set(const std::string& service, bool serving) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  SetLocked(service, serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING);
}

void DaemonHealth::Stopping() {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  stopping_ = true;
  for (auto& [service, status] : states_) status = HealthCheckResponse::NOT_SERVING;
  for (WatchCall* call : watching_) call->Want(Lookup(call->service()));
}

void DaemonHealth::SetLocked(const std::string& service, Status status) {
  states_[service] = status;
  for (WatchCall* call : watching_) {
    if (call->service() == service) call->Want(status);
  }
}

DaemonHealth::Status DaemonHealth::Lookup(const std::string& service) const {
  const auto found = states_.find(service);
  return found == states_.end() ? HealthCheckResponse::SERVICE_UNKNOWN : found->second;
}

}  // namespace kvstore
