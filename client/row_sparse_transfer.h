// TransferRowSparse: how a row-sparse push or pull travels to the servers.
//
// A push sends every server the pushed rows that fall in its row range, ids first - and a
// header even when there are none, so that dist_sync rounds complete. A pull asks each server
// for the output's (sorted, distinct) ids in its range and copies the returned rows into the
// outputs' row buffers (KeyTable::PlanRowSparsePull prepared them).
//
// Threading: runs on the dispatcher's thread; `done` runs once, on the transport's completion
// thread (or at once when nothing is to be sent).
#ifndef KVSTORE_CLIENT_ROW_SPARSE_TRANSFER_H_
#define KVSTORE_CLIENT_ROW_SPARSE_TRANSFER_H_

#include <vector>

#include "client/key_info.h"
#include "client/server_caller.h"

namespace kvstore {

// TransferRowSparse runs `kind` (kRowSparsePush or kRowSparsePull) of `work` and calls `done`
// once with the first error, naming the server.
void TransferRowSparse(const TransferContext& ctx, Kind kind, std::vector<KeyWork> work,
                       OpDone done);

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_ROW_SPARSE_TRANSFER_H_
