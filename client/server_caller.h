// ServerCaller: a worker's calls to its servers, over a ServerTransport, with the job's policy:
// a deadline on every call, retries of an unreachable server, and errors that name the server.
//
// A call that fails with UNAVAILABLE is sent again - the same request, so a push keeps its
// request id and the server applies it once, signed afresh in a job with a secret - after a
// backoff that doubles from retry_backoff up to
// 2 s, until max_retries; it then fails naming the server's rank and address and the number of
// attempts. Every error a call returns is prefixed with "server R at ADDRESS: ".
//
// Replicas (CallPolicy::replicas == 2): every shard p has two copies, its server's and the backup
// the next rank's server holds. A call that changes state (Init, Push, PushPull) goes to every
// living copy and succeeds once each has answered OK - so an acknowledged update is held twice;
// a read goes to the first living copy. When a copy cannot be reached, the caller asks the
// scheduler (set_failover_check) whether its server is dead: if so, the server is not called
// again, its copies' failures are dropped, and reads go to the other copy; if not, the call is
// retried as above. Both copies of a shard dead: the call fails naming both.
//
// A replacement server may take a dead server's rank back (server/scheduler/core/server_joiner.h).
// Every request carries the view epoch its copies were chosen by (common/view_epoch.h); the
// heartbeats' answers bring new views (ApplyView: the servers' addresses, the dead ones). A
// copy that refuses a request as routed by an old view names the epoch it needs: the caller
// then learns the view from the scheduler (set_view_refresh) and sends the request again -
// the same bytes, so the same request id - to the copies of the new view.
//
// TransferContext bundles what every transfer (dense_transfer.h, row_sparse_transfer.h,
// group_transfer.h) needs besides its operation: the caller, this worker's node id and the
// counters of request ids and pushed bytes.
//
// Threading: thread-safe. `done` runs on the transport's completion thread (or the timer's,
// for a call that gives up after a retry).
#ifndef KVSTORE_CLIENT_SERVER_CALLER_H_
#define KVSTORE_CLIENT_SERVER_CALLER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/server_transport.h"
#include "client/timer.h"
#include "common/request_signature.h"

namespace kvstore {

struct TransferContext;

// ServerAddress: a server of the job as the scheduler published it; or (backup) the backup copy
// of shard `rank` that the server at `address` (rank + 1, modulo the servers) holds.
struct ServerAddress {
  int rank = 0;
  std::string address;
  bool backup = false;
  // The server's shared-memory path for workers on its host (client/local_server_transport.h):
  // its Unix socket and its host's boot id; empty when it advertised none.
  std::string local_socket;
  std::string local_host;
};

// ReplicaTargets lists what a worker's transport reaches, by index: the servers in rank order,
// then, with `replicas` 2, the backup copy of each shard p, at server (p + 1) % N's address.
std::vector<ServerAddress> ReplicaTargets(const std::vector<ServerAddress>& servers, int replicas);

struct CallPolicy {
  absl::Duration rpc_timeout = absl::Seconds(120);
  int max_retries = 8;
  absl::Duration retry_backoff = absl::Milliseconds(50);
  // Copies of each shard (1 or 2); with 2 the transport reaches ReplicaTargets(servers, 2).
  int replicas = 1;
};

class ServerCaller {
 public:
  // The transport and the timer must outlive the caller.
  ServerCaller(ServerTransport* transport, std::vector<ServerAddress> servers, CallPolicy policy,
               Timer* timer);

  int num_servers() const { return num_servers_; }

  // RequestObserver is told of every call when it completes: the server, the method, the bytes
  // each way (0 for a failed call's reply), when it was first sent and answered, and the code.
  using RequestObserver =
      std::function<void(int server, ServerMethod method, size_t request_bytes, size_t reply_bytes,
                         absl::Time sent, absl::Time answered, absl::StatusCode code)>;
  // set_observer installs `observer` (worker_telemetry.h). Call before the first Call.
  void set_observer(RequestObserver observer) { observer_ = std::move(observer); }

  // FailoverCheck asks the scheduler whether server `rank`, which a call could not reach
  // (`error`), is dead; true once it has been declared dead. It may block (it runs on the
  // timer's thread).
  using FailoverCheck = std::function<absl::StatusOr<bool>(int rank, const absl::Status& error)>;
  // set_failover_check installs `check` (replicas only). Call before the first Call.
  void set_failover_check(FailoverCheck check) { failover_check_ = std::move(check); }
  // ViewRefresh asks the scheduler for the current view now, which reaches ApplyView.
  using ViewRefresh = std::function<absl::Status()>;
  // set_view_refresh installs `refresh` (replicas only). Call before the first Call.
  void set_view_refresh(ViewRefresh refresh) { view_refresh_ = std::move(refresh); }
  // set_signer makes every attempt of every call, and every probe, signed afresh by `signer`
  // for the server it goes to and the view it is routed by (common/request_signature.h): a
  // job with a secret. `signer` must outlive the caller. Call before the first Call.
  void set_signer(RequestSigner* signer) { signer_ = signer; }
  // ApplyView takes in the scheduler's view `epoch`: `servers` (every server's address; empty
  // keeps them) and the ranks of the `dead` ones. A view older than the one held is ignored;
  // at the same epoch only new dead servers count. Thread-safe.
  void ApplyView(uint64_t epoch, const std::vector<ServerAddress>& servers,
                 const std::vector<int>& dead);
  uint64_t view_epoch() const { return view_epoch_.load(std::memory_order_acquire); }
  // Supersede records that the job's view `epoch` has other servers than this caller reaches
  // (servers joined or drained: client/dist_store.h): a request refused as routed by an older
  // view is then answered with that refusal, for its sender to place anew, rather than sent
  // again to these servers. Thread-safe.
  void Supersede(uint64_t epoch);
  // MarkDead records that server `rank` is dead (the scheduler said so) in view `epoch`: its
  // copies are not called again until a later view says otherwise; nothing when the view has
  // moved on since. IsDead says whether it is.
  void MarkDead(int rank, uint64_t epoch);
  bool IsDead(int rank) const;
  // How many times one call is sent again after stale-view refusals before it fails.
  static constexpr int kMaxReroutes = 8;

