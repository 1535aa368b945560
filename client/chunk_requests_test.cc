#include "client/chunk_requests.h"

#include <catch2/catch.hpp>

#include "tests/test_util.h"

namespace kvstore {
namespace {

TEST_CASE("RequestRuns: pushes and pulls carry chunks up to the request size", "[transfer]") {
  const std::vector<int64_t> chunks = {512, 512, 512, 512, 300};
  CHECK(RequestRuns(Kind::kPush, chunks, 1024) == std::vector<size_t>{2, 2, 1});
  CHECK(RequestRuns(Kind::kPull, chunks, 1324) == std::vector<size_t>{2, 3});
  CHECK(RequestRuns(Kind::kPushPull, chunks, 1024) == std::vector<size_t>{1, 1, 1, 1, 1});
  CHECK(RequestRuns(Kind::kInitFill, chunks, 1024) == std::vector<size_t>{1, 1, 1, 1, 1});
  // A chunk bigger than a request goes alone.
  CHECK(RequestRuns(Kind::kPush, std::vector<int64_t>{100, 2000, 100}, 1024) ==
        std::vector<size_t>{1, 1, 1});
  CHECK(RequestRuns(Kind::kPush, {}, 1024).empty());
}

TEST_CASE("RequestRuns, random chunks: runs cover every chunk once, each within the size",
          "[transfer]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 500; ++trial) {
    const Kind kind = rng.Int(0, 1) == 0 ? Kind::kPush : Kind::kPull;
    const int64_t request = rng.Int(1, 4096);
    std::vector<int64_t> chunks(static_cast<size_t>(rng.Int(0, 30)));
    for (int64_t& c : chunks) c = rng.Int(1, 2048);
    INFO("trial " << trial << ": " << chunks.size() << " chunks, requests of " << request);
    const std::vector<size_t> runs = RequestRuns(kind, chunks, request);
    size_t at = 0;
    for (size_t r = 0; r < runs.size(); ++r) {
      REQUIRE(runs[r] >= 1);
      REQUIRE(at + runs[r] <= chunks.size());
      int64_t bytes = 0;
      for (size_t k = at; k < at + runs[r]; ++k) bytes += chunks[k];
      // Within the size, or a single chunk that alone exceeds it.
      REQUIRE((bytes <= request || runs[r] == 1));
      // As long as it can be: the next chunk would not have fitted.
      if (at + runs[r] < chunks.size()) REQUIRE(bytes + chunks[at + runs[r]] > request);
      at += runs[r];
    }
    REQUIRE(at == chunks.size());
  }
}

}  // namespace
}  // namespace kvstore
