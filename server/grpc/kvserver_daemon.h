// KVServerDaemon: a kvserver - the gRPC server for one shard plus its life cycle in the job.
//
// Start binds host:port (port 0: the OS picks one; port() says which), then, on a background
// thread, registers with the scheduler (retrying while the scheduler is not up yet, until
// register_timeout), builds the engine from the cluster view (dist_sync or dist_async, the
// workers' node ids), and sends heartbeats - with the keys and bytes it holds - until the
// scheduler says the job is over. Wait returns then: OK for a clean end, or the error that
// stopped the server (registration refused or timed out, scheduler unreachable for longer than
// scheduler_lost_timeout).
//
// Threading: Start, port, Wait and Shutdown may be called from any thread. Requests are served
// on `serving_threads` threads of the daemon's own (see KVServerService).
#ifndef KVSTORE_SERVER_GRPC_KVSERVER_DAEMON_H_
#define KVSTORE_SERVER_GRPC_KVSERVER_DAEMON_H_

#include <grpcpp/client_context.h>
#include <grpcpp/server.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/grpc_channel.h"
#include "common/grpc_health.h"
#include "common/metrics_http.h"
#include "common/metrics_registry.h"
#include "common/request_signature.h"
#include "common/scheduler_endpoint.h"
#include "common/security_options.h"
#include "common/store/updater.h"
#include "common/trace_writer.h"
#include "proto/kvstore.grpc.pb.h"
#include "server/core/controller.h"
#include "server/core/server_backend.h"
#include "server/core/server_engine.h"
#include "server/grpc/kvserver_metrics.h"
#include "server/grpc/kvserver_service.h"
#include "server/grpc/local_listener.h"

namespace kvstore {

struct KVServerOptions {
  // Interface and port to serve on (the bind address); port 0 lets the OS choose.
  std::string host = "127.0.0.1";
  int port = 0;
  // The host registered with the scheduler, which workers connect to (the advertised address;
  // common/advertise.h chooses it). Empty: `host`. A wildcard (0.0.0.0, ::) is refused by Start.
  std::string advertise_host;
  // The scheduler's "host:port"; or, when etcd_endpoints is set, the address of job `job`'s
  // leading scheduler that etcd holds, read again whenever the scheduler is lost
  // (common/scheduler_endpoint.h).
  std::string scheduler_address;
  std::string etcd_endpoints;
  std::string job;
  // Requested server rank, or -1 for registration order.
  int requested_rank = -1;
  // Updater applied to pushes until a worker sets another (kCommandSetUpdater). Empty: none
  // chosen - ASSIGN in dist_sync (MXNet's default), and in dist_async every push is refused
  // with FailedPrecondition until a worker sets an updater or optimizer (as MXNet refuses).
  std::string updater;
  std::string updater_config;
  // Updaters a worker may select by name. Start adds "sgd" when it is missing.
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  // The directory checkpoints are written under and restored from
  // (server/core/checkpoint_root.h); empty: the working directory when Start runs. Start
  // creates it when missing and resolves it once.
  std::string checkpoint_root;
  // When set: resume from the checkpoint ROOT/DIR/server-RANK.ckpt (controller command 4) - its
  // values, updater and updater state - before serving; DIR is relative to checkpoint_root. A
  // DIR that would leave the root stops Start; a mismatched job (servers, mode, chunk size) or
  // a damaged file stops the server with an error naming the file.
  std::string restore_dir;
  // The job secret (calls unchecked without one) and TLS (common/security_options.h).
  SecurityOptions security;
  // Heads >= kFirstCustomCommand go here (optional).
  CustomController custom_controller;
  // How long to wait for the scheduler and the rest of the job.
  absl::Duration register_timeout = absl::Seconds(120);
  // How long the scheduler may be unreachable before the server gives up; meanwhile it serves
  // on and registers again with a scheduler restarted in place (HeartbeatUntilOver).
  absl::Duration scheduler_lost_timeout = absl::Seconds(30);
  // Threads that read, run and answer requests, each with a completion queue of its own (a
  // connection's calls all go to one of them); 0: one per 4 cores, at least one.
  int serving_threads = 0;
  // After answering a call with a reply of under 64 KB (any push, a small pull), a serving
  // thread polls its queue this long before it sleeps (see KVServerService::Serve); zero: never.
  absl::Duration serving_poll = absl::Microseconds(250);
  // Serve workers on this host through shared memory too (local_listener.h), over a Unix socket
  // made in this directory and advertised to the job; empty: TCP only. When the socket cannot
  // be made the kvserver logs why and serves over TCP only.
  std::string local_socket_dir;
  // Join a running dist_sync job as one more server (the scheduler moves its
  // keys into it: server/scheduler/core/server_scaling.h); --rank is then not used.
  bool join = false;
  // The largest value, in bytes (ServerEngineOptions::max_value_bytes). It bounds requests
  // too: gRPC receives at most max_value_bytes + kRequestHeaderBytes in one request (and at
  // most 2 GiB), and buffers at most about twice that for all connections together
  // (ServerLimits::ForRequests).
  int64_t max_value_bytes = kDefaultMaxValueBytes;
  static constexpr int64_t kRequestHeaderBytes = 16 << 20;
  // The most bytes the server holds (ServerEngineOptions::memory_budget_bytes); 0: half of the
  // machine's physical memory.
  int64_t memory_budget_bytes = 0;
  // Prometheus metrics over HTTP at host:metrics_port/metrics (kvserver_metrics.h,
  // docs/operations.md); 0: a port the OS chooses (metrics_port() says which); -1: none.
  int metrics_port = -1;
  // When set, a Chrome-trace timeline of the dist_sync rounds is written to this file
  // (common/trace_writer.h; KV_TRACE_FILE).
  std::string trace_file;
  // Whether the process's log lines name this server's rank once it is known (SetLogNode,
  // common/logging.h): the kvserver program does; a process that runs several daemons does not.
  bool name_log_lines = false;
};

class ShardCopySender;

class KVServerDaemon {
 public:
  // Start binds and begins registering. InvalidArgument for bad options, Unavailable when the
  // address cannot be bound, NotFound for an unknown updater.
  static absl::StatusOr<std::unique_ptr<KVServerDaemon>> Start(KVServerOptions options);

