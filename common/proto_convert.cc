#include "common/proto_convert.h"

#include "absl/strings/str_cat.h"

namespace kvstore {

void KeyToProto(const Key& key, proto::Key* out) {
  if (key.is_int()) {
    out->set_int_key(key.int_key());
  } else {
    out->set_str_key(key.str_key());
  }
}

absl::StatusOr<Key> KeyFromProto(const proto::Key& key) {
  switch (key.kind_case()) {
    case proto::Key::kIntKey:
      return Key(key.int_key());
    case proto::Key::kStrKey:
      return Key(key.str_key());
    default:
      return absl::InvalidArgumentError("a tensor header has no key");
  }
}

proto::DType DTypeToProto(DType dtype) { return static_cast<proto::DType>(dtype); }

absl::StatusOr<DType> DTypeFromProto(int dtype) { return DTypeFromInt(dtype); }

}  // namespace kvstore
