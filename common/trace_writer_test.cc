#include "common/trace_writer.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

std::string TempFile(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

TEST_CASE("TraceWriter: events from many threads make a Chrome trace that parses", "[trace]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  const std::string path = TempFile("trace_writer_test.json");
  auto writer = TraceWriter::Open(path, "worker \"0\"");
  REQUIRE(writer.ok());
  (*writer)->NameRow(0, "operations");
  const absl::Time base = absl::FromUnixMicros(1'800'000'000'000'000);
  constexpr int kThreads = 4;
  std::vector<int> per_thread(kThreads);
  for (int& n : per_thread) n = static_cast<int>(rng.Int(10, 200));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < per_thread[t]; ++i) {
        (*writer)->Complete(absl::StrCat("push ", t, "\n\"", i), "operation", t,
                            base + absl::Microseconds(i), base + absl::Microseconds(i + t + 1),
                            {{"key", absl::StrCat(i)}});
      }
    });
  }
  for (auto& thread : threads) thread.join();
  REQUIRE((*writer)->Close().ok());

  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  google::protobuf::ListValue events;
  const auto parsed = google::protobuf::util::JsonStringToMessage(text.str(), &events);
  INFO(parsed.ToString());
  REQUIRE(parsed.ok());
  std::vector<int> seen(kThreads, 0);
  int metadata = 0;
  for (const auto& value : events.values()) {
    const auto& fields = value.struct_value().fields();
    if (fields.at("ph").string_value() == "M") {
      ++metadata;
      continue;
    }
    REQUIRE(fields.at("ph").string_value() == "X");
    const int row = static_cast<int>(fields.at("tid").number_value());
    REQUIRE(row >= 0);
    REQUIRE(row < kThreads);
    const int i = std::stoi(fields.at("args").struct_value().fields().at("key").string_value());
    CHECK(fields.at("name").string_value() == absl::StrCat("push ", row, "\n\"", i));
    CHECK(fields.at("dur").number_value() == row + 1);
    CHECK(fields.at("ts").number_value() == 1'800'000'000'000'000.0 + i);
    ++seen[row];
  }
  CHECK(metadata == 2);
  for (int t = 0; t < kThreads; ++t) CHECK(seen[t] == per_thread[t]);
}

TEST_CASE("TraceWriter: a file that cannot be created is named", "[trace]") {
  auto writer = TraceWriter::Open("/nonexistent-dir/trace.json", "x");
  REQUIRE_FALSE(writer.ok());
  CHECK(writer.status().code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(writer.status().message()).find("/nonexistent-dir/trace.json") !=
        std::string::npos);
}

}  // namespace
}  // namespace kvstore
