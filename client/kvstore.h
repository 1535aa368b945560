// KVStore: the public SDK of the KVStore parameter server.
//
// It mirrors Apache MXNet's `mxnet::KVStore` with absl::Status returns. A store holds values
// (Tensor) under keys (Key: int or string, never both in one store). Workers Init each key once,
// Push values into it and Pull the newest value out:
//
//   auto kv = kvstore::KVStore::Create("local").value();
//   kv->Init(3, kvstore::Tensor::Full(kvstore::DType::kFloat32, {2, 3}, 2));
//   kv->Push(3, kvstore::Tensor::Full(kvstore::DType::kFloat32, {2, 3}, 8));
//   kvstore::Tensor a = kvstore::Tensor::Zeros(kvstore::DType::kFloat32, {2, 3});
//   kv->Pull(3, &a);  // a is now all 8.
//
// Semantics (those of MXNet):
// - Push: several values for one key (a key repeated in `keys`, or the span overloads) are summed
//   first; the sum is merged into the stored value by the updater, ASSIGN by default
//   (stored = sum). Keys are merged in the order of their first appearance in the call.
// - Pull: copies the newest value into every output given for the key (several devices).
// - Operations on one key apply in the order they were issued; `priority` may reorder queued
//   operations on different keys (higher first).
// - Every call validates all of its arguments before doing anything: on error nothing was
//   applied. Errors: AlreadyExists (second Init of a key), NotFound (key never initialised),
//   InvalidArgument (shape or dtype mismatch naming the key and both shapes; int and string
//   keys mixed; wrong number of values or outputs), FailedPrecondition (a CUDA tensor where this
//   build or machine has no CUDA).
//
// Values may live on GPUs (Device::CUDA(i), or DLPack kDLCUDA): the values pushed to a key are
// then summed on the GPU (across GPUs by peer access or staging) and the sum crosses to host
// memory once, through a pinned buffer; a pull arrives once in a pinned buffer and is copied to
// every output's GPU (client/gpu/staging.h). The values of one key in one push are all on GPUs
// or all on the CPU.
//
// Store types: "local" and "device" run in this process with no servers (MXNet's aliases
// "local_update_cpu", "local_allreduce_cpu" and "local_allreduce_device" are accepted).
// In-process stores finish each operation before the call returns, so Wait/WaitAll return at
// once; programs written against the asynchronous contract (Wait before reading an output) stay
// correct for every store type. "dist_sync" and "dist_async" talk to a scheduler and kvservers
// over gRPC ("dist_sync_device", MXNet's alias "dist_device_sync", is dist_sync for values on
// GPUs - every store type takes them): Push, Pull and PushPull check their arguments, enqueue and
// return; errors found by the servers are returned by Wait / WaitAll. In dist_sync a server applies
// one update per round to the sum of every worker's push; in dist_async it applies each push as it
// arrives. Every worker calls Init with the same keys; rank 0's values are stored.
//
// Roles (MXNet's launch model: one program for every process of a job, DMLC_ROLE decides):
// IsWorkerNode / IsServerNode / IsSchedulerNode read the role. In a process started with
// DMLC_ROLE=server or scheduler, Create of a distributed type returns a store that is that
// daemon: RunServer(controller) serves until the job ends, and a program unaware of roles is
// served for too - its first worker call (Init, Push, ...) runs the daemon with the default
// controller and then ends the process with the daemon's exit status (0 when the job ended
// cleanly), as an MXNet program's servers leave at `import mxnet`. docs/cluster.md.
//
// Threading: a store may be used from several threads; calls are serialised internally.
// Tensors passed to Push are read and outputs given to Pull are written until the operation has
// completed (after Wait for asynchronous stores); the caller keeps them alive until then.
#ifndef KVSTORE_CLIENT_KVSTORE_H_
#define KVSTORE_CLIENT_KVSTORE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/compression.h"
#include "common/key.h"
#include "common/optimizer_config.h"
#include "common/row_sparse.h"
#include "common/security_options.h"
#include "common/store/embedding_table.h"
#include "common/tensor.h"

