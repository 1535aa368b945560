// DistStore: the "dist_sync" / "dist_async" store - a worker of a distributed job, composed of
// the worker's parts (docs/architecture.md draws them):
//
//   Membership     (membership.h)        joins the job, heartbeats, barriers, commands, leaves
//   KeyTable       (key_table.h)         what Init recorded of each key; checks and plans calls
//   GroupCache     (group_cache.h)       key groups: long lists of small keys as packed arrays
//   OpQueue        (op_queue.h)          per-key order, priority, in-flight limit, fusion, Wait
//   transfers      (dense_transfer.h, row_sparse_transfer.h, group_transfer.h)
//                                        turn an operation into requests and replies
//   ServerCaller   (server_caller.h)     deadlines, retries, errors naming the server
//   ServerTransport (server_transport.h) gRPC (grpc_server_transport.h) or in-process
//
// Connect registers with the scheduler and blocks until the job has assembled and every server
// serves (a restoring server first loads its checkpoint). Then:
// - Init checks its arguments, records each key's dtype, shape and placement (every worker),
//   sends rank 0's values to the servers that hold them, and ends with a barrier over the
//   workers, so it returns once the keys are initialised everywhere.
// - Push / Pull / PushPull and the row-sparse and bucket calls check their arguments against
//   the recorded keys (errors are returned at once, nothing is sent), then enqueue an operation
//   and return; the queue starts it through the transfers. A call with a long list of distinct
//   small keys travels as a key group.
// - Wait / WaitAll block until the operations on the keys have completed and return the first
//   error among them (errors are reported once).
// - When the scheduler says the job is over, later operations fail with Cancelled.
// - When the job's servers change while it runs (a dist_sync job: a kvserver joined with --join
//   or one was drained; docs/state.md), the servers refuse requests routed
//   by the old view. An operation refused so - or failed after a newer view was heard of - is
//   parked; once no operation runs on the old servers any more, the store learns the new view
//   from the scheduler, reaches its servers, places every key anew and runs the parked
//   operations again (dist_store_rescale.cc). Operations issued meanwhile wait; Init and the
//   table calls are sent again likewise. In dist_sync an operation's requests are either all
//   applied (before the cut) or all refused (after), so nothing is applied twice.
// - The destructor waits for the queued operations, tells the scheduler this worker finished,
//   and stops its threads.
//
// Threading: thread-safe. Caller tensors must stay alive and unchanged until the operation that
// reads or writes them has completed.
#ifndef KVSTORE_CLIENT_DIST_STORE_H_
#define KVSTORE_CLIENT_DIST_STORE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/group_cache.h"
#include "client/group_check.h"
#include "client/key_table.h"
#include "client/kvstore.h"
#include "client/membership.h"
#include "client/op_queue.h"
#include "client/scheduler_link.h"
#include "client/server_caller.h"
#include "client/server_transport.h"
#include "client/split_loop.h"
#include "client/timer.h"
#include "client/worker_telemetry.h"

namespace kvstore {

class DistStore final : public KVStore {
 public:
  // Connect joins the job through the scheduler at options.scheduler_host:scheduler_port, over
  // gRPC. InvalidArgument naming the option for a bad DistOptions value; DeadlineExceeded /
  // Unavailable naming the scheduler's address when it cannot be reached or the job does not
  // assemble within options.register_timeout, or naming a server that does not serve in time.
  static absl::StatusOr<std::unique_ptr<DistStore>> Connect(std::string type,
                                                            const DistOptions& options);
  // TransportFactory makes the transport to the servers once the job's view is known.
  using TransportFactory =
      std::function<absl::StatusOr<std::unique_ptr<ServerTransport>>(const JobView& view)>;
  // Connect joins through `link` and reaches the servers through the transport that
  // `make_transport` returns (the in-process job's, in_process_job.h). Errors as above.
  static absl::StatusOr<std::unique_ptr<DistStore>> Connect(std::string type,
                                                            const DistOptions& options,
                                                            std::unique_ptr<SchedulerLink> link,
                                                            const TransportFactory& make_transport);
  ~DistStore() override;

  int rank() const override { return membership_->view().rank; }
  int num_workers() const override { return membership_->view().num_workers; }
  absl::Status Wait(absl::Span<const Key> keys) override {
    return membership_->Noted(queue_->Wait(keys));
  }
  absl::Status WaitAll() override { return membership_->Noted(queue_->WaitAll()); }
  absl::Status Barrier() override { return membership_->Barrier(); }
  absl::Status SetUpdater(Updater updater) override;
  absl::Status SendCommandToServers(int head, const std::string& body) override;
  absl::StatusOr<int> NumDeadNodes(NodeGroup group, absl::Duration timeout) override;
  absl::Status SaveOptimizerStates(const std::string& path) override;
  absl::Status LoadOptimizerStates(const std::string& path) override;
  absl::Status Checkpoint(const std::string& dir) override;

