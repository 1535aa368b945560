#include "client/grpc_server_transport.h"

#include <grpcpp/client_context.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/named_thread.h"

namespace kvstore {

struct GrpcServerTransport::Rpc {
  grpc::ClientContext context;
  grpc::ByteBuffer reply;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  Done done;
};

absl::StatusOr<std::unique_ptr<GrpcServerTransport>> GrpcServerTransport::Create(
    const std::vector<ServerAddress>& servers, int connections,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  if (connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("connections per server must be >= 1, not ", connections));
  }
  std::unique_ptr<GrpcServerTransport> transport(new GrpcServerTransport());
  for (const ServerAddress& address : servers) {
    Server server;
    for (int c = 0; c < connections; ++c) {
      // MakeChannel gives every channel its own connection.
      server.stubs.push_back(
          std::make_unique<grpc::GenericStub>(MakeChannel(address.address, credentials)));
    }
    server.next_stub = std::make_unique<std::atomic<uint64_t>>(0);
    server.backup = address.backup;
    transport->servers_.push_back(std::move(server));
  }
  transport->completer_ =
      NamedThread("kv-completion", [t = transport.get()] { t->CompleteCalls(); });
  return transport;
}

GrpcServerTransport::~GrpcServerTransport() { Close(); }

void GrpcServerTransport::Close() {
  if (closed_) return;
  closed_ = true;
  cq_.Shutdown();
  if (completer_.joinable()) completer_.join();
}

void GrpcServerTransport::Send(int s, ServerMethod method,
                               std::shared_ptr<const grpc::ByteBuffer> request,
                               absl::Time deadline, Done done) {
  auto rpc = std::make_unique<Rpc>();
  rpc->context.set_deadline(GrpcDeadline(deadline));
  rpc->done = std::move(done);
  Server& server = servers_[s];
  grpc::GenericStub* stub = server.stubs[(*server.next_stub)++ % server.stubs.size()].get();
  rpc->reader = stub->PrepareUnaryCall(&rpc->context, GrpcMethodPath(method, server.backup),
                                       *request, &cq_);
  rpc->reader->StartCall();
  Rpc* raw = rpc.release();  // Owned by cq_ until CompleteCalls takes it back.
  raw->reader->Finish(&raw->reply, &raw->status, raw);
}

void GrpcServerTransport::CompleteCalls() {
  void* tag;
  bool ok;
  while (cq_.Next(&tag, &ok)) {
    std::unique_ptr<Rpc> rpc(static_cast<Rpc*>(tag));
    if (rpc->status.ok()) {
      rpc->done(absl::OkStatus(), &rpc->reply);
    } else {
      rpc->done(FromGrpcStatus(rpc->status), nullptr);
    }
  }
}

absl::Status GrpcServerTransport::Probe(int s, ServerMethod method,
                                        const grpc::ByteBuffer& request, absl::Time deadline) {
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(deadline));
  context.set_wait_for_ready(true);
  grpc::ByteBuffer reply;
  grpc::Status status;
  // A call of its own on a queue of its own, waited for here.
  grpc::CompletionQueue cq;
  auto call = servers_[s].stubs.front()->PrepareUnaryCall(
      &context, GrpcMethodPath(method, servers_[s].backup), request, &cq);
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