namespace kvstore {

// NodeGroup: node groups as in ps-lite, for NumDeadNodes.
enum class NodeGroup : int {
  kScheduler = 1,
  kServers = 2,
  kWorkers = 4,
  kServersAndWorkers = 6,
  kAll = 7,
};

// GradientCompression: MXNet's compression_params, e.g. {"2bit", 0.5}.
struct GradientCompression {
  // "2bit", "1bit" or "none" (off).
  std::string type = "2bit";
  // Unset: 0.5. Must be finite, and positive for 2bit.
  std::optional<double> threshold;
};

// CompletionThread: the thread that runs a distributed store's replies from its servers
// (client/completion_thread.h). Each store starts one of its own unless
// DistOptions::completion_thread gives it one to share.
class CompletionThread;
// NewCompletionThread starts a completion thread for the distributed stores of one process to
// share (DistOptions::completion_thread). A process that runs several stores (several workers,
// or several jobs) should: gRPC polls every connection of a process from one thread at a time,
// and with a thread per store, the one polling reads the others' replies and hands each over
// (docs/performance.md, entry 42). The thread stops once its last store is gone.
std::shared_ptr<CompletionThread> NewCompletionThread();

// DistOptions: how a distributed store ("dist_sync", "dist_async") joins its job.
struct DistOptions {
  // The scheduler's address; or, when etcd_endpoints is set (KV_ETCD_ENDPOINTS and KV_JOB),
  // job `job`'s leading scheduler, whose address etcd holds (a standby may take over).
  std::string scheduler_host = "127.0.0.1";
  int scheduler_port = 0;
  std::string etcd_endpoints;
  std::string job;
  // Requested worker rank, or -1 to be ranked by registration order.
  int requested_rank = -1;
  // How long to wait for the scheduler and for the whole job to register.
  absl::Duration register_timeout = absl::Seconds(120);
  // Deadline of each data RPC. A dist_sync push is answered when every worker has pushed the
  // key, so this also bounds how long a worker waits for the slowest one.
  absl::Duration rpc_timeout = absl::Seconds(120);
  // Deadline of Barrier (and of Init, which ends with one).
  absl::Duration barrier_timeout = absl::Seconds(660);
  // An unreachable server is retried this many times, with exponential backoff starting at
  // retry_backoff, before the operation fails naming the server.
  int max_retries = 8;
  absl::Duration retry_backoff = absl::Milliseconds(50);
  // Operations started concurrently; more wait in a queue ordered by priority.
  int max_inflight = 64;
  // TCP connections to each server; requests take them in turn. Several connections let big
  // values move in parallel chunks. 0: chosen by the job's size - 2 when the job has one
  // worker, 1 when it has more (a server then reads several workers' connections at once
  // anyway, and each more connection costs it CPU; docs/performance.md, entry 44).
  int connections_per_server = 0;
  // Reach the kvservers on this host through shared memory instead of TCP (client/
  // local_server_transport.h, docs/colocated.md), as many connections each as over TCP; every
  // other server is reached over gRPC. FromEnvironment takes it from KV_LOCAL (0 turns it off).
  bool local_transport = true;
  // Operations of one kind that are ready together are sent as one request per server
  // (tensor fusion) while their payload stays under this many bytes; 0 turns fusion off.
  // Pushes of separate calls are never fused in a dist_sync job of several workers
  // (docs/distributed.md, "Fusion").
  int64_t fusion_bytes = 1 << 20;
  // Key groups: a Push, Pull or PushPull of at least this many distinct keys, each small and
  // held whole by one server, and not compressed, travels as one packed array per server. The
  // first call with a list registers it with the servers; later calls with the same list send
  // only its id and the values (docs/performance.md). 0 turns key groups off.
  int group_min_keys = 64;
  // The job secret and TLS files (common/security_options.h): with a secret, every call carries
  // the job's credentials; with TLS, every link is encrypted and the servers are verified.
  SecurityOptions security;
  // The level of the SDK's logger ("kvstore" in spdlog's registry, common/logging.h): trace,
  // debug, info, warn, error or off; empty leaves the logger as it is (the host program may set
  // it). FromEnvironment takes it from KV_LOG_LEVEL or PS_VERBOSE (1: debug, 2: trace).
  std::string log_level;
  // Serve this worker's Prometheus metrics at http://127.0.0.1:PORT/metrics
  // (client/worker_telemetry.h); 0: a port the OS chooses (logged); -1: none. FromEnvironment
  // takes it from KV_METRICS_PORT.
  int metrics_port = -1;
  // Write a Chrome-trace timeline of this worker's operations to this file (KV_TRACE_FILE;
  // docs/operations.md); empty: none.
  std::string trace_file;
  // The thread that runs this store's replies, shared with other stores of the process
  // (NewCompletionThread); null: a thread of the store's own.
  std::shared_ptr<CompletionThread> completion_thread;

