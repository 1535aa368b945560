#include "common/state_file.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/test_util.h"

namespace kvstore {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

bool Mentions(const absl::Status& s, absl::string_view text) {
  return s.message().find(text) != absl::string_view::npos;
}

TEST_CASE("StateFile: CRC-32 matches the standard check value", "[state]") {
  CHECK(Crc32("123456789") == 0xCBF43926u);
  CHECK(Crc32("") == 0u);
}

TEST_CASE("StateFile: the bytes of a state file are those of format version 1", "[state]") {
  const std::string payload("optimizer states\x00\x01\xfe\xff", 20);
  const std::string path = TempPath("state_file_format.bin");
  REQUIRE(WriteStateFile(path, StateKind::kUpdaterState, payload).ok());
  const std::string expected = std::string("KVSTATE\0", 8) +
                               std::string(
                                   "\x01\x00\x00\x00"                  // version
                                   "\x02\x00\x00\x00"                  // kind: updater state
                                   "\x14\x00\x00\x00\x00\x00\x00\x00"  // payload length
                                   "\x47\x92\xde\x61",                 // CRC-32 of the payload
                                   20) +
                               payload;
  CHECK(Slurp(path) == expected);
  CHECK(Crc32(payload) == 0x61de9247u);
}

TEST_CASE("StateFile: a written file reads back; damage is reported naming the file", "[state]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  std::string payload(static_cast<size_t>(rng.Int(1, 5000)), '\0');
  for (char& c : payload) c = static_cast<char>(rng.Int(0, 255));
  const std::string path = TempPath("state_file_test.bin");
  REQUIRE(WriteStateFile(path, StateKind::kUpdaterState, payload).ok());
  auto read = ReadStateFile(path, StateKind::kUpdaterState);
  REQUIRE(read.ok());
  REQUIRE(*read == payload);
  const std::string good = Slurp(path);

  // The wrong kind.
  auto wrong = ReadStateFile(path, StateKind::kShardCheckpoint);
  CHECK(absl::IsInvalidArgument(wrong.status()));
  CHECK(Mentions(wrong.status(), path));
  // Missing.
  CHECK(absl::IsNotFound(ReadStateFile(path + ".missing", StateKind::kUpdaterState).status()));
  // Truncated anywhere.
  for (size_t keep : {size_t{3}, size_t{20}, good.size() - 1}) {
    Spit(path, good.substr(0, keep));
    auto s = ReadStateFile(path, StateKind::kUpdaterState).status();
    INFO("kept " << keep << ": " << s.ToString());
    CHECK(absl::IsDataLoss(s));
    CHECK(Mentions(s, path));
  }
  // One flipped bit in the payload.
  std::string flipped = good;
  flipped[28 + static_cast<size_t>(rng.Int(0, payload.size() - 1))] ^= 0x10;
  Spit(path, flipped);
  auto s = ReadStateFile(path, StateKind::kUpdaterState).status();
  CHECK(absl::IsDataLoss(s));
  CHECK(Mentions(s, "checksum"));
  // Not a state file, and a newer version.
  Spit(path, "hello, this is not a checkpoint at all");
  CHECK(Mentions(ReadStateFile(path, StateKind::kUpdaterState).status(), "not a KVStore state"));
  std::string newer = good;
  newer[8] = 9;
  Spit(path, newer);
  CHECK(Mentions(ReadStateFile(path, StateKind::kUpdaterState).status(), "version 9"));
  // Writing again replaces the file whole.
  REQUIRE(WriteStateFile(path, StateKind::kUpdaterState, "new").ok());
  REQUIRE(ReadStateFile(path, StateKind::kUpdaterState).value() == "new");
  // An unwritable place is an error naming it.
  const absl::Status unwritable =
      WriteStateFile("/nonexistent-dir/x.bin", StateKind::kUpdaterState, "x");
  CHECK(!unwritable.ok());
  CHECK(Mentions(unwritable, "/nonexistent-dir/x.bin"));
}

}  // namespace
}  // namespace kvstore
