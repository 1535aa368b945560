// gpu::StageEnds, the stages in which a value on a GPU goes to pinned memory while its chunks
// are sent: checked here over random chunk layouts (it needs no GPU); StageToHost itself runs
// in the GPU tests (tests/integration/gpu_store_test, tests/gpu/gpu_job).
#include "client/gpu/staging.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "tests/test_util.h"

namespace kvstore::gpu {
namespace {

TEST_CASE("StageEnds: stages end at chunk ends and double from the first chunk to the cap") {
  testing::TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 500; ++trial) {
    // Chunks of random sizes covering `total` bytes, given in a shuffled order.
    const size_t cap = static_cast<size_t>(rng.Int(1, 64)) << 10;
    std::vector<size_t> ends;
    size_t total = 0;
    const int chunks = static_cast<int>(rng.Int(1, 300));
    for (int c = 0; c < chunks; ++c) {
      total += static_cast<size_t>(rng.Int(1, 4096));
      ends.push_back(total);
    }
    std::vector<size_t> shuffled = ends;
    std::shuffle(shuffled.begin(), shuffled.end(), rng.engine());
    INFO("trial " << trial << ", " << chunks << " chunks, " << total << " bytes, cap " << cap);
    const std::vector<size_t> stages = StageEnds(shuffled, total, cap);

    REQUIRE(!stages.empty());
    REQUIRE(stages.back() == total);
    REQUIRE(std::is_sorted(stages.begin(), stages.end()));
    REQUIRE(std::adjacent_find(stages.begin(), stages.end()) == stages.end());
    const std::set<size_t> chunk_ends(ends.begin(), ends.end());
    for (size_t end : stages) REQUIRE(chunk_ends.count(end) == 1);
    // The first stage is the first chunk.
    REQUIRE(stages.front() == ends.front());
    // Every later stage but the last is the shortest run of chunks reaching its target:
    // twice the one before (the first chunk's size doubled), at most the cap.
    size_t target = ends.front();
    for (size_t s = 1; s + 1 < stages.size(); ++s) {
      target = std::min(target * 2, cap);
      const size_t begin = stages[s - 1], end = stages[s];
      REQUIRE(end - begin >= target);
      const size_t before_last = *std::prev(chunk_ends.find(end));
      REQUIRE(before_last - begin < target);
    }
    // Few stages: the sizes grow geometrically to the cap, then the cap takes the rest.
    REQUIRE(stages.size() <= 2 + 64 + total / cap);
  }
}

TEST_CASE("StageEnds: a value of 100 MB in 512 KiB chunks takes 11 stages") {
  std::vector<size_t> ends;
  const size_t total = 100u << 20, chunk = 512u << 10;
  for (size_t end = chunk; end <= total; end += chunk) ends.push_back(end);
  const std::vector<size_t> stages = StageEnds(ends, total);
  // 0.5, 1, 2, 4, 8, 16, 16, ... MiB.
  REQUIRE(stages.front() == chunk);
  REQUIRE(stages[1] - stages[0] == 2 * chunk);
  REQUIRE(stages.size() == 11);  // ..., 16, 16, 16, 16 and the last 4.5 MiB.
  REQUIRE(StageEnds({}, 4096) == std::vector<size_t>{4096});
  REQUIRE(StageEnds({4096}, 4096) == std::vector<size_t>{4096});
}

}  // namespace
}  // namespace kvstore::gpu
