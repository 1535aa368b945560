// The text form of a configuration: `name=value` fields separated by white space or commas,
// as in `kvserver --updater=sgd --updater_config="lr=0.1, momentum=0.9"`.
//
// KeyValueFields binds each field name to a variable of the caller's and then parses a text,
// setting the variables of the names it holds:
//
//   SgdConfig config;
//   RETURN_IF_ERROR(KeyValueFields("sgd config")
//                       .Number("lr", &config.lr)
//                       .Number("momentum", &config.momentum)
//                       .Parse(text));
//
// Numbers are read by absl::SimpleAtod, flags by absl::SimpleAtob (true/false, yes/no, 1/0).
// Fields may come in any order; a later field overrides an earlier one of the same name; a
// text of no fields leaves every variable as it was.
#ifndef KVSTORE_COMMON_KEY_VALUE_CONFIG_H_
#define KVSTORE_COMMON_KEY_VALUE_CONFIG_H_

#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvstore {

// KeyValueFields: the names a configuration text may hold and the variables they set.
// Threading: a plain value; the bound variables are written only by Parse, which the caller
// runs on one thread. The variables must outlive the KeyValueFields.
class KeyValueFields {
 public:
  // `what` names the configuration in errors ("sgd config", "adam config").
  explicit KeyValueFields(std::string what) : what_(std::move(what)) {}

  // Number binds `name` to a number; Flag binds it to a bool. Each returns *this for chaining.
  // Binding a name twice keeps the later binding.
  KeyValueFields& Number(absl::string_view name, double* target);
  KeyValueFields& Number(absl::string_view name, std::optional<double>* target);
  KeyValueFields& Flag(absl::string_view name, std::optional<bool>* target);

  // Parse sets the bound variable of every field of `text`. It returns InvalidArgument naming
  // `what` and the offending field when a field is not name=value, names no bound variable (the
  // error then lists the known names), or holds a value that is not a number (not a flag) where
  // the name is bound to one. Fields before the offending one have been applied.
  absl::Status Parse(absl::string_view text) const;

 private:
  using Target = std::variant<double*, std::optional<double>*, std::optional<bool>*>;

  KeyValueFields& Bind(absl::string_view name, Target target);

  std::string what_;
  // In binding order, which is the order errors list the known names in.
  std::vector<std::pair<std::string, Target>> fields_;
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_KEY_VALUE_CONFIG_H_
