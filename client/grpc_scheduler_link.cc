#include "client/grpc_scheduler_link.h"

#include <grpcpp/client_context.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/job_auth.h"
#include "common/logging.h"
#include "common/unreachable_retry.h"

namespace kvstore {

struct GrpcSchedulerLink::Context : grpc::ClientContext {
  Context(absl::Time deadline, const std::string& credential) {
    set_deadline(GrpcDeadline(deadline));
    if (!credential.empty()) AddMetadata(kNodeTokenKey, credential);
  }
};

GrpcSchedulerLink::GrpcSchedulerLink(std::string address,
                                     std::shared_ptr<grpc::ChannelCredentials> credentials,
                                     const std::string& secret)
    : GrpcSchedulerLink(SchedulerEndpoint::Fixed(std::move(address), std::move(credentials)),
                        secret) {}

GrpcSchedulerLink::GrpcSchedulerLink(std::unique_ptr<SchedulerEndpoint> endpoint,
                                     const std::string& secret)
    : endpoint_(std::move(endpoint)),
      job_token_(secret.empty() ? "" : JobToken(secret)),
      hostname_(LocalHostname()) {}

std::string GrpcSchedulerLink::name() const { return endpoint_->name(); }

std::shared_ptr<proto::Scheduler::Stub> GrpcSchedulerLink::Stub() const {
  std::shared_ptr<proto::Scheduler::Stub> stub = endpoint_->stub();
  if (stub == nullptr && endpoint_->Resolve().ok()) stub = endpoint_->stub();
  return stub;
}

grpc::Status GrpcSchedulerLink::Called(grpc::Status status) const {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) endpoint_->Resolve().IgnoreError();
  return status;
}

absl::StatusOr<JobView> GrpcSchedulerLink::Register(const std::string& mode, int requested_rank,
                                                    absl::Time deadline) {
  proto::RegisterRequest request;
  request.set_role(proto::WORKER);
  request.set_requested_rank(requested_rank);
  request.set_hostname(LocalHostname());
  request.set_mode(mode);
  proto::RegisterResponse reply;
  // The scheduler may still be starting: retried while it cannot be reached, saying so.
  const grpc::Status status = CallWhileUnreachable(
      name(), deadline,
      [&](absl::Time attempt_deadline) {
        Context context(attempt_deadline, "");
        if (!job_token_.empty()) context.AddMetadata(kJobTokenKey, job_token_);
        // Through etcd: the leader now (a standby may have taken over).
        if (const absl::Status found = endpoint_->Resolve(); !found.ok()) {
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(found.message()));
        }
        return endpoint_->stub()->Register(&context, request, &reply);
      },
      [](const std::string& line) { SdkLogger()->warn("{}", line); });
  if (!status.ok()) return FromGrpcStatus(status);
  const proto::ClusterView& view = reply.view();
  JobView job;
  job.node_id = reply.node_id();
  job.rank = reply.rank();
  job.num_workers = view.num_workers();
  job.mode = view.mode();
  job.heartbeat_interval = absl::Milliseconds(view.heartbeat_interval_ms());
  for (const proto::ServerInfo& info : view.servers()) {
    job.servers.push_back(
        ServerAddress{info.rank(), info.address(), false, info.local_socket(), info.local_host()});
  }
  job.big_value_bound = view.big_value_bound();
  job.chunk_bytes = view.chunk_bytes();
  job.replicas = std::max(1, view.replicas());
  job.signed_payloads = view.signed_payloads();
  job.node_token = reply.node_token();
  if (!job_token_.empty()) node_credential_ = NodeCredential(job.node_id, job.node_token);
  return job;
}

