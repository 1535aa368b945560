#include "server/core/server_backend.h"

#include <utility>

#include "common/status_macros.h"

namespace kvstore {

absl::StatusOr<std::shared_ptr<ServerBackend>> MakeServerBackend(const BackendSpec& spec) {
  ServerEngineOptions engine_options;
  engine_options.sync = spec.mode != "dist_async";
  if (spec.chunk_bytes > 0) engine_options.chunk_bytes = spec.chunk_bytes;
  const int64_t chunk_bytes = engine_options.chunk_bytes;
  engine_options.worker_node_ids = spec.worker_node_ids;
  engine_options.max_value_bytes = spec.max_value_bytes;
  engine_options.memory_budget_bytes = spec.memory_budget_bytes;
  // No updater chosen: ASSIGN, refused in dist_async (ServerEngineOptions::updater_chosen).
  const std::string updater_name = spec.updater.empty() ? "assign" : spec.updater;
  engine_options.updater_chosen = !spec.updater.empty();
  engine_options.round_observer = spec.round_observer;
  ASSIGN_OR_RETURN(std::unique_ptr<Updater> updater,
                   spec.registry->Create(updater_name, spec.updater_config));
  auto backend = std::make_shared<ServerBackend>();
  ASSIGN_OR_RETURN(backend->engine,
                   ServerEngine::Create(std::move(engine_options), std::move(updater)));
  TableEngineOptions table_options;
  table_options.sync = spec.mode != "dist_async";
  table_options.max_value_bytes = spec.max_value_bytes;
  table_options.memory_budget_bytes = spec.memory_budget_bytes;
  ServerEngine* engine = backend->engine.get();
  backend->tables = std::make_unique<TableEngine>(
      table_options, &engine->workers(), [engine] { return engine->held_bytes(); },
      &engine->view_floor());
  backend->controller = std::make_unique<Controller>(backend->engine.get(), spec.registry,
                                                     spec.custom_controller, spec.rank);
  backend->controller->SetJob(
      JobShape{spec.num_servers, spec.mode, chunk_bytes, spec.big_value_bound});
  backend->controller->SetCheckpointRoot(spec.checkpoint_root);
  backend->controller->SetTables(backend->tables.get());
  proto::UpdaterSpec updater_spec;
  updater_spec.set_registry_name(updater_name);
  updater_spec.set_registry_config(spec.updater_config);
  backend->controller->SetUpdaterSpec(std::move(updater_spec));
  if (!spec.restore_dir.empty()) RETURN_IF_ERROR(backend->controller->Restore(spec.restore_dir));
  return backend;
}

}  // namespace kvstore
