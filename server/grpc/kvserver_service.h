// KVServerService: the gRPC adapter of a kvserver. It decodes requests, calls the ServerEngine
// and the Controller, and encodes replies; nothing else.
//
// Every method is a raw callback method: tensor-carrying requests arrive as the framed
// ByteBuffer described in proto/kvstore.proto, and the engine reads the payload from the
// received slices without a protobuf copy; pulled values go out as slices over the pulled
// tensors. A dist_sync push is answered from the engine's completion callback, when its round
// is complete, so no reaction ever blocks.
//
// Until SetBackend is called (the server has not yet received the cluster view) every method
// answers UNAVAILABLE, which clients retry.
#ifndef KVSTORE_SERVER_GRPC_KVSERVER_SERVICE_H_
#define KVSTORE_SERVER_GRPC_KVSERVER_SERVICE_H_

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/kvstore.grpc.pb.h"
#include "server/core/controller.h"
#include "server/core/server_engine.h"

namespace kvstore {

// What the service serves with, once the job is assembled.
struct ServerBackend {
  std::unique_ptr<ServerEngine> engine;
  std::unique_ptr<Controller> controller;
};

using RawKVServerService = proto::KVServer::WithRawCallbackMethod_Init<
    proto::KVServer::WithRawCallbackMethod_Push<proto::KVServer::WithRawCallbackMethod_Pull<
        proto::KVServer::WithRawCallbackMethod_PushPull<
            proto::KVServer::WithRawCallbackMethod_RowSparsePull<
                proto::KVServer::WithRawCallbackMethod_Command<proto::KVServer::Service>>>>>>;

class KVServerService final : public RawKVServerService {
 public:
  KVServerService() = default;

  // SetBackend starts serving with `backend`. Thread-safe.
  void SetBackend(std::shared_ptr<ServerBackend> backend);
  std::shared_ptr<ServerBackend> backend() const;

  grpc::ServerUnaryReactor* Init(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* PushPull(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* RowSparsePull(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Command(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<ServerBackend> backend_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_GRPC_KVSERVER_SERVICE_H_
