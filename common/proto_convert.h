// Conversions between the wire protocol's messages (proto/kvstore.proto) and the core types.
#ifndef KVSTORE_COMMON_PROTO_CONVERT_H_
#define KVSTORE_COMMON_PROTO_CONVERT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/key.h"
#include "common/optimizer_config.h"
#include "common/tensor.h"
#include "proto/kvstore.pb.h"

namespace kvstore {

void KeyToProto(const Key& key, proto::Key* out);
// KeyFromProto: InvalidArgument for a key with neither an int nor a string.
absl::StatusOr<Key> KeyFromProto(const proto::Key& key);

proto::DType DTypeToProto(DType dtype);
// DTypeFromProto: InvalidArgument naming the number for an unknown dtype.
absl::StatusOr<DType> DTypeFromProto(int dtype);

void OptimizerConfigToProto(const OptimizerConfig& config, proto::OptimizerConfig* out);
OptimizerConfig OptimizerConfigFromProto(const proto::OptimizerConfig& config);

// SerializeWhole serializes `message`; ResourceExhausted naming `what` and the sizes when it
// is bigger than protobuf's limit of 2 GiB, where SerializeAsString returns nothing at all.
absl::StatusOr<std::string> SerializeWhole(const google::protobuf::MessageLite& message,
                                           absl::string_view what);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_PROTO_CONVERT_H_
