// Helpers shared by the ServerEngine tests (see server_engine_test_util.h).
#include "server/core/server_engine_test_util.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <utility>

#include "common/store/updater.h"
#include "tests/test_util.h"

namespace kvstore::testing {

IncomingValue Incoming(const Key& key, const Tensor& t, size_t chunk,
                       std::optional<ValueSlice> slice) {
  IncomingValue value;
  value.slice = slice ? *slice : ValueSlice{key, t.dtype(), t.shape(), 0, t.num_elements()};
  const auto* bytes = static_cast<const uint8_t*>(t.data());
  for (size_t at = 0; at < t.byte_size(); at += chunk) {
    value.bytes.emplace_back(bytes + at, std::min(chunk, t.byte_size() - at));
  }
  return value;
}

std::unique_ptr<ServerEngine> NewEngine(bool sync, std::vector<uint64_t> workers) {
  auto engine = ServerEngine::Create(ServerEngineOptions{sync, std::move(workers)}, nullptr);
  REQUIRE(engine.ok());
  return std::move(engine).value();
}

std::vector<double> PullAll(ServerEngine& engine, const Key& key, const Tensor& like) {
  auto pulled =
      engine.Pull(2, {ValueSlice{key, like.dtype(), like.shape(), 0, like.num_elements()}});
  REQUIRE(pulled.ok());
  return ToDoubles((*pulled)[0]);
}

std::unique_ptr<ServerEngine> NewSumEngine(bool sync, std::vector<uint64_t> workers,
                                           int64_t chunk_bytes) {
  ServerEngineOptions options;
  options.sync = sync;
  options.worker_node_ids = std::move(workers);
  options.chunk_bytes = chunk_bytes;
  auto engine = ServerEngine::Create(std::move(options), MakeSumUpdater());
  REQUIRE(engine.ok());
  return std::move(engine).value();
}

std::vector<uint8_t> Bytes(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  return std::vector<uint8_t>(p, p + t.byte_size());
}

absl::Status PullInto(TableEngine& engine, uint64_t node, const Key& key,
                      absl::Span<const int64_t> ids, std::string* bytes) {
  absl::StatusOr<Tensor> rows = engine.Pull(node, key, ids);
  if (!rows.ok()) return rows.status();
  bytes->assign(static_cast<const char*>(rows->data()), rows->byte_size());
  return absl::OkStatus();
}

}  // namespace kvstore::testing
