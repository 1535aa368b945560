// The one place where absl::Status and grpc::Status are converted into each other.
//
// Both use the canonical google.rpc.Code numbering, so codes map one to one and messages are
// carried unchanged. Errors travel only in the gRPC status, never in a reply field.
#ifndef KVSTORE_COMMON_GRPC_STATUS_H_
#define KVSTORE_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace kvstore {

// ToGrpcStatus returns the grpc::Status with the same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// FromGrpcStatus returns the absl::Status with the same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_GRPC_STATUS_H_
