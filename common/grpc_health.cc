#include "common/grpc_health.h"

#include <grpcpp/health_check_service_interface.h>

namespace kvstore {

void EnableHealthService() { grpc::EnableDefaultHealthCheckService(true); }

DaemonHealth::DaemonHealth(grpc::Server* server, std::string service)
    : health_(server == nullptr ? nullptr : server->GetHealthCheckService()),
      service_(std::move(service)) {
  if (health_ == nullptr) return;
  health_->SetServingStatus(false);
  health_->SetServingStatus(service_, false);
  health_->SetServingStatus(kAliveHealthService, true);
}

void DaemonHealth::SetServing(bool serving) {
  if (health_ == nullptr) return;
  health_->SetServingStatus("", serving);
  health_->SetServingStatus(service_, serving);
}

void DaemonHealth::Set(const std::string& service, bool serving) {
  if (health_ != nullptr) health_->SetServingStatus(service, serving);
}

void DaemonHealth::Stopping() {
  if (health_ != nullptr) health_->Shutdown();
}

}  // namespace kvstore
