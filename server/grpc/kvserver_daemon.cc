#include "server/grpc/kvserver_daemon.h"

#include <grpcpp/client_context.h>
#include <grpcpp/server_builder.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/advertise.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/job_auth.h"
#include "common/local_channel.h"
#include "common/logging.h"
#include "common/named_thread.h"
#include "common/status_macros.h"
#include "common/store/optimizer.h"
#include "common/store/sgd_updater.h"
#include "common/unreachable_retry.h"
#include "server/core/engine_cuts.h"
#include "server/core/server_backend.h"
#include "server/grpc/shard_copy_sender.h"
namespace kvstore {
namespace {

// HalfPhysicalMemory returns half of this machine's memory (no limit when it cannot be read).
int64_t HalfPhysicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return kUnlimitedBytes;
  return static_cast<int64_t>(pages) / 2 * page_size;
}

// CheckAndComplete checks a kvserver's options and fills in what they leave to defaults: the
// built-in updaters and optimizers registered, the advertised host, the serving threads, the
// memory budget. InvalidArgument naming the option otherwise.
absl::Status CheckAndComplete(KVServerOptions* options_in) {
  KVServerOptions& options = *options_in;
  if (options.scheduler_address.empty() && options.etcd_endpoints.empty()) {
    return absl::InvalidArgumentError(
        "a kvserver needs the scheduler's address, or etcd's endpoints and the job's name");
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
  if (!options.updater.empty()) {
    RETURN_IF_ERROR(options.registry.Create(options.updater, options.updater_config).status());
  }
  if (options.advertise_host.empty()) options.advertise_host = options.host;
  if (IsWildcardHost(options.advertise_host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the kvserver would advertise the wildcard address ", options.advertise_host,
                     ", which no worker can connect to: set --advertise_host (or DMLC_NODE_HOST, "
                     "DMLC_INTERFACE)"));
  }
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
  if (options.max_value_bytes < 1 || options.memory_budget_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_value_bytes must be positive and memory_budget_bytes >= 0 (0: half of the "
        "machine's memory), not ",
        options.max_value_bytes, " and ", options.memory_budget_bytes));
  }
  if (options.memory_budget_bytes == 0) options.memory_budget_bytes = HalfPhysicalMemory();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<KVServerDaemon>> KVServerDaemon::Start(KVServerOptions options) {
  RETURN_IF_ERROR(CheckAndComplete(&options));
  ASSIGN_OR_RETURN(std::shared_ptr<const CheckpointRoot> checkpoint_root,
                   CheckpointRoot::Open(options.checkpoint_root));
  // A restore directory that would leave the root, or does not exist, stops the server now.
  if (!options.restore_dir.empty()) {
    RETURN_IF_ERROR(checkpoint_root->OpenDirectory(options.restore_dir, false).status());
  }
  std::unique_ptr<KVServerDaemon> daemon(new KVServerDaemon(std::move(options)));
  daemon->checkpoint_root_ = std::move(checkpoint_root);
  ASSIGN_OR_RETURN(const ServerLimits limits, daemon->Listen());
  if (!daemon->options_.trace_file.empty()) {
    ASSIGN_OR_RETURN(daemon->trace_, TraceWriter::Open(daemon->options_.trace_file, "kvserver"));
  }
  if (daemon->options_.metrics_port >= 0) {
    daemon->AddCollectors();
    daemon->service_.SetMetrics(&daemon->metrics_);
    ASSIGN_OR_RETURN(daemon->metrics_http_,
                     MetricsHttpServer::Start(daemon->options_.host, daemon->options_.metrics_port,
                                              &daemon->registry_));
    spdlog::info("kvserver metrics on http://{}:{}/metrics", daemon->options_.host,
                 daemon->metrics_http_->port());
  }
  for (auto& cq : daemon->cqs_) {
    daemon->serving_.push_back(NamedThread("kv-serve", [d = daemon.get(), cq = cq.get()] {
      d->health_->Ask(cq);
      d->service_.Serve(cq, d->options_.serving_poll);
    }));
  }
  daemon->LogStartup(limits);
  daemon->thread_ = std::thread([d = daemon.get()] { d->Run(); });
  return daemon;
}

absl::StatusOr<ServerLimits> KVServerDaemon::Listen() {
  grpc::ServerBuilder builder;
  const int64_t max_request = options_.max_value_bytes > std::numeric_limits<int64_t>::max() -
                                                             KVServerOptions::kRequestHeaderBytes
                                  ? std::numeric_limits<int64_t>::max()
                                  : options_.max_value_bytes + KVServerOptions::kRequestHeaderBytes;
  const ServerLimits limits = ServerLimits::ForRequests(max_request);
  ConfigureServer(&builder, limits);
  const std::string listen = FormatHostPort(options_.host, options_.port);
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   ServerCredentialsFor(options_.security.tls));
  builder.AddListeningPort(listen, credentials, &port_);
  builder.RegisterService(&service_);
  // NOT_SERVING until registered (and restored).
  health_ = std::make_unique<DaemonHealth>("kvstore.proto.KVServer");
  health_->AddTo(&builder);
  for (int i = 0; i < options_.serving_threads; ++i) cqs_.push_back(builder.AddCompletionQueue());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("kvserver cannot listen on ", listen));
  }
  if (!options_.local_socket_dir.empty()) {
    // A random part: kvservers of other containers on this host (the same boot id, their own
    // /tmp, ports and pids) may have the same port and pid, and a worker must never reach one
    // of them at a path its own kvserver advertised.
    absl::BitGen random;
    const std::string path =
        absl::StrCat(options_.local_socket_dir, "/kvserver-", port_, "-", getpid(), "-",
                     absl::Hex(absl::Uniform<uint64_t>(random), absl::kZeroPad16), ".sock");
    absl::StatusOr<std::unique_ptr<LocalListener>> local = LocalListener::Start(
        path, limits.max_receive_bytes,
        [this](int method, const grpc::ByteBuffer& request, uint64_t view_epoch,
               grpc::ByteBuffer* response, std::function<void(absl::Status)> done) {
          service_.HandleLocal(method, request, view_epoch, response, std::move(done));
        });
    if (local.ok()) {
      local_ = *std::move(local);
      local_host_ = ThisHostId();
    } else {
      spdlog::warn("kvserver serves workers on this host over TCP only: {}",
                   local.status().ToString());
    }
  }
  return limits;
}

