#include "common/view_epoch.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>

#include "absl/strings/str_cat.h"

namespace kvstore {
namespace {

TEST_CASE("ViewEpoch: a stale-view refusal names the epoch it needs", "[view_epoch]") {
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 random(seed);
  for (int i = 0; i < 100; ++i) {
    const uint64_t have = random() % 1000;
    const uint64_t need = have + 1 + random() % (uint64_t{1} << 62);
    const absl::Status refusal = StaleViewError(have, need);
    CHECK(absl::IsAborted(refusal));
    REQUIRE(RequiredViewEpoch(refusal).has_value());
    CHECK(*RequiredViewEpoch(refusal) == need);
    // Prefixed on the way (the caller names the server): still found.
    const absl::Status named(refusal.code(),
                             absl::StrCat("server 1 at 127.0.0.1:9: ", refusal.message()));
    CHECK(RequiredViewEpoch(named) == need);
  }
}

TEST_CASE("ViewEpoch: other errors ask for no epoch", "[view_epoch]") {
  CHECK_FALSE(RequiredViewEpoch(absl::OkStatus()).has_value());
  CHECK_FALSE(RequiredViewEpoch(absl::AbortedError("the job failed")).has_value());
  // The words under another code are not a refusal.
  CHECK_FALSE(
      RequiredViewEpoch(absl::UnavailableError(StaleViewError(1, 2).message())).has_value());
  CHECK_FALSE(
      RequiredViewEpoch(absl::AbortedError("routed by view epoch 1; this copy needs epoch x"))
          .has_value());
  CHECK(ParseViewEpoch("17") == 17);
  CHECK(ParseViewEpoch("") == 0);
  CHECK(ParseViewEpoch("-3") == 0);
}

}  // namespace
}  // namespace kvstore
