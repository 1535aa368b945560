#include "server/scheduler/grpc/scheduler_service.h"

#include <grpcpp/client_context.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/server_commands.h"
#include "common/server_methods.h"
#include "common/status_macros.h"
#include "common/wire_frame.h"
#include "server/scheduler/core/server_failover.h"
#include "server/scheduler/core/worker_liveness.h"
namespace kvstore {
namespace {

// The scheduler's own node id (SchedulerCore issues 2, 3, ... to the others).
constexpr uint64_t kSchedulerNodeId = 1;

// ViewToProto fills `out` from `view` but for its servers, which the caller adds
// (SchedulerService::AddServers).
void ViewToProto(const ClusterView& view, proto::ClusterView* out) {
  out->set_num_servers(view.num_servers);
  out->set_num_workers(view.num_workers);
  out->set_big_value_bound(view.big_value_bound);
  out->set_chunk_bytes(view.chunk_bytes);
  out->set_mode(view.mode);
  out->set_replicas(view.replicas);
  out->set_signed_payloads(view.signed_payloads);
  out->set_heartbeat_interval_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(view.heartbeat_interval)));
  for (uint64_t id : view.worker_node_ids) out->add_worker_node_ids(id);
  out->set_job_id(view.job_id);
}

std::vector<ServerEntry> ServersFromProto(
    const google::protobuf::RepeatedPtrField<proto::ServerInfo>& servers) {
  std::vector<ServerEntry> entries;
  for (const proto::ServerInfo& info : servers) {
    entries.push_back(ServerEntry{info.rank(), info.node_id(), info.address()});
  }
  return entries;
}

// ClaimFromProto: a node's registration again with a scheduler restarted in place.
RejoinClaim ClaimFromProto(const proto::RegisterRequest& request) {
  const proto::Rejoin& rejoin = request.rejoin();
  const proto::ClusterView& view = rejoin.view();
  RejoinClaim claim;
  claim.role = request.role() == proto::SERVER ? NodeRole::kServer : NodeRole::kWorker;
  claim.node_id = rejoin.node_id();
  claim.rank = rejoin.rank();
  claim.address = request.address();
  claim.hostname = request.hostname();
  claim.view.num_servers = view.num_servers();
  claim.view.num_workers = view.num_workers();
  claim.view.servers = ServersFromProto(view.servers());
  claim.view.worker_node_ids.assign(view.worker_node_ids().begin(), view.worker_node_ids().end());
  claim.view.mode = view.mode();
  claim.view.job_id = view.job_id();
  claim.view_epoch = rejoin.view_epoch();
  claim.servers = ServersFromProto(rejoin.servers());
  claim.dead_servers.assign(rejoin.dead_servers().begin(), rejoin.dead_servers().end());
  claim.left_workers.assign(rejoin.left_worker_node_ids().begin(),
                            rejoin.left_worker_node_ids().end());
  claim.finished_workers.assign(rejoin.finished_worker_node_ids().begin(),
                                rejoin.finished_worker_node_ids().end());
  claim.max_round = rejoin.max_round();
  claim.epoch_floor = rejoin.epoch_floor();
  for (const proto::PublishedCheckpoint& set : rejoin.checkpoints()) {
    claim.checkpoints.push_back(PublishedCheckpoint{set.checkpoint_id(), set.dir(), set.round()});
  }
  return claim;
}

// Metadata returns the value of `key` in the call's metadata, or nothing.
std::optional<absl::string_view> Metadata(const grpc::CallbackServerContext& context,
                                          const char* key) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(key);
  if (it == metadata.end()) return std::nullopt;
  return absl::string_view(it->second.data(), it->second.size());
}