  ~KVServerDaemon();
  KVServerDaemon(const KVServerDaemon&) = delete;
  KVServerDaemon& operator=(const KVServerDaemon&) = delete;

  int port() const { return port_; }
  // address returns the advertised "host:port" (the bind host when none is advertised).
  std::string address() const;
  // metrics_port is the port /metrics is served on, or 0 without metrics.
  int metrics_port() const;
  // local_connections returns how many workers' connections the shared-memory path took so
  // far (0 without one).
  int local_connections() const { return local_ == nullptr ? 0 : local_->connections(); }

  // Wait blocks until the server has stopped and returns why (OK: the job ended).
  absl::Status Wait();
  // Shutdown stops the server now (Wait then returns Cancelled unless it already stopped).
  void Shutdown();

 private:
  explicit KVServerDaemon(KVServerOptions options) : options_(std::move(options)) {}
  // Listen builds and starts the gRPC server (NOT_SERVING until registered) on the options'
  // host and port, with a completion queue per serving thread; returns its limits.
  absl::StatusOr<ServerLimits> Listen();
  // LogStartup logs where the server listens, what it advertises, its limits and its
  // checkpoint root.
  void LogStartup(const ServerLimits& limits) const;
  void Run();
  // RegisterAndServe runs the server's life in phases: Register with the scheduler, make the
  // engines (MakeBackends) and the request verifier, serve, then HeartbeatUntilOver.
  absl::Status RegisterAndServe();
  class Heartbeat;
  // The engines this server serves: its shard's, and with replicas the previous rank's backup.
  struct Backends {
    std::shared_ptr<ServerBackend> primary;
    std::shared_ptr<ServerBackend> backup;
  };
  // Register registers with the scheduler, retrying while it cannot be reached, until
  // register_timeout; Cancelled once Shutdown was called.
  absl::StatusOr<proto::RegisterResponse> Register();
  // SetLocalPath tells the scheduler of the shared-memory path, if any.
  void SetLocalPath(proto::RegisterRequest* request) const;
  // CallRegister sends `request`, retried while the scheduler cannot be reached until
  // `give_up`; Shutdown cancels it.
  // `max_backoff` bounds the wait between attempts.
  // Through etcd, each attempt goes to the leader etcd names then.
  absl::StatusOr<proto::RegisterResponse> CallRegister(
      const proto::RegisterRequest& request, absl::Time give_up,
      absl::Duration max_backoff = absl::Seconds(1));
  // JobPicture: what this server knows of the running job - the view it registered with, and
  // what heartbeats told it since - which it presents when it registers again with a scheduler
  // restarted in place (Rejoin).
  struct JobPicture {
    proto::RegisterResponse registration;
    uint64_t view_epoch = 0;
    std::vector<proto::ServerInfo> servers;
    std::vector<int> dead_servers;
    std::vector<uint64_t> left_workers;
    std::vector<uint64_t> finished_workers;
    // Takes in a heartbeat's answer.
    void Update(const proto::HeartbeatResponse& reply);
  };
  // Rejoin registers this server again, presenting `picture` (its node id, rank, view and what
  // heartbeats told it), and waits until `give_up` for the scheduler to re-form the job. Then
  // it ends what the scheduler left half done on this server (Controller::AbandonCut) - unless
  // the scheduler knew it still (it did not restart: the heartbeat failed otherwise).
  absl::Status Rejoin(const JobPicture& picture, const Backends& backends, absl::Time give_up);
  // MakeBackends makes (and restores, or empties for a join) the engines the registration
  // assigns.
  absl::StatusOr<Backends> MakeBackends(const proto::RegisterResponse& registration);
  // Equip gives a backend's controller this server's copy sender and the shard swapper of a
  // rescale (SwapShard), for its own shard (`primary`) or the backup it holds.
  void Equip(ServerBackend& backend, bool primary);
  // SwapShard serves `shard` as shard `rank` of `num_servers` from now on - this server's own,
  // or with `backup` the backup it holds (replicas) - in a new backend refusing requests routed
  // by a view older than `epoch` (Controller::ShardSwapper). Runs on the thread of the command
  // that asks for it.
  absl::Status SwapShard(const proto::ShardCheckpoint& shard, int rank, int num_servers,
                         uint64_t epoch, bool backup);
  // MakeVerifier returns the verifier of the job's signed requests; null without a secret.
  std::shared_ptr<const RequestVerifier> MakeVerifier(
      const proto::RegisterResponse& registration) const;
  // RefuseLostUpdates makes a server that took a dead one's place without replicas refuse
  // every data request (DATA_LOSS) and tells the scheduler what it restored, before serving.
  void RefuseLostUpdates(const proto::RegisterResponse& registration, const Backends& backends,
                         const Heartbeat& beat);
  // HeartbeatUntilOver beats every `interval` until the job is over (OK), failed or joining
  // failed (Aborted), the scheduler was lost for scheduler_lost_timeout (Unavailable), or
  // Shutdown (Cancelled); it drops the workers that left an elastic job from the engines.
  // When a heartbeat fails, it registers again (Rejoin): a scheduler restarted in place
  // re-forms the job from its servers, and one that only missed a beat answers at once.
  absl::Status HeartbeatUntilOver(const proto::RegisterResponse& registration,
                                  const Heartbeat& beat, absl::Duration interval,
                                  const Backends& backends);
  // AddCollectors adds the metrics read at scrape time (process, keys and bytes held, info).
  void AddCollectors();

