#include "common/store/sgd_updater.h"

#include <catch2/catch.hpp>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kvstore {
namespace {

TEST_CASE("ParseSgdConfig: every field, separated by spaces or commas", "[sgd]") {
  auto parsed = ParseSgdConfig("lr=0.1, momentum=0.9 wd=1e-4,rescale_grad=0.25 clip_gradient=5");
  REQUIRE(parsed.ok());
  CHECK(parsed->lr == 0.1);
  CHECK(parsed->momentum == 0.9);
  CHECK(parsed->wd == 1e-4);
  CHECK(parsed->rescale_grad == 0.25);
  CHECK(parsed->clip_gradient == 5);
  auto defaults = ParseSgdConfig("");
  REQUIRE(defaults.ok());
  CHECK(defaults->lr == 0.01);
}

TEST_CASE("ParseSgdConfig: a malformed or unknown field is InvalidArgument naming it", "[sgd]") {
  // Each field, and what the error must name.
  const std::pair<const char*, const char*> cases[] = {
      {"lr=0.1=5", "\"lr=0.1=5\""}, {"lr", "\"lr\""},
      {"lr=x", "\"lr=x\""},         {"beta1=0.9", "\"beta1\""},
      {"momentum=nan", "momentum"}, {"lr=inf", "lr"}};
  for (const auto& [field, named] : cases) {
    const absl::Status status = ParseSgdConfig(absl::StrCat("wd=0 ", field)).status();
    INFO(field << ": " << status.ToString());
    CHECK(absl::IsInvalidArgument(status));
    CHECK(absl::StrContains(status.message(), named));
  }
}

}  // namespace
}  // namespace kvstore
