#include "common/key.h"

namespace kvstore {

static_assert(sizeof(Key) == 16, "a Key is an integer and a pointer");

uint64_t Key::StableHash() const {
  if (is_int()) {
    // splitmix64 finaliser: consecutive integer keys spread evenly.
    uint64_t z = static_cast<uint64_t>(int_key()) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : str_key()) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

std::string Key::Quoted() const {
  if (is_int()) return ToString();
  constexpr size_t kShown = 64;  // A key from a request may be of any length.
  const std::string& text = str_key();
  if (text.size() <= kShown) return "\"" + text + "\"";
  return "\"" + text.substr(0, kShown) + "...\" (" + std::to_string(text.size()) + " bytes)";
}

std::ostream& operator<<(std::ostream& os, const Key& key) { return os << key.ToString(); }

}  // namespace kvstore
