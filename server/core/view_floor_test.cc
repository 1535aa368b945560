// ViewFloor: which requests each floor refuses, and what the refusal asks for.
#include "server/core/view_floor.h"

#include <catch2/catch.hpp>

#include "common/view_epoch.h"

namespace kvstore {
namespace {

TEST_CASE("ViewFloor refuses writes routed by an older view, and reads when told to") {
  ViewFloor floor;
  CHECK(floor.epoch() == 0);
  CHECK(floor.Check(0, true).ok());
  floor.Set(3, /*reads_too=*/false);
  CHECK(floor.epoch() == 3);
  const absl::Status stale = floor.Check(2, /*write=*/true);
  CHECK_FALSE(stale.ok());
  REQUIRE(RequiredViewEpoch(stale).has_value());
  CHECK(*RequiredViewEpoch(stale) == 3);
  CHECK(floor.Check(2, /*write=*/false).ok());  // Reads go on.
  CHECK(floor.Check(3, true).ok());
  CHECK(floor.Check(4, true).ok());
  floor.Set(5, /*reads_too=*/true);  // The joining server: every request.
  CHECK_FALSE(floor.Check(4, false).ok());
  CHECK(floor.Check(5, false).ok());
  floor.Set(0, false);
  CHECK(floor.Check(0, true).ok());
}

}  // namespace
}  // namespace kvstore