  // FromEnvironment reads the scheduler address, the job size and the rank from the launch
  // environment (DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_WORKER_ID or the KV_ names, see
  // common/environment.h), and the job secret from the file KV_SECRET_FILE names and the TLS
  // files from KV_TLS_CA, KV_TLS_CERT and KV_TLS_KEY. InvalidArgument naming the variable when
  // one is malformed or the scheduler's port is missing; the secret file's error when it cannot
  // be read.
  static absl::StatusOr<DistOptions> FromEnvironment();
};

class KVStore {
 public:
  // Updater: merges `received` (the summed push) into `*stored`. In-process stores call it on
  // the pushing thread, once per key per Push; it must not call back into the store.
  using Updater = std::function<void(const Key& key, const Tensor& received, Tensor* stored)>;

  // Controller: runs a server command (MXNet's kvstore_server controller), returning its
  // reply. A server runs heads >= 16 through it; the built-in heads below 16 (set updater,
  // stats, ping, optimizer, checkpoints; server/core/controller.h) stay the server's own.
  using Controller = std::function<absl::StatusOr<std::string>(int head, absl::string_view body)>;

  // Create returns a new store of `type`: "local", "device" (or an MXNet alias of them), or
  // "dist_sync" / "dist_async", which join the job described by the launch environment
  // (DistOptions::FromEnvironment) and block until every node of the job has registered. In a
  // process whose DMLC_ROLE (KV_ROLE) is server or scheduler, a distributed type returns that
  // node's store at once (see RunServer). InvalidArgument naming the supported types for
  // anything else, or naming the variable when the role is not scheduler, server or worker.
  static absl::StatusOr<std::unique_ptr<KVStore>> Create(absl::string_view type = "local");
  // Create with explicit options for the distributed types.
  static absl::StatusOr<std::unique_ptr<KVStore>> Create(absl::string_view type,
                                                         const DistOptions& options);

  virtual ~KVStore() = default;
  KVStore(const KVStore&) = delete;
  KVStore& operator=(const KVStore&) = delete;

  // IsWorkerNode is true when this process's role (DMLC_ROLE, KV_ROLE) is worker or unset;
  // IsServerNode and IsSchedulerNode when it is server or scheduler (MXNet's static
  // methods). A malformed role is none of them (Create says why).
  static bool IsWorkerNode();
  static bool IsServerNode();
  static bool IsSchedulerNode();

  // InitPSEnv sets launch variables (DMLC_ROLE, DMLC_PS_ROOT_URI, ...) in this process's
  // environment, as MXNet's does for ps-lite; stores created later read them. Call it before
  // Create and before other threads read the environment. InvalidArgument naming a variable
  // whose name is empty or contains '='; nothing is set then.
  static absl::Status InitPSEnv(const std::unordered_map<std::string, std::string>& envs);

  // RunServer makes this process the job's server or scheduler (its DMLC_ROLE) and blocks
  // until the job ends: OK when it ended cleanly, or when SIGTERM / SIGINT stopped the node.
  // `controller` (optional) serves command heads >= 16 on a server. FailedPrecondition in a
  // worker's store, and when called twice; the daemon's errors (a job that did not assemble, a
  // lost scheduler, a missing job secret) otherwise.
  virtual absl::Status RunServer(const Controller& controller = nullptr) {
    return absl::FailedPreconditionError(
        "RunServer: this process is a worker (DMLC_ROLE is worker or unset); only server and "
        "scheduler processes run as daemons");
  }

  // set_barrier_before_exit: when true, a distributed worker's destructor - after its
  // operations have completed without error - waits in a Barrier for every other worker
  // before leaving, so the workers leave together (MXNet's default). Off by default here: the
  // job already ends only when every worker has finished, and a barrier in a destructor would
  // hold healthy workers for the barrier timeout when another one has failed.
  void set_barrier_before_exit(bool barrier_before_exit) {
    barrier_before_exit_.store(barrier_before_exit);
  }
  bool barrier_before_exit() const { return barrier_before_exit_.load(); }