// Serve parses a raw request as a `Request`, runs `handle(request, &response, done)`, and
// finishes the call when `done` runs: with the serialized response, or the error.
template <typename Request, typename Response, typename Handle>
grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* context,
                                const grpc::ByteBuffer* raw_request, grpc::ByteBuffer* raw_response,
                                const char* method, Handle handle) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  struct Call {
    Request request;
    Response response;
  };
  auto call = std::make_shared<Call>();
  const absl::Status parsed = DecodeMessage(*raw_request, &call->request);
  if (!parsed.ok()) {
    reactor->Finish(ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("malformed ", method, " request: ", parsed.message()))));
    return reactor;
  }
  handle(call->request, &call->response, [reactor, raw_response, call](absl::Status status) {
    if (status.ok()) *raw_response = EncodeMessage(call->response);
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

}  // namespace

SchedulerService::SchedulerService(SchedulerCore* core, absl::Duration command_timeout,
                                   const std::string& secret,
                                   std::shared_ptr<grpc::ChannelCredentials> server_credentials)
    : core_(core),
      commands_(core, this),
      command_timeout_(command_timeout),
      secret_(secret),
      server_credentials_(std::move(server_credentials)) {
  if (!secret.empty()) job_token_ = JobToken(secret);
}

std::shared_ptr<const SchedulerService::Keys> SchedulerService::JobKeys() const {
  if (secret_.empty()) return nullptr;
  const std::string job_id = core_->job_id();
  absl::MutexLock lock(&keys_mu_);
  if (keys_ == nullptr || keys_->job_id != job_id) {
    const NodeKey key = NodeKey::ForJob(secret_, job_id);
    // Sequences from the clock (microseconds): above every one an earlier scheduler of the
    // job signed, so that the kvservers accept this one's commands and refuse replays of its.
    const uint64_t first =
        static_cast<uint64_t>(std::max<int64_t>(1, absl::ToUnixMicros(absl::Now())));
    keys_ = std::make_shared<const Keys>(
        Keys{job_id, key,
             std::make_shared<RequestSigner>(kSchedulerNodeId, key.TokenFor(kSchedulerNodeId),
                                             false, first)});
  }
  return keys_;
}

absl::Status SchedulerService::Check(const grpc::CallbackServerContext& context, Allowed allowed,
                                     uint64_t node_id) const {
  if (!job_token_.has_value()) return absl::OkStatus();
  const bool job_allowed = allowed != Allowed::kSelf;
  if (job_allowed) {
    if (auto token = Metadata(context, kJobTokenKey); token && TokensEqual(*token, *job_token_)) {
      return absl::OkStatus();
    }
  }
  if (allowed != Allowed::kJob) {
    if (auto credential = Metadata(context, kNodeTokenKey)) {
      const std::optional<ParsedCredential> parsed = ParseNodeCredential(*credential);
      if (parsed && TokensEqual(parsed->token, JobKeys()->node_key.TokenFor(parsed->node_id))) {
        if (parsed->node_id != node_id) {
          return absl::PermissionDeniedError(absl::StrCat("the request names node ", node_id,
                                                          " but its credential is node ",
                                                          parsed->node_id, "'s"));
        }
        if (allowed == Allowed::kJobOrWorker) {
          for (const NodeInfo& node : core_->Nodes()) {
            if (node.node_id == node_id && node.role != NodeRole::kWorker) {
              return absl::PermissionDeniedError(absl::StrCat(
                  "node ", node_id, " is a server; only workers and controllers may do this"));
            }
          }
        }
        return absl::OkStatus();
      }
    }
  }
  if (allowed != Allowed::kJob && Metadata(context, kNodeTokenKey).has_value() &&
      !core_->view().ok()) {
    // A node token is made with the job's id, which a scheduler restarted in place learns
    // from the servers registering again: a node of the running job retries until then.
    return absl::UnavailableError(absl::StrCat(
        "this scheduler has not formed or re-formed its job yet, so it cannot check the node "
        "token of node ",
        node_id, " yet"));
  }
  switch (allowed) {
    case Allowed::kJob:
      return absl::UnauthenticatedError(
          "the call carries no valid job token (made from the job's secret file)");
    case Allowed::kSelf:
      return absl::UnauthenticatedError(absl::StrCat(
          "the call carries no valid node token for node ", node_id, " (issued at registration)"));
    default:
      return absl::UnauthenticatedError(
          "the call carries neither a valid job token (made from the job's secret file) nor a "
          "valid node token (issued at registration)");
  }
}

absl::Status SchedulerService::CheckCaller(uint64_t node_id) const {
  if (node_id == 0) return absl::OkStatus();
  for (const NodeInfo& node : core_->Nodes()) {
    if (node.node_id == node_id) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("node id ", node_id, " was never issued by this scheduler"));
}

std::shared_ptr<grpc::GenericStub> SchedulerService::ServerStub(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto& stub = stubs_[address];
  if (!stub) stub = std::make_shared<grpc::GenericStub>(MakeChannel(address, server_credentials_));
  return stub;
}

grpc::ServerUnaryReactor* SchedulerService::Register(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  return Serve<proto::RegisterRequest, proto::RegisterResponse>(
      context, request, response, "Register",
      [this, context](const proto::RegisterRequest& request, proto::RegisterResponse* response,
                      Done done) {
        const absl::Status status = Check(*context, Allowed::kJob, 0);
        if (!status.ok()) return done(status);
        HandleRegister(request, response, std::move(done));
      });
}

void SchedulerService::HandleRegister(const proto::RegisterRequest& request,
                                      proto::RegisterResponse* response, Done done) {
  NodeRole role;
  if (request.role() == proto::SERVER) {
    role = NodeRole::kServer;
  } else if (request.role() == proto::WORKER) {
    role = NodeRole::kWorker;
  } else {
    return done(absl::InvalidArgumentError(
        absl::StrCat("only servers and workers register; got role ", request.role())));
  }
  if (role == NodeRole::kWorker && !request.mode().empty() && request.mode() != "dist_sync" &&
      request.mode() != "dist_async") {
    return done(absl::InvalidArgumentError(
        absl::StrCat("unknown mode \"", request.mode(), "\" (dist_sync or dist_async)")));
  }
  if (role == NodeRole::kServer && !request.address().empty()) {
    absl::MutexLock lock(&local_mu_);
    if (request.local_socket().empty()) {
      local_paths_.erase(request.address());
    } else {
      local_paths_[request.address()] = LocalPath{request.local_socket(), request.local_host()};
    }
  }
  const bool rejoin = request.has_rejoin();
  auto answer = [this, role, rejoin, response, address = request.address(),
                 done = std::move(done)](absl::StatusOr<Registration> registration) {
    const std::shared_ptr<const Keys> keys = JobKeys();
    if (registration.ok() && role == NodeRole::kServer && keys != nullptr && !rejoin) {
      // Commands signed before this server registered are not its to accept. Taken before
      // a join starts, whose first commands go to this server. (A server registering again
      // keeps the sequences it has seen.)
      response->set_scheduler_sequence(keys->signer->next_sequence() - 1);
    }
    if (registration.ok() && registration->scaling) {
      response->set_join_epoch(registration->join_epoch);
      const std::optional<RescalePlan> plan = core_->scaling().active();
      if (rescale_ && plan.has_value() && plan->joining == registration->node_id) {
        rescale_(*plan, nullptr);
      } else if (plan.has_value()) {
        core_->scaling().Fail(*plan, "this scheduler moves no shards");
      }
    } else if (registration.ok() && registration->join_epoch > 0) {
      response->set_join_epoch(registration->join_epoch);
      if (join_) {
        join_(*registration, address);
      } else {
        core_->failover().FailJoin(registration->node_id, "this scheduler copies no shards");
      }
    }
    if (registration.ok()) {
      response->set_node_id(registration->node_id);
      response->set_replaced_address(registration->replaced_address);
      response->set_scheduler_knew(registration->known);
      response->set_rank(registration->rank);
      ViewToProto(registration->view, response->mutable_view());
      AddServers(registration->view.servers, response->mutable_view()->mutable_servers());
      if (keys != nullptr) {
        response->set_node_token(keys->node_key.TokenFor(registration->node_id));
        if (role == NodeRole::kServer) {
          auto& peers = *response->mutable_peer_tokens();
          peers[kSchedulerNodeId] = keys->node_key.TokenFor(kSchedulerNodeId);
          for (uint64_t id : registration->view.worker_node_ids) {
            peers[id] = keys->node_key.TokenFor(id);
          }
          // The other servers, which send a replacement the copies of its shards
          // (server_joiner.h); a server accepts only those copies' pages from them.
          for (const ServerEntry& server : registration->view.servers) {
            // Itself too: a rescale may have it send itself its own part.
            if (server.node_id != 0) {
              peers[server.node_id] = keys->node_key.TokenFor(server.node_id);
            }
          }
        }
      }
    }
    done(registration.status());
  };
  if (rejoin) return core_->Rejoin(ClaimFromProto(request), absl::Now(), std::move(answer));
  core_->Register(role, request.requested_rank(), request.address(), request.hostname(),
                  absl::Now(), std::move(answer), request.mode(), request.join());
}

bool SchedulerService::IsServer(const Routing& routing, uint64_t node_id) {
  return std::any_of(routing.servers.begin(), routing.servers.end(),
                     [node_id](const ServerEntry& server) { return server.node_id == node_id; });
}

void SchedulerService::AddServers(const std::vector<ServerEntry>& servers,
                                  google::protobuf::RepeatedPtrField<proto::ServerInfo>* out) {
  absl::MutexLock lock(&local_mu_);
  for (const ServerEntry& server : servers) {
    proto::ServerInfo* info = out->Add();
    info->set_rank(server.rank);
    info->set_node_id(server.node_id);
    info->set_address(server.address);
    const auto found = local_paths_.find(server.address);
    if (found != local_paths_.end()) {
      info->set_local_socket(found->second.socket);
      info->set_local_host(found->second.host);
    }
  }
}

grpc::ServerUnaryReactor* SchedulerService::Heartbeat(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return Serve<proto::HeartbeatRequest, proto::HeartbeatResponse>(
      context, request, response, "Heartbeat",
      [this, context](const proto::HeartbeatRequest& request, proto::HeartbeatResponse* response,
                      Done done) {
        absl::Status status = Check(*context, Allowed::kSelf, request.node_id());
        if (!status.ok()) return done(status);
        ServerLoad load{
            request.num_keys(),       request.num_bytes(),           request.max_round(),
            request.restored_round(), request.restored_checkpoint(), {}};
        for (const proto::TableStatus& t : request.tables()) {
          load.tables.push_back(TableLoad{t.key(), t.dim(), t.round(), t.rows(), t.counting(),
                                          t.admitted(), t.evicted(), t.bytes()});
        }
        const absl::StatusOr<bool> over =
            core_->Heartbeat(request.node_id(), absl::Now(), std::move(load),
                             WorkerReport{request.hostname(), request.barriers_passed()});
        if (over.ok()) response->set_shutdown(*over);
        for (LostUpdates& loss : core_->failover().data_loss()) {
          proto::LostUpdates* lost = response->add_data_loss();
          lost->set_rank(loss.rank);
          lost->set_server(std::move(loss.server));
          lost->set_restored(std::move(loss.restored));
          lost->set_restored_round(loss.restored_round);
          lost->set_reported_round(loss.reported_round);
        }
        const Routing routing = core_->failover().routing();
        for (int rank : routing.dead) response->add_dead_servers(rank);
        if (const std::shared_ptr<const Keys> keys = JobKeys();
            keys != nullptr && routing.epoch > 0 && IsServer(routing, request.node_id())) {
          // Servers joined since this one registered may send it the keys they hold.
          for (const ServerEntry& server : routing.servers) {
            (*response->mutable_server_tokens())[server.node_id] =
                keys->node_key.TokenFor(server.node_id);
          }
        }
        if (routing.epoch > 0) {
          // A replacement server joined: every server's address, as of this epoch.
          response->set_view_epoch(routing.epoch);
          AddServers(routing.servers, response->mutable_servers());
        }
        std::string join_failure = core_->failover().join_failure(request.node_id());
        if (join_failure.empty()) join_failure = core_->scaling().join_failure(request.node_id());
        response->set_join_failure(join_failure);
        if (over.ok() && *over) {
          const std::string failure = core_->job_failure();
          response->set_job_failed(!failure.empty());
          response->set_failure(failure);
        }
        for (uint64_t id : core_->liveness().left_worker_ids())
          response->add_left_worker_node_ids(id);
        for (uint64_t id : core_->finished_worker_ids()) response->add_finished_worker_node_ids(id);
        // A worker that left an elastic job (declared dead, yet still running) stops.
        if (const std::string left = core_->liveness().left_reason(request.node_id());
            !left.empty()) {
          response->set_shutdown(true);
          response->set_job_failed(true);
          response->set_failure(left);
        }
        done(over.status());
      });
}

grpc::ServerUnaryReactor* SchedulerService::Barrier(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  return Serve<proto::BarrierRequest, proto::BarrierResponse>(
      context, request, response, "Barrier",
      [this, context](const proto::BarrierRequest& request, proto::BarrierResponse*, Done done) {
        const absl::Status status = Check(*context, Allowed::kSelf, request.node_id());
        if (!status.ok()) return done(status);
        if (barrier_wait_ == nullptr) {
          return core_->Barrier(request.node_id(), request.group(), absl::Now(), std::move(done),
                                request.sequence());
        }
        const absl::Time entered = absl::Now();
        core_->Barrier(
            request.node_id(), request.group(), entered,
            [done = std::move(done), entered, wait = barrier_wait_](absl::Status status) {
              if (status.ok()) wait->ObserveDuration(absl::Now() - entered);
              done(std::move(status));
            },
            request.sequence());
      });
}

grpc::ServerUnaryReactor* SchedulerService::Command(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  return Serve<proto::CommandRequest, proto::CommandResponse>(
      context, request, response, "Command",
      [this, context](const proto::CommandRequest& request, proto::CommandResponse* response,
                      Done done) {
        absl::Status status = Check(*context, Allowed::kJobOrWorker, request.node_id());
        if (status.ok()) status = CheckCaller(request.node_id());
        if (!status.ok()) return done(status);
        HandleCommand(request, response, std::move(done));
      });
}

void SchedulerService::HandleCommand(const proto::CommandRequest& request,
                                     proto::CommandResponse* response, Done done) {
  if (commands_.HoldWhilePaused([this, request, response, done]() mutable {
        HandleCommand(request, response, std::move(done));
      })) {
    return;
  }
  if (request.head() >= kCommandCutBegin && request.head() <= kCommandCopyIn) {
    // The steps of checkpoint sets and shard copies: sent by the scheduler itself, in order.
    return done(absl::InvalidArgumentError(absl::StrCat(
        "command head ", request.head(),
        " is a step of the scheduler's own checkpoints and "
        "shard copies (heads ",
        kCommandCutBegin, "-", kCommandCopyIn,
        "); it is not sent on request (a checkpoint is head ", kCommandCheckpoint, ")")));
  }
  if (absl::StatusOr<ClusterView> view = core_->view(); !view.ok()) return done(view.status());
  if (request.head() == kCommandDrainServer) return HandleDrain(request, response, std::move(done));
  auto answer = [response,
                 done = std::move(done)](absl::StatusOr<std::vector<std::string>> replies) {
    if (!replies.ok()) return done(replies.status());
    for (std::string& reply : *replies) response->add_replies(std::move(reply));
    done(absl::OkStatus());
  };
  if (request.head() == kCommandCheckpoint && coordinator_ != nullptr) {
    // A checkpoint is one cut of every server, written as a set (checkpoint_coordinator.h).
    return coordinator_->Request(request.body(), std::move(answer));
  }
  commands_.FanOut(request.head(), request.body(), std::move(answer));
}

void SchedulerService::HandleDrain(const proto::CommandRequest& request,
                                   proto::CommandResponse* response, Done done) {
  int rank = -1;
  if (!absl::SimpleAtoi(request.body(), &rank)) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("draining a server takes its rank (command ", kCommandDrainServer,
                     " \"RANK\"), not \"", request.body(), "\"")));
  }
  if (!rescale_) return done(absl::FailedPreconditionError("this scheduler moves no shards"));
  absl::StatusOr<RescalePlan> plan = core_->scaling().Drain(rank);
  if (!plan.ok()) return done(plan.status());
  const std::string what = plan->what;
  rescale_(*std::move(plan), [response, what, done = std::move(done)](absl::Status status) {
    if (status.ok()) response->add_replies(absl::StrCat("drained: ", what));
    done(status);
  });
}

