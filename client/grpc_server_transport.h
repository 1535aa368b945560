// GrpcServerTransport: the ServerTransport of a distributed job - each request a raw unary call
// of proto/kvstore.proto's KVServer service, its frame the call's message as it is.
//
// Each server gets `connections` channels, each its own TCP connection, which requests take in
// turn: big values then move in parallel chunks. Calls complete on the queue of a
// CompletionThread (client/completion_thread.h), whose single thread runs `done` - gRPC's async
// API; its callback API keeps two threads polling, each event waking the other
// (docs/performance.md). The thread is the transport's own unless it is given one to share.
//
// Threading: as ServerTransport. Close lets go of the completion thread (joining it when it was
// the last holder).
#ifndef KVSTORE_CLIENT_GRPC_SERVER_TRANSPORT_H_
#define KVSTORE_CLIENT_GRPC_SERVER_TRANSPORT_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/completion_thread.h"
#include "client/server_caller.h"
#include "client/server_transport.h"

namespace kvstore {

class GrpcServerTransport final : public ServerTransport {
 public:
  // Create opens `connections` (>= 1) channels to each server over `credentials` (null:
  // plaintext; they connect lazily) and takes `completions` as its completion thread (null:
  // starts one of its own); Send(s, ...) reaches
  // servers[s], through the Backup methods when it is a backup copy (ReplicaTargets). Requests
  // carry the node's credential themselves (proto::RequestNode), not the calls' metadata.
  static absl::StatusOr<std::unique_ptr<GrpcServerTransport>> Create(
      const std::vector<ServerAddress>& servers, int connections,
      std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
      std::shared_ptr<CompletionThread> completions = nullptr);
  ~GrpcServerTransport() override;

  void Send(int s, ServerMethod method, std::shared_ptr<const grpc::ByteBuffer> request,
            absl::Time deadline, uint64_t view_epoch, Done done) override;
  absl::Status Retarget(int s, const std::string& address) override;
  absl::Status Probe(int s, ServerMethod method, const grpc::ByteBuffer& request,
                     absl::Time deadline) override;
  void Close() override;

 private:
  using Stubs = std::vector<std::unique_ptr<grpc::GenericStub>>;  // One per connection.
  struct Server {
    // The current connections, replaced by Retarget; every set stays owned by `connected_`
    // (calls in flight may still use an old one), so a send reads a plain pointer.
    std::unique_ptr<std::atomic<const Stubs*>> stubs;
    std::unique_ptr<std::atomic<uint64_t>> next_stub;
    bool backup = false;  // Calls the Backup methods (ServerAddress::backup).
  };
  // One unary call in flight on cq_.
  struct Rpc;

  GrpcServerTransport() = default;
  // Connect opens the channels to `address`; the transport keeps them until it is destroyed.
  const Stubs* Connect(const std::string& address);

  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  int connections_ = 1;
  std::vector<Server> servers_;
  absl::Mutex connected_mu_;
  std::vector<std::unique_ptr<const Stubs>> connected_ ABSL_GUARDED_BY(connected_mu_);
  std::shared_ptr<CompletionThread> completions_;  // Null once closed.
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_GRPC_SERVER_TRANSPORT_H_