  // type returns the type the store was created with.
  const std::string& type() const { return type_; }
  // rank returns this worker's rank in [0, num_workers()); 0 for in-process stores.
  virtual int rank() const = 0;
  // num_workers returns the number of workers in the job; 1 for in-process stores.
  virtual int num_workers() const = 0;

  // Init stores values[i] under keys[i]. Keys must be unique and not yet initialised. Every
  // worker calls it; only rank 0's values are stored; returns once the keys are initialised.
  absl::Status Init(absl::Span<const Key> keys, absl::Span<const Tensor> values);
  absl::Status Init(const Key& key, const Tensor& value);

  // Push pushes values[i] into keys[i]; values of a repeated key are summed first. Every value
  // of a key must have the stored dtype and shape.
  absl::Status Push(absl::Span<const Key> keys, absl::Span<const Tensor> values, int priority = 0);
  absl::Status Push(const Key& key, const Tensor& value, int priority = 0);
  // Pushes the sum of `values` (e.g. one per device) into `key`.
  absl::Status Push(const Key& key, absl::Span<const Tensor> values, int priority = 0);

  // Pull copies the newest value of keys[i] into *outs[i]; a key may appear several times (one
  // output per device). Outputs must be allocated with the stored dtype and shape.
  absl::Status Pull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs, int priority = 0);
  absl::Status Pull(const Key& key, Tensor* out, int priority = 0);
  // Pulls `key` into each of `outs`.
  absl::Status Pull(const Key& key, absl::Span<Tensor* const> outs, int priority = 0);

  // PushPull pushes like Push(keys, values) and then pulls the updated value of keys[i] into
  // *outs[i] (outs has one entry per value; an output may be the pushed tensor itself).
  absl::Status PushPull(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                        absl::Span<Tensor* const> outs, int priority = 0);
  absl::Status PushPull(const Key& key, const Tensor& value, Tensor* out, int priority = 0);

  // Buckets: the values of many keys back to back in one tensor, in list order (as ps-lite's
  // ZPush takes one array of values, and as PyTorch's DDP lays out gradients). `bucket` is a
  // CPU tensor of the keys' dtype holding exactly their elements; key i's value is the stretch
  // after the values of keys 0..i-1, shaped as stored. PushBucket, PullBucket and
  // PushPullBucket are Push, Pull and PushPull of the keys with those stretches as values and
  // outputs, without a tensor per key: a distributed store sends a long list of small keys from
  // the bucket itself when each server's keys lie back to back in it (docs/distributed.md).
  // InvalidArgument naming the first key whose dtype is not the bucket's, or both element
  // counts when they differ; NotFound for a key never initialised. Where a store cannot send
  // the bucket as a whole, PullBucket and PushPullBucket return once the pull has completed.
  absl::Status PushBucket(absl::Span<const Key> keys, const Tensor& bucket, int priority = 0);
  absl::Status PullBucket(absl::Span<const Key> keys, Tensor* bucket, int priority = 0);
  absl::Status PushPullBucket(absl::Span<const Key> keys, const Tensor& bucket, Tensor* out,
                              int priority = 0);
  // The same with the keys as integers in one array (as ps-lite's ZPush takes them): a
  // distributed store compares such a list with the list it sent last as one array, without
  // reading a Key per entry. Equivalent to the calls above with Key(keys[i]).
  absl::Status PushBucket(absl::Span<const int64_t> keys, const Tensor& bucket, int priority = 0);
  absl::Status PullBucket(absl::Span<const int64_t> keys, Tensor* bucket, int priority = 0);
  absl::Status PushPullBucket(absl::Span<const int64_t> keys, const Tensor& bucket, Tensor* out,
                              int priority = 0);

  // Row-sparse values (MXNet's RowSparseNDArray, see common/row_sparse.h).
  //
  // Init(key, RowSparse) stores the value (servers hold its dense form). Push of RowSparse
  // values sums the values of a key (several devices) row by row - rows listed several times
  // are added - and merges the sum through the updater as a value whose unlisted rows are zero:
  // with ASSIGN the stored value becomes exactly the pushed rows, as MXNet's `local = merged`;
  // with "sum" only the listed rows change. Distributed stores send each server only the rows
  // in its row range (big values are split over the servers by rows). Row-sparse pushes are
  // never compressed. Errors: those of a dense Push, and InvalidArgument for a row id outside
  // the value.
  absl::Status Init(const Key& key, const RowSparse& value);
  absl::Status Push(absl::Span<const Key> keys, absl::Span<const RowSparse> values,
                    int priority = 0);
  absl::Status Push(const Key& key, const RowSparse& value, int priority = 0);

