// State files: checkpoints of a kvserver's shard and saved optimizer states.
//
// A state file is
//
//   [8 bytes: "KVSTATE\0"][u32 LE: format version][u32 LE: kind][u64 LE: payload length]
//   [u32 LE: CRC-32 (IEEE) of the payload][payload]
//
// where the payload is a serialized protobuf message of the kind's type (ShardCheckpoint,
// UpdaterState). WriteStateFile writes it atomically: to a temporary file in the same
// directory, fsync, rename over the target, fsync of the directory - a crash leaves the old
// file or the new one, never a torn one. ReadStateFile checks everything and returns
// DataLoss / InvalidArgument / NotFound naming the file and what is wrong (missing, truncated,
// not a state file, a newer version, the wrong kind, a checksum mismatch).
#ifndef KVSTORE_COMMON_STATE_FILE_H_
#define KVSTORE_COMMON_STATE_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvstore {

enum class StateKind : uint32_t {
  kShardCheckpoint = 1,
  kUpdaterState = 2,
  kCheckpointManifest = 3,
};

inline constexpr uint32_t kStateFileVersion = 1;

// Crc32 returns the CRC-32 (IEEE 802.3, as zlib's crc32) of `data`, computed by ISA-L's
// crc32_gzip_refl (libisal: carry-less multiplication, tens of GB/s where zlib does 6).
uint32_t Crc32(absl::string_view data);

// WriteStateFile writes `payload` as a state file of `kind` at `path`, atomically (above). An
// error (its code mapped from errno) names the file that could not be written.
absl::Status WriteStateFile(const std::string& path, StateKind kind, absl::string_view payload);

// WriteStateFileAt writes the state file `name` (a file name, no '/') in the directory open as
// `dir_fd` (opened for reading), atomically as WriteStateFile does; errors name `path`. It
// follows no link: the temporary file is created new (O_EXCL), and the rename replaces the
// entry `name` itself, even when that entry is a symbolic link.
absl::Status WriteStateFileAt(int dir_fd, const std::string& name, const std::string& path,
                              StateKind kind, absl::string_view payload);

// ReadStateFile returns the payload of the state file of `kind` at `path`; errors as above.
absl::StatusOr<std::string> ReadStateFile(const std::string& path, StateKind kind);

// ParseStateFile returns the payload of `bytes`, the contents of the state file `path` (named
// in errors), checked as ReadStateFile checks a file.
absl::StatusOr<std::string> ParseStateFile(absl::string_view bytes, const std::string& path,
                                           StateKind kind);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_STATE_FILE_H_