void KVServerDaemon::LogStartup(const ServerLimits& limits) const {
  const std::string bound = FormatHostPort(options_.host, port_);
  spdlog::info("kvserver listening on {} ({}, {} serving threads)", bound,
               options_.security.tls.transport(), serving_.size());
  if (bound != address()) spdlog::info("kvserver advertised to the job as {}", address());
  if (local_ != nullptr) {
    spdlog::info("kvserver serves workers on this host through shared memory at {}",
                 local_->path());
  }
  spdlog::info(
      "kvserver limits: values up to {} bytes, {} bytes held at most, requests up to "
      "{} bytes, {} bytes of gRPC buffers",
      options_.max_value_bytes, options_.memory_budget_bytes, limits.max_receive_bytes,
      limits.memory_quota_bytes);
  const std::string& root = checkpoint_root_->path();
  if (root == "/") {
    spdlog::warn(
        "kvserver checkpoint root is /: checkpoints may go anywhere this user can "
        "write; set --checkpoint_root");
  } else {
    spdlog::info("kvserver checkpoint root {}", root);
  }
}

KVServerDaemon::~KVServerDaemon() {
  Shutdown();
  if (thread_.joinable()) thread_.join();
  // The server first (Run did, unless Start failed), then the service, then the queues: the
  // serving threads drain them and return.
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  if (local_ != nullptr) local_->Stop();
  service_.StopServing();
  if (health_ != nullptr) health_->StopServing();
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

std::string KVServerDaemon::address() const {
  return absl::StrCat(FormatHostPort(options_.advertise_host, port_));
}

int KVServerDaemon::metrics_port() const {
  return metrics_http_ == nullptr ? 0 : metrics_http_->port();
}

void KVServerDaemon::AddCollectors() {
  AddProcessCollector(&registry_);
  registry_.AddCollector([this](MetricsWriter* out) {
    MetricLabels info;
    {
      absl::MutexLock lock(&info_mu_);
      info = info_;
    }
    const std::shared_ptr<ServerBackend> backend = service_.backend();
    out->Family("kvstore_server_up",
                "1 once the kvserver serves its shard (registered, restored), else 0.",
                MetricsWriter::Type::kGauge);
    out->Sample("kvstore_server_up", {}, backend != nullptr ? 1 : 0);
    if (!info.empty()) {
      out->Family("kvstore_server_info", "The kvserver's place in the job (value 1).",
                  MetricsWriter::Type::kGauge);
      out->Sample("kvstore_server_info", info, 1);
    }
    out->Family("kvstore_server_memory_budget_bytes",
                "The most bytes this kvserver may hold (--memory_budget_bytes).",
                MetricsWriter::Type::kGauge);
    out->Sample("kvstore_server_memory_budget_bytes", {},
                static_cast<double>(options_.memory_budget_bytes));
    if (backend == nullptr) return;
    const ShardStore::Stats stats = backend->engine->stats();
    out->Family("kvstore_server_keys", "Keys (parts of keys) this kvserver holds.",
                MetricsWriter::Type::kGauge);
    out->Sample("kvstore_server_keys", {}, static_cast<double>(stats.num_keys));
    out->Family("kvstore_server_held_bytes", "Bytes of values this kvserver holds.",
                MetricsWriter::Type::kGauge);
    out->Sample("kvstore_server_held_bytes", {}, static_cast<double>(stats.num_bytes));
    // Tables (docs/tables.md): this server's rows of each, labelled by its key.
    const std::vector<TableInfo> tables = backend->tables->Tables();
    if (tables.empty()) return;
    struct Family {
      const char* name;
      const char* help;
      MetricsWriter::Type type;
      int64_t (*value)(const TableInfo&);
    };
    static constexpr Family kFamilies[] = {
        {"kvstore_server_table_rows", "Rows of the table this kvserver holds.",
         MetricsWriter::Type::kGauge, [](const TableInfo& t) { return t.stats.rows; }},
        {"kvstore_server_table_counting", "Ids of the table counted for admission, no row yet.",
         MetricsWriter::Type::kGauge, [](const TableInfo& t) { return t.stats.counting; }},
        {"kvstore_server_table_admitted_total", "Rows of the table created (ids admitted).",
         MetricsWriter::Type::kCounter, [](const TableInfo& t) { return t.stats.admitted; }},
        {"kvstore_server_table_evicted_total", "Rows of the table evicted (unseen, or LRU).",
         MetricsWriter::Type::kCounter, [](const TableInfo& t) { return t.stats.evicted; }},
        {"kvstore_server_table_bytes", "Bytes the table's rows and counts take here.",
         MetricsWriter::Type::kGauge, [](const TableInfo& t) { return t.stats.bytes; }},
        {"kvstore_server_table_round", "Updates applied to the table here.",
         MetricsWriter::Type::kCounter, [](const TableInfo& t) { return t.round; }},
    };
    for (const Family& family : kFamilies) {
      out->Family(family.name, family.help, family.type);
      for (const TableInfo& table : tables) {
        out->Sample(family.name, {{"table", table.key.Quoted()}},
                    static_cast<double>(family.value(table)));
      }
    }
  });
}

absl::Status KVServerDaemon::Wait() {
  done_.WaitForNotification();
  return status_;
}

void KVServerDaemon::Shutdown() {
  if (health_ != nullptr) health_->Stopping();
  if (!stop_.HasBeenNotified()) stop_.Notify();
  absl::MutexLock lock(&registering_mu_);
  if (registering_ != nullptr) registering_->TryCancel();
}

void KVServerDaemon::Run() {
  absl::Status status = RegisterAndServe();
  if (!status.ok() && stop_.HasBeenNotified() && !absl::IsCancelled(status)) {
    status = absl::CancelledError("kvserver stopped by its owner");
  }
  health_->Stopping();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (local_ != nullptr) local_->Stop();
  // No command is served any more: a checkpoint set or a shard copy the scheduler had open
  // (a periodic set begun as the last worker finished) is ended here, its unpublished files
  // removed, so that an exiting server leaves nothing half written.
  for (const std::shared_ptr<ServerBackend>& backend : {service_.backend(), service_.backup()}) {
    if (backend == nullptr) continue;
    const absl::StatusOr<std::string> ended = backend->controller->AbandonCut();
    if (!ended.ok()) {
      spdlog::error("kvserver: ending an open checkpoint on exit failed: {}",
                    ended.status().ToString());
      if (status.ok()) status = ended.status();
    } else if (!ended->empty()) {
      spdlog::warn("kvserver: exiting in the middle of the scheduler's work; ended {}", *ended);
    }
  }
  status_ = status;
  done_.Notify();
}

// Heartbeat sends one heartbeat reporting this server's load and what it restored, with the
// node's credential; thread-compatible (the serving loop's).
class KVServerDaemon::Heartbeat {
 public:
  // `backend` is the backend served before the service serves one; then the service's (a
  // rescale swaps it).
  Heartbeat(const SchedulerEndpoint* scheduler, const proto::RegisterResponse& registration,
            std::shared_ptr<ServerBackend> backend, const KVServerService* service, bool secured,
            absl::Duration interval)
      : scheduler_(scheduler),
        node_id_(registration.node_id()),
        first_(std::move(backend)),
        service_(service),
        credential_(secured ? NodeCredential(registration.node_id(), registration.node_token())
                            : ""),
        interval_(interval) {}

  grpc::Status Send(proto::HeartbeatResponse* reply) const {
    std::shared_ptr<ServerBackend> backend = service_->backend();
    if (backend == nullptr) backend = first_;
    proto::HeartbeatRequest request;
    request.set_node_id(node_id_);
    const ShardStore::Stats stats = backend->engine->stats();
    request.set_num_keys(stats.num_keys);
    request.set_num_bytes(stats.num_bytes);
    request.set_max_round(backend->engine->cuts().MaxRoundStarted());
    request.set_restored_round(backend->controller->restored_round());
    request.set_restored_checkpoint(backend->controller->restored_checkpoint());
    for (const TableInfo& info : backend->tables->Tables()) {
      proto::TableStatus* table = request.add_tables();
      table->set_key(info.key.Quoted());
      table->set_dim(info.dim);
      table->set_round(info.round);
      table->set_rows(info.stats.rows);
      table->set_counting(info.stats.counting);
      table->set_admitted(info.stats.admitted);
      table->set_evicted(info.stats.evicted);
      table->set_bytes(info.stats.bytes);
    }
    grpc::ClientContext context;
    if (!credential_.empty()) context.AddMetadata(kNodeTokenKey, credential_);
    context.set_deadline(GrpcDeadline(absl::Now() + std::max(interval_, absl::Seconds(2))));
    const std::shared_ptr<proto::Scheduler::Stub> stub = scheduler_->stub();
    if (stub == nullptr) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no scheduler known");
    return stub->Heartbeat(&context, request, reply);
  }

 private:
  const SchedulerEndpoint* const scheduler_;
  const uint64_t node_id_;
  const std::shared_ptr<ServerBackend> first_;
  const KVServerService* const service_;
  const std::string credential_;
  const absl::Duration interval_;
};

absl::Status KVServerDaemon::RegisterAndServe() {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> to_scheduler,
                   ChannelCredentialsFor(options_.security.tls));
  if (options_.etcd_endpoints.empty()) {
    scheduler_ = SchedulerEndpoint::Fixed(options_.scheduler_address, to_scheduler);
  } else {
    ASSIGN_OR_RETURN(scheduler_, SchedulerEndpoint::ThroughEtcd(options_.etcd_endpoints,
                                                                options_.job, to_scheduler));
  }
  ASSIGN_OR_RETURN(const proto::RegisterResponse registration, Register());
  if (options_.name_log_lines) SetLogNode(absl::StrCat("kvserver ", registration.rank()));
  ASSIGN_OR_RETURN(Backends backends, MakeBackends(registration));
  const proto::ClusterView& view = registration.view();
  // Shard copies for replacement servers go from this server to them directly.
  auto copies = std::make_shared<const ShardCopySender>(ShardCopySender::Options{
      registration.node_id(),
      options_.security.secret.empty() ? std::string() : registration.node_token(),
      view.signed_payloads(), to_scheduler});
  copies_ = copies;
  for (const std::shared_ptr<ServerBackend>& backend : {backends.primary, backends.backup}) {
    if (backend != nullptr) Equip(*backend, backend == backends.primary);
  }
  const absl::Duration interval = absl::Milliseconds(std::max(10, view.heartbeat_interval_ms()));
  const Heartbeat beat(scheduler_.get(), registration, backends.primary, &service_,
                       !options_.security.secret.empty(), interval);
  if (!registration.replaced_address().empty()) RefuseLostUpdates(registration, backends, beat);
  const Backends served = backends;
  verifier_ = MakeVerifier(registration);
  service_.SetBackend(std::move(backends.primary), verifier_, std::move(backends.backup));
  health_->SetServing(true);
  spdlog::info("kvserver rank {} (node {}) serving {} for {} workers", registration.rank(),
               registration.node_id(), view.mode(), view.num_workers());
  return HeartbeatUntilOver(registration, beat, interval, served);
}

