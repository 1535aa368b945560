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
//
// An online scale-out or scale-in (docs/state.md, "Adding and draining servers while a job
// runs") moves less: each old server sends each new server only CheckpointPartFor's part of its
// copy, and the new server merges them with ReshardCheckpoint(`pieces` true): the files then
// need to cover only `rank`'s new slices, not tile whole values (DataLoss naming the key and the
// elements that no piece holds), and each new chunk carries on from the round its pieces were
// cut at (chunk_rounds; FailedPrecondition naming the key when they differ).
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
    int64_t chunk_bytes, bool pieces = false);

// CheckpointPartFor returns what server `rank` of the job `partitioner` places needs of `file`
// (one server's copy of its shard, taken at a cut, its values' chunk rounds included): of each
// value, the elements in `rank`'s new slices, in pieces cut where the old chunks' rounds differ
// so that each piece carries one round (chunk_rounds of one entry; none when `file` has none);
// the optimizer state of every old chunk overlapping them; every row of its tables that
// TableServerOf places on `rank`; and the file's job, ids, round, mode and updater.
// DataLoss naming the key when a value's bytes or chunk rounds do not fit its header.
absl::StatusOr<proto::ShardCheckpoint> CheckpointPartFor(const proto::ShardCheckpoint& file,
                                                         int rank, const Partitioner& partitioner);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_CHECKPOINT_RESHARD_H_
