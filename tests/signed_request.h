// SignRequest: what the SDK does to every kvserver request of a job with a secret, for tests
// that build requests by hand (raw frames, malformed ones): it appends the signature of
// common/request_signature.h, made by `signer` for the kvserver at `receiver`.
#ifndef KVSTORE_TESTS_SIGNED_REQUEST_H_
#define KVSTORE_TESTS_SIGNED_REQUEST_H_

#include <grpcpp/support/byte_buffer.h>

#include "absl/strings/string_view.h"
#include "common/request_signature.h"

namespace kvstore::testing {

// SignRequest returns `request`, a request of the gRPC method `method` (its full path), signed
// by `signer` for the kvserver at `receiver` routed by view `view_epoch`: the signature is
// appended after every byte of the request, so a malformed request stays malformed in the same
// way. A request that is not a kvserver's, or a null `signer`, is returned as it is.
grpc::ByteBuffer SignRequest(absl::string_view method, const grpc::ByteBuffer& request,
                             RequestSigner* signer, absl::string_view receiver,
                             uint64_t view_epoch = 0);

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_SIGNED_REQUEST_H_
