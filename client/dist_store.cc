#include "client/dist_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/dense_transfer.h"
#include "client/group_transfer.h"
#include "client/grpc_scheduler_link.h"
#include "client/grpc_server_transport.h"
#include "client/local_server_transport.h"
#include "client/row_sparse_transfer.h"
#include "client/table_transfer.h"
#include "common/grpc_channel.h"
#include "common/job_auth.h"
#include "common/logging.h"
#include "common/proto_convert.h"
#include "common/server_commands.h"
#include "common/status_macros.h"
#include "common/store/updater_state.h"
#include "common/table_wire.h"
#include "proto/kvstore.pb.h"

namespace kvstore {
namespace {

// ConnectionsPerServer: `requested` (DistOptions::connections_per_server), or when 0 the count
// for the job's size (2 for one worker, 1 for more).
int ConnectionsPerServer(int requested, const JobView& view) {
  if (requested > 0) return requested;
  return view.num_workers > 1 ? 1 : 2;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DistStore>> DistStore::Connect(std::string type,
                                                              const DistOptions& options) {
  if (options.etcd_endpoints.empty() &&
      (options.scheduler_port <= 0 || options.scheduler_port > 65535)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler port ", options.scheduler_port, " is not in 1..65535"));
  }
  const int connections = options.connections_per_server;
  const bool local = options.local_transport;
  std::shared_ptr<CompletionThread> completions = options.completion_thread;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   ChannelCredentialsFor(options.security.tls));
  std::unique_ptr<SchedulerEndpoint> scheduler;
  if (options.etcd_endpoints.empty()) {
    scheduler = SchedulerEndpoint::Fixed(
        absl::StrCat(options.scheduler_host, ":", options.scheduler_port), credentials);
  } else {
    ASSIGN_OR_RETURN(scheduler, SchedulerEndpoint::ThroughEtcd(options.etcd_endpoints, options.job,
                                                               credentials));
  }
  return Connect(std::move(type), options,
                 std::make_unique<GrpcSchedulerLink>(std::move(scheduler), options.security.secret),
                 [connections, local, credentials, completions](
                     const JobView& view) -> absl::StatusOr<std::unique_ptr<ServerTransport>> {
                   const std::vector<ServerAddress> targets =
                       ReplicaTargets(view.servers, view.replicas);
                   const int per_server = ConnectionsPerServer(connections, view);
                   ASSIGN_OR_RETURN(
                       std::unique_ptr<GrpcServerTransport> transport,
                       GrpcServerTransport::Create(targets, per_server, credentials, completions));
                   if (!local) return std::unique_ptr<ServerTransport>(std::move(transport));
                   return LocalServerTransport::Wrap(targets, per_server, std::move(transport));
                 });
}

absl::Status DistStore::CheckOptions(const DistOptions& options) {
  if (!options.log_level.empty()) {
    const spdlog::level::level_enum level = spdlog::level::from_str(options.log_level);
    if (level == spdlog::level::off && options.log_level != "off") {
      return absl::InvalidArgumentError(absl::StrCat(
          "log_level \"", options.log_level, "\" is not trace, debug, info, warn, error or off"));
    }
    SdkLogger()->set_level(level);
  }
  if (options.max_inflight < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_inflight must be >= 1, not ", options.max_inflight));
  }
  if (options.connections_per_server < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("connections_per_server must be >= 0 (0: chosen by the job's size), not ",
                     options.connections_per_server));
  }
  if (options.max_retries < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_retries must be >= 0, not ", options.max_retries));
  }
  if (options.fusion_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("fusion_bytes must be >= 0, not ", options.fusion_bytes));
  }
  return absl::OkStatus();
}

void DistStore::MakeCaller(const DistOptions& options) {
  const JobView& view = membership_->view();
  caller_ = std::make_unique<ServerCaller>(
      transport_.get(), view.servers,
      CallPolicy{options.rpc_timeout, options.max_retries, options.retry_backoff, view.replicas},
      timer_.get());
  // The servers may change while the job runs (dist_store_rescale.cc); with replicas the view
  // also routes around dead servers (OnRouting).
  if (rescalable_ || view.replicas > 1) {
    membership_->set_on_routing([this](const JobState& state) { OnRouting(state); });
  }
  FailOver(caller_.get());
}

