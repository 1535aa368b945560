// GrpcSchedulerLink: the SchedulerLink of a distributed job - unary calls of the Scheduler
// service (proto/kvstore.proto) on one channel, each with its deadline.
//
// Threading: thread-safe (gRPC stubs are).
#ifndef KVSTORE_CLIENT_GRPC_SCHEDULER_LINK_H_
#define KVSTORE_CLIENT_GRPC_SCHEDULER_LINK_H_

#include <memory>
#include <string>

#include "client/scheduler_link.h"
#include "proto/kvstore.grpc.pb.h"

namespace kvstore {

class GrpcSchedulerLink final : public SchedulerLink {
 public:
  // The channel connects lazily, to "host:port".
  explicit GrpcSchedulerLink(std::string address);

  std::string name() const override;
  absl::StatusOr<JobView> Register(const std::string& mode, int requested_rank,
                                   absl::Time deadline) override;
  absl::StatusOr<bool> Heartbeat(uint64_t node_id, absl::Time deadline) override;
  absl::Status Barrier(uint64_t node_id, absl::Time deadline) override;
  absl::Status Finish(uint64_t node_id, absl::Time deadline) override;
  absl::StatusOr<std::vector<std::string>> Command(uint64_t node_id, int head,
                                                   const std::string& body,
                                                   absl::Time deadline) override;
  absl::StatusOr<int> NumDeadNodes(uint64_t node_id, int group, int timeout_s,
                                   absl::Time deadline) override;

 private:
  const std::string address_;
  std::unique_ptr<proto::Scheduler::Stub> stub_;
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_GRPC_SCHEDULER_LINK_H_