grpc::ByteBuffer SchedulerService::Signed(ServerMethod method, bool backup,
                                          const std::string& address,
                                          const grpc::ByteBuffer& request) const {
  const std::shared_ptr<const Keys> keys = JobKeys();
  if (keys == nullptr) return request;
  return keys->signer->Sign({method, backup, address, 0}, request);
}

void SchedulerService::Send(const std::string& address, bool backup, int head,
                            const std::string& body, Reply done) {
  proto::ServerCommandRequest command;
  command.set_node_id(kSchedulerNodeId);
  command.set_head(head);
  command.set_body(body);
  struct Call {
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer reply;
  };
  auto call = std::make_shared<Call>();
  call->request = Signed(ServerMethod::kCommand, backup, address, EncodeMessage(command));
  call->context.set_deadline(GrpcDeadline(absl::Now() + command_timeout_));
  ServerStub(address)->UnaryCall(&call->context, GrpcMethodPath(ServerMethod::kCommand, backup),
                                 grpc::StubOptions(), &call->request, &call->reply,
                                 [call, done = std::move(done)](grpc::Status grpc_status) {
                                   absl::Status result = FromGrpcStatus(grpc_status);
                                   proto::ServerCommandResponse reply;
                                   if (result.ok()) result = DecodeMessage(call->reply, &reply);
                                   if (!result.ok()) return done(result);
                                   done(std::move(*reply.mutable_reply()));
                                 });
}