absl::StatusOr<JobState> GrpcSchedulerLink::Heartbeat(uint64_t node_id, uint64_t barriers_passed,
                                                      absl::Time deadline) {
  proto::HeartbeatRequest request;
  request.set_node_id(node_id);
  request.set_hostname(hostname_);
  request.set_barriers_passed(barriers_passed);
  proto::HeartbeatResponse reply;
  Context context(deadline, node_credential_);
  const grpc::Status status = Call(&proto::Scheduler::Stub::Heartbeat, &context, request, &reply);
  if (!status.ok()) return FromGrpcStatus(status);
  JobState state{reply.shutdown(), reply.job_failed() ? reply.failure() : std::string(), {}};
  for (const proto::LostUpdates& lost : reply.data_loss()) {
    state.data_loss.push_back(LostUpdates{lost.rank(), lost.server(), lost.restored(),
                                          lost.restored_round(), lost.reported_round()});
  }
  state.dead_servers.assign(reply.dead_servers().begin(), reply.dead_servers().end());
  state.view_epoch = reply.view_epoch();
  for (const proto::ServerInfo& info : reply.servers()) {
    state.servers.push_back(
        ServerAddress{info.rank(), info.address(), false, info.local_socket(), info.local_host()});
  }
  return state;
}

absl::Status GrpcSchedulerLink::Barrier(uint64_t node_id, uint64_t sequence, absl::Time deadline) {
  proto::BarrierRequest request;
  request.set_node_id(node_id);
  request.set_sequence(sequence);
  request.set_group(proto::GROUP_WORKERS);
  proto::BarrierResponse reply;
  Context context(deadline, node_credential_);
  return FromGrpcStatus(Call(&proto::Scheduler::Stub::Barrier, &context, request, &reply));
}

absl::Status GrpcSchedulerLink::Finish(uint64_t node_id, absl::Time deadline,
                                       const std::string& failure) {
  proto::FinishRequest request;
  request.set_node_id(node_id);
  request.set_failure(failure);
  proto::FinishResponse reply;
  Context context(deadline, node_credential_);
  return FromGrpcStatus(Call(&proto::Scheduler::Stub::Finish, &context, request, &reply));
}

absl::StatusOr<std::vector<std::string>> GrpcSchedulerLink::Command(uint64_t node_id, int head,
                                                                    const std::string& body,
                                                                    absl::Time deadline) {
  proto::CommandRequest request;
  request.set_node_id(node_id);
  request.set_head(head);
  request.set_body(body);
  proto::CommandResponse reply;
  Context context(deadline, node_credential_);
  const grpc::Status status = Call(&proto::Scheduler::Stub::Command, &context, request, &reply);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::vector<std::string>(reply.replies().begin(), reply.replies().end());
}

absl::StatusOr<int> GrpcSchedulerLink::NumDeadNodes(uint64_t node_id, int group, int timeout_s,
                                                    absl::Time deadline) {
  proto::ClusterStatusRequest request;
  request.set_node_id(node_id);
  request.set_group(static_cast<proto::Group>(group));
  request.set_timeout_s(timeout_s);
  proto::ClusterStatusResponse reply;
  Context context(deadline, node_credential_);
  const grpc::Status status =
      Call(&proto::Scheduler::Stub::ClusterStatus, &context, request, &reply);
  if (!status.ok()) return FromGrpcStatus(status);
  return reply.num_dead();
}

absl::StatusOr<bool> GrpcSchedulerLink::ServerUnreachable(uint64_t node_id, int rank,
                                                          const std::string& error,
                                                          absl::Time deadline,
                                                          std::string* reason) {
  proto::ServerUnreachableRequest request;
  request.set_node_id(node_id);
  request.set_server_rank(rank);
  request.set_error(error);
  proto::ServerUnreachableResponse reply;
  Context context(deadline, node_credential_);
  const grpc::Status status =
      Call(&proto::Scheduler::Stub::ServerUnreachable, &context, request, &reply);
  if (!status.ok()) return FromGrpcStatus(status);
  if (reason != nullptr) *reason = reply.reason();
  return reply.dead();
}

}  // namespace kvstore
