// Security settings of a node, resolved against the launch environment, without flags: what
// the flag-reading binaries (common/security_flags.h) and a daemon run by the SDK from the
// environment (server/role_daemon.h) both use, so that one environment gives one answer.
//
//   SecuritySettings given{.secret_file = "/etc/kv/secret"};
//   ASSIGN_OR_RETURN(SecurityOptions security,
//                    ResolveSecurity(env, given, SecurityRole{/*daemon=*/true, "0.0.0.0"}));
#ifndef KVSTORE_COMMON_DAEMON_SECURITY_H_
#define KVSTORE_COMMON_DAEMON_SECURITY_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/environment.h"
#include "common/security_options.h"

namespace kvstore {

// SecuritySettings: what a command line gave; an empty string or false means "not given" (the
// environment's KV_SECRET_FILE, KV_TLS_* and KV_INSECURE apply).
struct SecuritySettings {
  std::string secret_file;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  bool tls_mutual = false;
  bool insecure = false;
};

// Who asks: a daemon bound to `bind_host`, or a client (kvctl).
struct SecurityRole {
  bool daemon = false;
  std::string bind_host;
};

// ResolveSecurity returns the security options: each setting given, else the environment's.
// A daemon without a secret is refused (FailedPrecondition saying how to make one) unless
// insecure (--insecure or KV_INSECURE=1); so is a daemon bound to an address other than
// loopback without TLS, and one with TLS but no certificate or key. The secret file's errors
// are returned as they are.
absl::StatusOr<SecurityOptions> ResolveSecurity(const JobEnvironment& env,
                                                const SecuritySettings& given,
                                                const SecurityRole& role);

// IsLoopback is true for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopback(const std::string& host);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_DAEMON_SECURITY_H_
