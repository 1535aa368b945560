// The standard gRPC health service (grpc.health.v1.Health, proto/health.proto) of a daemon.
//
// Both daemons serve it on their gRPC port through grpc++'s default health service, which
// Kubernetes gRPC probes, grpc_health_probe and `kvctl health ADDRESS` ask. It is answered
// without the job secret: a probe carries no credentials, and the answer tells only whether
// the daemon serves (docs/security.md).
//
// Service names a daemon reports (docs/operations.md):
//   ""                        the daemon as a whole: SERVING once it does its work (a kvserver:
//                             registered with the scheduler and restored; the scheduler:
//                             listening for registrations), NOT_SERVING before and while it
//                             stops.
//   kvstore.proto.KVServer /  the same, under the daemon's own service name.
//   kvstore.proto.Scheduler
//   kvstore.alive             SERVING from the start until the daemon stops (liveness).
//   kvstore.job               scheduler only: SERVING while the job runs (every node
//                             registered, not yet over).
//
// Threading: thread-safe.
#ifndef KVSTORE_COMMON_GRPC_HEALTH_H_
#define KVSTORE_COMMON_GRPC_HEALTH_H_

#include <grpcpp/server.h>

#include <string>

namespace kvstore {

inline constexpr char kAliveHealthService[] = "kvstore.alive";
inline constexpr char kJobHealthService[] = "kvstore.job";

// EnableHealthService makes grpc++ add its health service to the servers built after it (a
// process-wide switch of grpc++). Call before ServerBuilder::BuildAndStart.
void EnableHealthService();

// DaemonHealth sets the health states of one daemon's server.
class DaemonHealth {
 public:
  // Starts NOT_SERVING for "" and `service`, SERVING for kvstore.alive. `server` (built after
  // EnableHealthService) must outlive this object; null: every call does nothing.
  DaemonHealth(grpc::Server* server, std::string service);

  // SetServing sets "" and the daemon's service.
  void SetServing(bool serving);
  // Set sets one named service (kvstore.job).
  void Set(const std::string& service, bool serving);
  // Stopping turns every service NOT_SERVING for good (later calls change nothing).
  void Stopping();

 private:
  grpc::HealthCheckServiceInterface* health_;
  const std::string service_;
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_GRPC_HEALTH_H_
