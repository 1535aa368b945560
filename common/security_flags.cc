#include "common/security_flags.h"

#include <spdlog/spdlog.h>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_auth.h"

ABSL_FLAG(std::string, secret_file, "",
          "File holding the job secret (chmod 600); KV_SECRET_FILE when unset. Every call of "
          "the job is then authenticated.");
ABSL_FLAG(std::string, tls_ca, "", "TLS: the job's CA certificate (PEM); KV_TLS_CA when unset.");
ABSL_FLAG(std::string, tls_cert, "",
          "TLS: this node's certificate chain (PEM); KV_TLS_CERT when unset.");
ABSL_FLAG(std::string, tls_key, "", "TLS: this node's private key (PEM); KV_TLS_KEY when unset.");
ABSL_FLAG(bool, tls_mutual, false,
          "TLS: daemons require and verify client certificates signed by the CA.");
ABSL_FLAG(bool, insecure, false,
          "Let a daemon run without a job secret, or without TLS on a non-loopback address.");

namespace kvstore {
namespace {

std::string FlagOr(const absl::Flag<std::string>& flag, const std::optional<std::string>& env) {
  const std::string value = absl::GetFlag(flag);
  return !value.empty() ? value : env.value_or("");
}

}  // namespace

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" ||
         absl::StartsWith(host, "127.");
}

absl::StatusOr<SecurityOptions> SecurityFromFlags(const JobEnvironment& env,
                                                  const SecurityRole& role) {
  SecurityOptions security;
  const std::string secret_file = FlagOr(FLAGS_secret_file, env.secret_file);
  if (!secret_file.empty()) {
    absl::StatusOr<std::string> secret = ReadSecretFile(secret_file);
    if (!secret.ok()) return secret.status();
    security.secret = *std::move(secret);
  }
  security.tls.ca_file = FlagOr(FLAGS_tls_ca, env.tls_ca);
  security.tls.cert_file = FlagOr(FLAGS_tls_cert, env.tls_cert);
  security.tls.key_file = FlagOr(FLAGS_tls_key, env.tls_key);
  security.tls.mutual = absl::GetFlag(FLAGS_tls_mutual);
  if (!role.daemon) return security;
  const bool insecure = absl::GetFlag(FLAGS_insecure);
  if (security.secret.empty()) {
    if (!insecure) {
      return absl::FailedPreconditionError(
          "no job secret: pass --secret_file=PATH (or set KV_SECRET_FILE) naming a file only "
          "you can read, e.g. `openssl rand -hex 32 > secret && chmod 600 secret`, the same "
          "for every node of the job; or --insecure to let anyone who reaches the port act "
          "as any node");
    }
    spdlog::warn("running without a job secret (--insecure): any process that reaches this "
                 "port can act as any node of the job");
  }
  if (!security.tls.enabled() && !IsLoopback(role.bind_host)) {
    if (!insecure) {
      return absl::FailedPreconditionError(absl::StrCat(
          "bound to ", role.bind_host, " without TLS: pass --tls_ca, --tls_cert and --tls_key "
          "(deploy/make-certs.sh makes them), or --insecure to send the job's values in the "
          "clear"));
    }
    spdlog::warn("serving on {} without TLS (--insecure): values and credentials travel in "
                 "the clear", role.bind_host);
  }
  if (security.tls.enabled() &&
      (security.tls.cert_file.empty() || security.tls.key_file.empty())) {
    return absl::InvalidArgumentError(
        "a daemon with TLS needs --tls_cert and --tls_key besides --tls_ca");
  }
  return security;
}

}  // namespace kvstore
