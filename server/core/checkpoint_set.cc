#include "server/core/checkpoint_set.h"

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/partitioner.h"
#include "common/state_file.h"
#include "common/status_macros.h"
#include "server/core/controller.h"
#include "server/core/shard_encoding.h"

namespace kvstore {

std::string PendingFileName(int rank) { return CheckpointFileName(rank) + ".pending"; }

namespace {

// ServerFileRank returns R for "server-R.ckpt", -1 for any other name.
int ServerFileRank(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "server-") || !absl::ConsumeSuffix(&name, ".ckpt")) return -1;
  int rank = -1;
  if (!absl::SimpleAtoi(name, &rank) || rank < 0 || absl::StrCat(rank) != name) return -1;
  return rank;
}

// ReadListedFile reads server `file_rank`'s file `name` of a set and checks it against its
// entry in the manifest (size, CRC-32) and the manifest's job, checkpoint and round.
absl::StatusOr<proto::ShardCheckpoint> ReadListedFile(const ConfinedDirectory& dir,
                                                      const std::string& name, int file_rank,
                                                      const proto::CheckpointManifest::File& listed,
                                                      const proto::CheckpointManifest& manifest,
                                                      const std::string& manifest_path) {
  const std::string path = dir.PathOf(name);
  ASSIGN_OR_RETURN(std::string payload, dir.ReadStateFile(name, StateKind::kShardCheckpoint));
  if (payload.size() != listed.payload_bytes() || Crc32(payload) != listed.payload_crc32()) {
    return absl::DataLossError(
        absl::StrCat(path, " does not match ", manifest_path, " (", payload.size(),
                     " bytes, CRC-32 ", Crc32(payload), "; the manifest says ",
                     listed.payload_bytes(), " bytes, CRC-32 ", listed.payload_crc32(),
                     "): the directory mixes files of two checkpoints, or the file was replaced"));
  }
  absl::StatusOr<proto::ShardCheckpoint> decoded = DecodeShard(payload);
  if (!decoded.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", decoded.status().message()));
  }
  std::string().swap(payload);
  proto::ShardCheckpoint& checkpoint = *decoded;
  if (checkpoint.job_id() != manifest.job_id() ||
      checkpoint.checkpoint_id() != manifest.checkpoint_id() ||
      checkpoint.round() != manifest.round() || checkpoint.server_rank() != file_rank) {
    return absl::DataLossError(absl::StrCat(
        path, " belongs to job ", checkpoint.job_id(), " checkpoint ", checkpoint.checkpoint_id(),
        " round ", checkpoint.round(), " (server ", checkpoint.server_rank(), "), but ",
        manifest_path, " is job ", manifest.job_id(), " checkpoint ", manifest.checkpoint_id(),
        " round ", manifest.round()));
  }
  return decoded;
}

}  // namespace

absl::StatusOr<VerifiedSet> VerifyCheckpointSet(const ConfinedDirectory& dir, int rank,
                                                int num_servers, const std::string& mode,
                                                int64_t chunk_bytes) {
  VerifiedSet set;
  const std::string manifest_path = dir.PathOf(kManifestFileName);
  absl::StatusOr<std::string> manifest_bytes =
      dir.ReadStateFile(kManifestFileName, StateKind::kCheckpointManifest);
  if (absl::IsNotFound(manifest_bytes.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        manifest_path, " is missing: ", dir.path(),
        " does not hold a complete checkpoint set (the manifest is written last, once every "
        "server's file is in place; a partial or interrupted checkpoint has none)"));
  }
  RETURN_IF_ERROR(manifest_bytes.status());
  if (!set.manifest.ParseFromString(*manifest_bytes)) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": the manifest does not parse"));
  }
  const proto::CheckpointManifest& manifest = set.manifest;
  auto shape = [&](absl::string_view what, auto saved, auto now) {
    return absl::FailedPreconditionError(absl::StrCat(manifest_path,
                                                      ": the checkpoint was written by a job with ",
                                                      what, " ", saved, ", this job has ", now));
  };
  if (manifest.mode() != mode) return shape("mode", manifest.mode(), mode);
  // Another number of servers, placement or chunk size: every file is read and re-placed.
  set.reshard = manifest.num_servers() != num_servers || manifest.placement() != kPlacement ||
                manifest.chunk_bytes() != chunk_bytes;
  if (manifest.num_servers() < 1 || manifest.files_size() != manifest.num_servers()) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": lists ", manifest.files_size(),
                                            " files for ", manifest.num_servers(), " servers"));
  }
  std::map<std::string, const proto::CheckpointManifest::File*> listed;
  for (const auto& file : manifest.files()) listed[file.name()] = &file;
  ASSIGN_OR_RETURN(std::vector<std::string> names, dir.FileNames());
  bool own_seen = false;
  std::map<std::string, proto::ShardCheckpoint> all;  // By file name.
  for (const std::string& name : names) {
    const int file_rank = ServerFileRank(name);
    if (file_rank < 0) continue;
    const std::string path = dir.PathOf(name);
    auto it = listed.find(name);
    if (it == listed.end()) {
      return absl::DataLossError(absl::StrCat(
          path, " is not part of checkpoint ", manifest.checkpoint_id(), " (", manifest_path,
          " lists ", manifest.files_size(), " files): a file of another checkpoint"));
    }
    ASSIGN_OR_RETURN(proto::ShardCheckpoint checkpoint,
                     ReadListedFile(dir, name, file_rank, *it->second, manifest, manifest_path));
    if (set.reshard) {
      all[name] = std::move(checkpoint);
    } else if (file_rank == rank) {
      own_seen = true;
      set.own = std::move(checkpoint);
    }
  }
  if (set.reshard) {
    std::vector<std::string> missing;
    for (const auto& file : manifest.files()) {
      if (all.count(file.name()) == 0) missing.push_back(file.name());
    }
    if (!missing.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          manifest_path, ": checkpoint ", manifest.checkpoint_id(), " was written by ",
          manifest.num_servers(), " servers",
          manifest.placement() != kPlacement ? " under an older placement of small values" : "",
          manifest.chunk_bytes() != chunk_bytes
              ? absl::StrCat(" in chunks of ", manifest.chunk_bytes(), " bytes")
              : "",
          "; this job has ", num_servers, " servers in chunks of ", chunk_bytes,
          " bytes. Restoring it re-places every key, which needs every server's file in ",
          dir.path(), "; missing: ", absl::StrJoin(missing, ", "),
          " (copy each server's files of the set there)"));
    }
    for (auto& [name, file] : all) set.all.push_back(std::move(file));
    return set;
  }
  if (!own_seen) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir.PathOf(CheckpointFileName(rank)), " is missing from checkpoint ",
        manifest.checkpoint_id(), " (", manifest_path, " lists it): the set is partial"));
  }
  return set;
}

absl::Status RemoveCheckpointSetFiles(const ConfinedDirectory& dir, int rank) {
  RETURN_IF_ERROR(dir.RemoveFile(kManifestFileName));
  RETURN_IF_ERROR(dir.RemoveFile(CheckpointFileName(rank)));
  return dir.RemoveFile(PendingFileName(rank));
}

}  // namespace kvstore