  // node_id returns the id the scheduler issued to this worker; node_token its token, which
  // its calls carry in a job with a secret (common/job_auth.h; empty otherwise).
  uint64_t node_id() const { return membership_->view().node_id; }
  const std::string& node_token() const { return membership_->view().node_token; }
  // signer signs this worker's requests to the servers (null in a job without a secret), for
  // tools that send raw requests as this worker: they must share its sequence numbers.
  RequestSigner* signer() const { return signer_.get(); }
  // signed_payloads: the job's signatures cover payloads (scheduler --signed_payloads).
  bool signed_payloads() const { return membership_->view().signed_payloads; }
  // push_payload_bytes returns the tensor bytes sent by pushes so far (the codes, when
  // compressed), not counting headers.
  int64_t push_payload_bytes() const { return push_payload_bytes_.load(); }

 protected:
  absl::Status DoInit(absl::Span<const Key> keys, absl::Span<const Tensor> values) override;
  absl::Status DoPush(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                      int priority) override;
  absl::Status DoPull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs,
                      int priority) override;
  absl::Status DoPushPull(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                          absl::Span<Tensor* const> outs, int priority) override;
  absl::Status DoPushBucket(absl::Span<const Key> keys, const Tensor& bucket,
                            int priority) override;
  absl::Status DoPullBucket(absl::Span<const Key> keys, Tensor* bucket, int priority) override;
  absl::Status DoIntKeyBucket(absl::Span<const int64_t> keys, const Tensor* in, Tensor* out,
                              int priority) override;
  absl::Status DoPushPullBucket(absl::Span<const Key> keys, const Tensor& bucket, Tensor* out,
                                int priority) override;
  absl::StatusOr<std::pair<DType, Shape>> StoredSpec(const Key& key) const override;
  absl::Status DoSetGradientCompression(const CompressionParams& params) override;
  absl::Status DoSetOptimizer(const OptimizerConfig& config) override;
  absl::Status DoPushRowSparse(absl::Span<const Key> keys, absl::Span<const RowSparse> values,
                               int priority) override;
  absl::Status DoRowSparsePull(absl::Span<const Key> keys, absl::Span<RowSparse* const> outs,
                               absl::Span<const std::vector<int64_t>> row_ids,
                               int priority) override;
  absl::Status DoInitTable(const Key& key, const TableConfig& config) override;
  absl::Status DoPullRows(const Key& key, int64_t dim, absl::Span<const int64_t> ids,
                          float* out) override;
  absl::Status DoPushRows(const Key& key, int64_t dim, absl::Span<const int64_t> ids,
                          const float* grads) override;

 private:
  DistStore(std::string type, DistOptions options)
      : KVStore(std::move(type)), options_(std::move(options)) {}

  // Rescales (see the top; dist_store_rescale.cc). Run sends `op` through its transfer on
  // the servers now, waiting while they are being changed; Park keeps an operation refused as
  // routed by an old view for SwitchServers, which the rescale thread runs: it waits until no
  // operation runs, learns the view (at least `needed_epoch_`), reaches its servers, places the
  // keys anew and runs the parked operations again. Enter / Leave bracket a call on the
  // servers from a caller's thread (Init, tables); Rerouted runs such a call again after a
  // switch while it is refused as routed by an old view. OnRouting takes in a heartbeat's view.
  void Run(Op op, OpDone done, int reroutes);
  // Ungroup turns a key-group operation packed for other servers into per-key work on the
  // same values and outputs (`*outputs` holds views of the outputs, to outlive the operation).
  absl::Status Ungroup(Op* op, std::vector<std::unique_ptr<Tensor>>* outputs) const;
  void Park(Op op, OpDone done, int reroutes, uint64_t needed);
  void RescaleLoop();
  void SwitchServers();
  absl::Status Reach(uint64_t epoch, const std::vector<ServerAddress>& servers,
                     const std::vector<int>& dead);
  void Enter();
  void Leave();
  absl::Status Rerouted(const std::function<absl::Status()>& call);
  void OnRouting(const JobState& state);
  // NeedsSwitch: the operation that ran from view `epoch` and ended with `status` is to be
  // sent again on a newer view; `*needed` gets the epoch to wait for.
  bool NeedsSwitch(const absl::Status& status, uint64_t epoch, uint64_t* needed);