  // RowSparsePull fills *outs[i] with the rows row_ids[i] of the newest value of keys[i]
  // (MXNet's row_sparse_pull): the ids may be unsorted and repeated, or empty; the output
  // receives them sorted without duplicates, and its rows. Each output must have the stored
  // dtype and shape (RowSparse::Empty(dtype, shape)); a key may appear several times (one
  // output per device). InvalidArgument for an id outside [0, shape[0]), a mismatched output or
  // mismatched span lengths; NotFound for a key never initialised.
  //
  // Storage types are told apart by the C++ types, so MXNet's two mixed cases cannot be
  // written: MXNet ignores a plain `pull` into a row-sparse output (with a warning) and refuses
  // a `row_sparse_pull` into a dense output. Pull into a dense output always returns the whole
  // value, also for a key initialised or pushed row-sparse (MXNet's storage cast).
  absl::Status RowSparsePull(absl::Span<const Key> keys, absl::Span<RowSparse* const> outs,
                             absl::Span<const std::vector<int64_t>> row_ids, int priority = 0);
  absl::Status RowSparsePull(const Key& key, RowSparse* out, const std::vector<int64_t>& row_ids,
                             int priority = 0);
  // Pulls `key` into each of `outs`: with one id list for all of them, or one per output.
  absl::Status RowSparsePull(const Key& key, absl::Span<RowSparse* const> outs,
                             absl::Span<const std::vector<int64_t>> row_ids, int priority = 0);

  // Tables (docs/tables.md): rows of float32 keyed by any int64 id, created on first use and
  // forgotten when unused - embeddings of a vocabulary too large to allocate whole. A table
  // has a key of its own (never a dense or row-sparse value's). Distributed stores spread
  // its rows over the servers by a hash of the id; in-process stores hold them here.
  //
  // InitTable makes table `key` as `config` says (config.name is replaced by the key): row
  // width, initializer of rows not stored, admission, eviction, row optimizer. Every worker
  // calls it with the same config; it returns once the table exists on every server (a
  // barrier over the workers, as Init). AlreadyExists for a key already a table or a value in
  // this store, or made on the servers with another config; InvalidArgument naming the field
  // of a bad config.
  absl::Status InitTable(const Key& key, const TableConfig& config);
  // PullRows writes the rows of `ids` (any order, duplicates allowed) into `out`, a CPU float32
  // tensor of shape (ids.size(), dim): stored rows, or the initializer's row of an id without
  // one. Returns once they are there.
  absl::Status PullRows(const Key& key, absl::Span<const int64_t> ids, Tensor* out);
  // PushRows pushes `grads`, a CPU float32 tensor of shape (ids.size(), dim), the gradients of
  // the rows of `ids` (duplicates are summed). dist_sync: every worker pushes once per round
  // (with no ids if it has none), and a server applies the round's sum of every worker's
  // gradients with the row optimizer; dist_async and in-process stores apply each push. Only
  // the rows pushed move (lazy update). Returns once the push is applied (dist_sync: once every
  // worker has pushed the round). Errors name the key: NotFound for a key that is no table,
  // InvalidArgument for a tensor of another shape, dtype or device, ResourceExhausted for a
  // table over its max_rows with eviction off or a server over its memory budget - nothing
  // changes then.
  absl::Status PushRows(const Key& key, absl::Span<const int64_t> ids, const Tensor& grads);
  // TableDim returns the row width of table `key`; NotFound naming it when it is no table.
  absl::StatusOr<int64_t> TableDim(const Key& key) const;

  // ValueSpec returns the dtype and shape stored under `key` (this worker's record once the key
  // is initialised; no request is sent): what a caller converting another dtype to the stored
  // one needs. NotFound naming the key before Init.
  absl::StatusOr<std::pair<DType, Shape>> ValueSpec(const Key& key) const {
    return StoredSpec(key);
  }