void DistStore::FailOver(ServerCaller* caller) {
  if (membership_->view().replicas <= 1) return;
  // With replicas, an unreachable server fails over to its shards' backups, routed by the
  // scheduler's view.
  Membership* membership = membership_.get();
  caller->set_failover_check([membership](int rank, const absl::Status& error) {
    return membership->ServerUnreachable(rank, error);
  });
  caller->set_view_refresh([membership] { return membership->RefreshRouting(); });
}

absl::StatusOr<std::unique_ptr<DistStore>> DistStore::Connect(
    std::string type, const DistOptions& options, std::unique_ptr<SchedulerLink> link,
    const TransportFactory& make_transport) {
  RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<DistStore> store(new DistStore(std::move(type), options));
  MembershipOptions membership;
  membership.requested_rank = options.requested_rank;
  membership.register_timeout = options.register_timeout;
  membership.barrier_timeout = options.barrier_timeout;
  membership.command_timeout = options.rpc_timeout;
  // dist_sync_device (MXNet's alias dist_device_sync) is dist_sync with values on GPUs.
  const std::string mode = store->type() == "dist_async" ? "dist_async" : "dist_sync";
  ASSIGN_OR_RETURN(store->membership_, Membership::Join(std::move(link), mode, membership));
  const JobView& view = store->membership_->view();
  ASSIGN_OR_RETURN(store->transport_, make_transport(view));
  store->make_transport_ = make_transport;
  store->rescalable_ = mode == "dist_sync";
  {
    absl::MutexLock lock(&store->rescale_mu_);
    store->servers_now_ = view.servers;
  }
  store->timer_ = std::make_unique<Timer>();
  store->MakeCaller(options);
  const int servers = static_cast<int>(view.servers.size());
  ASSIGN_OR_RETURN(
      store->telemetry_,
      WorkerTelemetry::Start({view.rank, servers, options.metrics_port, options.trace_file}));
  if (WorkerTelemetry* t = store->telemetry_.get()) {
    store->caller_->set_observer([t](int server, ServerMethod method, size_t request_bytes,
                                     size_t reply_bytes, absl::Time sent, absl::Time answered,
                                     absl::StatusCode code) {
      t->RequestDone(server, method, request_bytes, reply_bytes, sent, answered, code);
    });
  }
  ASSIGN_OR_RETURN(Partitioner partitioner, Partitioner::Create(servers, view.big_value_bound));
  store->keys_ = std::make_unique<KeyTable>(
      partitioner, view.chunk_bytes > 0 ? view.chunk_bytes : kDefaultChunkBytes);
  store->groups_ = std::make_unique<GroupCache>(servers);
  store->membership_->set_acknowledged_round(
      [keys = store->keys_.get(), groups = store->groups_.get()](int rank) {
        absl::flat_hash_map<const KeyInfo*, int64_t> extra;
        groups->AddAcknowledged(&extra);
        return keys->AcknowledgedRound(rank, extra);
      },
      mode == "dist_sync");
  if (!options.security.secret.empty()) {
    store->signer_ =
        std::make_unique<RequestSigner>(view.node_id, view.node_token, view.signed_payloads);
    store->caller_->set_signer(store->signer_.get());
  }
  store->context_ = TransferContext{
      store->caller_.get(), view.node_id, &store->next_request_id_, &store->push_payload_bytes_,
      static_cast<size_t>(ConnectionsPerServer(options.connections_per_server, view)) *
          static_cast<size_t>(servers)};
  RETURN_IF_ERROR(store->caller_->WaitForServers(store->context_, options.register_timeout));
  store->queue_ = std::make_unique<OpQueue>(
      OpQueue::Options{options.max_inflight, options.fusion_bytes,
                       /*fuse_pushes=*/mode != "dist_sync" || view.num_workers < 2},
      [s = store.get()](Op op, OpDone done) { s->Start(std::move(op), std::move(done)); });
  if (store->rescalable_) {
    store->rescaler_ = std::thread([s = store.get()] { s->RescaleLoop(); });
  }
  SetSdkLogNode(absl::StrCat("worker ", view.rank));
  SdkLogger()->info("worker rank {} (node {}) joined a {} job of {} workers and {} servers",
                    view.rank, view.node_id, view.mode, view.num_workers, servers);
  return store;
}

