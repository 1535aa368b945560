#include "common/job_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvstore {
namespace {

std::string HmacHex(absl::string_view key, absl::string_view message) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length));
}

std::string RandomBytes(size_t n) {
  std::string bytes(n, '\0');
  // RAND_bytes fails only when the system's entropy source does; fall back to nothing weaker.
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(n)) != 1) {
    std::ifstream urandom("/dev/urandom", std::ios::binary);
    urandom.read(bytes.data(), static_cast<std::streamsize>(n));
  }
  return bytes;
}

}  // namespace

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int error = errno;
    return absl::Status(
        error == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kPermissionDenied,
        absl::StrCat("secret file ", path, ": ", std::strerror(error)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("secret file ", path, " is not a file"));
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "secret file ", path, " may be read or written by others than its owner (mode ",
        absl::StrCat(absl::Hex(st.st_mode & 0777)), "); chmod 600 it"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(absl::StrCat("secret file ", path, " cannot be read"));
  }
  std::stringstream contents;
  contents << in.rdbuf();
  std::string secret = contents.str();
  absl::StripTrailingAsciiWhitespace(&secret);
  if (secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat("secret file ", path, " holds ", secret.size(),
                                                   " bytes; at least ", kMinSecretBytes,
                                                   " are needed"));
  }
  return secret;
}

std::string NewSecret() { return absl::BytesToHexString(RandomBytes(32)); }

std::string JobToken(absl::string_view secret) { return HmacHex(secret, "kvstore job"); }

bool TokensEqual(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

NodeKey NodeKey::Random() {
  NodeKey key;
  key.key_ = RandomBytes(32);
  return key;
}

NodeKey NodeKey::ForJob(absl::string_view secret, absl::string_view job_id) {
  NodeKey key;
  key.key_ = HmacHex(secret, absl::StrCat("kvstore node key ", job_id));
  return key;
}

std::string NodeKey::TokenFor(uint64_t node_id) const {
  return HmacHex(key_, absl::StrCat("kvstore node ", node_id));
}

std::string NodeCredential(uint64_t node_id, absl::string_view token) {
  return absl::StrCat(node_id, ":", token);
}

std::optional<ParsedCredential> ParseNodeCredential(absl::string_view credential) {
  const size_t colon = credential.find(':');
  if (colon == absl::string_view::npos) return std::nullopt;
  ParsedCredential parsed;
  if (!absl::SimpleAtoi(credential.substr(0, colon), &parsed.node_id)) return std::nullopt;
  parsed.token = credential.substr(colon + 1);
  return parsed;
}

}  // namespace kvstore
