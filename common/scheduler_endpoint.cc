#include "common/scheduler_endpoint.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"

namespace kvstore {

std::string SchedulerKey(const std::string& job) {
  return absl::StrCat("/kvstore/jobs/", job, "/scheduler");
}

std::unique_ptr<SchedulerEndpoint> SchedulerEndpoint::Fixed(
    std::string address, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  std::unique_ptr<SchedulerEndpoint> endpoint(new SchedulerEndpoint(std::move(credentials)));
  absl::MutexLock lock(&endpoint->mu_);
  endpoint->SetAddress(address);
  return endpoint;
}

absl::StatusOr<std::unique_ptr<SchedulerEndpoint>> SchedulerEndpoint::ThroughEtcd(
    const std::string& endpoints, std::string job,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  if (job.empty()) return absl::InvalidArgumentError("a job found through etcd needs a name");
  absl::StatusOr<EtcdClient> etcd = EtcdClient::Create(endpoints, absl::Seconds(1));
  if (!etcd.ok()) return etcd.status();
  std::unique_ptr<SchedulerEndpoint> endpoint(new SchedulerEndpoint(std::move(credentials)));
  endpoint->etcd_ = *std::move(etcd);
  endpoint->job_ = std::move(job);
  return endpoint;
}

void SchedulerEndpoint::SetAddress(const std::string& address) {
  if (address == address_ && stub_ != nullptr) return;
  address_ = address;
  stub_ = proto::Scheduler::NewStub(MakeChannel(address_, credentials_));
}

std::shared_ptr<proto::Scheduler::Stub> SchedulerEndpoint::stub() const {
  absl::MutexLock lock(&mu_);
  return stub_;
}

std::string SchedulerEndpoint::name() const {
  absl::MutexLock lock(&mu_);
  if (!etcd_.has_value()) return absl::StrCat("the scheduler at ", address_);
  return absl::StrCat("the scheduler of job ", job_, " (etcd at ", etcd_->endpoints(),
                      address_.empty() ? "; no leader found yet" : "; at " + address_, ")");
}

absl::Status SchedulerEndpoint::Resolve() {
  if (!etcd_.has_value()) return absl::OkStatus();
  absl::StatusOr<std::string> leader = etcd_->Get(SchedulerKey(job_));
  if (!leader.ok()) {
    return absl::UnavailableError(absl::StrCat("no leading scheduler of job ", job_,
                                               " found in etcd: ", leader.status().message()));
  }
  absl::MutexLock lock(&mu_);
  SetAddress(*leader);
  return absl::OkStatus();
}

}  // namespace kvstore