  // Wait blocks until every issued operation on `keys` has completed and returns the first
  // error among them. WaitAll does the same for every key.
  virtual absl::Status Wait(absl::Span<const Key> keys) = 0;
  virtual absl::Status WaitAll() = 0;

  // Barrier blocks until every worker has called it (returns at once for in-process stores).
  // Like MXNet's, it does not wait for this worker's pending pushes and pulls.
  virtual absl::Status Barrier() = 0;

  // SetUpdater replaces the updater that merges pushes into stored values (in-process stores;
  // MXNet's `_set_updater`). Distributed stores run updaters registered by name on the servers.
  virtual absl::Status SetUpdater(Updater updater) = 0;

  // SetGradientCompression turns on 2-bit or 1-bit gradient compression (MXNet's
  // set_gradient_compression; see common/compression.h for the rules and the wire layout) for
  // the pushes issued after it, or turns it off with type "none". Every float32 value pushed is
  // quantised with a residual kept per key - and per device, i.e. per position of the value
  // among the values pushed to the key in one call - which carries what was not sent into the
  // next push (error feedback); values of other dtypes are pushed as they are. In-process
  // stores quantise and decode each device's value before summing; distributed stores sum the
  // devices' values, quantise the sum and send only the codes, which the servers decode before
  // summing the workers' pushes. Init and Pull are never compressed. Changing the parameters
  // clears the residuals. InvalidArgument for an unknown type or a bad threshold.
  absl::Status SetGradientCompression(const GradientCompression& params);

  // SetOptimizer makes the store's updater run an optimizer (MXNet's set_optimizer; the
  // optimizers, hyper-parameters and schedules are in common/optimizer_config.h, the formulas
  // in docs/optimizers.md). In-process stores replace their updater; distributed stores send
  // the typed configuration to every server (controller command 3) and return once all of
  // them have it; a server switches between dist_sync rounds, never within one. Every call
  // starts from fresh optimizer state (momentum, moments, update counts), unless
  // config.keep_state: then the running optimizer's state carries over to the new
  // hyper-parameters (a learning-rate change; FailedPrecondition naming both when another
  // optimizer runs). InvalidArgument for an unknown optimizer, a parameter it does not take or
  // a value out of range, before anything is sent.
  absl::Status SetOptimizer(const OptimizerConfig& config);

  // SaveOptimizerStates writes the updater's state - optimizer moments, update counts, the
  // schedule position, master weights - to the file `path` on this machine (a versioned,
  // checksummed state file written atomically; common/state_file.h). A distributed store
  // gathers it from every server, between dist_sync rounds (FailedPrecondition while a round is
  // open). MXNet refuses this in dist mode (mxnet#15923); here it works in every mode.
  // LoadOptimizerStates reads such a file into the current optimizer (set SetOptimizer first,
  // with the same optimizer): every server keeps the parts of the keys it holds. Errors name
  // the file and what is wrong (missing, truncated, corrupted, another optimizer's state, a
  // layout that does not match); nothing changes then.
  virtual absl::Status SaveOptimizerStates(const std::string& path) = 0;
  virtual absl::Status LoadOptimizerStates(const std::string& path) = 0;

  // Checkpoint makes every server write its shard - values, updater, updater state - to
  // ROOT/DIR/server-R.ckpt on its own machine (atomically, versioned and checksummed), ROOT
  // being the server's --checkpoint_root; `kvserver --restore DIR` resumes from it and
  // training continues with identical numbers. `dir` is relative to ROOT, or absolute below
  // ROOT's canonical path; one that leaves ROOT (absolute elsewhere, a ".." component) or goes
  // through a symbolic link is refused: InvalidArgument or PermissionDenied naming it and the
  // root (docs/security.md). Call it between rounds (after WaitAll and Barrier on
  // every worker). In-process stores have no servers: FailedPrecondition (use Pull and
  // SaveOptimizerStates).
  virtual absl::Status Checkpoint(const std::string& dir) = 0;

  // SendCommandToServers runs controller command (head, body) on every server and returns after
  // all ran it (see server/core/controller.h for the built-in heads; head 0 with body
  // "sgd lr=0.1 momentum=0.9" selects the servers' updater). In-process stores have no servers:
  // it returns OK and does nothing, like MXNet's.
  virtual absl::Status SendCommandToServers(int head, const std::string& body) = 0;

