#include "server/grpc/kvserver_daemon.h"

#include <grpcpp/client_context.h>
#include <grpcpp/server_builder.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/named_thread.h"
#include "common/status_macros.h"
#include "server/core/optimizer.h"
#include "server/core/server_backend.h"
#include "server/core/sgd_updater.h"

namespace kvstore {

absl::StatusOr<std::unique_ptr<KVServerDaemon>> KVServerDaemon::Start(KVServerOptions options) {
  if (options.scheduler_address.empty()) {
    return absl::InvalidArgumentError("a kvserver needs the scheduler's address");
  }
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", options.port, " is not in 0..65535"));
  }
  const std::vector<std::string> names = options.registry.Names();
  if (std::find(names.begin(), names.end(), "sgd") == names.end()) {
    RETURN_IF_ERROR(RegisterSgdUpdater(&options.registry));
  }
  RETURN_IF_ERROR(RegisterOptimizers(&options.registry));
  // Fail early on an unknown updater.
  RETURN_IF_ERROR(options.registry.Create(options.updater, options.updater_config).status());
  if (options.serving_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serving_threads must be >= 0 (0: the default), not ", options.serving_threads));
  }
  if (options.serving_poll < absl::ZeroDuration() || options.serving_poll > absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat("serving_poll must be in [0, 1s], not ",
                                                   absl::FormatDuration(options.serving_poll)));
  }
  if (options.serving_threads == 0) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    options.serving_threads = std::max(1, cores / 4);
  }
  std::unique_ptr<KVServerDaemon> daemon(new KVServerDaemon(std::move(options)));
  grpc::ServerBuilder builder;
  ConfigureServer(&builder);
  const std::string listen = absl::StrCat(daemon->options_.host, ":", daemon->options_.port);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &daemon->port_);
  builder.RegisterService(&daemon->service_);
  for (int i = 0; i < daemon->options_.serving_threads; ++i) {
    daemon->cqs_.push_back(builder.AddCompletionQueue());
  }
  daemon->server_ = builder.BuildAndStart();
  if (daemon->server_ == nullptr || daemon->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("kvserver cannot listen on ", listen));
  }
  for (auto& cq : daemon->cqs_) {
    daemon->serving_.push_back(NamedThread("kv-serve", [d = daemon.get(), cq = cq.get()] {
      d->service_.Serve(cq, d->options_.serving_poll);
    }));
  }
  spdlog::info("kvserver listening on {} ({} serving threads)", daemon->address(),
               daemon->serving_.size());
  daemon->thread_ = std::thread([d = daemon.get()] { d->Run(); });
  return daemon;
}

KVServerDaemon::~KVServerDaemon() {
  Shutdown();
  if (thread_.joinable()) thread_.join();
  // The server first (Run did, unless Start failed), then the service, then the queues: the
  // serving threads drain them and return.
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  service_.StopServing();
  for (auto& cq : cqs_) cq->Shutdown();
  for (std::thread& t : serving_) t.join();
  if (serving_.empty()) {
    for (auto& cq : cqs_) {
      void* tag;
      bool ok;
      while (cq->Next(&tag, &ok)) {
      }
    }
  }
}

std::string KVServerDaemon::address() const { return absl::StrCat(options_.host, ":", port_); }

absl::Status KVServerDaemon::Wait() {
  done_.WaitForNotification();
  return status_;
}

void KVServerDaemon::Shutdown() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  absl::MutexLock lock(&registering_mu_);
  if (registering_ != nullptr) registering_->TryCancel();
}

void KVServerDaemon::Run() {
  absl::Status status = RegisterAndServe();
  if (!status.ok() && stop_.HasBeenNotified() && !absl::IsCancelled(status)) {
    status = absl::CancelledError("kvserver stopped by its owner");
  }
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  status_ = status;
  done_.Notify();
}

absl::Status KVServerDaemon::RegisterAndServe() {
  auto stub = proto::Scheduler::NewStub(MakeChannel(options_.scheduler_address));
  proto::RegisterRequest request;
  request.set_role(proto::SERVER);
  request.set_address(address());
  request.set_requested_rank(options_.requested_rank);
  request.set_hostname(LocalHostname());
  proto::RegisterResponse registration;
  const absl::Time give_up = absl::Now() + options_.register_timeout;
  {
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadline(give_up));
    context.set_wait_for_ready(true);  // Wait for a scheduler that is still starting.
    {
      absl::MutexLock lock(&registering_mu_);
      if (stop_.HasBeenNotified()) return absl::CancelledError("kvserver stopped");
      registering_ = &context;
    }
    const grpc::Status status = stub->Register(&context, request, &registration);
    {
      absl::MutexLock lock(&registering_mu_);
      registering_ = nullptr;
    }
    if (!status.ok()) {
      if (stop_.HasBeenNotified()) return absl::CancelledError("kvserver stopped");
      return absl::Status(FromGrpcStatus(status).code(),
                          absl::StrCat("registering with the scheduler at ",
                                       options_.scheduler_address, ": ", status.error_message()));
    }
  }
  const proto::ClusterView& view = registration.view();
  BackendSpec spec;
  spec.rank = registration.rank();
  spec.num_servers = view.num_servers();
  spec.mode = view.mode();
  spec.chunk_bytes = view.chunk_bytes();
  spec.worker_node_ids.assign(view.worker_node_ids().begin(), view.worker_node_ids().end());
  spec.updater = options_.updater;
  spec.updater_config = options_.updater_config;
  spec.registry = &options_.registry;
  spec.custom_controller = options_.custom_controller;
  spec.restore_dir = options_.restore_dir;
  ASSIGN_OR_RETURN(std::shared_ptr<ServerBackend> backend, MakeServerBackend(spec));
  if (!options_.restore_dir.empty()) {
    spdlog::info("kvserver rank {} restored {} keys from {}", registration.rank(),
                 backend->engine->stats().num_keys,
                 CheckpointPath(options_.restore_dir, registration.rank()));
  }
  ServerEngine* engine = backend->engine.get();
  service_.SetBackend(std::move(backend));
  spdlog::info("kvserver rank {} (node {}) serving {} for {} workers", registration.rank(),
              registration.node_id(), view.mode(), view.num_workers());

  const absl::Duration interval = absl::Milliseconds(std::max(10, view.heartbeat_interval_ms()));
  absl::Time last_contact = absl::Now();
  while (!stop_.WaitForNotificationWithTimeout(interval)) {
    proto::HeartbeatRequest beat;
    beat.set_node_id(registration.node_id());
    const ShardStore::Stats stats = engine->stats();
    beat.set_num_keys(stats.num_keys);
    beat.set_num_bytes(stats.num_bytes);
    proto::HeartbeatResponse reply;
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadline(absl::Now() + std::max(interval, absl::Seconds(2))));
    const grpc::Status status = stub->Heartbeat(&context, beat, &reply);
    if (status.ok()) {
      last_contact = absl::Now();
      if (reply.shutdown()) {
        spdlog::info("kvserver rank {}: the job is over, exiting", registration.rank());
        return absl::OkStatus();
      }
    } else if (absl::Now() - last_contact > options_.scheduler_lost_timeout) {
      return absl::UnavailableError(absl::StrCat(
          "lost the scheduler at ", options_.scheduler_address, ": no heartbeat answered for ",
          absl::FormatDuration(options_.scheduler_lost_timeout), " (", status.error_message(),
          ")"));
    }
  }
  return absl::CancelledError("kvserver stopped by its owner");
}

}  // namespace kvstore