DistStore::~DistStore() {
  if (queue_ != nullptr) {
    const absl::Status pending = queue_->WaitAll();
    if (!pending.ok()) {
      SdkLogger()->warn("worker {}: {}", rank(), pending.ToString());
      if (membership_ != nullptr) membership_->Noted(pending).IgnoreError();
    }
    if (pending.ok() && barrier_before_exit()) {
      const absl::Status barrier = Barrier();
      if (!barrier.ok()) {
        SdkLogger()->warn("worker {}: barrier before exit: {}", rank(), barrier.ToString());
      }
    }
    queue_.reset();
  }
  if (rescaler_.joinable()) {
    {
      absl::MutexLock lock(&rescale_mu_);
      stopping_ = true;
      rescale_changed_.SignalAll();
    }
    rescaler_.join();
  }
  if (membership_ != nullptr) membership_->Leave();
  // Every call has completed (WaitAll), and no retry is left to the timer.
  timer_.reset();
  if (transport_ != nullptr) transport_->Close();
  absl::MutexLock lock(&rescale_mu_);
  for (const std::unique_ptr<ServerTransport>& retired : retired_transports_) retired->Close();
}

CompressionParams DistStore::compression() const {
  absl::ReaderMutexLock lock(&compression_mu_);
  return compression_;
}

// ---------------------------------------------------------------------------------------------
// The operations

absl::Status DistStore::DoInit(absl::Span<const Key> keys, absl::Span<const Tensor> values) {
  RETURN_IF_ERROR(membership_->JobOver());
  std::vector<KeyWork> work;
  absl::Status status = Rerouted([&]() -> absl::Status {
    // Planned again on every try: the keys are placed over the servers of the view now.
    ASSIGN_OR_RETURN(work, keys_->PlanInit(keys, values));
    if (rank() != 0) return absl::OkStatus();
    // The Init, then the chunks of the parts it created deferred.
    absl::Status sent_status;
    for (const Kind kind : {Kind::kInit, Kind::kInitFill}) {
      absl::Notification sent;
      TransferDense(context_, kind, work, CompressionParams(), [&](absl::Status s) {
        sent_status = s;
        sent.Notify();
      });
      sent.WaitForNotification();
      if (!sent_status.ok()) break;
    }
    return sent_status;
  });
  if (work.empty() && !status.ok()) return status;  // Refused before anything was sent.
  // Every worker waits until rank 0's values are stored, even when they were refused, so that
  // no worker is left alone in the barrier.
  const absl::Status barrier = Barrier();
  if (status.ok()) status = barrier;
  if (!status.ok()) return membership_->Noted(status);
  keys_->Record(&work);
  return absl::OkStatus();
}

absl::Status DistStore::DoPush(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                               int priority) {
  if (TryGroup(Kind::kPush, keys, values, {}, priority)) return absl::OkStatus();
  RETURN_IF_ERROR(CheckDefined(keys, values, "push"));
  RETURN_IF_ERROR(membership_->JobOver());
  ASSIGN_OR_RETURN(std::vector<KeyWork> work, keys_->Plan(keys, values, {}));
  Enqueue(priority, std::move(work), Kind::kPush);
  return absl::OkStatus();
}

absl::Status DistStore::DoPull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs,
                               int priority) {
  if (TryGroup(Kind::kPull, keys, {}, outs, priority)) return absl::OkStatus();
  RETURN_IF_ERROR(membership_->JobOver());
  ASSIGN_OR_RETURN(std::vector<KeyWork> work, keys_->Plan(keys, {}, outs));
  Enqueue(priority, std::move(work), Kind::kPull);
  return absl::OkStatus();
}

absl::Status DistStore::DoPushPull(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                                   absl::Span<Tensor* const> outs, int priority) {
  if (values.size() != outs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pushpull of ", values.size(), " values into ", outs.size(), " outputs"));
  }
  if (TryGroup(Kind::kPushPull, keys, values, outs, priority)) return absl::OkStatus();
  RETURN_IF_ERROR(CheckDefined(keys, values, "pushpull"));
  RETURN_IF_ERROR(membership_->JobOver());
  ASSIGN_OR_RETURN(std::vector<KeyWork> work, keys_->Plan(keys, values, outs));
  Enqueue(priority, std::move(work), Kind::kPushPull);
  return absl::OkStatus();
}

absl::Status DistStore::DoPushRowSparse(absl::Span<const Key> keys,
                                        absl::Span<const RowSparse> values, int priority) {
  RETURN_IF_ERROR(membership_->JobOver());
  ASSIGN_OR_RETURN(std::vector<KeyWork> work, keys_->PlanRowSparsePush(keys, values));
  Enqueue(priority, std::move(work), Kind::kRowSparsePush);
  return absl::OkStatus();
}

