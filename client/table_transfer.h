// Table transfers: how a worker's table calls (docs/tables.md) travel to the servers.
//
// The row of id x lives on server TableServerOf(x, S) (common/table_wire.h). A push sends every
// server its ids and their gradients in one TablePush (dist_sync: every server, with no ids
// where there are none, so that each server's round completes; dist_async: only the servers
// with ids), a pull asks every server with ids for their rows and scatters the replies into
// the output. Each call returns once every request is answered; the first error names the
// server (ServerCaller), and the calls' deadlines and retries are the caller's.
//
// Threading: any thread; blocks until the replies arrive.
#ifndef KVSTORE_CLIENT_TABLE_TRANSFER_H_
#define KVSTORE_CLIENT_TABLE_TRANSFER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/server_caller.h"
#include "common/key.h"
#include "proto/kvstore.pb.h"

namespace kvstore {

// InitTableOnServers sends table `key`'s `spec` to every server.
absl::Status InitTableOnServers(const TransferContext& ctx, const Key& key,
                                const proto::TableSpec& spec);

// PushTableRows pushes `grads` (ids.size() x dim) for `ids`; `every_server`: send the servers
// without ids an empty push too (dist_sync).
absl::Status PushTableRows(const TransferContext& ctx, const Key& key, int64_t dim,
                           absl::Span<const int64_t> ids, const float* grads, bool every_server);

// PullTableRows writes the rows of `ids` into `out` (ids.size() x dim).
absl::Status PullTableRows(const TransferContext& ctx, const Key& key, int64_t dim,
                           absl::Span<const int64_t> ids, float* out);

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_TABLE_TRANSFER_H_
