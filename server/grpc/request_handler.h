// Request handling of a kvserver, for every transport: decodes one framed request
// (proto/kvstore.proto), runs it on the server's engine or controller, and encodes the reply.
//
// The gRPC service (kvserver_service.h) runs it for each call it receives; the SDK's in-process
// transport (client/in_process_transport.h) runs it for each request a worker sends, without a
// socket. Both therefore see the same bytes, checks and errors.
#ifndef KVSTORE_SERVER_GRPC_REQUEST_HANDLER_H_
#define KVSTORE_SERVER_GRPC_REQUEST_HANDLER_H_

#include <grpcpp/support/byte_buffer.h>

#include <functional>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "common/server_methods.h"
#include "server/core/server_backend.h"

namespace kvstore {

// HandleServerRequest runs `request`, a request of `method`, against `backend`, and calls `done`
// exactly once: with OK once `*response` holds the reply, or with the error (UNAVAILABLE while
// `backend` is null: the server has not received the cluster view yet, and clients retry).
// `caller` is the node the call's credential proved (common/job_auth.h), or nothing when the
// transport checks none: a request naming another node is then PERMISSION_DENIED, and a
// Command from any node but the scheduler too; nothing is run.
// `done` may run later on another thread (a dist_sync push is answered when its round is
// complete, on the thread of the push that completes it); `request` is read only during the
// call, and `*response` must stay valid until `done` has run. Never blocks waiting for other
// nodes. Thread-safe.
void HandleServerRequest(const std::shared_ptr<ServerBackend>& backend, ServerMethod method,
                         const grpc::ByteBuffer& request, grpc::ByteBuffer* response,
                         std::function<void(absl::Status)> done,
                         std::optional<uint64_t> caller = std::nullopt);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_GRPC_REQUEST_HANDLER_H_
