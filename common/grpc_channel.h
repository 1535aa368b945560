// gRPC channel and server settings shared by every node.
#ifndef KVSTORE_COMMON_GRPC_CHANNEL_H_
#define KVSTORE_COMMON_GRPC_CHANNEL_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/security_options.h"

namespace kvstore {

// MakeChannel returns a channel to `address` ("host:port") with no message size limit and its
// own TCP connection (channels with equal arguments would otherwise share one), over
// `credentials` (ChannelCredentialsFor; null: plaintext), receiving with a fixed window of
// kStreamWindowBytes per stream (no BDP probing). It connects lazily; calls fail with
// UNAVAILABLE while the peer is down.
inline constexpr int kStreamWindowBytes = 2 << 20;
std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

// ChannelCredentialsFor returns TLS credentials that verify the peer against tls.ca_file (and
// present tls.cert_file / key_file when set, for mutual TLS), or plaintext ones when TLS is
// off. NotFound naming the file that cannot be read; InvalidArgument for a certificate, key or
// `mutual` without a CA, or a certificate without its key (or the reverse).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const TlsOptions& tls);
// ServerCredentialsFor returns a daemon's TLS credentials (its certificate and key; with
// tls.mutual, client certificates required and verified against tls.ca_file), or plaintext
// ones when TLS is off. NotFound naming the file that cannot be read; InvalidArgument for a
// certificate, key or `mutual` without a CA, or a certificate without its key (or the reverse).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsOptions& tls);

// ServerLimits: what a daemon's gRPC server takes in from its clients, so that no client
// (a malformed request, a flood of calls) can exhaust the daemon's memory.
struct ServerLimits {
  // The largest request, in bytes (at most INT_MAX): a bigger one is refused with
  // RESOURCE_EXHAUSTED before any handler sees it.
  int64_t max_receive_bytes = 4 << 20;
  // The memory gRPC may use for the server's connections and calls (a grpc::ResourceQuota):
  // near it, gRPC shrinks what each connection may send ahead, stops accepting connections and
  // cancels calls.
  int64_t memory_quota_bytes = 64 << 20;
  // The most calls one connection may have open at once (further ones wait at the client);
  // 0: gRPC's default (no limit).
  int max_concurrent_calls = 0;

  // ForRequests returns the limits of a server whose largest request is `max_request_bytes`:
  // that (at most INT_MAX), and a quota of twice it, at least 64 MiB, so that a few such
  // requests fit at once.
  static ServerLimits ForRequests(int64_t max_request_bytes);
};

// ConfigureServer sets `limits` on a server being built; replies are not limited. The server
// listens only on the ports it is given (no SO_REUSEPORT clones, which gRPC binds to ports of
// their own when the port is chosen by the OS).
void ConfigureServer(grpc::ServerBuilder* builder, const ServerLimits& limits);

// GrpcDeadline converts an absl deadline for ClientContext::set_deadline.
std::chrono::system_clock::time_point GrpcDeadline(absl::Time deadline);

// LocalHostname returns this machine's host name ("unknown" when it cannot be read).
std::string LocalHostname();

}  // namespace kvstore

#endif  // KVSTORE_COMMON_GRPC_CHANNEL_H_
