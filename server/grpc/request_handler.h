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
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/server_methods.h"
#include "server/core/server_backend.h"

namespace kvstore {

// PeerTokens: the nodes that may call a kvserver (the job's workers and its scheduler) and
// their tokens, by node id (common/job_auth.h).
using PeerTokens = absl::flat_hash_map<uint64_t, std::string>;

// HandleServerRequest runs `request`, a request of `method`, against `backend`, and calls `done`
// exactly once: with OK once `*response` holds the reply, or with the error (UNAVAILABLE while
// `backend` is null: the server has not received the cluster view yet, and clients retry).
// With `peers`, the request's node credential (proto::RequestNode) must be one of theirs
// (UNAUTHENTICATED otherwise) and name the node the request names (PERMISSION_DENIED
// otherwise), and only the scheduler may send a Command (PERMISSION_DENIED); nothing is run
// otherwise. Without `peers` (a transport without a job secret) nothing is checked.
// `view_epoch` is the view the sender routed the request by (common/view_epoch.h): a request
// the engine's view floor refuses (ServerEngine::CheckView) is answered with StaleViewError;
// commands, which come from the scheduler, are never refused so.
// `done` may run later on another thread (a dist_sync push is answered when its round is
// complete, on the thread of the push that completes it); `request` is read only during the
// call, and `*response` must stay valid until `done` has run. Never blocks waiting for other
// nodes. Thread-safe.
void HandleServerRequest(const std::shared_ptr<ServerBackend>& backend, ServerMethod method,
                         const grpc::ByteBuffer& request, grpc::ByteBuffer* response,
                         std::function<void(absl::Status)> done,
                         const PeerTokens* peers = nullptr, uint64_t view_epoch = 0);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_GRPC_REQUEST_HANDLER_H_
