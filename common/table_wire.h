// Tables on the wire: a TableConfig as the proto::TableSpec that TableInit carries, and where a
// table's row of an id lives.
//
// Placement: the row of id x lives on server TableServerOf(x, S) = (Mix64(x) mod S), Mix64 being
// SplitMix64's finalizer, so that ids that are close (consecutive, or multiples of S) spread
// evenly over the servers whatever the id distribution's shape.
#ifndef KVSTORE_COMMON_TABLE_WIRE_H_
#define KVSTORE_COMMON_TABLE_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/store/embedding_table.h"
#include "proto/kvstore.pb.h"

namespace kvstore {

// TableSpecToProto writes `config` (its name aside) as a TableSpec.
proto::TableSpec TableSpecToProto(const TableConfig& config);

// TableConfigFromProto reads `spec` into a TableConfig named `name`, checked as
// EmbeddingTable::Create checks it: InvalidArgument naming `name` and the field for an unknown
// initializer or optimizer, or a value out of range.
absl::StatusOr<TableConfig> TableConfigFromProto(const proto::TableSpec& spec,
                                                 const std::string& name);

// InitializerKind / OptimizerKind read the names a TableSpec, the C API and Python use
// ("zeros", "uniform", "normal"; "sgd", "adagrad", "adam"): InvalidArgument naming `what` and
// the names known otherwise. InitializerName / OptimizerName write them.
absl::StatusOr<RowInitializer::Kind> InitializerKind(absl::string_view name,
                                                     absl::string_view what);
absl::StatusOr<RowOptimizer::Kind> OptimizerKind(absl::string_view name, absl::string_view what);
const char* InitializerName(RowInitializer::Kind kind);
const char* OptimizerName(RowOptimizer::Kind kind);

// The most bytes of rows one piece of a saved table holds (proto::TableCheckpoint).
inline constexpr size_t kTablePieceBytes = size_t{64} << 20;

// TablePieces writes table `key` - made from `spec`, at `round`, holding `contents` - as
// TableCheckpoint pieces of at most `piece_bytes` of rows each, rows in order: the first carries
// the spec, the round, the ids counted for admission and the counters; all but the last are
// marked `continued`.
std::vector<proto::TableCheckpoint> TablePieces(const proto::Key& key, const proto::TableSpec& spec,
                                                int64_t round, const TableContents& contents,
                                                size_t piece_bytes = kTablePieceBytes);

// SameTableSpec: whether two specs make the same table.
bool SameTableSpec(const proto::TableSpec& a, const proto::TableSpec& b);

// TableServerOf returns the server (0 .. num_servers-1) that holds the row of `id`.
int TableServerOf(int64_t id, int num_servers);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_TABLE_WIRE_H_