grpc::ServerUnaryReactor* SchedulerService::ServerUnreachable(grpc::CallbackServerContext* context,
                                                              const grpc::ByteBuffer* request,
                                                              grpc::ByteBuffer* response) {
  return Serve<proto::ServerUnreachableRequest, proto::ServerUnreachableResponse>(
      context, request, response, "ServerUnreachable",
      [this, context](const proto::ServerUnreachableRequest& request,
                      proto::ServerUnreachableResponse* response, Done done) {
        absl::Status status = Check(*context, Allowed::kSelf, request.node_id());
        if (status.ok()) status = CheckCaller(request.node_id());
        if (!status.ok()) return done(status);
        HandleServerUnreachable(request, response, std::move(done));
      });
}

void SchedulerService::HandleServerUnreachable(const proto::ServerUnreachableRequest& request,
                                               proto::ServerUnreachableResponse* response,
                                               Done done) {
  const int rank = request.server_rank();
  const std::vector<int> dead = core_->failover().dead_servers();
  if (std::find(dead.begin(), dead.end(), rank) != dead.end()) {
    response->set_dead(true);
    response->set_reason(absl::StrCat("server ", rank, " was declared dead before"));
    return done(absl::OkStatus());
  }
  const absl::StatusOr<std::string> address = core_->failover().ServerAddress(rank);
  if (!address.ok()) return done(address.status());
  HealthCheck(*address, [this, rank, address = *address, request, response,
                         done = std::move(done)](absl::Status result) {
    if (!absl::IsUnavailable(result)) {
      response->set_dead(false);
      response->set_reason(absl::StrCat("server ", rank, " at ", address,
                                        " answers a health check (",
                                        result.ok() ? "OK" : result.ToString(), ")"));
      return done(absl::OkStatus());
    }
    const std::string reason =
        absl::StrCat("nothing answers at ", address, " (", result.message(), "; worker node ",
                     request.node_id(), " saw: ", request.error(), ")");
    const absl::StatusOr<bool> declared =
        core_->failover().DeclareServerDead(rank, reason, absl::Now());
    if (!declared.ok()) return done(declared.status());
    if (*declared) {
      spdlog::error(
          "scheduler: server {} is dead: {}; its shard is served by its backup "
          "on the next rank from now on",
          rank, reason);
    }
    response->set_dead(true);
    response->set_reason(absl::StrCat("server ", rank, " is dead: ", reason));
    done(absl::OkStatus());
  });
}

