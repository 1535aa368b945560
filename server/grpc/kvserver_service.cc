#include "server/grpc/kvserver_service.h"

#include <grpc/support/time.h>

#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include "common/grpc_status.h"
#include "common/view_epoch.h"

namespace kvstore {

void KVServerService::SetBackend(std::shared_ptr<ServerBackend> backend,
                                 std::shared_ptr<const RequestVerifier> verifier,
                                 std::shared_ptr<ServerBackend> backup) {
  absl::MutexLock lock(&mu_);
  backend_ = std::move(backend);
  verifier_ = std::move(verifier);
  backup_ = std::move(backup);
}

std::shared_ptr<ServerBackend> KVServerService::backend() const {
  absl::MutexLock lock(&mu_);
  return backend_;
}

std::shared_ptr<ServerBackend> KVServerService::backup() const {
  absl::MutexLock lock(&mu_);
  return backup_;
}

void KVServerService::Serving(bool backup, std::shared_ptr<ServerBackend>* backend,
                              std::shared_ptr<ServerBackend>* primary,
                              std::shared_ptr<const RequestVerifier>* verifier) const {
  absl::MutexLock lock(&mu_);
  *backend = backup ? backup_ : backend_;
  *primary = backend_;
  *verifier = verifier_;
}

// One call of one method: asked for, then run, then finished. Every step runs on a serving
// thread under a reader lock of serving_mu_, so that once StopServing returns, nothing asks
// for or answers a call on a queue that may be shutting down.
class KVServerService::Call final : public ServingTag {
 public:
  // In the order of proto/kvstore.proto: the nine methods, then their Backup methods.
  static constexpr int kMethods = 2 * kNumServerMethods;

  // Ask requests the next call of `method` on `cq`. Requires a reader lock of serving_mu_,
  // with serving not stopped.
  static void Ask(KVServerService* service, int method, grpc::ServerCompletionQueue* cq) {
    auto* call = new Call(service, method, cq);
    service->RequestAsyncUnary(method, &call->context_, &call->request_, &call->responder_, cq, cq,
                               static_cast<ServingTag*>(call));
  }

  // Proceed runs for each event of the call: its arrival (kOther), then its finish, and says
  // which it was (kSmallEnded: a call has been answered with under kSmallReplyBytes).
  Event Proceed(bool ok) override {
    absl::ReaderMutexLock lock(&service_->serving_mu_);
    if (finishing_ || !ok || service_->stopped_) {  // Done, or the server is shutting down.
      const size_t request_bytes = finishing_ ? request_.Length() : 0;
      const size_t response_bytes = finishing_ ? response_.Length() : 0;
      const bool small = finishing_ && ok && response_bytes < kSmallReplyBytes;
      if (finishing_ && service_->metrics_ != nullptr) {
        service_->metrics_->RecordCall(method_ % kNumServerMethods, code_, request_bytes,
                                       response_bytes, absl::Now() - started_);
      }
      delete this;
      return small ? Event::kSmallEnded : Event::kEnded;
    }
    Ask(service_, method_, cq_);  // The next call of this method.
    finishing_ = true;
    if (service_->metrics_ != nullptr) started_ = absl::Now();
    std::function<void(absl::Status)> done = [this](absl::Status status) {
      if (status.ok()) {
        responder_.Finish(response_, grpc::Status::OK, static_cast<ServingTag*>(this));
      } else {
        code_ = status.code();
        responder_.FinishWithError(ToGrpcStatus(status), static_cast<ServingTag*>(this));
      }
    };
    service_->Dispatch(method_, request_, &response_, std::move(done), [this] {
      const auto& metadata = context_.client_metadata();
      const auto found = metadata.find(kViewEpochKey);
      if (found == metadata.end()) return uint64_t{0};
      return ParseViewEpoch(std::string(found->second.data(), found->second.size()));
    });
    return Event::kOther;
  }

 private:
  Call(KVServerService* service, int method, grpc::ServerCompletionQueue* cq)
      : service_(service), method_(method), cq_(cq), responder_(&context_) {}

