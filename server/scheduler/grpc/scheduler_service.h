// SchedulerService: the gRPC adapter of the scheduler. It parses requests, checks the caller's
// credentials and converts requests to SchedulerCore calls and back; controller commands go to
// the servers through its CommandFanOut (command_fan_out.h), for which it is the gRPC channel.
//
// Every method is a raw callback method: a request that does not parse is answered
// INVALID_ARGUMENT naming the method. With a job secret (common/job_auth.h), every call must
// carry a credential, else UNAUTHENTICATED and nothing changes:
//   Register                         the job token (proof of the secret);
//   Heartbeat, Barrier, Finish       the node token of the node the request names;
//   Command, Shutdown                the job token (kvctl) or a worker's node token (its own id);
//   ClusterStatus                    the job token or any node's token (its own id).
// A credential for another node than the request names, or a server sending a command, is
// PERMISSION_DENIED. Registration returns the node's token, and to servers the tokens of the
// nodes that may call them (the workers and the scheduler).
//
// Waiting calls (Register, Barrier) finish from the core's completion callbacks, so no reaction
// blocks; Command finishes when the last server has answered.
#ifndef KVSTORE_SERVER_SCHEDULER_GRPC_SCHEDULER_SERVICE_H_
#define KVSTORE_SERVER_SCHEDULER_GRPC_SCHEDULER_SERVICE_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/job_auth.h"
#include "common/metrics_registry.h"
#include "common/request_signature.h"
#include "common/server_methods.h"
#include "proto/kvstore.grpc.pb.h"
#include "server/scheduler/core/checkpoint_coordinator.h"
#include "server/scheduler/core/command_fan_out.h"
#include "server/scheduler/core/scheduler_core.h"
#include "server/scheduler/core/server_scaling.h"

namespace kvstore {

using RawSchedulerService = proto::Scheduler::WithRawCallbackMethod_Register<
    proto::Scheduler::WithRawCallbackMethod_Heartbeat<
        proto::Scheduler::WithRawCallbackMethod_Barrier<
            proto::Scheduler::WithRawCallbackMethod_Command<
                proto::Scheduler::WithRawCallbackMethod_ClusterStatus<
                    proto::Scheduler::WithRawCallbackMethod_Finish<
                        proto::Scheduler::WithRawCallbackMethod_Shutdown<
                            proto::Scheduler::WithRawCallbackMethod_ServerUnreachable<
                                proto::Scheduler::Service>>>>>>>>;

class SchedulerService final : public RawSchedulerService, private ServerCommandChannel {
 public:
  // `core` must outlive the service. Commands to servers time out after `command_timeout` and
  // travel over `server_credentials` (common/grpc_channel.h; null: plaintext). With `secret`
  // empty, no call is checked.
  SchedulerService(SchedulerCore* core, absl::Duration command_timeout, const std::string& secret,
                   std::shared_ptr<grpc::ChannelCredentials> server_credentials = nullptr);

