#include "common/job_auth.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "tests/test_util.h"

namespace kvstore {
namespace {

std::string WriteFile(const std::string& name, const std::string& contents, mode_t mode) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
  chmod(path.c_str(), mode);
  return path;
}

TEST_CASE("ReadSecretFile: reads an owner-only file, refuses others with a reason", "[auth]") {
  const std::string secret = NewSecret();
  SECTION("an owner-only file of a fresh secret") {
    const auto read = ReadSecretFile(WriteFile("secret_ok", secret + "\n", 0600));
    REQUIRE(read.ok());
    CHECK(*read == secret);
  }
  SECTION("a file others may read") {
    const std::string path = WriteFile("secret_open", secret, 0644);
    const auto read = ReadSecretFile(path);
    REQUIRE(absl::IsPermissionDenied(read.status()));
    CHECK(std::string(read.status().message()).find(path) != std::string::npos);
    CHECK(std::string(read.status().message()).find(secret) == std::string::npos);
  }
  SECTION("a secret too short") {
    CHECK(absl::IsInvalidArgument(ReadSecretFile(WriteFile("secret_short", "abc", 0600)).status()));
  }
  SECTION("a missing file") {
    CHECK(absl::IsNotFound(ReadSecretFile("/nonexistent/kvstore/secret").status()));
  }
}

TEST_CASE("JobToken and NodeKey: tokens depend on the secret, the key and the node", "[auth]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  const std::string a = NewSecret();
  const std::string b = NewSecret();
  CHECK(a != b);
  CHECK(JobToken(a) == JobToken(a));
  CHECK(JobToken(a) != JobToken(b));
  CHECK(JobToken(a).find(a) == std::string::npos);
  const NodeKey key = NodeKey::Random();
  const NodeKey other = NodeKey::Random();
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const uint64_t node = static_cast<uint64_t>(rng.Int(1, 1 << 30));
    CHECK(key.TokenFor(node) == key.TokenFor(node));
    CHECK(key.TokenFor(node) != other.TokenFor(node));
    seen.insert(key.TokenFor(node) + ":" + std::to_string(node));
  }
  std::set<std::string> tokens;
  for (const std::string& entry : seen) tokens.insert(entry.substr(0, entry.find(':')));
  CHECK(tokens.size() == seen.size());  // No two nodes share a token.
}

TEST_CASE("TokensEqual and credentials: exact matches only", "[auth]") {
  const NodeKey key = NodeKey::Random();
  const std::string token = key.TokenFor(7);
  CHECK(TokensEqual(token, token));
  std::string flipped = token;
  flipped.back() = flipped.back() == '0' ? '1' : '0';
  CHECK_FALSE(TokensEqual(token, flipped));
  CHECK_FALSE(TokensEqual(token, token.substr(1)));
  CHECK_FALSE(TokensEqual(token, ""));
  const std::string credential = NodeCredential(7, token);  // `parsed` views it.
  const auto parsed = ParseNodeCredential(credential);
  REQUIRE(parsed.has_value());
  CHECK(parsed->node_id == 7);
  CHECK(parsed->token == token);
  CHECK_FALSE(ParseNodeCredential("no-colon").has_value());
  CHECK_FALSE(ParseNodeCredential("x:abc").has_value());
  CHECK_FALSE(ParseNodeCredential("-1:abc").has_value());
}

}  // namespace
}  // namespace kvstore