void KVServerDaemon::Equip(ServerBackend& backend, bool primary) {
  std::shared_ptr<const ShardCopySender> copies = copies_;
  backend.controller->SetCopySender(
      [copies](const std::string& address, bool backup, const CopySource& copy) {
        return copies->Send(address, backup, copy);
      });
  backend.controller->SetShardSwapper([this, primary](const proto::ShardCheckpoint& shard, int rank,
                                                      int num_servers, uint64_t epoch) {
    return SwapShard(shard, rank, num_servers, epoch, !primary);
  });
}

absl::Status KVServerDaemon::SwapShard(const proto::ShardCheckpoint& shard, int rank,
                                       int num_servers, uint64_t epoch, bool backup) {
  BackendSpec spec = spec_;
  spec.rank = rank;
  spec.num_servers = num_servers;
  spec.restore_dir.clear();
  if (backup) spec.round_observer = nullptr;
  ASSIGN_OR_RETURN(std::shared_ptr<ServerBackend> backend, MakeServerBackend(spec));
  RETURN_IF_ERROR(backend->controller->LoadShard(
      shard, absl::StrCat("the shard merged for server ", rank, " of ", num_servers,
                          backup ? " (a backup)" : "")));
  // Requests routed by an older view went by another placement: refused, sent again.
  backend->engine->view_floor().Set(epoch, /*reads_too=*/true);
  Equip(*backend, !backup);
  spdlog::info("kvserver: now holds {} of shard {} of {} at view epoch {}: {} keys ({} bytes)",
               backup ? "the backup" : "the primary", rank, num_servers, epoch,
               backend->engine->stats().num_keys, backend->engine->stats().num_bytes);
  if (backup) {
    service_.SetBackend(service_.backend(), verifier_, std::move(backend));
    return absl::OkStatus();
  }
  if (options_.name_log_lines) SetLogNode(absl::StrCat("kvserver ", rank));
  spec_ = std::move(spec);
  service_.SetBackend(std::move(backend), verifier_, service_.backup());
  return absl::OkStatus();
}

