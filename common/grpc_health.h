// DaemonHealth: the standard gRPC health service (grpc.health.v1.Health, proto/health.proto)
// of a daemon, served on gRPC's async API from completion queues of the daemon's own.
//
// Both daemons serve it on their gRPC port, where Kubernetes gRPC probes, grpc_health_probe
// and `kvctl health ADDRESS` ask it (Check), and gRPC clients that check health themselves
// follow it (Watch). It is answered without the job secret: a probe carries no credentials,
// and the answer tells only whether the daemon serves (docs/security.md).
//
// It is not grpc++'s default health service because that one runs on the callback API, which
// keeps two threads of gRPC's own polling every connection of the process: in a kvserver they
// took the reads of pushed values from the serving thread and handed each read over to it
// (docs/performance.md, entry 41). Here health calls are one more kind of call on the
// kvserver's serving queues; the scheduler serves them on a queue and thread of their own.
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
// Check answers NOT_FOUND for any other name; Watch sends SERVICE_UNKNOWN for it, then every
// change, as the protocol asks.
//
// Life cycle: construct, AddTo a ServerBuilder, build the server, then Ask on each queue that
// should carry health calls (or Serve one). To stop: the server's Shutdown, then StopServing,
// then the queues' Shutdown, then drain them (Serve does); the object must outlive the drain.
//
// Threading: thread-safe.
#ifndef KVSTORE_COMMON_GRPC_HEALTH_H_
#define KVSTORE_COMMON_GRPC_HEALTH_H_

#include <grpcpp/server_builder.h>

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "proto/health.grpc.pb.h"

namespace kvstore {

inline constexpr char kAliveHealthService[] = "kvstore.alive";
inline constexpr char kJobHealthService[] = "kvstore.job";

class DaemonHealth {
 public:
  // Starts NOT_SERVING for "" and `service`, SERVING for kvstore.alive.
  explicit DaemonHealth(std::string service);
  DaemonHealth(const DaemonHealth&) = delete;
  DaemonHealth& operator=(const DaemonHealth&) = delete;

  // AddTo registers the health service with `builder` (before BuildAndStart).
  void AddTo(grpc::ServerBuilder* builder);
  // Ask asks for the next Check and the next Watch call on `cq`, a queue of the built server
  // that a thread serves with the ServingTag protocol (common/serving_tag.h). Call once per
  // queue, before its thread first waits.
  void Ask(grpc::ServerCompletionQueue* cq);
  // Serve asks on `cq` and serves it until the queue is shut down and drained: for a daemon
  // whose queue carries nothing else.
  void Serve(grpc::ServerCompletionQueue* cq);
  // StopServing makes every later event drop its call: once it returns, no call is asked for
  // or written to, and the queues may be shut down. Call after the server's Shutdown.
  void StopServing();

  // SetServing sets "" and the daemon's service.
  void SetServing(bool serving);
  // Set sets one named service (kvstore.job).
  void Set(const std::string& service, bool serving);
  // Stopping turns every service NOT_SERVING for good (later calls change nothing).
  void Stopping();

 private:
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;
  class CheckCall;
  class WatchCall;

  void SetLocked(const std::string& service, Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status Lookup(const std::string& service) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::health::v1::Health::AsyncService async_;
  const std::string service_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Status> states_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // Stopping was called: states are final.
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;   // StopServing was called.
  absl::flat_hash_set<WatchCall*> watching_ ABSL_GUARDED_BY(mu_);  // Started, not yet done.
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_GRPC_HEALTH_H_
