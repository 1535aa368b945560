// Request handling of a kvserver, for every transport: decodes one framed request
// (proto/kvstore.proto), runs it on the server's engine or controller, and encodes the reply.
//
// The gRPC service (kvserver_service.h) runs it for each call it receives; the SDK's in-process
// transport (tests/in_process/in_process_transport.h) runs it for each request a worker sends,
// without a socket. Both therefore see the same bytes, checks and errors.
#ifndef KVSTORE_SERVER_CORE_REQUEST_HANDLER_H_
#define KVSTORE_SERVER_CORE_REQUEST_HANDLER_H_

#include <grpcpp/support/byte_buffer.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/server_methods.h"
#include "server/core/server_backend.h"

namespace kvstore {

// VerifiedCaller: in a job with a secret, the node whose signature a request carried
// (common/request_signature.h), checked - and the signature removed - by the transport before
// the request is handled.
struct VerifiedCaller {
  uint64_t node_id = 0;
};

// HandleServerRequest runs `request`, a request of `method`, against `backend`, and calls `done`
// exactly once: with OK once `*response` holds the reply, or with the error (UNAVAILABLE while
// `backend` is null: the server has not received the cluster view yet, and clients retry;
// `backend->refusal` for every data request of a server that lost acknowledged updates).
// With `caller`, the request must name the node that signed it (PERMISSION_DENIED otherwise),
// and only the scheduler may send a Command (PERMISSION_DENIED); nothing is run otherwise.
// Without `caller` (a transport without a job secret) nothing is checked.
// `view_epoch` is the view the sender routed the request by (common/view_epoch.h): a request
// the engine's view floor refuses (ServerEngine::view_floor, ViewFloor::Check) is answered with
// StaleViewError; commands, which come from the scheduler, are never refused so. `done` may run
// later on another thread (a dist_sync push is answered when its round is complete, on the thread
// of the push that completes it); `request`'s bytes and `*response` must stay valid until `done`
// has run (a dist_sync round keeps a push's bytes until its last push, instead of copying them).
// Never blocks waiting for other nodes. Thread-safe.
void HandleServerRequest(const std::shared_ptr<ServerBackend>& backend, ServerMethod method,
                         const grpc::ByteBuffer& request, grpc::ByteBuffer* response,
                         std::function<void(absl::Status)> done,
                         const VerifiedCaller* caller = nullptr, uint64_t view_epoch = 0);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_REQUEST_HANDLER_H_
