// Key: the name of a value in the store - an integer or a string, as in MXNet's KVStore.
//
// One store holds keys of one kind only; mixing them is rejected by the store (InvalidArgument).
#ifndef KVSTORE_COMMON_KEY_H_
#define KVSTORE_COMMON_KEY_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace kvstore {

class Key {
 public:
  // Implicit on purpose: `store->Push(3, value)` and `store->Push("weight", value)` read as in
  // MXNet. The template keeps `Key(0)` from being ambiguous with a null `const char*`.
  template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  Key(T key) : value_(static_cast<int64_t>(key)) {}  // NOLINT(runtime/explicit)
  Key(std::string key) : value_(std::move(key)) {}    // NOLINT(runtime/explicit)
  Key(const char* key) : value_(std::string(key)) {}  // NOLINT(runtime/explicit)
  Key(absl::string_view key) : value_(std::string(key)) {}  // NOLINT(runtime/explicit)

  bool is_int() const { return std::holds_alternative<int64_t>(value_); }
  bool is_string() const { return !is_int(); }
  // int_key / str_key return the key; calling the wrong one is a programmer error.
  int64_t int_key() const { return std::get<int64_t>(value_); }
  const std::string& str_key() const { return std::get<std::string>(value_); }
  // KindName returns "int" or "string", for error messages.
  absl::string_view KindName() const { return is_int() ? "int" : "string"; }

  // ToString returns the integer in decimal or the string as it is.
  std::string ToString() const { return is_int() ? std::to_string(int_key()) : str_key(); }
  // Quoted returns the key as it appears in error messages: 3 or "weight".
  std::string Quoted() const { return is_int() ? ToString() : "\"" + str_key() + "\""; }

  friend bool operator==(const Key& a, const Key& b) { return a.value_ == b.value_; }
  friend bool operator!=(const Key& a, const Key& b) { return !(a == b); }
  friend bool operator<(const Key& a, const Key& b) { return a.value_ < b.value_; }
  template <typename H>
  friend H AbslHashValue(H h, const Key& key) {
    return H::combine(std::move(h), key.value_);
  }

  // StableHash returns a hash that is the same in every process and build (FNV-1a over the
  // string, a 64-bit mix of the integer). Placement of keys on servers uses it.
  uint64_t StableHash() const;

 private:
  std::variant<int64_t, std::string> value_;
};

std::ostream& operator<<(std::ostream& os, const Key& key);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_KEY_H_