  KVServerService* service_;
  const int method_;
  grpc::ServerCompletionQueue* cq_;
  grpc::ServerContext context_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_;
  bool finishing_ = false;
  absl::Time started_;  // When the call arrived (kept only with metrics).
  absl::StatusCode code_ = absl::StatusCode::kOk;  // How it was answered.
};

void KVServerService::Dispatch(int method_index, const grpc::ByteBuffer& request,
                               grpc::ByteBuffer* response, std::function<void(absl::Status)> done,
                               absl::FunctionRef<uint64_t()> unsigned_view_epoch) const {
  std::shared_ptr<ServerBackend> backend, primary;
  std::shared_ptr<const RequestVerifier> verifier;
  const bool backup = method_index >= kNumServerMethods;
  const auto method = static_cast<ServerMethod>(method_index % kNumServerMethods);
  Serving(backup, &backend, &primary, &verifier);
  // In a job with a secret nothing is said of this server to a caller that cannot prove
  // it belongs to the job: the signature is checked first. It carries the view the worker
  // routed by; without a secret the transport does, read only once a replacement server has
  // joined (the gRPC metadata map costs a small call about a microsecond).
  const grpc::ByteBuffer* checked_request = &request;
  std::optional<RequestVerifier::Verified> verified;
  uint64_t view_epoch = 0;
  if (verifier != nullptr) {
    absl::StatusOr<RequestVerifier::Verified> checked = verifier->Verify(method, backup, request);
    if (!checked.ok()) {
      done(checked.status());
      return;
    }
    verified = *std::move(checked);
    checked_request = &verified->request;
    view_epoch = verified->view_epoch;
  } else if (backend != nullptr && backend->engine->view_floor().epoch() > 0) {
    view_epoch = unsigned_view_epoch();
  }
  if (backup && backend == nullptr && primary != nullptr) {
    done(absl::FailedPreconditionError(
        "this kvserver holds no backup shard (the job has no replicas)"));
    return;
  }
  const VerifiedCaller caller{verified.has_value() ? verified->node_id : 0};
  HandleServerRequest(backend, method, *checked_request, response, std::move(done),
                      verified.has_value() ? &caller : nullptr, view_epoch);
}

void KVServerService::HandleLocal(int method_index, const grpc::ByteBuffer& request,
                                  uint64_t view_epoch, grpc::ByteBuffer* response,
                                  std::function<void(absl::Status)> done) const {
  if (metrics_ != nullptr) {
    const absl::Time started = absl::Now();
    const size_t request_bytes = request.Length();
    done = [this, method_index, started, request_bytes, response,
            done = std::move(done)](absl::Status status) {
      metrics_->RecordCall(method_index % kNumServerMethods, status.code(), request_bytes,
                           status.ok() ? response->Length() : 0, absl::Now() - started);
      done(std::move(status));
    };
  }
  Dispatch(method_index, request, response, std::move(done), [view_epoch] { return view_epoch; });
}

void KVServerService::Serve(grpc::ServerCompletionQueue* cq, absl::Duration poll) {
  {
    absl::ReaderMutexLock lock(&serving_mu_);
    if (!stopped_) {
      for (int method = 0; method < Call::kMethods; ++method) Call::Ask(this, method, cq);
    }
  }
  void* tag;
  bool ok;
  absl::Time poll_until = absl::InfinitePast();
  for (;;) {
    if (poll_until != absl::InfinitePast() && absl::Now() < poll_until) {
      const auto next = cq->AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC));
      if (next == grpc::CompletionQueue::SHUTDOWN) return;
      if (next == grpc::CompletionQueue::TIMEOUT) {
        std::this_thread::yield();  // Whatever else is runnable here goes first.
        continue;
      }
    } else if (!cq->Next(&tag, &ok)) {
      return;
    }
    switch (static_cast<ServingTag*>(tag)->Proceed(ok)) {
      case ServingTag::Event::kOther:
        break;  // A call's arrival (its finish follows).
      case ServingTag::Event::kSmallEnded:
        poll_until = absl::Now() + poll;
        break;
      case ServingTag::Event::kEnded:
        poll_until = absl::InfinitePast();
        break;
    }
  }
}

void KVServerService::StopServing() {
  absl::MutexLock lock(&serving_mu_);
  stopped_ = true;
}

}  // namespace kvstore
