// CutGate: the phases of a cut, which pushes it holds, and the order it lets them go in.
#include "server/core/cut_gate.h"

#include <catch2/catch.hpp>
#include <vector>

#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

TEST_CASE("CutGate holds what would open a round while frozen or pass the cut's round") {
  TestRng rng;
  INFO(rng.Describe());
  CutGate gate;
  CHECK_FALSE(gate.active());
  CHECK_FALSE(gate.Holds(false, 5));  // No cut: nothing held.

  REQUIRE(gate.Begin().ok());
  CHECK(gate.phase() == CutGate::Phase::kFrozen);
  const absl::Status again = gate.Begin();
  CHECK(again.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(gate.Holds(false, 0));       // Would open a round: frozen.
  CHECK_FALSE(gate.Holds(true, 0));  // Joins an open round: goes on.

  std::vector<int> ran;
  std::vector<absl::StatusCode> codes;
  const int held = static_cast<int>(rng.Int(1, 6));
  for (int i = 0; i < held; ++i) {
    gate.Hold([&ran, &codes, i](absl::Status status) {
      ran.push_back(i);
      codes.push_back(status.code());
    });
  }
  const int64_t round = rng.Int(1, 100);
  const absl::Time now = absl::Now();
  // dist_async keeps them held at Limit.
  CHECK(gate.Limit(round, now, /*release_held=*/false).empty());
  CHECK(gate.phase() == CutGate::Phase::kLimited);
  CHECK(gate.round() == round);
  CHECK_FALSE(gate.Holds(false, round - 1));  // Below the cut: opens its round.
  CHECK(gate.Holds(false, round));            // Would start round + 1, past the cut.
  CHECK_FALSE(gate.Holds(true, round));
  CHECK(gate.CatchingUp(now + absl::Seconds(1), absl::Seconds(2)));
  CHECK_FALSE(gate.CatchingUp(now + absl::Seconds(3), absl::Seconds(2)));

  for (CutGate::Held& push : gate.End()) push(absl::CancelledError("refused"));
  CHECK_FALSE(gate.active());
  std::vector<int> in_order;
  for (int i = 0; i < held; ++i) in_order.push_back(i);
  CHECK(ran == in_order);  // Arrival order.
  for (absl::StatusCode code : codes) CHECK(code == absl::StatusCode::kCancelled);
  CHECK(gate.End().empty());
}

TEST_CASE("CutGate in dist_sync lets the held pushes go on at Limit") {
  CutGate gate;
  REQUIRE(gate.Begin().ok());
  int ran = 0;
  gate.Hold([&ran](absl::Status status) { ran += status.ok() ? 1 : 100; });
  gate.Hold([&ran](absl::Status status) { ran += status.ok() ? 1 : 100; });
  std::vector<CutGate::Held> release = gate.Limit(3, absl::Now(), /*release_held=*/true);
  REQUIRE(release.size() == 2);
  for (CutGate::Held& push : release) push(absl::OkStatus());
  CHECK(ran == 2);
  CHECK(gate.End().empty());
}

}  // namespace
}  // namespace kvstore
