#include "common/key_value_config.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

// The variables a test binds: two plain numbers, an optional number and a flag.
struct Config {
  double lr = 0.01;
  double wd = 0;
  std::optional<double> beta1;
  std::optional<bool> centered;
};

KeyValueFields Fields(Config* c) {
  KeyValueFields fields("test config");
  fields.Number("lr", &c->lr)
      .Number("wd", &c->wd)
      .Number("beta1", &c->beta1)
      .Flag("centered", &c->centered);
  return fields;
}

bool Mentions(const absl::Status& s, absl::string_view text) {
  return absl::StrContains(s.message(), text);
}

TEST_CASE("KeyValueFields: fields in any order and separation set their variables", "[config]") {
  Config c;
  REQUIRE(Fields(&c).Parse(" lr=0.5,beta1=0.8 ,, centered=true\twd=1e-4\n").ok());
  CHECK(c.lr == 0.5);
  CHECK(c.wd == 1e-4);
  CHECK(c.beta1 == 0.8);
  CHECK(c.centered == true);

  Config untouched;
  REQUIRE(Fields(&untouched).Parse("").ok());
  REQUIRE(Fields(&untouched).Parse(" , ").ok());
  CHECK(untouched.lr == 0.01);
  CHECK(!untouched.beta1.has_value());
  CHECK(!untouched.centered.has_value());

  Config later;
  REQUIRE(Fields(&later).Parse("lr=1 lr=2 centered=1 centered=no").ok());
  CHECK(later.lr == 2);
  CHECK(later.centered == false);
}

TEST_CASE("KeyValueFields: random configurations parse to the values written", "[config]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  const char* separators[] = {" ", ",", ", ", "  ", "\t", " ,\n"};
  for (int round = 0; round < 200; ++round) {
    const double lr = rng.Uniform(-10, 10), wd = rng.Uniform(0, 1e-3);
    const double beta1 = rng.Uniform(0, 1);
    const bool centered = rng.Int(0, 1) == 1;
    std::vector<std::string> fields = {
        absl::StrFormat("lr=%.17g", lr), absl::StrFormat("wd=%.17g", wd),
        absl::StrFormat("beta1=%.17g", beta1), centered ? "centered=true" : "centered=false"};
    std::shuffle(fields.begin(), fields.end(), rng.engine());
    std::string text;
    for (const std::string& field : fields) {
      text += separators[rng.Int(0, 5)] + field;
    }
    INFO(text);
    Config c;
    REQUIRE(Fields(&c).Parse(text).ok());
    CHECK(c.lr == lr);
    CHECK(c.wd == wd);
    CHECK(c.beta1 == beta1);
    CHECK(c.centered == centered);
  }
}

TEST_CASE("KeyValueFields: a bad field is InvalidArgument naming it, wherever it stands",
          "[config]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  struct Bad {
    const char* field;
    const char* named;  // What the error must name.
    const char* says;
  };
  const Bad bad[] = {
      {"lr", "\"lr\"", "not name=value"},
      {"=0.1", "\"=0.1\"", "not name=value"},
      {"lr=", "\"lr=\"", "not name=number"},
      {"lr=0.1=5", "\"lr=0.1=5\"", "not name=number"},
      {"lr=fast", "\"lr=fast\"", "not name=number"},
      {"centered=maybe", "\"centered=maybe\"", "not name=true|false"},
      {"gamma=1", "\"gamma\"", "known: lr, wd, beta1, centered"},
      {"gamma=x", "\"gamma\"", "has no field"},
  };
  for (const Bad& b : bad) {
    std::vector<std::string> fields = {"lr=0.2", "wd=0", "beta1=0.5"};
    fields.insert(fields.begin() + rng.Int(0, 3), b.field);
    std::string text;
    for (const std::string& field : fields) text += field + (rng.Int(0, 1) ? " " : ",");
    INFO(text);
    Config c;
    const absl::Status status = Fields(&c).Parse(text);
    INFO(status.ToString());
    CHECK(absl::IsInvalidArgument(status));
    CHECK(Mentions(status, "test config"));
    CHECK(Mentions(status, b.named));
    CHECK(Mentions(status, b.says));
  }
}

}  // namespace
}  // namespace kvstore
