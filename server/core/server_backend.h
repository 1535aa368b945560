// ServerBackend: what a kvserver serves with once its job has assembled - the engine holding its
// shard and the controller running commands on it - and MakeServerBackend, which builds them
// from the cluster view the scheduler published. The kvserver daemon and the SDK's in-process
// job (tests/in_process/in_process_job.h) build their servers with it alike.
#ifndef KVSTORE_SERVER_CORE_SERVER_BACKEND_H_
#define KVSTORE_SERVER_CORE_SERVER_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/store/updater.h"
#include "server/core/checkpoint_root.h"
#include "server/core/controller.h"
#include "server/core/server_engine.h"
#include "server/core/table_engine.h"

namespace kvstore {

struct ServerBackend {
  std::unique_ptr<ServerEngine> engine;
  // The server's tables (docs/tables.md), sending workers checked by the engine's JobWorkers.
  std::unique_ptr<TableEngine> tables;
  std::unique_ptr<Controller> controller;  // Uses the engine and the tables.
  // When not OK, every data request (all but commands) is refused with it: a server that took
  // the rank of a dead one without replicas, whose acknowledged updates are lost (DATA_LOSS).
  // Set before the backend is served; read only after.
  absl::Status refusal;
};

// BackendSpec: one server's place in the job and how it starts.
struct BackendSpec {
  int rank = 0;
  int num_servers = 1;
  std::string mode = "dist_sync";                   // Or "dist_async".
  int64_t chunk_bytes = 0;                          // 0: kDefaultChunkBytes.
  int64_t big_value_bound = kDefaultBigValueBound;  // The cluster view's.
  // ServerEngineOptions::max_value_bytes and memory_budget_bytes.
  int64_t max_value_bytes = kDefaultMaxValueBytes;
  int64_t memory_budget_bytes = kUnlimitedBytes;
  std::vector<uint64_t> worker_node_ids;
  // The updater applied until a worker sets another, by its name in `registry`. Empty: none
  // chosen - ASSIGN in dist_sync, pushes refused in dist_async until a worker sets one
  // (ServerEngineOptions::updater_chosen).
  std::string updater;
  std::string updater_config;
  const UpdaterRegistry* registry = nullptr;  // Must outlive the backend.
  CustomController custom_controller;
  // Where checkpoints are written and restored from (CheckpointRoot::Open); null: the
  // server refuses both.
  std::shared_ptr<const CheckpointRoot> checkpoint_root;
  // When set, the checkpoint of this rank in this directory below the root is restored first.
  std::string restore_dir;
  // ServerEngineOptions::round_observer (optional).
  std::shared_ptr<RoundObserver> round_observer;
};

// MakeServerBackend builds the engine and the controller of one server and restores its
// checkpoint when asked. NotFound for an unknown updater; the engine's and the restore's
// errors (naming the file) otherwise.
absl::StatusOr<std::shared_ptr<ServerBackend>> MakeServerBackend(const BackendSpec& spec);

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_SERVER_BACKEND_H_
