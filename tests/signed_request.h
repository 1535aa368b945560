// SignRequest: what the SDK does to every kvserver request of a job with a secret, for tests
// that build requests by hand (raw frames, malformed ones): it puts a node credential into the
// request's own header (proto::RequestNode's node_credential, field 15).
#ifndef KVSTORE_TESTS_SIGNED_REQUEST_H_
#define KVSTORE_TESTS_SIGNED_REQUEST_H_

#include <grpcpp/support/byte_buffer.h>

#include "absl/strings/string_view.h"

namespace kvstore::testing {

// SignRequest returns `request`, a request of the gRPC method `method` (its full path), with
// `credential` ("NODE_ID:TOKEN", common/job_auth.h) as its node_credential: put in front of
// the header of a framed request (Init, Push, PushPull: [fixed32 N][N bytes header][payload]),
// with N grown to match, or of the message of any other kvserver method. In front, as a whole
// field of its own, it parses the same whatever follows: a malformed request stays malformed
// in the same way (appended, it could complete a field the request left cut short). A request
// that already names a credential keeps its own (the later field wins). A request that is not
// a kvserver's, or a frame shorter than its own prefix says, is returned as it is. An empty
// `credential` changes nothing.
grpc::ByteBuffer SignRequest(absl::string_view method, const grpc::ByteBuffer& request,
                             absl::string_view credential);

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_SIGNED_REQUEST_H_