void SchedulerService::HealthCheck(const std::string& address,
                                   std::function<void(absl::Status)> done) {
  struct Check {
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer reply;
  };
  auto check = std::make_shared<Check>();
  grpc::Slice empty;  // An empty grpc.health.v1.HealthCheckRequest: the server as a whole.
  check->request = grpc::ByteBuffer(&empty, 1);
  check->context.set_deadline(GrpcDeadline(absl::Now() + kUnreachableCheck));
  ServerStub(address)->UnaryCall(&check->context, "/grpc.health.v1.Health/Check",
                                 grpc::StubOptions(), &check->request, &check->reply,
                                 [check, done = std::move(done)](grpc::Status grpc_status) {
                                   done(FromGrpcStatus(grpc_status));
                                 });
}

void SchedulerService::CheckMissingServers(absl::Duration after) {
  for (const ServerEntry& server : core_->ReformMissing(absl::Now(), after)) {
    {
      absl::MutexLock lock(&mu_);
      if (!checking_.insert(server.rank).second) continue;
    }
    HealthCheck(server.address, [this, server](absl::Status result) {
      if (absl::IsUnavailable(result)) {
        const absl::Status declared =
            core_->ReformWithout(server.rank,
                                 absl::StrCat("it did not register again and nothing answers at ",
                                              server.address, " (", result.message(), ")"),
                                 absl::Now());
        if (!declared.ok()) {
          spdlog::error("scheduler: re-forming the job: {}", std::string(declared.message()));
        }
      }
      absl::MutexLock lock(&mu_);
      checking_.erase(server.rank);
    });
  }
}