  // Call sends `request` to shard `s` - its server, or with replicas its copies (see above) -
  // retrying UNAVAILABLE; `done` runs exactly once.
  void Call(int s, ServerMethod method, std::shared_ptr<const grpc::ByteBuffer> request,
            ServerTransport::Done done);

  // WaitForServers returns once every server answers an empty pull from `ctx`'s node (a server
  // answers UNAVAILABLE until it has set itself up after the job assembled, and restored its
  // checkpoint); the error naming the first server that is not ready within `timeout`.
  absl::Status WaitForServers(const TransferContext& ctx, absl::Duration timeout);

  // ServerError prefixes `status`'s message with target `t`'s server rank and address (and,
  // for a backup copy, the shard it backs up).
  absl::Status ServerError(int t, const absl::Status& status) const;

 private:
  // Copy c of shard s: its index among the transport's targets, and the rank of its server.
  int TargetOf(int s, int c) const { return c == 0 ? s : num_servers() + s; }
  int ServerOf(int t) const {
    return t < num_servers() ? t : (t - num_servers() + 1) % num_servers();
  }
  // Route sends a call of a job with replicas to the copies of the current view, and again
  // (up to kMaxReroutes times) once a newer view is known when a copy refused it as stale.
  void Route(int s, ServerMethod method, std::shared_ptr<const grpc::ByteBuffer> request,
             ServerTransport::Done done, int reroutes);
  // AwaitView returns once the view is at `epoch` or later, asking the scheduler (bounded by
  // the call timeout); the error says what it waited for.
  absl::Status AwaitView(uint64_t epoch);
  // CallEveryCopy sends a state-changing request to every living copy of shard `s`;
  // CallOneCopy sends a read to its first living copy from copy `c` on. Both route by view
  // `epoch`.
  void CallEveryCopy(int s, ServerMethod method, std::shared_ptr<const grpc::ByteBuffer> request,
                     uint64_t epoch, ServerTransport::Done done);
  void CallOneCopy(int s, int c, ServerMethod method,
                   std::shared_ptr<const grpc::ByteBuffer> request, uint64_t epoch,
                   ServerTransport::Done done);
  absl::Status AllCopiesDead(int s) const;
  bool NoLivingCopy(int s) const;
  // Attempt sends `request` to target `t` once, routed by view `epoch`; Retry retries or
  // fails it after `status`.
  void Attempt(int t, ServerMethod method, std::shared_ptr<const grpc::ByteBuffer> request,
               uint64_t epoch, ServerTransport::Done done, int attempt);
  void Retry(int t, ServerMethod method, std::shared_ptr<const grpc::ByteBuffer> request,
             uint64_t epoch, ServerTransport::Done done, int attempt, absl::Status status);
  std::string AddressOf(int t) const;
  // Signed returns `request` signed for target `t` routed by view `epoch`, or `request` itself
  // without a signer.
  std::shared_ptr<const grpc::ByteBuffer> Signed(
      int t, ServerMethod method, const std::shared_ptr<const grpc::ByteBuffer>& request,
      uint64_t epoch) const;

  ServerTransport* const transport_;
  const int num_servers_;
  const CallPolicy policy_;
  Timer* const timer_;
  RequestObserver observer_;         // Optional.
  RequestSigner* signer_ = nullptr;  // Optional: a job with a secret.
  FailoverCheck failover_check_;     // Optional; replicas only.
  ViewRefresh view_refresh_;         // Optional; replicas only.
  // The view: its epoch, every target's address (ReplicaTargets of the servers), the dead
  // servers. Senders read the epoch first, then the dead flags; ApplyView writes them in the
  // other order, so a request routed by epoch E went to every living copy of E.
  mutable absl::Mutex view_mu_;  // Serializes view changes; guards the addresses.
  std::vector<ServerAddress> targets_ ABSL_GUARDED_BY(view_mu_);
  std::atomic<uint64_t> view_epoch_{0};
  std::atomic<uint64_t> superseded_{0};        // Supersede's epoch (0: none).
  std::unique_ptr<std::atomic<bool>[]> dead_;  // By server rank.
};

// Replies: an operation's requests still unanswered and the first error among the answers; a
// transfer's shared state derives from it.
struct Replies {
  absl::Mutex mu;
  size_t remaining = 0;  // Guarded by mu.
  absl::Status error;    // Guarded by mu until the last reply.
  // Record records one answer; true for the last.
  bool Record(const absl::Status& status) {
    absl::MutexLock lock(&mu);
    if (!status.ok() && error.ok()) error = status;
    return --remaining == 0;
  }
};

struct TransferContext {
  ServerCaller* caller = nullptr;
  uint64_t node_id = 0;
  // Push request ids, unique per worker; a retried request keeps its own.
  std::atomic<uint64_t>* next_request_id = nullptr;
  // Tensor bytes sent by pushes (codes, when compressed), not counting headers.
  std::atomic<int64_t>* push_payload_bytes = nullptr;
  // Requests of one dense operation in flight at once (connections per server x servers).
  size_t window = 1;
};

// SetSender fills the field every kvserver request has (proto::RequestNode's node id) from
// `ctx`; the caller signs each attempt (set_signer).
template <typename Request>
void SetSender(const TransferContext& ctx, Request* request) {
  request->set_node_id(ctx.node_id);
}

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_SERVER_CALLER_H_
