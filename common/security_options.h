// SecurityOptions: how a node proves it belongs to its job and protects its links - the job
// secret (common/job_auth.h) and TLS files - for the daemons, kvctl and the SDK alike.
#ifndef KVSTORE_COMMON_SECURITY_OPTIONS_H_
#define KVSTORE_COMMON_SECURITY_OPTIONS_H_

#include <string>

namespace kvstore {

// TlsOptions: PEM files. TLS is on when `ca_file` is set: clients verify the peer's
// certificate against it; daemons present `cert_file` / `key_file`. With `mutual`, daemons
// also require and verify a client certificate (clients then present theirs).
struct TlsOptions {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  bool mutual = false;
  bool enabled() const { return !ca_file.empty(); }
  // transport names what the links run over, for logs: "plaintext", "TLS" or "mutual TLS".
  const char* transport() const { return !enabled() ? "plaintext" : mutual ? "mutual TLS" : "TLS"; }
};

struct SecurityOptions {
  // The job secret (the file's contents, not its name). Empty: calls carry no credentials,
  // and a daemon checks none.
  std::string secret;
  TlsOptions tls;
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_SECURITY_OPTIONS_H_
