// The security flags every binary shares (kvserver, scheduler, kvctl, custom kvservers):
//
//   --secret_file=PATH  the job secret (common/job_auth.h); KV_SECRET_FILE when unset
//   --tls_ca=PATH --tls_cert=PATH --tls_key=PATH   TLS (KV_TLS_CA, KV_TLS_CERT, KV_TLS_KEY)
//   --tls_mutual        daemons require and verify client certificates
//   --insecure          a daemon may run without a secret, or unencrypted on a non-loopback
//                       address (it says so in its log); KV_INSECURE=1 when unset
//
// SecurityFromFlags reads them once, in main(), after InitFlags.
#ifndef KVSTORE_COMMON_SECURITY_FLAGS_H_
#define KVSTORE_COMMON_SECURITY_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/daemon_security.h"
#include "common/environment.h"
#include "common/security_options.h"

namespace kvstore {

// SecuritySettingsFromFlags returns what the flags gave (common/daemon_security.h).
SecuritySettings SecuritySettingsFromFlags();

// SecurityFromFlags is ResolveSecurity(env, SecuritySettingsFromFlags(), role): the flags,
// falling back to `env` (KV_SECRET_FILE, KV_TLS_*, KV_INSECURE).
absl::StatusOr<SecurityOptions> SecurityFromFlags(const JobEnvironment& env,
                                                  const SecurityRole& role);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_SECURITY_FLAGS_H_
