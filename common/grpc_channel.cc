#include "common/grpc_channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvstore {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Reconnect quickly after a peer restarts (the default backoff grows to two minutes): a
  // scheduler restarted in place is reached within half a second of listening again.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  // Despite its name, gRPC takes this as the time one connection attempt may take (TCP
  // connect, the TLS handshake, the first SETTINGS frame), not as a backoff. 100 ms is too short
  // for a TLS handshake on a busy machine or a distant peer: the attempt fails ("connection
  // attempt timed out before receiving SETTINGS frame"), and so do calls without
  // wait_for_ready.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  // A fixed window of 2 MiB per stream for what this side receives (a pulled chunk is 1 MiB),
  // instead of the window gRPC's BDP probing sizes: with the probe, a pull's server stalled
  // whenever the thread that reads the replies was busy copying the previous one out, waiting
  // for the window to open (docs/performance.md, entry 45). 2 MiB covers a link's
  // bandwidth-delay product up to about 16 Gb/s at 1 ms, or 100 Gb/s at 150 us, per stream.
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(address, credentials, args);
}

namespace {

// ReadPem returns the contents of a PEM file named by a TLS option.
absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  if (in) contents << in.rdbuf();
  if (!in || contents.str().empty()) {
    return absl::NotFoundError(absl::StrCat("TLS ", what, " file ", path, " cannot be read"));
  }
  return contents.str();
}

// CheckTlsOptions refuses options that name TLS files or mutual TLS but no CA (TLS would be
// off although asked for), and a certificate without its key or a key without its certificate.
absl::Status CheckTlsOptions(const TlsOptions& tls) {
  if (!tls.enabled() && (!tls.cert_file.empty() || !tls.key_file.empty() || tls.mutual)) {
    return absl::InvalidArgumentError(
        "TLS certificate, key or mutual TLS given without the CA (--tls_ca or KV_TLS_CA): TLS "
        "needs the CA to verify peers");
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs a certificate (--tls_cert or KV_TLS_CERT) and its key (--tls_key or "
        "KV_TLS_KEY) together");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const TlsOptions& tls) {
  RETURN_IF_ERROR(CheckTlsOptions(tls));
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(tls.ca_file, "CA"));
  if (!tls.cert_file.empty() || !tls.key_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem(tls.cert_file, "certificate"));
    ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem(tls.key_file, "key"));
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsOptions& tls) {
  RETURN_IF_ERROR(CheckTlsOptions(tls));
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      tls.mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                 : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(tls.ca_file, "CA"));
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(tls.cert_file, "certificate"));
  ASSIGN_OR_RETURN(pair.private_key, ReadPem(tls.key_file, "key"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  return grpc::SslServerCredentials(ssl);
}

ServerLimits ServerLimits::ForRequests(int64_t max_request_bytes) {
  ServerLimits limits;
  limits.max_receive_bytes =
      std::clamp<int64_t>(max_request_bytes, 0, std::numeric_limits<int>::max());
  limits.memory_quota_bytes = std::max<int64_t>(2 * limits.max_receive_bytes, 64 << 20);
  return limits;
}

void ConfigureServer(grpc::ServerBuilder* builder, const ServerLimits& limits) {
  builder->SetMaxReceiveMessageSize(static_cast<int>(
      std::clamp<int64_t>(limits.max_receive_bytes, 0, std::numeric_limits<int>::max())));
  builder->SetMaxSendMessageSize(-1);
  grpc::ResourceQuota quota;
  quota.Resize(static_cast<size_t>(std::max<int64_t>(limits.memory_quota_bytes, 1)));
  builder->SetResourceQuota(quota);  // The builder keeps its own reference.
  // No SO_REUSEPORT: with it gRPC clones each listener once per poller, and a port chosen by
  // the OS (port 0) is chosen again for each clone - the daemon would also serve on ports it
  // never advertised.
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (limits.max_concurrent_calls > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_concurrent_calls);
  }
}

std::chrono::system_clock::time_point GrpcDeadline(absl::Time deadline) {
  return absl::ToChronoTime(deadline);
}

std::string LocalHostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "unknown";
  return name;
}

}  // namespace kvstore