  // Issue stamps a push with the compression set now and enqueues it.
  void Issue(Op op);
  void Enqueue(int priority, std::vector<KeyWork> work, Kind kind);
  // Start runs an operation the queue started, through its transfer (Transfer: the
  // group, row-sparse or dense one).
  void Start(Op op, OpDone done);
  void Transfer(Op op, OpDone done);
  // CountingAcknowledged wraps the `done` of push operation `op` so that its success counts
  // one acknowledged push of each of its keys (KeyInfo::acknowledged_pushes).
  static OpDone CountingAcknowledged(const Op& op, OpDone done);
  // CheckOptions refuses options out of range (naming the field) and applies the log level.
  static absl::Status CheckOptions(const DistOptions& options);
  // MakeCaller makes the caller to the joined job's servers, failing over to backups with
  // replicas (FailOver gives `caller` the scheduler's checks).
  void MakeCaller(const DistOptions& options);
  void FailOver(ServerCaller* caller);
  CompressionParams compression() const;

  // Key groups (caller thread). GroupsUsable is false when a call of `n` keys cannot use a
  // group. TryGroup enqueues a key-group operation when the call can use one; false
  // otherwise (the per-key path then runs, and reports any error). EnqueueGroup checks the
  // call against `group` (its keys too, unless `unchecked` is empty) and enqueues it when they
  // match.
  bool GroupsUsable(size_t n, bool pushes) const;
  bool TryGroup(Kind kind, absl::Span<const Key> keys, absl::Span<const Tensor> values,
                absl::Span<Tensor* const> outs, int priority);
  GroupCheck EnqueueGroup(Kind kind, std::shared_ptr<GroupPlan> group,
                          absl::Span<const Key> unchecked, absl::Span<const Tensor> values,
                          absl::Span<Tensor* const> outs, int priority);
  // TryGroupBucket enqueues a key-group operation on buckets (`in` pushed, `out` pulled into)
  // when the list forms a group whose keys all have the buckets' dtype and size; false
  // otherwise (the caller then takes the views path, which reports any error).
  bool TryGroupBucket(Kind kind, absl::Span<const Key> keys, const Tensor* in, Tensor* out,
                      int priority);
  bool EnqueueBucket(Kind kind, std::shared_ptr<GroupPlan> group, const Tensor* in, Tensor* out,
                     int priority);

  const DistOptions options_;
  // Metrics and timeline (null: neither asked for); outlives the queue and the caller.
  std::unique_ptr<WorkerTelemetry> telemetry_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<ServerTransport> transport_;
  std::unique_ptr<Timer> timer_;
  std::unique_ptr<ServerCaller> caller_;
  std::unique_ptr<RequestSigner> signer_;  // A job with a secret: signs every request.
  std::unique_ptr<KeyTable> keys_;
  std::unique_ptr<GroupCache> groups_;
  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<int64_t> push_payload_bytes_{0};
  TransferContext context_;
  SplitLoop split_;  // Checks long key lists on two threads.
  mutable absl::Mutex compression_mu_;
  CompressionParams compression_ ABSL_GUARDED_BY(compression_mu_);
  std::unique_ptr<OpQueue> queue_;

  // Rescales (see the top). The factory of transports, kept for the servers of a new view.
  TransportFactory make_transport_;
  bool rescalable_ = false;  // A dist_sync job.
  absl::Mutex rescale_mu_;
  absl::CondVar rescale_changed_;
  int active_ ABSL_GUARDED_BY(rescale_mu_) = 0;  // Operations and calls on the servers now.
  bool switching_ ABSL_GUARDED_BY(rescale_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(rescale_mu_) = false;
  uint64_t needed_epoch_ ABSL_GUARDED_BY(rescale_mu_) = 0;  // A switch is due when above.
  uint64_t heard_epoch_ ABSL_GUARDED_BY(rescale_mu_) = 0;   // The newest view heard of.
  std::vector<ServerAddress> heard_servers_ ABSL_GUARDED_BY(rescale_mu_);
  std::vector<int> heard_dead_ ABSL_GUARDED_BY(rescale_mu_);
  // The servers the caller reaches now (changed only by the rescale thread).
  std::vector<ServerAddress> servers_now_ ABSL_GUARDED_BY(rescale_mu_);
  struct Parked {
    Op op;
    OpDone done;
    int reroutes;
  };
  std::vector<Parked> parked_ ABSL_GUARDED_BY(rescale_mu_);
  // The transports and callers of earlier views: calls may still be finishing on their threads.
  std::vector<std::unique_ptr<ServerTransport>> retired_transports_ ABSL_GUARDED_BY(rescale_mu_);
  std::vector<std::unique_ptr<ServerCaller>> retired_callers_ ABSL_GUARDED_BY(rescale_mu_);
  std::thread rescaler_;
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_DIST_STORE_H_