absl::Status DistStore::DoRowSparsePull(absl::Span<const Key> keys,
                                        absl::Span<RowSparse* const> outs,
                                        absl::Span<const std::vector<int64_t>> row_ids,
                                        int priority) {
  RETURN_IF_ERROR(membership_->JobOver());
  ASSIGN_OR_RETURN(std::vector<KeyWork> work, keys_->PlanRowSparsePull(keys, outs, row_ids));
  Enqueue(priority, std::move(work), Kind::kRowSparsePull);
  return absl::OkStatus();
}

absl::Status DistStore::DoInitTable(const Key& key, const TableConfig& config) {
  RETURN_IF_ERROR(membership_->JobOver());
  absl::Status status =
      Rerouted([&] { return InitTableOnServers(context_, key, TableSpecToProto(config)); });
  // Every worker waits until every worker has made the table on every server, even after a
  // refusal, so that no worker is left alone in the barrier and no push finds no table.
  const absl::Status barrier = Barrier();
  if (status.ok()) status = barrier;
  return membership_->Noted(status);
}

absl::Status DistStore::DoPullRows(const Key& key, int64_t dim, absl::Span<const int64_t> ids,
                                   float* out) {
  RETURN_IF_ERROR(membership_->JobOver());
  return membership_->Noted(Rerouted([&] { return PullTableRows(context_, key, dim, ids, out); }));
}

absl::Status DistStore::DoPushRows(const Key& key, int64_t dim, absl::Span<const int64_t> ids,
                                   const float* grads) {
  RETURN_IF_ERROR(membership_->JobOver());
  return membership_->Noted(Rerouted([&] {
    return PushTableRows(context_, key, dim, ids, grads,
                         /*every_server=*/membership_->view().mode != "dist_async");
  }));
}

absl::StatusOr<std::pair<DType, Shape>> DistStore::StoredSpec(const Key& key) const {
  return keys_->StoredSpec(key);
}

void DistStore::Enqueue(int priority, std::vector<KeyWork> work, Kind kind) {
  Op op;
  op.priority = priority;
  op.kind = kind;
  op.keys.reserve(work.size());
  for (const KeyWork& entry : work) {
    op.keys.push_back(entry.key);
    op.bytes += entry.info->bytes;
  }
  op.work = std::move(work);
  Issue(std::move(op));
}

void DistStore::Issue(Op op) {
  if (telemetry_ != nullptr) op.queued = absl::Now();
  if (op.kind == Kind::kPush || op.kind == Kind::kPushPull) op.compression = compression();
  queue_->Enqueue(std::move(op));
}

void DistStore::Start(Op op, OpDone done) {
  if (telemetry_ != nullptr) {
    std::vector<Key> keys;
    keys.reserve(op.work.size());
    for (const KeyWork& entry : op.work) keys.push_back(entry.key);
    const size_t group_keys = op.group != nullptr ? op.group->keys.size() : 0;
    done = [t = telemetry_.get(), kind = op.kind, keys = std::move(keys), group_keys,
            queued = op.queued, started = absl::Now(),
            done = std::move(done)](absl::Status status) {
      t->OperationDone(kind, keys, group_keys, queued, started, status.code());
      done(std::move(status));
    };
  }
  if (op.kind == Kind::kPush || op.kind == Kind::kPushPull || op.kind == Kind::kRowSparsePush) {
    done = CountingAcknowledged(op, std::move(done));
  }
  if (rescalable_) return Run(std::move(op), std::move(done), 0);
  Transfer(std::move(op), std::move(done));
}

void DistStore::Transfer(Op op, OpDone done) {
  if (op.group != nullptr) {
    TransferGroup(context_, op.kind, std::move(op.group), std::move(op.group_work),
                  std::move(done));
  } else if (op.kind == Kind::kRowSparsePush || op.kind == Kind::kRowSparsePull) {
    TransferRowSparse(context_, op.kind, std::move(op.work), std::move(done));
  } else {
    TransferDense(context_, op.kind, std::move(op.work), op.compression, std::move(done));
  }
}