  KVServerOptions options_;
  std::shared_ptr<const CheckpointRoot> checkpoint_root_;  // Opened by Start.
  int port_ = 0;
  // Before the service, which records into them: destroyed after it.
  MetricsRegistry registry_;
  KVServerMetrics metrics_{&registry_};
  absl::Mutex info_mu_;
  MetricLabels info_ ABSL_GUARDED_BY(info_mu_);  // kvstore_server_info's labels, once known.
  KVServerService service_;
  // How the primary backend was made (a rescale makes the next one alike), the copy sender its
  // controllers share, and the request verifier: set while registering, before serving.
  BackendSpec spec_;
  std::shared_ptr<const ShardCopySender> copies_;
  std::shared_ptr<const RequestVerifier> verifier_;
  // The health service; like service_, it must outlive the server.
  std::unique_ptr<DaemonHealth> health_;
  // One serving thread per completion queue.
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs_;
  std::vector<std::thread> serving_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<LocalListener> local_;  // Null: no shared-memory path.
  std::string local_host_;                // This host's id, advertised with local_.
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  std::unique_ptr<TraceWriter> trace_;  // Outlives the engine's round observer: see ~.
  std::thread thread_;
  absl::Notification stop_;
  // The registration call while it waits for the scheduler; Shutdown cancels it.
  // Where the scheduler is (set by RegisterAndServe, then used by its thread only).
  std::unique_ptr<SchedulerEndpoint> scheduler_;
  absl::Mutex registering_mu_;
  grpc::ClientContext* registering_ ABSL_GUARDED_BY(registering_mu_) = nullptr;
  absl::Notification done_;
  absl::Status status_;  // Written before done_ is notified.
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_GRPC_KVSERVER_DAEMON_H_
