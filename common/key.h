// Key: the name of a value in the store - an integer or a string, as in MXNet's KVStore.
//
// One store holds keys of one kind only; mixing them is rejected by the store (InvalidArgument).
#ifndef KVSTORE_COMMON_KEY_H_
#define KVSTORE_COMMON_KEY_H_

#include <atomic>
#include <cstdint>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace kvstore {

class Key {
 public:
  // Implicit on purpose: `store->Push(3, value)` and `store->Push("weight", value)` read as in
  // MXNet. The template keeps `Key(0)` from being ambiguous with a null `const char*`.
  template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  Key(T key) : int_(static_cast<int64_t>(key)) {}          // NOLINT(runtime/explicit)
  Key(std::string key) : str_(new Str(std::move(key))) {}  // NOLINT(runtime/explicit)
  Key(const char* key) : Key(std::string(key)) {}          // NOLINT(runtime/explicit)
  Key(absl::string_view key) : Key(std::string(key)) {}    // NOLINT(runtime/explicit)

  // A string key's text is shared by its copies (it never changes): copying a Key costs an
  // atomic increment at most, and a Key is 16 bytes, so that a list of 100,000 is 1.6 MB.
  Key(const Key& other) : int_(other.int_), str_(other.str_) {
    if (str_ != nullptr) str_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  Key(Key&& other) noexcept : int_(other.int_), str_(other.str_) { other.str_ = nullptr; }
  Key& operator=(const Key& other) {
    Key copy(other);
    swap(*this, copy);
    return *this;
  }
  Key& operator=(Key&& other) noexcept {
    Key taken(std::move(other));
    swap(*this, taken);
    return *this;
  }
  ~Key() {
    if (str_ != nullptr && str_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete str_;
  }
  friend void swap(Key& a, Key& b) noexcept {
    std::swap(a.int_, b.int_);
    std::swap(a.str_, b.str_);
  }

  bool is_int() const { return str_ == nullptr; }
  bool is_string() const { return !is_int(); }
  // int_key / str_key return the key; calling the wrong one is a programmer error.
  int64_t int_key() const { return int_; }
  const std::string& str_key() const { return str_->text; }
  // KindName returns "int" or "string", for error messages.
  absl::string_view KindName() const { return is_int() ? "int" : "string"; }

  // ToString returns the integer in decimal or the string as it is.
  std::string ToString() const { return is_int() ? std::to_string(int_key()) : str_key(); }
  // Quoted returns the key as it appears in error messages: 3 or "weight"; a string key of
  // more than 64 bytes shows its first 64 and its length.
  std::string Quoted() const;

  // Integer keys order before string keys; each kind in its natural order.
  friend bool operator==(const Key& a, const Key& b) {
    if (a.is_int() || b.is_int()) return a.is_int() == b.is_int() && a.int_ == b.int_;
    return a.str_ == b.str_ || a.str_->text == b.str_->text;
  }
  friend bool operator!=(const Key& a, const Key& b) { return !(a == b); }
  friend bool operator<(const Key& a, const Key& b) {
    if (a.is_int() != b.is_int()) return a.is_int();
    return a.is_int() ? a.int_ < b.int_ : a.str_->text < b.str_->text;
  }
  template <typename H>
  friend H AbslHashValue(H h, const Key& key) {
    if (key.is_int()) return H::combine(std::move(h), key.int_);
    return H::combine(std::move(h), key.str_->text);
  }

  // StableHash returns a hash that is the same in every process and build (FNV-1a over the
  // string, a 64-bit mix of the integer). Placement of keys on servers uses it.
  uint64_t StableHash() const;

 private:
  struct Str {
    explicit Str(std::string s) : text(std::move(s)) {}
    std::atomic<int64_t> refs{1};
    const std::string text;
  };
  int64_t int_ = 0;     // The integer key (0 for a string key).
  Str* str_ = nullptr;  // The string key, shared by copies; null for an integer key.
};

std::ostream& operator<<(std::ostream& os, const Key& key);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_KEY_H_
