// Shard encoding: a server's shard (proto::ShardCheckpoint) as the bytes of its checkpoint file
// or of the copy a replacement server receives.
//
// Protobuf serializes and parses messages of at most 2 GiB, and a server's shard - its values
// and its optimizer's state - may be bigger. EncodeShard writes a shard of at most
// `max_fragment_bytes` as its plain serialization, the form every file had before; a bigger
// one as fragments: the 8 bytes of kFragmentedMagic, the number of fragments (8 bytes,
// little-endian), then for each fragment its length (8 bytes, little-endian) and a serialized
// ShardCheckpoint. The first fragment holds all but the
// values, the updater's parts and the tables' pieces; the others hold the values in order,
// then the parts, then the table pieces, each fragment at most `max_fragment_bytes`; a value whose
// bytes do not fit is cut into pieces, each but the last marked `continued`. DecodeShard reads
// either form back into the one ShardCheckpoint it was made from.
//
// Threading: the functions are pure.
#ifndef KVSTORE_SERVER_CORE_SHARD_ENCODING_H_
#define KVSTORE_SERVER_CORE_SHARD_ENCODING_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/kvstore.pb.h"

namespace kvstore {

// Never the first bytes of a plain serialization: 'K' would be field 9 as a group.
inline constexpr char kFragmentedMagic[] = "KVSHARDF";
inline constexpr size_t kMaxFragmentBytes = size_t{1} << 30;

// EncodeShard takes the shard (moved in: its values are moved, not copied, into fragments).
// ResourceExhausted naming the key when one of the updater's parts alone exceeds half of
// `max_fragment_bytes` (parts are chunks of the chunk size, far smaller); InvalidArgument for
// fragments under 1 KiB.
absl::StatusOr<std::string> EncodeShard(proto::ShardCheckpoint shard,
                                        size_t max_fragment_bytes = kMaxFragmentBytes);

// DecodeShard: DataLoss saying what is wrong - bytes that do not parse, fewer fragments than
// written or one cut short, a continued value without its continuation or with another key's.
absl::StatusOr<proto::ShardCheckpoint> DecodeShard(absl::string_view bytes);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_SHARD_ENCODING_H_
