// SchedulerDaemon: the scheduler process's server - SchedulerCore behind SchedulerService -
// and its life cycle.
//
// Start binds host:port (port 0: the OS picks one; port() says which) and starts a ticker that
// expires overdue registrations and barriers. Wait returns when the job is over: OK once every
// worker has finished (or a controller asked for shutdown) and every server has been told to
// exit (or `shutdown_grace` has passed), DeadlineExceeded naming the missing nodes when the job
// has not assembled within register_timeout (counted from the first registration, and at the
// latest from the start, so that a job nobody joins ends too).
#ifndef KVSTORE_SERVER_SCHEDULER_GRPC_SCHEDULER_DAEMON_H_
#define KVSTORE_SERVER_SCHEDULER_GRPC_SCHEDULER_DAEMON_H_

#include <grpcpp/server.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_health.h"
#include "common/metrics_http.h"
#include "common/metrics_registry.h"
#include "common/security_options.h"
#include "server/scheduler/core/checkpoint_coordinator.h"
#include "server/scheduler/core/scheduler_core.h"
#include "server/scheduler/core/server_joiner.h"
#include "server/scheduler/core/server_rescaler.h"
#include "server/scheduler/grpc/scheduler_service.h"

namespace kvstore {

struct SchedulerDaemonOptions {
  // The address bound (0.0.0.0 or :: for every interface) and the port (0: the OS chooses).
  std::string host = "127.0.0.1";
  int port = 0;
  // The host the job's nodes reach the scheduler at, as address() reports it (common/
  // advertise.h chooses it). Empty: `host`. A wildcard (0.0.0.0, ::) is refused by Start.
  std::string advertise_host;
  SchedulerOptions job;
  // After the job is over, how long to wait for servers to hear it before exiting anyway.
  absl::Duration shutdown_grace = absl::Seconds(10);
  // Deadline of each command sent to a server.
  absl::Duration command_timeout = absl::Seconds(60);
  // The job secret (calls unchecked without one) and TLS (common/security_options.h).
  SecurityOptions security;
  // Checkpoint sets and periodic checkpoints (checkpoint_coordinator.h); an empty job id is
  // drawn at random when the scheduler starts.
  CheckpointCoordinatorOptions checkpoints;
  // The largest request the scheduler receives, in bytes; gRPC buffers at most about twice
  // that, and 64 MiB at least, for all connections together (ServerLimits::ForRequests). The
  // scheduler's requests are small, except the optimizer states a worker loads
  // (LoadOptimizerStates), which travel through it in one request.
  int64_t max_request_bytes = kDefaultMaxRequestBytes;
  static constexpr int64_t kDefaultMaxRequestBytes = 64 << 20;
  // A node has a few calls open at once (a register or barrier, heartbeats, a command); more
  // wait at the client.
  static constexpr int kMaxCallsPerConnection = 32;
  // Prometheus metrics over HTTP at host:metrics_port/metrics (docs/operations.md); 0: a port
  // the OS chooses (metrics_port() says which); -1: none.
  int metrics_port = -1;
  // How often the scheduler logs what the job waits for (registration, barriers).
  absl::Duration progress_interval = absl::Seconds(5);
  // Not empty: start as a standby (SchedulerCore::SetStandby with this reason) until Lead.
  std::string standby;
};

class SchedulerDaemon {
 public:
  static absl::StatusOr<std::unique_ptr<SchedulerDaemon>> Start(SchedulerDaemonOptions options);
  ~SchedulerDaemon();
  SchedulerDaemon(const SchedulerDaemon&) = delete;
  SchedulerDaemon& operator=(const SchedulerDaemon&) = delete;

  int port() const { return port_; }
  // address returns the advertised "host:port".
  std::string address() const;
  // metrics_port is the port /metrics is served on, or 0 without metrics.
  int metrics_port() const;
  // Wait blocks until the scheduler has stopped and returns why.
  absl::Status Wait();
  // Shutdown stops the scheduler now.
  void Shutdown();
  // EndJob ends the job as `kvctl shutdown` does (`reason` is logged): every later heartbeat
  // tells its node the job is over, and Wait returns OK once every server has heard it, or
  // after shutdown_grace.
  void EndJob(const std::string& reason);
  // Lead ends the standby (SchedulerDaemonOptions::standby): the scheduler serves its job from
  // now on, its registration window counted from now.
  void Lead();
  // Abandon stops the scheduler now and makes Wait return Aborted with `why` (a leader that
  // lost its lease: another scheduler may lead the job).
  void Abandon(const std::string& why);

 private:
  explicit SchedulerDaemon(SchedulerDaemonOptions options) : options_(std::move(options)) {}
  // MakeCoordinators makes the checkpoint coordinator and the server joiner, both driving the
  // kvservers through the service's command fan-out, and hands them to the service.
  void MakeCoordinators();
  // Listen builds and starts the gRPC server with the service and the health service.
  absl::Status Listen();
  // RunTicker runs Tick until the job ends, then stops the server and records the status.
  void RunTicker();
  absl::Status Tick();
  // AddCollectors adds the metrics read from the core at scrape time.
  void AddCollectors();
  // Watch logs the job's progress and its nodes' deaths, and keeps the health states.
  void Watch(absl::Time now);
  // DeadAfter: how long a node may be silent before it counts as dead.
  absl::Duration DeadAfter() const;

  SchedulerDaemonOptions options_;
  int port_ = 0;
  MetricsRegistry registry_;  // Before the service, which records into it.
  std::unique_ptr<SchedulerCore> core_;
  std::unique_ptr<SchedulerService> service_;
  // The health service (it must outlive the server) and the queue and thread that serve it.
  std::unique_ptr<DaemonHealth> health_;
  std::unique_ptr<grpc::ServerCompletionQueue> health_cq_;
  std::thread health_thread_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  // Watch's state (ticker thread only).
  absl::Time last_progress_ = absl::InfinitePast();
  std::map<uint64_t, bool> dead_;  // By node id: whether last seen dead.
  bool job_running_ = false;
  // Replacement servers' joins: they run on the coordinator's thread, which is joined first.
  std::unique_ptr<ServerJoiner> joiner_;
  std::unique_ptr<ServerRescaler> rescaler_;  // Adds and drains servers (server_rescaler.h).
  // Declared after the service it calls, so destroyed first.
  std::unique_ptr<CheckpointCoordinator> coordinator_;
  // Set once the job has been over for half of shutdown_grace: the servers then hear the end
  // even while a checkpoint or a join is still under way (SchedulerCore::SetServersBusy), so
  // that they exit before the scheduler gives up waiting for them.
  std::atomic<bool> stop_holding_servers_{false};
  std::thread ticker_;
  absl::Notification stop_;
  absl::Notification done_;
  absl::Status status_;
  absl::Mutex abandon_mu_;
  std::string abandoned_ ABSL_GUARDED_BY(abandon_mu_);  // Abandon's reason.
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_GRPC_SCHEDULER_DAEMON_H_
