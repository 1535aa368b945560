#include "common/security_flags.h"

#include "absl/flags/flag.h"

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

SecuritySettings SecuritySettingsFromFlags() {
  SecuritySettings given;
  given.secret_file = absl::GetFlag(FLAGS_secret_file);
  given.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  given.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  given.tls_key = absl::GetFlag(FLAGS_tls_key);
  given.tls_mutual = absl::GetFlag(FLAGS_tls_mutual);
  given.insecure = absl::GetFlag(FLAGS_insecure);
  return given;
}

absl::StatusOr<SecurityOptions> SecurityFromFlags(const JobEnvironment& env,
                                                  const SecurityRole& role) {
  return ResolveSecurity(env, SecuritySettingsFromFlags(), role);
}

}  // namespace kvstore