  // SetBarrierWait makes every passed barrier observed in `histogram` (seconds from a node's
  // entry to its release). Call before serving; `histogram` must outlive the service.
  void SetBarrierWait(Histogram* histogram) { barrier_wait_ = histogram; }

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Command(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ClusterStatus(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  // ServerUnreachable (a job with replicas): the server a worker could not reach is checked
  // with a gRPC health check (kUnreachableCheck); when nothing answers at its address
  // (UNAVAILABLE) it is declared dead for good (ServerFailover::DeclareServerDead) and the
  // worker fails over to the backups of its shards. A check that times out or answers does not
  // declare it: the worker retries as usual.
  grpc::ServerUnaryReactor* ServerUnreachable(grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) override;
  static constexpr absl::Duration kUnreachableCheck = absl::Milliseconds(500);

  // CheckMissingServers: while a job with replicas is re-formed (SchedulerCore::Rejoin), each
  // server it has waited for longer than `after` is checked with a gRPC health check, as
  // ServerUnreachable checks one, and when nothing answers at its address it is declared dead
  // (SchedulerCore::ReformWithout): it died while the scheduler was away. The daemon calls it
  // periodically; it never blocks, and checks a server once at a time.
  void CheckMissingServers(absl::Duration after);

  // SetCheckpointCoordinator makes checkpoint commands (head 4) run as checkpoint sets through
  // `coordinator` (server/scheduler/core/checkpoint_coordinator.h), which must outlive the service.
  // Call it before serving.
  void SetCheckpointCoordinator(CheckpointCoordinator* coordinator) { coordinator_ = coordinator; }
  // SetJoinHandler makes every replacement server's registration (Registration::join_epoch,
  // a job with replicas) handed to `join` with the server's address, once answered; the
  // daemon runs a ServerJoiner for it. Call it before serving.
  void SetJoinHandler(std::function<void(Registration, std::string address)> join) {
    join_ = std::move(join);
  }
  // SetRescaleHandler makes every rescale planned - a server registering with `join`, once
  // answered (done null), or a drain (command kCommandDrainServer: `done` answers it) - handed to
  // `rescale`; the daemon runs a ServerRescaler for it. Without one, a join is failed and a
  // drain refused. Call it before serving.
  using RescaleDone = std::function<void(absl::Status)>;
  void SetRescaleHandler(std::function<void(RescalePlan, RescaleDone)> rescale) {
    rescale_ = std::move(rescale);
  }
  // commands reaches the servers with controller commands (command_fan_out.h): the
  // checkpoint coordinator and the server joiner call servers through it, and pause the
  // workers' and kvctl's commands with it (held until resumed). Its calls time out after the
  // command timeout.
  CommandFanOut* commands() { return &commands_; }

 private:
  using Done = std::function<void(absl::Status)>;
  // Who may make a call.
  enum class Allowed { kJob, kSelf, kJobOrWorker, kJobOrSelf };

  // Check returns OK when the call's credential is allowed `allowed` for a request naming
  // `node_id`; UNAUTHENTICATED or PERMISSION_DENIED otherwise.
  absl::Status Check(const grpc::CallbackServerContext& context, Allowed allowed,
                     uint64_t node_id) const;
  // CheckCaller accepts node id 0 (a controller such as kvctl) or an issued node id.
  absl::Status CheckCaller(uint64_t node_id) const;
  // Send (ServerCommandChannel) sends a command to the server at `address` (its backup engine
  // when `backup`), signed as node 1, with the command timeout; `done` gets the reply or the
  // call's error.
  void Send(const std::string& address, bool backup, int head, const std::string& body,
            Reply done) override;
  // HealthCheck checks the server at `address` as a whole (grpc.health.v1, within
  // kUnreachableCheck); `done` gets the call's status (UNAVAILABLE: nothing answers there).
  void HealthCheck(const std::string& address, std::function<void(absl::Status)> done);
  // ServerStub returns the (cached) raw stub for a server's address.
  std::shared_ptr<grpc::GenericStub> ServerStub(const std::string& address);

  // IsServer: node `node_id` is one of `routing`'s servers.
  static bool IsServer(const Routing& routing, uint64_t node_id);
  void HandleRegister(const proto::RegisterRequest& request, proto::RegisterResponse* response,
                      Done done);
  // HandleDrain plans the drain of the server a kCommandDrainServer command names and hands it
  // to the rescale handler, which answers.
  void HandleDrain(const proto::CommandRequest& request, proto::CommandResponse* response,
                   Done done);
  void HandleCommand(const proto::CommandRequest& request, proto::CommandResponse* response,
                     Done done);
  void HandleServerUnreachable(const proto::ServerUnreachableRequest& request,
                               proto::ServerUnreachableResponse* response, Done done);
  absl::Status HandleClusterStatus(const proto::ClusterStatusRequest& request,
                                   proto::ClusterStatusResponse* response);

  SchedulerCore* core_;
  CommandFanOut commands_;
  Histogram* barrier_wait_ = nullptr;  // Optional; set before serving.
  const absl::Duration command_timeout_;
  // With a secret: the job token, and the keys of the job the core runs (JobKeys).
  const std::string secret_;
  std::optional<std::string> job_token_;
  // The key of node tokens (common/job_auth.h: made from the secret and the job's id) and the
  // signer of the commands sent to kvservers as node 1 (the scheduler), for job `job_id`.
  struct Keys {
    std::string job_id;
    NodeKey node_key;
    std::shared_ptr<RequestSigner> signer;
  };
  // JobKeys returns the keys of the job the core runs now (a re-formed job takes its own id);
  // null without a secret.
  std::shared_ptr<const Keys> JobKeys() const;
  mutable absl::Mutex keys_mu_;
  mutable std::shared_ptr<const Keys> keys_ ABSL_GUARDED_BY(keys_mu_);
  // Signed returns `request` signed for `method` (its Backup method with `backup`) on the
  // kvserver at `address`, or `request` itself in a job without a secret.
  grpc::ByteBuffer Signed(ServerMethod method, bool backup, const std::string& address,
                          const grpc::ByteBuffer& request) const;
  std::shared_ptr<grpc::ChannelCredentials> server_credentials_;  // Calls to the servers.
  CheckpointCoordinator* coordinator_ = nullptr;
  std::function<void(Registration, std::string)> join_;    // Optional; set before serving.
  std::function<void(RescalePlan, RescaleDone)> rescale_;  // Optional; set before serving.
  // LocalPath: a server's shared-memory path for workers on its host (RegisterRequest's
  // local_socket and local_host), by the address it serves on - transport details the core
  // does not keep; every registration (a restarted scheduler's too) brings them again.
  struct LocalPath {
    std::string socket;
    std::string host;
  };
  // AddServers appends `servers` to `out` with their local paths.
  void AddServers(const std::vector<ServerEntry>& servers,
                  google::protobuf::RepeatedPtrField<proto::ServerInfo>* out);
  absl::Mutex local_mu_;
  absl::flat_hash_map<std::string, LocalPath> local_paths_ ABSL_GUARDED_BY(local_mu_);
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::GenericStub>> stubs_ ABSL_GUARDED_BY(mu_);
  std::set<int> checking_ ABSL_GUARDED_BY(mu_);  // Ranks CheckMissingServers is checking.
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_GRPC_SCHEDULER_SERVICE_H_
