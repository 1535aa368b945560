#include "tests/signed_request.h"

#include "absl/strings/match.h"
#include "common/server_methods.h"

namespace kvstore::testing {

grpc::ByteBuffer SignRequest(absl::string_view method, const grpc::ByteBuffer& request,
                             RequestSigner* signer, absl::string_view receiver,
                             uint64_t view_epoch) {
  if (signer == nullptr) return request;
  for (int m = 0; m < kNumServerMethods; ++m) {
    for (const bool backup : {false, true}) {
      const auto server_method = static_cast<ServerMethod>(m);
      if (method == GrpcMethodPath(server_method, backup)) {
        return signer->Sign({server_method, backup, receiver, view_epoch}, request);
      }
    }
  }
  return request;
}

}  // namespace kvstore::testing
