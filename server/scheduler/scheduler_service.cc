#include "server/scheduler/scheduler_service.h"

#include <grpcpp/client_context.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/wire_frame.h"

namespace kvstore {
namespace {

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

void ViewToProto(const ClusterView& view, proto::ClusterView* out) {
  out->set_num_servers(view.num_servers);
  out->set_num_workers(view.num_workers);
  out->set_big_value_bound(view.big_value_bound);
  out->set_chunk_bytes(view.chunk_bytes);
  out->set_mode(view.mode);
  out->set_heartbeat_interval_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(view.heartbeat_interval)));
  for (const ServerEntry& server : view.servers) {
    proto::ServerInfo* info = out->add_servers();
    info->set_rank(server.rank);
    info->set_node_id(server.node_id);
    info->set_address(server.address);
  }
  for (uint64_t id : view.worker_node_ids) out->add_worker_node_ids(id);
}

}  // namespace

grpc::ServerUnaryReactor* SchedulerService::Register(grpc::CallbackServerContext* context,
                                                     const proto::RegisterRequest* request,
                                                     proto::RegisterResponse* response) {
  NodeRole role;
  if (request->role() == proto::SERVER) {
    role = NodeRole::kServer;
  } else if (request->role() == proto::WORKER) {
    role = NodeRole::kWorker;
  } else {
    return Reply(context, absl::InvalidArgumentError(absl::StrCat(
                              "only servers and workers register; got role ", request->role())));
  }
  if (role == NodeRole::kWorker && !request->mode().empty() && request->mode() != "dist_sync" &&
      request->mode() != "dist_async") {
    return Reply(context, absl::InvalidArgumentError(absl::StrCat(
                              "unknown mode \"", request->mode(),
                              "\" (dist_sync or dist_async)")));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  core_->Register(
      role, request->requested_rank(), request->address(), request->hostname(), absl::Now(),
      [reactor, response](absl::StatusOr<Registration> registration) {
        if (registration.ok()) {
          response->set_node_id(registration->node_id);
          response->set_rank(registration->rank);
          ViewToProto(registration->view, response->mutable_view());
        }
        reactor->Finish(ToGrpcStatus(registration.status()));
      },
      request->mode());
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerService::Heartbeat(grpc::CallbackServerContext* context,
                                                      const proto::HeartbeatRequest* request,
                                                      proto::HeartbeatResponse* response) {
  const absl::StatusOr<bool> over = core_->Heartbeat(
      request->node_id(), absl::Now(), ServerLoad{request->num_keys(), request->num_bytes()});
  if (over.ok()) response->set_shutdown(*over);
  return Reply(context, over.status());
}

grpc::ServerUnaryReactor* SchedulerService::Barrier(grpc::CallbackServerContext* context,
                                                    const proto::BarrierRequest* request,
                                                    proto::BarrierResponse* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  core_->Barrier(request->node_id(), request->group(), absl::Now(),
                 [reactor](absl::Status status) { reactor->Finish(ToGrpcStatus(status)); });
  return reactor;
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
  if (!stub) stub = std::make_shared<grpc::GenericStub>(MakeChannel(address));
  return stub;
}

grpc::ServerUnaryReactor* SchedulerService::Command(grpc::CallbackServerContext* context,
                                                    const proto::CommandRequest* request,
                                                    proto::CommandResponse* response) {
  absl::Status status = CheckCaller(request->node_id());
  if (!status.ok()) return Reply(context, status);
  absl::StatusOr<ClusterView> view = core_->view();
  if (!view.ok()) return Reply(context, view.status());

  // One raw call per server; the last to complete finishes the reactor.
  struct FanOut {
    absl::Mutex mu;
    int remaining = 0;
    std::vector<std::string> replies;
    absl::Status first_error;
    proto::CommandResponse* response = nullptr;
    grpc::ServerUnaryReactor* reactor = nullptr;
  };
  struct Call {
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer reply;
  };
  auto fan_out = std::make_shared<FanOut>();
  fan_out->remaining = static_cast<int>(view->servers.size());
  fan_out->replies.resize(view->servers.size());
  fan_out->response = response;
  fan_out->reactor = context->DefaultReactor();
  proto::ServerCommandRequest command;
  command.set_node_id(1);
  command.set_head(request->head());
  command.set_body(request->body());
  const grpc::ByteBuffer encoded = EncodeMessage(command);
  for (size_t i = 0; i < view->servers.size(); ++i) {
    const ServerEntry server = view->servers[i];
    auto call = std::make_shared<Call>();
    call->request = encoded;
    call->context.set_deadline(GrpcDeadline(absl::Now() + command_timeout_));
    ServerStub(server.address)
        ->UnaryCall(&call->context, "/kvstore.proto.KVServer/Command", grpc::StubOptions(),
                    &call->request, &call->reply,
                    [fan_out, call, server, i](grpc::Status grpc_status) {
                      absl::Status result = FromGrpcStatus(grpc_status);
                      proto::ServerCommandResponse reply;
                      if (result.ok()) result = DecodeMessage(call->reply, &reply);
                      bool last;
                      {
                        absl::MutexLock lock(&fan_out->mu);
                        if (result.ok()) {
                          fan_out->replies[i] = reply.reply();
                        } else if (fan_out->first_error.ok()) {
                          fan_out->first_error = absl::Status(
                              result.code(), absl::StrCat("server ", server.rank, " at ",
                                                          server.address, ": ", result.message()));
                        }
                        last = --fan_out->remaining == 0;
                      }
                      if (!last) return;
                      for (std::string& r : fan_out->replies) fan_out->response->add_replies(r);
                      fan_out->reactor->Finish(ToGrpcStatus(fan_out->first_error));
                    });
  }
  return fan_out->reactor;
}

grpc::ServerUnaryReactor* SchedulerService::ClusterStatus(
    grpc::CallbackServerContext* context, const proto::ClusterStatusRequest* request,
    proto::ClusterStatusResponse* response) {
  const absl::Status status = CheckCaller(request->node_id());
  if (!status.ok()) return Reply(context, status);
  const absl::Time now = absl::Now();
  const absl::Duration timeout =
      request->timeout_s() > 0 ? absl::Seconds(request->timeout_s()) : absl::Seconds(5);
  for (const NodeInfo& node : core_->Nodes()) {
    proto::NodeStatus* out = response->add_nodes();
    out->set_node_id(node.node_id);
    out->set_role(node.role == NodeRole::kServer ? proto::SERVER : proto::WORKER);
    out->set_rank(node.rank);
    out->set_address(node.address);
    out->set_hostname(node.hostname);
    out->set_finished(node.finished);
    out->set_last_heartbeat_age_s(absl::ToDoubleSeconds(now - node.last_heartbeat));
    out->set_alive(node.finished || now - node.last_heartbeat <= timeout);
    out->set_num_keys(node.num_keys);
    out->set_num_bytes(node.num_bytes);
  }
  const int group = request->group() == proto::GROUP_UNSPECIFIED ? kGroupAll : request->group();
  response->set_num_dead(core_->NumDeadNodes(group, timeout, now));
  return Reply(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* SchedulerService::Finish(grpc::CallbackServerContext* context,
                                                   const proto::FinishRequest* request,
                                                   proto::FinishResponse* /*response*/) {
  return Reply(context, core_->Finish(request->node_id(), absl::Now()));
}

grpc::ServerUnaryReactor* SchedulerService::Shutdown(grpc::CallbackServerContext* context,
                                                     const proto::ShutdownRequest* request,
                                                     proto::ShutdownResponse* /*response*/) {
  const absl::Status status = CheckCaller(request->node_id());
  if (status.ok()) {
    core_->RequestShutdown(request->reason().empty() ? "shutdown requested by a controller"
                                                     : request->reason());
  }
  return Reply(context, status);
}

}  // namespace kvstore