OpDone DistStore::CountingAcknowledged(const Op& op, OpDone done) {
  if (op.group != nullptr) {
    return [group = op.group, done = std::move(done)](absl::Status status) {
      if (status.ok()) group->acknowledged_pushes.fetch_add(1, std::memory_order_relaxed);
      done(std::move(status));
    };
  }
  // Plain pointers: the key table never drops a record.
  absl::InlinedVector<const KeyInfo*, 2> infos;
  for (const KeyWork& entry : op.work) infos.push_back(entry.info.get());
  return [infos = std::move(infos), done = std::move(done)](absl::Status status) {
    if (status.ok()) {
      for (const KeyInfo* info : infos) {
        info->acknowledged_pushes.fetch_add(1, std::memory_order_relaxed);
      }
    }
    done(std::move(status));
  };
}

// ---------------------------------------------------------------------------------------------
// Key groups

bool DistStore::GroupsUsable(size_t n, bool pushes) const {
  if (options_.group_min_keys <= 0 || n < static_cast<size_t>(options_.group_min_keys)) {
    return false;
  }
  return !(pushes && compression().enabled()) && !membership_->job_over();
}

bool DistStore::TryGroup(Kind kind, absl::Span<const Key> keys, absl::Span<const Tensor> values,
                         absl::Span<Tensor* const> outs, int priority) {
  const bool pushes = kind != Kind::kPull;
  if (!GroupsUsable(keys.size(), pushes)) return false;
  // The group used last, its keys compared while the tensors are checked; when the list turns
  // out to be another, its own group (GroupCache::For compares the list before returning it).
  if (std::shared_ptr<GroupPlan> recent = groups_->Recent(keys.size()); recent != nullptr) {
    const GroupCheck check = EnqueueGroup(kind, std::move(recent), keys, values, outs, priority);
    if (check != GroupCheck::kOtherKeys) return check == GroupCheck::kOk;
  }
  std::shared_ptr<GroupPlan> group = groups_->For(keys, *keys_);
  return group != nullptr &&
         EnqueueGroup(kind, std::move(group), {}, values, outs, priority) == GroupCheck::kOk;
}

GroupCheck DistStore::EnqueueGroup(Kind kind, std::shared_ptr<GroupPlan> group,
                                   absl::Span<const Key> unchecked, absl::Span<const Tensor> values,
                                   absl::Span<Tensor* const> outs, int priority) {
  Op op;
  op.priority = priority;
  op.kind = kind;
  op.bytes = group->bytes;
  if (kind != Kind::kPull) {
    const GroupCheck check = PackGroup(*group, unchecked, values, &split_, &op.group_work);
    if (check != GroupCheck::kOk) return check;
    unchecked = {};  // Compared by PackGroup.
  }
  if (kind != Kind::kPush) {
    const GroupCheck check = CheckGroupOutputs(*group, unchecked, outs, &split_, &op.group_work);
    if (check != GroupCheck::kOk) return check;
  }
  op.group = std::move(group);
  Issue(std::move(op));
  return GroupCheck::kOk;
}

bool DistStore::TryGroupBucket(Kind kind, absl::Span<const Key> keys, const Tensor* in, Tensor* out,
                               int priority) {
  if (!GroupsUsable(keys.size(), kind != Kind::kPull)) return false;
  std::shared_ptr<GroupPlan> group = groups_->For(keys, *keys_);
  return group != nullptr && EnqueueBucket(kind, std::move(group), in, out, priority);
}

bool DistStore::EnqueueBucket(Kind kind, std::shared_ptr<GroupPlan> group, const Tensor* in,
                              Tensor* out, int priority) {
  Op op;
  op.priority = priority;
  op.kind = kind;
  op.bytes = group->bytes;
  if (PrepareBucket(*group, kind != Kind::kPull ? in : nullptr, kind != Kind::kPush ? out : nullptr,
                    &op.group_work) != GroupCheck::kOk) {
    return false;
  }
  op.group = std::move(group);
  Issue(std::move(op));
  return true;
}

absl::Status DistStore::DoPushBucket(absl::Span<const Key> keys, const Tensor& bucket,
                                     int priority) {
  if (TryGroupBucket(Kind::kPush, keys, &bucket, nullptr, priority)) return absl::OkStatus();
  return KVStore::DoPushBucket(keys, bucket, priority);
}

