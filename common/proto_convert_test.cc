// Tests of SerializeWhole: a message over protobuf's 2 GiB limit is refused, naming it, where
// SerializeAsString would return nothing.
#include "common/proto_convert.h"

#include <catch2/catch.hpp>
#include <string>

namespace kvstore {
namespace {

TEST_CASE("SerializeWhole: a message over 2 GiB is refused, naming it", "[proto]") {
  proto::UpdaterState state;
  proto::PartState* part = state.add_parts();
  part->add_buffers(std::string(1000, 'x'));
  absl::StatusOr<std::string> small = SerializeWhole(state, "a small state");
  REQUIRE(small.ok());
  CHECK(*small == state.SerializeAsString());
  // 2.2 GB of state: what a server with Adam over 0.55 GB of values would send.
  part->set_master(std::string(size_t{2200} << 20, 'y'));
  CHECK(state.SerializeAsString().empty());  // What was written before.
  const absl::Status big = SerializeWhole(state, "the optimizer state of server 3").status();
  INFO(big.ToString());
  CHECK(absl::IsResourceExhausted(big));
  CHECK(big.message().find("the optimizer state of server 3 is 2306868") !=
        absl::string_view::npos);
}

}  // namespace
}  // namespace kvstore
