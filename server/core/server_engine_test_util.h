// Helpers shared by the ServerEngine tests: engines with a given updater and workers, values
// wrapped as received bytes, and pulls of whole values.
#ifndef KVSTORE_SERVER_CORE_SERVER_ENGINE_TEST_UTIL_H_
#define KVSTORE_SERVER_CORE_SERVER_ENGINE_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/key.h"
#include "common/tensor.h"
#include "server/core/server_engine.h"
#include "server/core/table_engine.h"

namespace kvstore::testing {

// Incoming wraps a tensor's bytes as a value, cut into chunks of at most `chunk` bytes so that
// elements straddle chunk boundaries the way received gRPC slices do.
IncomingValue Incoming(const Key& key, const Tensor& t, size_t chunk = 7,
                       std::optional<ValueSlice> slice = std::nullopt);

// NewEngine returns an engine with the default (assign) updater and `workers` as the job's
// workers, in dist_sync when `sync`, else dist_async.
std::unique_ptr<ServerEngine> NewEngine(bool sync, std::vector<uint64_t> workers);

// NewSumEngine is NewEngine with the sum updater and chunks of `chunk_bytes` bytes.
std::unique_ptr<ServerEngine> NewSumEngine(bool sync, std::vector<uint64_t> workers,
                                           int64_t chunk_bytes);

// PullAll pulls the whole value of `key`, shaped like `like`, as node 2, as doubles.
std::vector<double> PullAll(ServerEngine& engine, const Key& key, const Tensor& like);

// Bytes returns a copy of the tensor's bytes.
std::vector<uint8_t> Bytes(const Tensor& t);

// PullInto writes the rows a TableEngine's pull of `ids` returns into `*bytes`, as bytes.
absl::Status PullInto(TableEngine& engine, uint64_t node, const Key& key,
                      absl::Span<const int64_t> ids, std::string* bytes);

}  // namespace kvstore::testing

#endif  // KVSTORE_SERVER_CORE_SERVER_ENGINE_TEST_UTIL_H_
