#include "common/daemon_security.h"

#include <spdlog/spdlog.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_auth.h"

namespace kvstore {
namespace {

std::string GivenOr(const std::string& given, const std::optional<std::string>& env) {
  return !given.empty() ? given : env.value_or("");
}

}  // namespace

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || absl::StartsWith(host, "127.");
}

absl::StatusOr<SecurityOptions> ResolveSecurity(const JobEnvironment& env,
                                                const SecuritySettings& given,
                                                const SecurityRole& role) {
  SecurityOptions security;
  const std::string secret_file = GivenOr(given.secret_file, env.secret_file);
  if (!secret_file.empty()) {
    absl::StatusOr<std::string> secret = ReadSecretFile(secret_file);
    if (!secret.ok()) return secret.status();
    security.secret = *std::move(secret);
  }
  security.tls.ca_file = GivenOr(given.tls_ca, env.tls_ca);
  security.tls.cert_file = GivenOr(given.tls_cert, env.tls_cert);
  security.tls.key_file = GivenOr(given.tls_key, env.tls_key);
  security.tls.mutual = given.tls_mutual;
  if (!role.daemon) return security;
  const bool insecure = given.insecure || env.insecure;
  if (security.secret.empty()) {
    if (!insecure) {
      return absl::FailedPreconditionError(
          "no job secret: pass --secret_file=PATH (or set KV_SECRET_FILE) naming a file only "
          "you can read, e.g. `openssl rand -hex 32 > secret && chmod 600 secret`, the same "
          "for every node of the job (deploy/launch.py makes one); or --insecure (KV_INSECURE=1) "
          "to let anyone who reaches the port act as any node");
    }
    spdlog::warn(
        "running without a job secret (--insecure): any process that reaches this "
        "port can act as any node of the job");
  }
  if (!security.tls.enabled() && !IsLoopback(role.bind_host)) {
    if (!insecure) {
      return absl::FailedPreconditionError(absl::StrCat(
          "bound to ", role.bind_host,
          " without TLS: pass --tls_ca, --tls_cert and --tls_key "
          "(or set KV_TLS_CA, KV_TLS_CERT and KV_TLS_KEY; deploy/make-certs.sh makes them), or "
          "--insecure (KV_INSECURE=1) to send the job's values in the clear"));
    }
    spdlog::warn(
        "serving on {} without TLS (--insecure): values and credentials travel in "
        "the clear",
        role.bind_host);
  }
  if (security.tls.enabled() && (security.tls.cert_file.empty() || security.tls.key_file.empty())) {
    return absl::InvalidArgumentError(
        "a daemon with TLS needs --tls_cert and --tls_key (KV_TLS_CERT, KV_TLS_KEY) besides "
        "--tls_ca");
  }
  return security;
}

}  // namespace kvstore
