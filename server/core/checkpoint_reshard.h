// Checkpoint sets restored onto another number of servers, another placement of small values
// or another chunk size (docs/state.md, "Restore onto another number of servers").
//
// ReshardCheckpoint makes server `rank`'s file of the job that `partitioner` places, cut in
// chunks of `chunk_bytes`, from every file of a set:
// - each key goes where `partitioner` places it now: a split value re-split by rows as that
//   number of servers splits it, a small value whole on the server rendezvous hashing picks;
//   its bytes are gathered from the old parts;
// - the updater's state of each new chunk is gathered element by element from the old chunks'
//   states (every optimizer keeps per-element buffers); the update count and the momentum
//   schedule, kept per chunk, must agree over the elements a new chunk gathers, else
//   FailedPrecondition naming the key and the elements;
// - the set's job, checkpoint id and round, and its updater, are kept.
// `files` must be every file of one set, in any order. Their keys' parts must tile each value
// without gaps or overlaps, else DataLoss naming the key. The files must name one updater and
// one mode, else FailedPrecondition.
#ifndef KVSTORE_SERVER_CORE_CHECKPOINT_RESHARD_H_
#define KVSTORE_SERVER_CORE_CHECKPOINT_RESHARD_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/partitioner.h"
#include "proto/kvstore.pb.h"

namespace kvstore {

absl::StatusOr<proto::ShardCheckpoint> ReshardCheckpoint(
    absl::Span<const proto::ShardCheckpoint> files, int rank, const Partitioner& partitioner,
    int64_t chunk_bytes);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_CHECKPOINT_RESHARD_H_
