// Checkpoint sets: a checkpoint of the whole job as one cut, on disk.
//
// A set in directory DIR (below each server's checkpoint root) is every server's file
// `server-R.ckpt` (a ShardCheckpoint naming the job, the checkpoint id and the round it was
// cut at) plus `MANIFEST` (a CheckpointManifest state file: job id, checkpoint id, round, the
// job's shape, and each file's payload size and CRC-32). The scheduler's coordinator
// (server/scheduler/core/checkpoint_coordinator.h) writes a set in three steps on every server:
// the server file under a pending name (PendingFileName), then - once every server has written
// its own - the rename of the pending file over `server-R.ckpt` and the manifest, written last
// and atomically (common/state_file.h). The old manifest is removed before the first rename,
// so a crash in between leaves a directory that restore refuses, never a mixed one that it
// accepts. A checkpoint refused or failed anywhere is aborted everywhere: the pending files
// are removed, an earlier set in DIR stays as it was.
//
// VerifyCheckpointSet is what `kvserver --restore DIR` checks before it restores anything:
// the manifest is there and whole; it names this job's shape; this server's file is there;
// every `server-*.ckpt` present in DIR (servers sharing one directory see each other's files)
// is in the manifest with its size and checksum, and names the manifest's job and checkpoint.
// Each refusal names the file and what is wrong.
//
// A set written by another number of servers, under another placement of small values
// (CheckpointManifest::placement) or with another chunk size is restored by re-placing it
// (checkpoint_reshard.h), which needs every server's file of the set in DIR: VerifyCheckpointSet
// then reads them all, and refuses a set missing any, naming the files.
#ifndef KVSTORE_SERVER_CORE_CHECKPOINT_SET_H_
#define KVSTORE_SERVER_CORE_CHECKPOINT_SET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/kvstore.pb.h"
#include "server/core/checkpoint_root.h"

namespace kvstore {

inline constexpr char kManifestFileName[] = "MANIFEST";

// PendingFileName returns "server-RANK.ckpt.pending": where a server's file of a set being
// written waits for the set to be complete.
std::string PendingFileName(int rank);

// VerifiedSet: a set that passed VerifyCheckpointSet, and this server's file of it; or, for a
// set to re-place (`reshard`), every file of it, in rank order.
struct VerifiedSet {
  proto::CheckpointManifest manifest;
  proto::ShardCheckpoint own;
  bool reshard = false;
  std::vector<proto::ShardCheckpoint> all;
};

// VerifyCheckpointSet checks the set in `dir` as the file comment says, for server `rank` of
// a job of `num_servers` servers in `mode` with `chunk_bytes`. Errors: FailedPrecondition for a
// missing manifest (partial), another mode, or a set to re-place that misses files; DataLoss for
// a file that does not match the manifest (mixed) or a damaged one; each naming the file.
absl::StatusOr<VerifiedSet> VerifyCheckpointSet(const ConfinedDirectory& dir, int rank,
                                                int num_servers, const std::string& mode,
                                                int64_t chunk_bytes);

// RemoveCheckpointSetFiles removes server `rank`'s part of a set in `dir`: the manifest
// first, then its file and its pending file.
absl::Status RemoveCheckpointSetFiles(const ConfinedDirectory& dir, int rank);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_CHECKPOINT_SET_H_
