#include "common/lost_updates.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

TEST_CASE(
    "LostUpdates: the range runs from the round after the one restored to the later of "
    "the last reported and the last acknowledged",
    "[common][reliability]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 200; ++trial) {
    LostUpdates loss;
    loss.rank = static_cast<int>(rng.Int(0, 7));
    loss.server = absl::StrCat("server ", loss.rank, " (was A, now B, node 9)");
    loss.restored_round = rng.Int(0, 1000);
    loss.restored = absl::StrCat("restarted from checkpoint ck at round ", loss.restored_round);
    loss.reported_round = rng.Int(0, 2000);
    const int64_t acknowledged = rng.Int(0, 2000);
    const bool exact = rng.Int(0, 1) == 1;
    const std::string text = Describe(loss, acknowledged, exact);
    INFO(text);
    const int64_t last = std::max(loss.reported_round, acknowledged);
    CHECK(text.rfind(absl::StrCat(loss.server, " died and was ", loss.restored), 0) == 0);
    if (last > loss.restored_round) {
      CHECK(absl::StrContains(
          text, absl::StrCat("the updates of rounds ", loss.restored_round + 1, " to ", last,
                             exact ? " that" : " (at least) that")));
    } else {
      CHECK(absl::StrContains(text, "no update it had acknowledged after round"));
    }
  }
}

}  // namespace
}  // namespace kvstore
