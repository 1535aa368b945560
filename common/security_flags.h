// The security flags every binary shares (kvserver, scheduler, kvctl, custom kvservers):
//
//   --secret_file=PATH  the job secret (common/job_auth.h); KV_SECRET_FILE when unset
//   --tls_ca=PATH --tls_cert=PATH --tls_key=PATH   TLS (KV_TLS_CA, KV_TLS_CERT, KV_TLS_KEY)
//   --tls_mutual        daemons require and verify client certificates
//   --insecure          a daemon may run without a secret, or unencrypted on a non-loopback
//                       address (it says so in its log)
//
// SecurityFromFlags reads them once, in main(), after InitFlags.
#ifndef KVSTORE_COMMON_SECURITY_FLAGS_H_
#define KVSTORE_COMMON_SECURITY_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/environment.h"
#include "common/security_options.h"

namespace kvstore {

// Who reads the flags: a daemon bound to `bind_host`, or a client (kvctl).
struct SecurityRole {
  bool daemon = false;
  std::string bind_host;
};

// SecurityFromFlags returns the security options from the flags, falling back to `env`
// (KV_SECRET_FILE, KV_TLS_*). A daemon without a secret is refused (FailedPrecondition saying
// how to make one) unless --insecure; so is a daemon bound to an address other than loopback
// without TLS. The secret file's errors are returned as they are.
absl::StatusOr<SecurityOptions> SecurityFromFlags(const JobEnvironment& env,
                                                  const SecurityRole& role);

// IsLoopback is true for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopback(const std::string& host);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_SECURITY_FLAGS_H_
