// TransferDense: how a dense Init, Push, Pull or PushPull of some keys travels to the servers.
//
// Each key's value goes by chunk (KeyInfo::chunks): the chunks of small values bound for one
// server share one request, and the chunks of a value cut in several go in requests of their
// own - a push's or pull's consecutive chunks for one server up to 1 MiB a request, a
// push+pull's one chunk each (chunk_requests.h) - so that no request holds a whole big
// value. Requests start in order, at most
// ctx.window at a time, so that chunks arrive one after another and the server sums and
// updates each while the next is on the wire. Tensor bytes travel as slices over the caller's
// memory (or the sum's, when a key was pushed several values, or the GPU sum's pinned copy);
// a push request takes the next request id of this worker. With gradient compression on, a
// float32 push sends the codes of each chunk instead, quantised with the key's residual. A
// pull's reply is copied from the received slices straight into the first output, then into
// the others.
//
// An Init sends each server its whole part; a part cut in chunks goes as a deferred header,
// its bytes then as kInitFill requests of one chunk each.
//
// Threading: runs on the dispatcher's thread (or Init's caller); `done` runs once, on the
// transport's completion thread (or at once, on an error found before sending).
#ifndef KVSTORE_CLIENT_DENSE_TRANSFER_H_
#define KVSTORE_CLIENT_DENSE_TRANSFER_H_

#include <vector>

#include "client/key_info.h"
#include "client/server_caller.h"
#include "common/compression.h"

namespace kvstore {

// TransferDense runs `kind` (kInit, kInitFill, kPush, kPull or kPushPull) of `work` on every
// server involved and calls `done` once with the first error, naming the server.
void TransferDense(const TransferContext& ctx, Kind kind, std::vector<KeyWork> work,
                   const CompressionParams& compression, OpDone done);

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_DENSE_TRANSFER_H_
