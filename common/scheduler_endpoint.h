// SchedulerEndpoint: where a node reaches its job's scheduler - a fixed address, or the address
// of the job's leading scheduler that etcd holds (the key SchedulerKey(job), written by
// server/scheduler/scheduler_election.h) - and the gRPC stub to it, made anew when the address
// changes (a standby took over).
//
// Threading: thread-safe.
#ifndef KVSTORE_COMMON_SCHEDULER_ENDPOINT_H_
#define KVSTORE_COMMON_SCHEDULER_ENDPOINT_H_

#include <grpcpp/security/credentials.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/etcd_client.h"
#include "proto/kvstore.grpc.pb.h"

namespace kvstore {

// SchedulerKey is the etcd key holding job `job`'s leading scheduler's address.
std::string SchedulerKey(const std::string& job);

class SchedulerEndpoint {
 public:
  // Fixed: the scheduler at `address`.
  static std::unique_ptr<SchedulerEndpoint> Fixed(
      std::string address, std::shared_ptr<grpc::ChannelCredentials> credentials);
  // ThroughEtcd: job `job`'s leader, read from etcd at `endpoints` (Resolve first).
  // InvalidArgument for malformed endpoints or an empty job.
  static absl::StatusOr<std::unique_ptr<SchedulerEndpoint>> ThroughEtcd(
      const std::string& endpoints, std::string job,
      std::shared_ptr<grpc::ChannelCredentials> credentials);

  // stub is the stub to the scheduler as last resolved (null through etcd before a Resolve
  // found a leader).
  std::shared_ptr<proto::Scheduler::Stub> stub() const;
  // name says which scheduler this is, for messages: "the scheduler at HOST:PORT", or "the
  // scheduler of job J (etcd at E; at HOST:PORT)".
  std::string name() const;
  bool through_etcd() const { return etcd_.has_value(); }
  // Resolve reads the leader's address from etcd again and, when it changed, makes a new stub;
  // OK at once for a fixed address. Unavailable naming etcd and the job when etcd cannot be
  // reached or holds no leader.
  absl::Status Resolve();

 private:
  SchedulerEndpoint(std::shared_ptr<grpc::ChannelCredentials> credentials)
      : credentials_(std::move(credentials)) {}
  void SetAddress(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::optional<EtcdClient> etcd_;
  std::string job_;
  mutable absl::Mutex mu_;
  std::string address_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<proto::Scheduler::Stub> stub_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_SCHEDULER_ENDPOINT_H_
