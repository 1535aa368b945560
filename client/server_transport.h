// ServerTransport: how a worker reaches its job's kvservers - the one seam between the worker's
// logic and the network.
//
// A request is a framed message (common/wire_frame.h: a protobuf header, then raw tensor bytes)
// for one of the kvserver's methods (common/server_methods.h); the reply is framed the same
// way. The transport delivers one request to one server, once: retries, request ids and error
// naming are its callers' (server_caller.h), and so is what the bytes mean (the transfers).
//
// Two implementations: GrpcServerTransport (grpc_server_transport.h), the raw methods of the
// KVServer service over several connections per server; InProcessServerTransport
// (in_process_transport.h), which hands the request to the servers' request handler in the same
// process, without a socket - for jobs whose workers are threads (tests).
//
// Threading: Send may be called from any thread, concurrently; `done` runs on a thread of the
// transport's own, never inside Send, so that a caller may hold no lock it needs in `done`.
#ifndef KVSTORE_CLIENT_SERVER_TRANSPORT_H_
#define KVSTORE_CLIENT_SERVER_TRANSPORT_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/server_methods.h"

namespace kvstore {

class ServerTransport {
 public:
  // Receives a request's outcome: OK with the reply (valid during the call), or the error and
  // null. UNAVAILABLE means the server could not be reached or is not serving yet (a server
  // answers so until the job has assembled), and is worth retrying.
  using Done = std::function<void(absl::Status, grpc::ByteBuffer* reply)>;

  virtual ~ServerTransport() = default;

  // Send sends `request` to target `s` (0 <= s < the job's targets: ReplicaTargets) once,
  // saying it was routed by view `view_epoch` (common/view_epoch.h; 0 says nothing); `done`
  // runs exactly once, with DeadlineExceeded when there is no answer by `deadline`.
  virtual void Send(int s, ServerMethod method, std::shared_ptr<const grpc::ByteBuffer> request,
                    absl::Time deadline, uint64_t view_epoch, Done done) = 0;

  // Retarget makes later requests to target `s` go to `address` (a replacement server joined
  // the job there). Requests in flight finish where they went. Unimplemented by default.
  virtual absl::Status Retarget(int s, const std::string& address) {
    return absl::UnimplementedError("this transport's servers do not move");
  }

  // Probe sends `request` to server `s` and blocks for its answer until `deadline`, waiting
  // for a connection to come up rather than failing at once (joining a job whose servers are
  // still starting).
  virtual absl::Status Probe(int s, ServerMethod method, const grpc::ByteBuffer& request,
                             absl::Time deadline) = 0;

  // Close stops the transport; every Send must have completed (its `done` run) before.
  virtual void Close() = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_SERVER_TRANSPORT_H_
