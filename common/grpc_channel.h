// gRPC channel and server settings shared by every node.
#ifndef KVSTORE_COMMON_GRPC_CHANNEL_H_
#define KVSTORE_COMMON_GRPC_CHANNEL_H_

#include <grpcpp/channel.h>
#include <grpcpp/server_builder.h>

#include <memory>
#include <string>

#include "absl/time/time.h"

namespace kvstore {

// MakeChannel returns a channel to `address` ("host:port") with no message size limit and its
// own TCP connection (channels with equal arguments would otherwise share one). It connects
// lazily; calls fail with UNAVAILABLE while the peer is down.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// ConfigureServer lifts the message size limits of a server being built.
void ConfigureServer(grpc::ServerBuilder* builder);

// GrpcDeadline converts an absl deadline for ClientContext::set_deadline.
std::chrono::system_clock::time_point GrpcDeadline(absl::Time deadline);

// LocalHostname returns this machine's host name ("unknown" when it cannot be read).
std::string LocalHostname();

}  // namespace kvstore

#endif  // KVSTORE_COMMON_GRPC_CHANNEL_H_
