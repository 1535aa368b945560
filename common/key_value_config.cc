#include "common/key_value_config.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kvstore {
namespace {

// What separates fields: white space and commas.
constexpr char kSeparators[] = " \t\n\r,";

}  // namespace

KeyValueFields& KeyValueFields::Number(absl::string_view name, double* target) {
  return Bind(name, target);
}

KeyValueFields& KeyValueFields::Number(absl::string_view name, std::optional<double>* target) {
  return Bind(name, target);
}

KeyValueFields& KeyValueFields::Flag(absl::string_view name, std::optional<bool>* target) {
  return Bind(name, target);
}

KeyValueFields& KeyValueFields::Bind(absl::string_view name, Target target) {
  auto bound = std::find_if(fields_.begin(), fields_.end(),
                            [&](const auto& field) { return field.first == name; });
  if (bound != fields_.end()) {
    bound->second = target;
  } else {
    fields_.emplace_back(std::string(name), target);
  }
  return *this;
}

absl::Status KeyValueFields::Parse(absl::string_view text) const {
  for (absl::string_view field :
       absl::StrSplit(text, absl::ByAnyChar(kSeparators), absl::SkipEmpty())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(field, absl::MaxSplits('=', 1));
    if (parts.size() != 2 || parts[0].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what_, " field \"", field, "\" is not name=value"));
    }
    const absl::string_view name = parts[0], value = parts[1];
    auto bound = std::find_if(fields_.begin(), fields_.end(),
                              [&](const auto& f) { return f.first == name; });
    if (bound == fields_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what_, " has no field \"", name, "\" (known: ",
                       absl::StrJoin(fields_, ", ",
                                     [](std::string* out, const auto& f) { out->append(f.first); }),
                       ")"));
    }
    if (auto* flag = std::get_if<std::optional<bool>*>(&bound->second)) {
      bool parsed;
      if (!absl::SimpleAtob(value, &parsed)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what_, " field \"", field, "\" is not name=true|false"));
      }
      **flag = parsed;
      continue;
    }
    double parsed;
    if (!absl::SimpleAtod(value, &parsed)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what_, " field \"", field, "\" is not name=number"));
    }
    if (auto* plain = std::get_if<double*>(&bound->second)) {
      **plain = parsed;
    } else {
      *std::get<std::optional<double>*>(bound->second) = parsed;
    }
  }
  return absl::OkStatus();
}

}  // namespace kvstore