absl::Status DistStore::DoIntKeyBucket(absl::Span<const int64_t> keys, const Tensor* in,
                                       Tensor* out, int priority) {
  const Kind kind = in == nullptr ? Kind::kPull : out == nullptr ? Kind::kPush : Kind::kPushPull;
  std::shared_ptr<GroupPlan> group =
      GroupsUsable(keys.size(), kind != Kind::kPull) ? groups_->ForInts(keys) : nullptr;
  if (group != nullptr && EnqueueBucket(kind, std::move(group), in, out, priority)) {
    return absl::OkStatus();
  }
  return KVStore::DoIntKeyBucket(keys, in, out, priority);
}

absl::Status DistStore::DoPullBucket(absl::Span<const Key> keys, Tensor* bucket, int priority) {
  if (TryGroupBucket(Kind::kPull, keys, nullptr, bucket, priority)) return absl::OkStatus();
  return KVStore::DoPullBucket(keys, bucket, priority);
}

absl::Status DistStore::DoPushPullBucket(absl::Span<const Key> keys, const Tensor& bucket,
                                         Tensor* out, int priority) {
  if (TryGroupBucket(Kind::kPushPull, keys, &bucket, out, priority)) return absl::OkStatus();
  return KVStore::DoPushPullBucket(keys, bucket, out, priority);
}

// ---------------------------------------------------------------------------------------------
// Commands

absl::Status DistStore::SetUpdater(Updater /*updater*/) {
  return absl::FailedPreconditionError(
      "a distributed store runs updaters on its servers: select one by name with "
      "SendCommandToServers(0, \"sgd lr=0.1 momentum=0.9\") or kvserver --updater");
}

absl::Status DistStore::DoSetOptimizer(const OptimizerConfig& config) {
  proto::OptimizerConfig message;
  OptimizerConfigToProto(config, &message);
  return SendCommandToServers(kCommandSetOptimizer, message.SerializeAsString());
}

absl::Status DistStore::DoSetGradientCompression(const CompressionParams& params) {
  // Pushes issued from now on use `params`; a key's residual restarts from zero when its next
  // compressed push finds different parameters.
  absl::MutexLock lock(&compression_mu_);
  compression_ = params;
  return absl::OkStatus();
}

absl::Status DistStore::SendCommandToServers(int head, const std::string& body) {
  return membership_->Command(head, body).status();
}

absl::Status DistStore::SaveOptimizerStates(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<std::string> replies,
                   membership_->Command(kCommandSaveOptimizerStates, ""));
  UpdaterStateData merged;
  for (size_t s = 0; s < replies.size(); ++s) {
    proto::UpdaterState message;
    if (!message.ParseFromString(replies[s])) {
      return absl::InternalError(
          absl::StrCat("server ", s, " sent optimizer state that does not parse"));
    }
    ASSIGN_OR_RETURN(UpdaterStateData state, UpdaterStateFromProto(message));
    if (s > 0 && state.optimizer != merged.optimizer) {
      return absl::FailedPreconditionError(
          absl::StrCat("servers run different updaters (\"", merged.optimizer, "\" and \"",
                       state.optimizer, "\"); set one optimizer on all of them first"));
    }
    merged.optimizer = state.optimizer;
    merged.num_update = std::max(merged.num_update, state.num_update);
    for (PartStateData& part : state.parts) merged.parts.push_back(std::move(part));
  }
  return SaveOptimizerStateFile(path, merged);
}

absl::Status DistStore::LoadOptimizerStates(const std::string& path) {
  ASSIGN_OR_RETURN(UpdaterStateData state, LoadOptimizerStateFile(path));
  proto::UpdaterState message;
  UpdaterStateToProto(state, &message);
  ASSIGN_OR_RETURN(const std::string body,
                   SerializeWhole(message, absl::StrCat("the optimizer state in ", path)));
  const absl::Status status = membership_->Command(kCommandLoadOptimizerStates, body).status();
  if (status.ok()) return status;
  if (absl::IsResourceExhausted(status)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        path, ": the saved optimizer state is ", body.size(),
        " bytes, more than the scheduler accepts in one request; start it with a larger "
        "--max_request_bytes (",
        status.message(), ")"));
  }
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

absl::Status DistStore::Checkpoint(const std::string& dir) {
  return membership_->Command(kCommandCheckpoint, dir).status();
}

absl::StatusOr<int> DistStore::NumDeadNodes(NodeGroup group, absl::Duration timeout) {
  return membership_->NumDeadNodes(static_cast<int>(group), timeout);
}

}  // namespace kvstore
