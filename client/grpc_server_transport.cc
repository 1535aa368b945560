#include "client/grpc_server_transport.h"

#include <grpcpp/client_context.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/view_epoch.h"

namespace kvstore {

struct GrpcServerTransport::Rpc final : CompletionThread::Completion {
  // Complete runs `done` with the call's outcome, then deletes the call.
  void Complete(bool) override {
    const std::unique_ptr<Rpc> self(this);
    if (status.ok()) {
      done(absl::OkStatus(), &reply);
    } else {
      done(FromGrpcStatus(status), nullptr);
    }
  }

  grpc::ClientContext context;
  grpc::ByteBuffer reply;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  Done done;
};

absl::StatusOr<std::unique_ptr<GrpcServerTransport>> GrpcServerTransport::Create(
    const std::vector<ServerAddress>& servers, int connections,
    std::shared_ptr<grpc::ChannelCredentials> credentials,
    std::shared_ptr<CompletionThread> completions) {
  if (connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("connections per server must be >= 1, not ", connections));
  }
  std::unique_ptr<GrpcServerTransport> transport(new GrpcServerTransport());
  transport->credentials_ = std::move(credentials);
  transport->connections_ = connections;
  for (const ServerAddress& address : servers) {
    Server server;
    server.stubs = std::make_unique<std::atomic<const Stubs*>>(transport->Connect(address.address));
    server.next_stub = std::make_unique<std::atomic<uint64_t>>(0);
    server.backup = address.backup;
    transport->servers_.push_back(std::move(server));
  }
  transport->completions_ =
      completions != nullptr ? std::move(completions) : CompletionThread::Start();
  return transport;
}

const GrpcServerTransport::Stubs* GrpcServerTransport::Connect(const std::string& address) {
  auto stubs = std::make_unique<Stubs>();
  for (int c = 0; c < connections_; ++c) {
    // MakeChannel gives every channel its own connection.
    stubs->push_back(std::make_unique<grpc::GenericStub>(MakeChannel(address, credentials_)));
  }
  const Stubs* connected = stubs.get();
  absl::MutexLock lock(&connected_mu_);
  connected_.push_back(std::move(stubs));
  return connected;
}

absl::Status GrpcServerTransport::Retarget(int s, const std::string& address) {
  if (s < 0 || s >= static_cast<int>(servers_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no server target ", s));
  }
  servers_[s].stubs->store(Connect(address), std::memory_order_release);
  return absl::OkStatus();
}

GrpcServerTransport::~GrpcServerTransport() { Close(); }

void GrpcServerTransport::Close() { completions_.reset(); }

void GrpcServerTransport::Send(int s, ServerMethod method,
                               std::shared_ptr<const grpc::ByteBuffer> request, absl::Time deadline,
                               uint64_t view_epoch, Done done) {
  auto rpc = std::make_unique<Rpc>();
  rpc->context.set_deadline(GrpcDeadline(deadline));
  if (view_epoch > 0) rpc->context.AddMetadata(kViewEpochKey, absl::StrCat(view_epoch));
  rpc->done = std::move(done);
  Server& server = servers_[s];
  const Stubs* stubs = server.stubs->load(std::memory_order_acquire);
  grpc::GenericStub* stub = (*stubs)[(*server.next_stub)++ % stubs->size()].get();
  rpc->reader = stub->PrepareUnaryCall(&rpc->context, GrpcMethodPath(method, server.backup),
                                       *request, completions_->queue());
  rpc->reader->StartCall();
  Rpc* raw = rpc.release();  // Owned by the queue until its Complete.
  raw->reader->Finish(&raw->reply, &raw->status, static_cast<CompletionThread::Completion*>(raw));
}

absl::Status GrpcServerTransport::Probe(int s, ServerMethod method, const grpc::ByteBuffer& request,
                                        absl::Time deadline) {
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(deadline));
  context.set_wait_for_ready(true);
  grpc::ByteBuffer reply;
  grpc::Status status;
  // A call of its own on a queue of its own, waited for here.
  grpc::CompletionQueue cq;
  const Stubs* stubs = servers_[s].stubs->load(std::memory_order_acquire);
  auto call = stubs->front()->PrepareUnaryCall(&context, GrpcMethodPath(method, servers_[s].backup),
                                               request, &cq);
  call->StartCall();
  call->Finish(&reply, &status, &status);
  void* tag;
  bool ok;
  cq.Next(&tag, &ok);  // The call's deadline bounds the wait.
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return FromGrpcStatus(status);
}

}  // namespace kvstore
