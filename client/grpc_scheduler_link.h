// GrpcSchedulerLink: the SchedulerLink of a distributed job - unary calls of the Scheduler
// service (proto/kvstore.proto), each with its deadline, to the scheduler at an address or to
// the job's leader that etcd names (common/scheduler_endpoint.h): through etcd, a call that
// finds no scheduler (UNAVAILABLE) makes the next go to the leader etcd names then. With a job
// secret, Register carries the job token and every later call the node token registration returned
// (common/job_auth.h).
//
// Threading: thread-safe once Register has returned (gRPC stubs are).
#ifndef KVSTORE_CLIENT_GRPC_SCHEDULER_LINK_H_
#define KVSTORE_CLIENT_GRPC_SCHEDULER_LINK_H_

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "client/scheduler_link.h"
#include "common/scheduler_endpoint.h"
#include "proto/kvstore.grpc.pb.h"

namespace kvstore {

class GrpcSchedulerLink final : public SchedulerLink {
 public:
  // The channel connects lazily, to "host:port", over `credentials` (null: plaintext).
  // `secret` is the job secret, or empty.
  GrpcSchedulerLink(std::string address, std::shared_ptr<grpc::ChannelCredentials> credentials,
                    const std::string& secret);
  // The scheduler `endpoint` finds (an address, or etcd's leader).
  GrpcSchedulerLink(std::unique_ptr<SchedulerEndpoint> endpoint, const std::string& secret);

  std::string name() const override;
  absl::StatusOr<JobView> Register(const std::string& mode, int requested_rank,
                                   absl::Time deadline) override;
  absl::StatusOr<JobState> Heartbeat(uint64_t node_id, uint64_t barriers_passed,
                                     absl::Time deadline) override;
  absl::Status Barrier(uint64_t node_id, uint64_t sequence, absl::Time deadline) override;
  absl::Status Finish(uint64_t node_id, absl::Time deadline, const std::string& failure) override;
  absl::StatusOr<std::vector<std::string>> Command(uint64_t node_id, int head,
                                                   const std::string& body,
                                                   absl::Time deadline) override;
  absl::StatusOr<bool> ServerUnreachable(uint64_t node_id, int rank, const std::string& error,
                                         absl::Time deadline, std::string* reason) override;
  absl::StatusOr<int> NumDeadNodes(uint64_t node_id, int group, int timeout_s,
                                   absl::Time deadline) override;

 private:
  // Context is a client context with `deadline` and this node's credential.
  struct Context;

  // Stub returns the stub to the scheduler, resolving it first through etcd when none is
  // known yet; null when none is found.
  std::shared_ptr<proto::Scheduler::Stub> Stub() const;
  // Called returns `status`, and after an UNAVAILABLE one reads etcd's leader again.
  grpc::Status Called(grpc::Status status) const;
  // Call makes one call of `method` on the scheduler's stub (UNAVAILABLE when none is found).
  template <typename Request, typename Reply>
  grpc::Status Call(grpc::Status (proto::Scheduler::Stub::*method)(grpc::ClientContext*,
                                                                   const Request&, Reply*),
                    grpc::ClientContext* context, const Request& request, Reply* reply) const {
    const std::shared_ptr<proto::Scheduler::Stub> stub = Stub();
    if (stub == nullptr) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no scheduler found: " + name());
    }
    return Called(((*stub).*method)(context, request, reply));
  }

  const std::unique_ptr<SchedulerEndpoint> endpoint_;
  const std::string job_token_;  // Empty without a secret.
  const std::string hostname_;   // Sent with heartbeats (a restarted scheduler learns it).
  std::string node_credential_;  // Set by Register, with a secret.
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_GRPC_SCHEDULER_LINK_H_
