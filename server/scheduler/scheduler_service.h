// SchedulerService: the gRPC adapter of the scheduler. It converts requests to SchedulerCore
// calls and back, and fans controller commands out to the servers.
//
// Waiting calls (Register, Barrier) finish from the core's completion callbacks, so no reaction
// blocks; Command finishes when the last server has answered.
#ifndef KVSTORE_SERVER_SCHEDULER_SCHEDULER_SERVICE_H_
#define KVSTORE_SERVER_SCHEDULER_SCHEDULER_SERVICE_H_

#include <grpcpp/generic/generic_stub.h>

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/kvstore.grpc.pb.h"
#include "server/scheduler/scheduler_core.h"

namespace kvstore {

class SchedulerService final : public proto::Scheduler::CallbackService {
 public:
  // `core` must outlive the service. Commands to servers time out after `command_timeout`.
  SchedulerService(SchedulerCore* core, absl::Duration command_timeout)
      : core_(core), command_timeout_(command_timeout) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const proto::RegisterRequest* request,
                                     proto::RegisterResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const proto::HeartbeatRequest* request,
                                      proto::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* context,
                                    const proto::BarrierRequest* request,
                                    proto::BarrierResponse* response) override;
  grpc::ServerUnaryReactor* Command(grpc::CallbackServerContext* context,
                                    const proto::CommandRequest* request,
                                    proto::CommandResponse* response) override;
  grpc::ServerUnaryReactor* ClusterStatus(grpc::CallbackServerContext* context,
                                          const proto::ClusterStatusRequest* request,
                                          proto::ClusterStatusResponse* response) override;
  grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                   const proto::FinishRequest* request,
                                   proto::FinishResponse* response) override;
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* context,
                                     const proto::ShutdownRequest* request,
                                     proto::ShutdownResponse* response) override;

 private:
  // ServerStub returns the (cached) raw stub for a server's address.
  std::shared_ptr<grpc::GenericStub> ServerStub(const std::string& address);
  // CheckController accepts node id 0 (a controller such as kvctl) or an issued node id.
  absl::Status CheckCaller(uint64_t node_id) const;

  SchedulerCore* core_;
  const absl::Duration command_timeout_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::GenericStub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_SCHEDULER_SERVICE_H_
