// Job authentication: the job secret and the credentials derived from it.
//
// A job has one secret, a file only its owner can read (deploy/launch.py writes a fresh one per
// job; daemons take --secret_file, the SDK and kvctl KV_SECRET_FILE or --secret_file). The
// secret itself never travels: every call carries credentials derived from it, compared in
// constant time:
// - the job token (metadata kJobTokenKey), HMAC-SHA256(secret, "kvstore job"): proof that the
//   caller holds the secret. Registration needs it; so do kvctl's calls.
// - a node token ("NODE_ID:TOKEN": metadata kNodeTokenKey on calls to the scheduler; in the
//   request itself, proto::RequestNode's node_credential, on calls to a kvserver, where
//   metadata would cost small calls more than the check), HMAC-SHA256 of the node id under a
//   node key derived from the secret and the job's id (HMAC-SHA256(secret, "kvstore node key "
//   + JOB_ID), the id drawn at random by the scheduler that forms the job), so that a
//   scheduler restarted in place, or a standby, checks the tokens its predecessor issued
//   without any state of its own, while tokens of another job of the same secret are
//   worthless. The scheduler issues each node its token when it registers, and gives
//   every kvserver the tokens of the job's workers and its own; a kvserver then accepts a
//   request only from the node its token names. Only the secret's holders - the job's own
//   processes - can compute a token: a process without the secret cannot read, push or poison
//   request ids as any node. (A process with the secret could compute another node's token;
//   the secret is the job's trust boundary, docs/security.md.)
// A daemon started without a secret checks nothing (its binary refuses that unless told
// --insecure).
//
// Threading: the functions are thread-safe; NodeKey is immutable once made.
#ifndef KVSTORE_COMMON_JOB_AUTH_H_
#define KVSTORE_COMMON_JOB_AUTH_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvstore {

// gRPC metadata keys (lower case, as gRPC requires).
inline constexpr char kJobTokenKey[] = "kv-job-token";
inline constexpr char kNodeTokenKey[] = "kv-node-token";

// The shortest secret accepted, in bytes.
inline constexpr size_t kMinSecretBytes = 16;

// ReadSecretFile returns the secret in `path` (its contents less trailing whitespace).
// NotFound / PermissionDenied naming the file when it cannot be read; PermissionDenied when
// others than its owner may read or write it (chmod 600); InvalidArgument when it holds fewer
// than kMinSecretBytes bytes. The secret never appears in a message.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

// NewSecret returns a fresh random secret (hex text, 64 characters).
std::string NewSecret();

// JobToken returns the job token of `secret` (hex).
std::string JobToken(absl::string_view secret);

// TokensEqual compares two tokens in time that depends only on their lengths.
bool TokensEqual(absl::string_view a, absl::string_view b);

// NodeKey: the scheduler's key for node tokens.
class NodeKey {
 public:
  // Random makes a fresh key.
  static NodeKey Random();
  // ForJob derives the key of job `job_id` from the job's secret: every scheduler of the job
  // makes the same one.
  static NodeKey ForJob(absl::string_view secret, absl::string_view job_id);
  // TokenFor returns node `node_id`'s token (hex).
  std::string TokenFor(uint64_t node_id) const;

 private:
  std::string key_;
};

// NodeCredential: "NODE_ID:TOKEN" as it travels in kNodeTokenKey.
std::string NodeCredential(uint64_t node_id, absl::string_view token);
// ParseNodeCredential splits a credential; nothing when it is malformed. `token` views the
// credential's bytes (no copy: a kvserver parses one per request).
struct ParsedCredential {
  uint64_t node_id = 0;
  absl::string_view token;
};
std::optional<ParsedCredential> ParseNodeCredential(absl::string_view credential);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_JOB_AUTH_H_
