#include "common/grpc_status.h"

#include <catch2/catch.hpp>

#include "common/logging.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST_CASE("GrpcStatus: every code and message survives both directions", "[status]") {
  for (int code = 0; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code),
                              code == 0 ? "" : "key 3: shape (2, 3) vs (3, 2)");
    const grpc::Status wire = ToGrpcStatus(status);
    REQUIRE(static_cast<int>(wire.error_code()) == code);
    REQUIRE(FromGrpcStatus(wire) == status);
  }
}

TEST_CASE("StatusMacros: propagate the first error", "[status]") {
  REQUIRE(Quarter(12).value() == 3);
  REQUIRE(absl::IsInvalidArgument(Quarter(6).status()));
  REQUIRE(CheckEven(4).ok());
  REQUIRE(absl::IsInvalidArgument(CheckEven(5)));
}

TEST_CASE("Logging: accepts known levels and rejects others", "[logging]") {
  REQUIRE(InitLogging({"test", "debug"}).ok());
  REQUIRE(InitLogging({"test", "off"}).ok());
  REQUIRE(absl::IsInvalidArgument(InitLogging({"test", "loud"})));
}

}  // namespace
}  // namespace kvstore