grpc::ServerUnaryReactor* SchedulerService::ClusterStatus(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  return Serve<proto::ClusterStatusRequest, proto::ClusterStatusResponse>(
      context, request, response, "ClusterStatus",
      [this, context](const proto::ClusterStatusRequest& request,
                      proto::ClusterStatusResponse* response, Done done) {
        absl::Status status = Check(*context, Allowed::kJobOrSelf, request.node_id());
        if (status.ok()) status = HandleClusterStatus(request, response);
        done(status);
      });
}

absl::Status SchedulerService::HandleClusterStatus(const proto::ClusterStatusRequest& request,
                                                   proto::ClusterStatusResponse* response) {
  const absl::Status status = CheckCaller(request.node_id());
  if (!status.ok()) return status;
  const absl::Time now = absl::Now();
  const absl::Duration timeout =
      request.timeout_s() > 0 ? absl::Seconds(request.timeout_s()) : absl::Seconds(5);
  for (const NodeInfo& node : core_->Nodes()) {
    proto::NodeStatus* out = response->add_nodes();
    out->set_node_id(node.node_id);
    out->set_role(node.role == NodeRole::kServer ? proto::SERVER : proto::WORKER);
    out->set_rank(node.rank);
    out->set_address(node.address);
    out->set_hostname(node.hostname);
    out->set_finished(node.finished);
    out->set_failed(node.failed || node.dead);
    out->set_failure(node.dead ? absl::StrCat("declared dead: ", node.death) : node.failure);
    out->set_left(node.left);
    out->set_last_heartbeat_age_s(absl::ToDoubleSeconds(now - node.last_heartbeat));
    out->set_alive(node.finished || now - node.last_heartbeat <= timeout);
    out->set_num_keys(node.num_keys);
    out->set_num_bytes(node.num_bytes);
    for (const TableLoad& t : node.tables) {
      proto::TableStatus* table = out->add_tables();
      table->set_key(t.key);
      table->set_dim(t.dim);
      table->set_round(t.round);
      table->set_rows(t.rows);
      table->set_counting(t.counting);
      table->set_admitted(t.admitted);
      table->set_evicted(t.evicted);
      table->set_bytes(t.bytes);
    }
  }
  const int group = request.group() == proto::GROUP_UNSPECIFIED ? kGroupAll : request.group();
  response->set_num_dead(core_->liveness().NumDeadNodes(group, timeout, now));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* SchedulerService::Finish(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) {
  return Serve<proto::FinishRequest, proto::FinishResponse>(
      context, request, response, "Finish",
      [this, context](const proto::FinishRequest& request, proto::FinishResponse*, Done done) {
        absl::Status status = Check(*context, Allowed::kSelf, request.node_id());
        if (status.ok()) status = core_->Finish(request.node_id(), absl::Now(), request.failure());
        done(status);
      });
}

grpc::ServerUnaryReactor* SchedulerService::Shutdown(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  return Serve<proto::ShutdownRequest, proto::ShutdownResponse>(
      context, request, response, "Shutdown",
      [this, context](const proto::ShutdownRequest& request, proto::ShutdownResponse*, Done done) {
        absl::Status status = Check(*context, Allowed::kJobOrWorker, request.node_id());
        if (status.ok()) status = CheckCaller(request.node_id());
        if (status.ok()) {
          core_->RequestShutdown(request.reason().empty() ? "shutdown requested by a controller"
                                                          : request.reason());
        }
        done(status);
      });
}

}  // namespace kvstore
