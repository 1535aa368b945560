// MemoryBudget: what fits, what is refused and what the refusal names.
#include "server/core/memory_budget.h"

#include <catch2/catch.hpp>
#include <string>

#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

TEST_CASE("MemoryBudget refuses what would go over its limit and counts what is added") {
  TestRng rng;
  INFO(rng.Describe());
  const int64_t limit = rng.Int(1000, 1000000);
  MemoryBudget budget(limit);
  CHECK(budget.limit() == limit);
  int64_t reference = 0;
  for (int step = 0; step < 500; ++step) {
    const int64_t bytes = rng.Int(-reference, limit / 10);
    const absl::Status fits = budget.Check(bytes, "a test value");
    REQUIRE(fits.ok() == (reference + bytes <= limit));
    if (!fits.ok()) {
      CHECK(fits.code() == absl::StatusCode::kResourceExhausted);
      const std::string message(fits.message());
      CHECK(message.find("a test value") != std::string::npos);
      CHECK(message.find(std::to_string(reference) + " bytes held") != std::string::npos);
      CHECK(message.find(std::to_string(limit) + " bytes") != std::string::npos);
      continue;
    }
    budget.Add(bytes);
    reference += bytes;
    REQUIRE(budget.held() == reference);
  }
  CHECK(budget.Check(limit - reference, "the rest").ok());
  CHECK_FALSE(budget.Check(limit - reference + 1, "one more byte").ok());
}

}  // namespace
}  // namespace kvstore