  // NumDeadNodes returns how many nodes of `group` sent no heartbeat within `timeout`
  // (MXNet's get_num_dead_node); 0 for in-process stores.
  virtual absl::StatusOr<int> NumDeadNodes(NodeGroup group,
                                           absl::Duration timeout = absl::Seconds(60)) = 0;

 protected:
  explicit KVStore(std::string type) : type_(std::move(type)) {}

  // The operations, called by the public methods after they have checked that the spans have
  // matching lengths, that no output is null or undefined and (Init) that no value is
  // undefined. DoPush and DoPushPull check their values with CheckDefined themselves (a store
  // may fold that into a pass it makes anyway).
  virtual absl::Status DoInit(absl::Span<const Key> keys, absl::Span<const Tensor> values) = 0;
  virtual absl::Status DoPush(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                              int priority) = 0;
  virtual absl::Status DoPull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs,
                              int priority) = 0;
  virtual absl::Status DoPushPull(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                                  absl::Span<Tensor* const> outs, int priority) = 0;
  // Buckets, called after the bucket was checked to be a defined CPU tensor. The defaults
  // push and pull views of the bucket (BucketViews); the pulls wait for completion.
  virtual absl::Status DoPushBucket(absl::Span<const Key> keys, const Tensor& bucket, int priority);
  virtual absl::Status DoPullBucket(absl::Span<const Key> keys, Tensor* bucket, int priority);
  virtual absl::Status DoPushPullBucket(absl::Span<const Key> keys, const Tensor& bucket,
                                        Tensor* out, int priority);
  // A bucket listed by integer keys, checked like the others: `in` is pushed when not null,
  // `out` pulled into when not null. The default calls the methods above with Keys.
  virtual absl::Status DoIntKeyBucket(absl::Span<const int64_t> keys, const Tensor* in, Tensor* out,
                                      int priority);
  // CheckDefined returns InvalidArgument naming the first key whose value is undefined.
  static absl::Status CheckDefined(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                                   absl::string_view op);
  // BucketViews returns each key's stretch of `bucket`, checked as the bucket methods say.
  absl::StatusOr<std::vector<Tensor>> BucketViews(absl::Span<const Key> keys,
                                                  const Tensor& bucket) const;
  // StoredSpec returns the dtype and shape stored under `key`; NotFound naming it otherwise.
  virtual absl::StatusOr<std::pair<DType, Shape>> StoredSpec(const Key& key) const = 0;
  // Called with validated parameters.
  virtual absl::Status DoSetGradientCompression(const CompressionParams& params) = 0;
  virtual absl::Status DoSetOptimizer(const OptimizerConfig& config) = 0;
  // Called after the spans were checked for matching lengths, non-null outputs and values
  // whose rows are defined CPU tensors.
  virtual absl::Status DoPushRowSparse(absl::Span<const Key> keys,
                                       absl::Span<const RowSparse> values, int priority) = 0;
  virtual absl::Status DoRowSparsePull(absl::Span<const Key> keys,
                                       absl::Span<RowSparse* const> outs,
                                       absl::Span<const std::vector<int64_t>> row_ids,
                                       int priority) = 0;

  // Tables, called with a checked config (named by the key) and, for rows, `out` / `grads`
  // checked as ids.size() x dim float32 values on the CPU. The defaults refuse
  // (FailedPrecondition): a store of a server or scheduler process has no tables.
  virtual absl::Status DoInitTable(const Key& key, const TableConfig& config);
  virtual absl::Status DoPullRows(const Key& key, int64_t dim, absl::Span<const int64_t> ids,
                                  float* out);
  virtual absl::Status DoPushRows(const Key& key, int64_t dim, absl::Span<const int64_t> ids,
                                  const float* grads);

 private:
  // CheckTableRows checks `rows` as the (ids, dim) float32 CPU tensor of table `key`'s `op`
  // and returns the table's dim.
  absl::StatusOr<int64_t> CheckTableRows(const Key& key, size_t ids, const Tensor& rows,
                                         absl::string_view op) const;

  std::string type_;
  std::atomic<bool> barrier_before_exit_{false};
  // The tables this store made, and their row widths.
  mutable absl::Mutex tables_mu_;
  absl::flat_hash_map<Key, int64_t> table_dims_ ABSL_GUARDED_BY(tables_mu_);
  std::atomic<bool> any_table_{false};
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_KVSTORE_H_