absl::StatusOr<proto::RegisterResponse> KVServerDaemon::Register() {
  proto::RegisterRequest request;
  request.set_role(proto::SERVER);
  request.set_address(address());
  request.set_requested_rank(options_.join ? -1 : options_.requested_rank);
  request.set_hostname(LocalHostname());
  request.set_join(options_.join);
  SetLocalPath(&request);
  return CallRegister(request, absl::Now() + options_.register_timeout);
}

void KVServerDaemon::SetLocalPath(proto::RegisterRequest* request) const {
  if (local_ == nullptr || local_host_.empty()) return;
  request->set_local_socket(local_->path());
  request->set_local_host(local_host_);
}

void KVServerDaemon::JobPicture::Update(const proto::HeartbeatResponse& reply) {
  if (reply.view_epoch() > view_epoch) {
    view_epoch = reply.view_epoch();
    servers.assign(reply.servers().begin(), reply.servers().end());
  }
  dead_servers.assign(reply.dead_servers().begin(), reply.dead_servers().end());
  left_workers.assign(reply.left_worker_node_ids().begin(), reply.left_worker_node_ids().end());
  finished_workers.assign(reply.finished_worker_node_ids().begin(),
                          reply.finished_worker_node_ids().end());
}

absl::Status KVServerDaemon::Rejoin(const JobPicture& picture, const Backends& backends,
                                    absl::Time give_up) {
  // The backend served now (a rescale swaps it).
  const std::shared_ptr<ServerBackend> primary =
      service_.backend() != nullptr ? service_.backend() : backends.primary;
  const std::shared_ptr<ServerBackend> backup =
      service_.backend() != nullptr ? service_.backup() : backends.backup;
  const proto::RegisterResponse& registration = picture.registration;
  proto::RegisterRequest request;
  request.set_role(proto::SERVER);
  request.set_address(address());
  request.set_requested_rank(registration.rank());
  request.set_hostname(LocalHostname());
  SetLocalPath(&request);
  proto::Rejoin& rejoin = *request.mutable_rejoin();
  rejoin.set_node_id(registration.node_id());
  rejoin.set_rank(registration.rank());
  *rejoin.mutable_view() = registration.view();
  rejoin.set_view_epoch(picture.view_epoch);
  for (const proto::ServerInfo& server : picture.servers) *rejoin.add_servers() = server;
  for (int rank : picture.dead_servers) rejoin.add_dead_servers(rank);
  for (uint64_t id : picture.left_workers) rejoin.add_left_worker_node_ids(id);
  for (uint64_t id : picture.finished_workers) rejoin.add_finished_worker_node_ids(id);
  rejoin.set_max_round(primary->engine->cuts().MaxRoundStarted());
  uint64_t floor = registration.join_epoch();
  for (const std::shared_ptr<ServerBackend>& backend : {primary, backup}) {
    if (backend != nullptr) floor = std::max(floor, backend->engine->view_floor().epoch());
  }
  rejoin.set_epoch_floor(floor);
  for (proto::PublishedCheckpoint& set : primary->controller->published()) {
    *rejoin.add_checkpoints() = std::move(set);
  }
  // Pushes may be held by a cut the lost scheduler began: tried often, to end it soon.
  ASSIGN_OR_RETURN(const proto::RegisterResponse again,
                   CallRegister(request, give_up, absl::Milliseconds(200)));
  if (again.node_id() != registration.node_id() || again.rank() != registration.rank()) {
    return absl::FailedPreconditionError(
        absl::StrCat("registered again as node ", again.node_id(), " rank ", again.rank(),
                     ", not node ", registration.node_id(), " rank ", registration.rank()));
  }
  // A scheduler that knew this server did not restart: its checkpoint or join goes on.
  if (again.scheduler_knew()) return absl::OkStatus();
  for (const std::shared_ptr<ServerBackend>& backend : {primary, backup}) {
    if (backend == nullptr) continue;
    ASSIGN_OR_RETURN(const std::string ended, backend->controller->AbandonCut());
    if (!ended.empty()) {
      spdlog::warn("kvserver rank {}: ended what the lost scheduler left half done: {}",
                   registration.rank(), ended);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::RegisterResponse> KVServerDaemon::CallRegister(
    const proto::RegisterRequest& request, absl::Time give_up, absl::Duration max_backoff) {
  const bool secured = !options_.security.secret.empty();
  proto::RegisterResponse registration;
  // The scheduler may still be starting: retried while it cannot be reached, saying so.
  const grpc::Status status = CallWhileUnreachable(
      scheduler_->name(), give_up,
      [&](absl::Time deadline) {
        grpc::ClientContext context;
        context.set_deadline(GrpcDeadline(deadline));
        if (secured) context.AddMetadata(kJobTokenKey, JobToken(options_.security.secret));
        {
          absl::MutexLock lock(&registering_mu_);
          if (stop_.HasBeenNotified()) {
            return grpc::Status(grpc::StatusCode::CANCELLED, "kvserver stopped");
          }
          registering_ = &context;
        }
        // Through etcd: the leader now (a standby may have taken over).
        if (const absl::Status found = scheduler_->Resolve(); !found.ok()) {
          absl::MutexLock lock(&registering_mu_);
          registering_ = nullptr;
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(found.message()));
        }
        const grpc::Status attempt = scheduler_->stub()->Register(&context, request, &registration);
        absl::MutexLock lock(&registering_mu_);
        registering_ = nullptr;
        return attempt;
      },
      [](const std::string& line) { spdlog::warn("kvserver: {}", line); }, absl::Seconds(5),
      max_backoff);
  if (!status.ok()) {
    if (stop_.HasBeenNotified()) return absl::CancelledError("kvserver stopped");
    return absl::Status(
        FromGrpcStatus(status).code(),
        absl::StrCat("registering with ", scheduler_->name(), ": ", status.error_message()));
  }
  return registration;
}

absl::StatusOr<KVServerDaemon::Backends> KVServerDaemon::MakeBackends(
    const proto::RegisterResponse& registration) {
  const proto::ClusterView& view = registration.view();
  BackendSpec spec;
  spec.rank = registration.rank();
  spec.num_servers = view.num_servers();
  spec.mode = view.mode();
  spec.chunk_bytes = view.chunk_bytes();
  if (view.big_value_bound() > 0) spec.big_value_bound = view.big_value_bound();
  spec.worker_node_ids.assign(view.worker_node_ids().begin(), view.worker_node_ids().end());
  spec.updater = options_.updater;
  spec.updater_config = options_.updater_config;
  spec.registry = &options_.registry;
  spec.custom_controller = options_.custom_controller;
  spec.max_value_bytes = options_.max_value_bytes;
  spec.memory_budget_bytes = options_.memory_budget_bytes;
  spec.checkpoint_root = checkpoint_root_;
  spec.restore_dir = options_.restore_dir;
  // A server replacing a dead one of a job with replicas: the scheduler copies its shards
  // from the survivors, newer than any checkpoint.
  const uint64_t join_epoch = registration.join_epoch();
  if (join_epoch > 0) {
    if (!spec.restore_dir.empty()) {
      spdlog::warn(
          "kvserver rank {}: joining a running job with replicas: its shards are "
          "copied from the servers that hold them, not restored from {}",
          registration.rank(), spec.restore_dir);
    }
    spec.restore_dir.clear();
  }
  if (metrics_http_ != nullptr || trace_ != nullptr) {
    spec.round_observer = metrics_.ForJob(spec.worker_node_ids, trace_.get());
    absl::MutexLock lock(&info_mu_);
    info_ = {
        {"rank", absl::StrCat(registration.rank())}, {"mode", view.mode()}, {"address", address()}};
  }
  Backends backends;
  spec_ = spec;
  ASSIGN_OR_RETURN(backends.primary, MakeServerBackend(spec));
  if (!spec.restore_dir.empty()) {
    spdlog::info("kvserver rank {} restored {} keys from {}", registration.rank(),
                 backends.primary->engine->stats().num_keys,
                 backends.primary->controller->restored_from());
  }
  // With replicas, this server also holds the backup of the previous rank's shard: a second
  // engine of that rank, restored from the same set, served through the Backup methods.
  if (view.replicas() > 1) {
    BackendSpec backup_spec = spec;
    backup_spec.rank = (spec.rank + spec.num_servers - 1) % spec.num_servers;
    backup_spec.round_observer = nullptr;
    ASSIGN_OR_RETURN(backends.backup, MakeServerBackend(backup_spec));
    spdlog::info("kvserver rank {} holds the backup of shard {}", registration.rank(),
                 backup_spec.rank);
  }
  if (join_epoch > 0) {
    // Empty until the copies arrive: nothing routed by an older view is served.
    backends.primary->engine->view_floor().Set(join_epoch, /*reads_too=*/true);
    if (backends.backup != nullptr) {
      backends.backup->engine->view_floor().Set(join_epoch, /*reads_too=*/true);
    }
    if (options_.join) {
      spdlog::info(
          "kvserver rank {} (node {}) joins the running job as one more server: the "
          "scheduler moves the keys the new placement gives it into it, then publishes it at "
          "view epoch {}",
          registration.rank(), registration.node_id(), join_epoch);
    } else {
      spdlog::info(
          "kvserver rank {} (node {}) replaces a dead server of the running job: the "
          "scheduler copies shards {} and {} into it, then publishes it at view epoch {}",
          registration.rank(), registration.node_id(), registration.rank(),
          (registration.rank() + view.num_servers() - 1) % view.num_servers(), join_epoch);
    }
  }
  return backends;
}

std::shared_ptr<const RequestVerifier> KVServerDaemon::MakeVerifier(
    const proto::RegisterResponse& registration) const {
  if (options_.security.secret.empty()) return nullptr;
  return std::make_shared<const RequestVerifier>(
      std::map<uint64_t, std::string>(registration.peer_tokens().begin(),
                                      registration.peer_tokens().end()),
      address(),
      std::map<uint64_t, uint64_t>{{kSchedulerNodeId, registration.scheduler_sequence()}},
      registration.view().signed_payloads());
}

void KVServerDaemon::RefuseLostUpdates(const proto::RegisterResponse& registration,
                                       const Backends& backends, const Heartbeat& beat) {
  // The dead server's updates since the checkpoint are lost: nothing is acknowledged on the
  // old values. The scheduler hears what was restored before any worker can be refused, so
  // that the workers' errors name the rounds lost.
  const Controller* controller = backends.primary->controller.get();
  backends.primary->refusal = absl::DataLossError(absl::StrCat(
      "kvserver rank ", registration.rank(), " took the place of the server at ",
      registration.replaced_address(), ", which died, and ",
      controller->restored_round() >= 0
          ? absl::StrCat("restored checkpoint ", controller->restored_checkpoint(), " at round ",
                         controller->restored_round())
          : std::string("restored no checkpoint"),
      ": the updates that server acknowledged since are lost, so it refuses every data "
      "request; restart the job from a checkpoint"));
  spdlog::error("{}", std::string(backends.primary->refusal.message()));
  proto::HeartbeatResponse reply;
  const grpc::Status status = beat.Send(&reply);
  if (!status.ok()) {
    spdlog::warn("kvserver rank {}: telling the scheduler what it restored: {}",
                 registration.rank(), status.error_message());
  }
}

absl::Status KVServerDaemon::HeartbeatUntilOver(const proto::RegisterResponse& registration,
                                                const Heartbeat& beat, absl::Duration interval,
                                                const Backends& backends) {
  const proto::ClusterView& view = registration.view();
  JobPicture picture{registration};
  absl::Time last_contact = absl::Now();
  int left_workers = 0;  // How many workers had left the job at the last heartbeat.
  while (!stop_.WaitForNotificationWithTimeout(interval)) {
    proto::HeartbeatResponse reply;
    const grpc::Status status = beat.Send(&reply);
    if (!status.ok()) {
      const absl::Time give_up = last_contact + options_.scheduler_lost_timeout;
      const std::string lost = absl::StrCat(
          "lost ", scheduler_->name(), ": no heartbeat answered for ",
          absl::FormatDuration(options_.scheduler_lost_timeout), " (", status.error_message(), ")");
      if (absl::Now() > give_up) return absl::UnavailableError(lost);
      // A scheduler restarted in place knows this server once it registers again; until
      // then, or while none listens, this waits (up to scheduler_lost_timeout in all).
      spdlog::warn(
          "kvserver rank {}: a heartbeat to {} failed ({}); registering "
          "again, waiting up to {} for it",
          registration.rank(), scheduler_->name(), status.error_message(),
          absl::FormatDuration(absl::Trunc(give_up - absl::Now(), absl::Milliseconds(100))));
      const absl::Status again = Rejoin(picture, backends, give_up);
      if (stop_.HasBeenNotified()) break;
      if (!again.ok()) {
        if (absl::IsFailedPrecondition(again) || absl::IsInvalidArgument(again) ||
            absl::IsPermissionDenied(again) || absl::IsUnauthenticated(again)) {
          return absl::Status(
              again.code(),
              absl::StrCat("registering again with ", scheduler_->name(), ": ", again.message()));
        }
        if (absl::Now() > give_up) return absl::UnavailableError(lost);
        continue;
      }
      spdlog::info("kvserver rank {} (node {}): registered again with {}", registration.rank(),
                   registration.node_id(), scheduler_->name());
      last_contact = absl::Now();
      continue;
    }
    last_contact = absl::Now();
    picture.Update(reply);
    // Servers joined since: they may send this one the keys they hold (a rescale).
    if (verifier_ != nullptr) {
      for (const auto& [node_id, token] : reply.server_tokens()) verifier_->AddPeer(node_id, token);
    }
    // The backend served now (a rescale swaps it).
    const std::shared_ptr<ServerBackend> primary = service_.backend();
    const std::shared_ptr<ServerBackend> backup = service_.backup();
    ServerEngine* engine = primary->engine.get();
    ServerEngine* backup_engine = backup != nullptr ? backup->engine.get() : nullptr;
    if (!reply.join_failure().empty()) {
      spdlog::error("kvserver rank {}: joining the running job failed: {}", registration.rank(),
                    reply.join_failure());
      return absl::AbortedError(
          absl::StrCat("joining the running job failed: ", reply.join_failure()));
    }
    if (reply.left_worker_node_ids_size() > left_workers) {
      // An elastic job goes on without them: their open rounds stop waiting for them.
      left_workers = reply.left_worker_node_ids_size();
      const std::vector<uint64_t> left(reply.left_worker_node_ids().begin(),
                                       reply.left_worker_node_ids().end());
      int64_t completed = engine->DropWorkers(left);
      if (backup_engine != nullptr) completed += backup_engine->DropWorkers(left);
      for (const std::shared_ptr<ServerBackend>& backend : {primary, backup}) {
        if (backend != nullptr) completed += backend->tables->DropWorkers();
      }
      spdlog::warn(
          "kvserver rank {}: workers (node ids) {} have left the job; rounds now wait "
          "for the {} remaining workers ({} open rounds completed without them)",
          registration.rank(), absl::StrJoin(left, ", "),
          view.num_workers() - static_cast<int>(engine->workers().dropped()), completed);
    }
    if (reply.shutdown() && reply.job_failed()) {
      // Answer the pushes still waiting for a round, naming why, before exiting non-zero.
      engine->FailRounds(reply.failure());
      if (backup_engine != nullptr) backup_engine->FailRounds(reply.failure());
      for (const std::shared_ptr<ServerBackend>& backend : {primary, backup}) {
        if (backend != nullptr) {
          backend->tables->FailRounds(
              absl::AbortedError(absl::StrCat("the job failed: ", reply.failure())));
        }
      }
      spdlog::error("kvserver rank {}: the job failed: {}", registration.rank(), reply.failure());
      absl::SleepFor(std::max(interval, absl::Milliseconds(500)));
      return absl::AbortedError(absl::StrCat("the job failed: ", reply.failure()));
    }
    if (reply.shutdown()) {
      spdlog::info("kvserver rank {}: the job is over, exiting", registration.rank());
      return absl::OkStatus();
    }
  }
  return absl::CancelledError("kvserver stopped by its owner");
}

}  // namespace kvstore
