// DistStore: the "dist_sync" / "dist_async" store - a worker of a distributed job.
//
// Connect registers with the scheduler and blocks until the job has assembled and every server
// serves (a restoring server first loads its checkpoint); the cluster view
// gives the servers' addresses, the big-value bound and this worker's rank. Then:
// - Init checks its arguments, records each key's dtype, shape and placement (every worker),
//   sends rank 0's values to the servers that hold them, and ends with a barrier over the
//   workers, so it returns once the keys are initialised everywhere.
// - Push / Pull / PushPull check their arguments against the recorded keys (errors are returned
//   at once, nothing is sent), then enqueue an operation and return. A dispatcher thread starts
//   queued operations: an operation starts once every earlier operation on any of its keys has
//   completed (per-key order), the highest priority first among those ready, at most
//   max_inflight at a time. Starting one sums the values pushed to each key (a per-key buffer
//   reused across pushes), cuts values above the big-value bound into one slice per server, and
//   sends one request per server holding any of the keys - all in parallel, tensor bytes as
//   slices over the caller's (or the sum's) memory. With gradient compression on, a float32
//   push sends the codes of each chunk instead (quantised with the key's residual). Replies
//   are copied from the received slices straight into the outputs, on a completion thread
//   that alone polls the store's completion queue (gRPC's async API).
// - Key groups: a call with a long list of distinct small keys (DistOptions::group_min_keys)
//   sends one packed array per server instead; the list's member headers go to each server
//   once (docs/distributed.md). Values that are views of one buffer in the list's order (a
//   gradient bucket) are sent from it without packing, and pulled into it in one copy.
// - A server answering UNAVAILABLE is retried with exponential backoff, under the same request
//   id (the server applies a push once); after max_retries the operation fails naming the server
//   and its address. Every RPC has a deadline.
// - Wait / WaitAll block until the operations on the keys have completed and return the first
//   error among them (errors are reported once).
// - Heartbeats go to the scheduler every interval; when it says the job is over (kvctl
//   shutdown) later operations fail with Cancelled.
// - The destructor waits for the queued operations, tells the scheduler this worker finished,
//   and stops its threads.
//
// Threading: thread-safe. Caller tensors must stay alive and unchanged until the operation that
// reads or writes them has completed.
#ifndef KVSTORE_CLIENT_DIST_STORE_H_
#define KVSTORE_CLIENT_DIST_STORE_H_

#include <grpcpp/completion_queue.h>
#include <grpcpp/generic/generic_stub.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/kvstore.h"
#include "client/split_loop.h"
#include "common/compression.h"
#include "common/partitioner.h"
#include "proto/kvstore.grpc.pb.h"

namespace kvstore {

class DistStore final : public KVStore {
 public:
  // Connect joins the job. DeadlineExceeded / Unavailable naming the scheduler's address when it
  // cannot be reached or the job does not assemble within options.register_timeout.
  static absl::StatusOr<std::unique_ptr<DistStore>> Connect(std::string type,
                                                            const DistOptions& options);
  ~DistStore() override;

  int rank() const override { return rank_; }
  int num_workers() const override { return num_workers_; }
  absl::Status Wait(absl::Span<const Key> keys) override;
  absl::Status WaitAll() override;
  absl::Status Barrier() override;
  absl::Status SetUpdater(Updater updater) override;
  absl::Status SendCommandToServers(int head, const std::string& body) override;
  absl::StatusOr<int> NumDeadNodes(NodeGroup group, absl::Duration timeout) override;
  absl::Status SaveOptimizerStates(const std::string& path) override;
  absl::Status LoadOptimizerStates(const std::string& path) override;
  absl::Status Checkpoint(const std::string& dir) override;

  // node_id returns the id the scheduler issued to this worker.
  uint64_t node_id() const { return node_id_; }
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

 private:
  struct Server {
    int rank = 0;
    std::string address;
    std::vector<std::unique_ptr<grpc::GenericStub>> stubs;  // One per connection.
    std::unique_ptr<std::atomic<uint64_t>> next_stub;
  };
  // KeyInfo: what Init recorded about a key.
  struct KeyInfo {
    DType dtype = DType::kFloat32;
    Shape shape;
    std::vector<Slice> slices;
    // The slices cut into chunks (ChunkSlice); `alone[i]` when chunk i is part of a cut slice
    // and travels in a request of its own, else it shares one request per server.
    std::vector<Slice> chunks;
    std::vector<bool> alone;
    int64_t bytes = 0;
    Tensor merge_buffer;  // Sum of several values pushed at once; reused.
    // Gradient compression: the residual (error feedback) and the codes of the last push, both
    // reused; touched only by the operation that is sending the key.
    Tensor residual;
    CompressionParams residual_params;
    Tensor codes;
    // Values on GPUs: the device buffer of their sum, and pinned host buffers for the sum
    // sent and the value pulled.
    Tensor gpu_scratch;
    Tensor gpu_staging;
    Tensor pull_staging;
  };
  // GroupPlan: a list of distinct small keys that travels as one packed array per server (see DistOptions::group_min_keys and proto "Key groups").
  struct GroupPlan {
    uint64_t id = 0;
    std::vector<Key> keys;
    std::vector<int64_t> int_keys;  // The keys, when all are integers (compared faster).
    std::vector<const KeyInfo*> infos;  // keys_ never drops an entry.
    // The keys' dtypes and shapes, flat, so that a call's values are checked without touching
    // every KeyInfo: key i has dtypes[i] and the dimensions dims[dims_at[i], dims_at[i + 1]).
    std::vector<DType> dtypes;
    std::vector<uint32_t> dims_at;
    std::vector<int64_t> dims;
    // Buckets: where key i's value starts in a bucket of the list (the last entry is the
    // bucket's size), and whether all keys share one dtype (the bucket's).
    std::vector<size_t> key_offsets;
    bool one_dtype = true;
    absl::flat_hash_set<Key> members;
    // A member: one chunk of a key (a small key is one chunk) and where it starts in the
    // key's value. Per server holding members: its members in list order and where each one's
    // bytes start in its packed array (the last entry is the array's size).
    struct Member {
      uint32_t key = 0;  // Index into keys.
      Slice chunk;
      size_t value_offset = 0;
    };
    static constexpr size_t kScattered = ~size_t{0};
    struct Part {
      int server = 0;
      std::vector<Member> members;
      std::vector<size_t> offsets;
      // Where the part's members lie back to back in a bucket of the list, or kScattered.
      size_t bucket_base = kScattered;
    };
    std::vector<Part> parts;
    // Every member in key order, for packing: its part and its offset there. 32-bit offsets
    // (a member is at most 64 KiB, a group's arrays at most 256 MiB): a call's check reads
    // every piece, and 20 bytes a piece is less memory to read than 40.
    struct Piece {
      uint32_t key = 0;
      uint32_t part = 0;
      uint32_t value_offset = 0;
      uint32_t packed_offset = 0;
      uint32_t bytes = 0;
    };
    std::vector<Piece> pieces;
    // Uniform: integer keys, all of one dtype and shape and each one piece, and each part's
    // keys a stretch of the list (part p: keys [part_first[p], part_first[p + 1])). Key i of
    // part p is then at (i - part_first[p]) * uniform_bytes in its part, and a call's check
    // reads only the call's keys and values and int_keys; when the keys are consecutive
    // integers (key i is int_keys[0] + i), not even int_keys.
    bool uniform = false;
    bool consecutive = false;
    size_t uniform_bytes = 0;
    std::vector<size_t> part_first;
    int64_t bytes = 0;
    // Per part: whether the server has the member list (sent with the first request).
    std::unique_ptr<std::atomic<bool>[]> registered;
    // Packed arrays of finished pushes, reused by the next ones.
    absl::Mutex spare_mu;
    std::vector<std::vector<Tensor>> spare ABSL_GUARDED_BY(spare_mu);
  };
  // GroupWork: a key-group operation's data. Pushes: per part, the bytes to send - an array
  // packed on the caller's thread, or (`direct`) the caller's own memory when the values
  // already lie back to back in the part's order (views of one buffer, or a bucket). Pulls:
  // per part, where the reply goes in one piece when the outputs lie back to back (else null:
  // member by member, into out_data).
  struct GroupWork {
    std::vector<Tensor> packed;
    bool direct = false;
    std::vector<uint8_t*> out_bases;
    std::vector<uint8_t*> out_data;  // Per key: its output's memory (when a part needs it).
  };
  using OpDone = std::function<void(absl::Status)>;
  // kInitFill sends the bytes of the parts an Init created deferred (parts cut in chunks).
  enum class Kind { kInit, kPush, kPull, kPushPull, kRowSparsePush, kRowSparsePull, kInitFill };
  // One key's part of an operation: its values (push) and outputs (pull); for row-sparse
  // operations the pushed values, or the outputs with their sorted distinct row ids.
  struct KeyWork {
    Key key;
    std::shared_ptr<KeyInfo> info;
    // Most operations give one value or output per key: held inline, no allocation.
    absl::InlinedVector<Tensor, 1> values;
    absl::InlinedVector<Tensor*, 1> outs;
    std::vector<RowSparse> sparse_values;
    std::vector<RowSparse*> sparse_outs;
    std::vector<std::vector<int64_t>> sparse_rows;
    // Some output is on a GPU: receive into info->pull_staging, then copy to every output.
    bool via_host = false;
  };
  struct Op {
    int priority = 0;
    Kind kind = Kind::kPush;
    int64_t bytes = 0;
    CompressionParams compression;  // For pushes: as set when the operation was issued.
    std::vector<Key> keys;  // Distinct.
    std::vector<KeyWork> work;
    // A key-group operation (keys and work empty): the group and its data.
    std::shared_ptr<GroupPlan> group;
    GroupWork group_work;
  };

  DistStore(std::string type, DistOptions options) : KVStore(std::move(type)),
                                                      options_(std::move(options)) {}
  absl::Status Join();
  // WaitForServers returns once every server serves (bounded by register_timeout).
  absl::Status WaitForServers();

  // Validation against the recorded keys (caller thread).
  absl::Status CheckKeyKind(const Key& key) const ABSL_SHARED_LOCKS_REQUIRED(keys_mu_);
  absl::StatusOr<std::shared_ptr<KeyInfo>> Lookup(const Key& key) const
      ABSL_SHARED_LOCKS_REQUIRED(keys_mu_);
  absl::StatusOr<std::vector<KeyWork>> Plan(absl::Span<const Key> keys,
                                            absl::Span<const Tensor> values,
                                            absl::Span<Tensor* const> outs) const;

  // Key groups (caller thread). GroupFor returns the group of `keys` when the call can use one,
  // else null: the per-key path then runs (and reports any error). PackGroup checks the values
  // against the recorded keys and packs them; false when one does not match (per-key path).
  std::shared_ptr<GroupPlan> GroupFor(absl::Span<const Key> keys, bool pushes);
  // IntGroupFor is GroupFor for a list of integer keys that formed a group before (nullptr
  // otherwise: the caller then lists Keys, which forms one).
  std::shared_ptr<GroupPlan> IntGroupFor(absl::Span<const int64_t> keys, bool pushes);
  // GroupsUsable is false when a call of `n` keys cannot use a group.
  bool GroupsUsable(size_t n, bool pushes) const;
  // RecentGroup returns the group used last when `keys` has as many keys as its list (and the
  // call can use a group), without comparing them: the check of the call's tensors compares
  // them on the way (one pass over the call, not two).
  std::shared_ptr<GroupPlan> RecentGroup(absl::Span<const Key> keys, bool pushes);
  // SameKeys is true when `keys` is the group's list; SameKey when `key` is its key i.
  static bool SameKeys(const GroupPlan& group, absl::Span<const Key> keys);
  static bool SameKey(const GroupPlan& group, size_t i, const Key& key) {
    return group.int_keys.empty() ? key == group.keys[i]
                                  : key.is_int() && key.int_key() == group.int_keys[i];
  }
  // Matches is true when `t` is a CPU tensor of the dtype and shape of the group's key i;
  // MatchesShape when it is one of `dtype` and the shape dims[0, rank).
  static bool Matches(const GroupPlan& group, size_t i, const Tensor& t);
  static bool MatchesShape(const Tensor& t, DType dtype, const int64_t* dims, size_t rank);
  // The outcome of checking a call against a group: kOtherKeys when the call's keys (compared
  // when the group came from RecentGroup) are not the group's list, kMismatch when a tensor
  // does not fit its key (the per-key path then reports it).
  enum class GroupCheck { kOk, kMismatch, kOtherKeys };
  // CheckGroupTensors checks the call's tensors (`tensor(i)` for key i) with Matches, and the
  // call's keys with SameKey unless `keys` is empty, and returns in `bases`, per part, where
  // its members already lie back to back in one buffer in the part's order (null where they
  // do not). Long lists are checked on two threads (split_).
  template <typename TensorAt>
  GroupCheck CheckGroupTensors(const GroupPlan& group, absl::Span<const Key> keys,
                               TensorAt tensor, std::vector<uint8_t*>* bases);
  GroupCheck PackGroup(GroupPlan& group, absl::Span<const Key> keys,
                       absl::Span<const Tensor> values, GroupWork* work);
  // SendFrom makes the bytes each part sends the caller's memory at bases[p], which
  // `owner(part)` keeps alive (direct: nothing is copied).
  template <typename Owner>
  static void SendFrom(const GroupPlan& group, const std::vector<uint8_t*>& bases, Owner owner,
                       GroupWork* work);
  // PackPieces copies every member from `key_data(i)` (key i's value) into the part's packed
  // array, reusing the group's spare arrays.
  template <typename KeyData>
  static void PackPieces(GroupPlan& group, KeyData key_data, GroupWork* work);
  // TryGroupBucket enqueues a key-group operation on a bucket (`in` pushed, `out` pulled into)
  // when the list forms a group whose keys all have the buckets' dtype and size; false
  // otherwise (the caller then takes the views path, which reports any error).
  bool TryGroupBucket(Kind kind, absl::Span<const Key> keys, const Tensor* in, Tensor* out,
                      int priority);
  bool EnqueueBucket(Kind kind, std::shared_ptr<GroupPlan> group, const Tensor* in, Tensor* out,
                     int priority);
  GroupCheck CheckGroupOutputs(const GroupPlan& group, absl::Span<const Key> keys,
                               absl::Span<Tensor* const> outs, GroupWork* work);
  // TryGroup enqueues a key-group operation when the call can use one; false otherwise.
  bool TryGroup(Kind kind, absl::Span<const Key> keys, absl::Span<const Tensor> values,
                absl::Span<Tensor* const> outs, int priority);
  // EnqueueGroup checks the call against `group` (its keys too, unless `unchecked` is empty)
  // and enqueues it when they match.
  GroupCheck EnqueueGroup(Kind kind, std::shared_ptr<GroupPlan> group,
                          absl::Span<const Key> unchecked, absl::Span<const Tensor> values,
                          absl::Span<Tensor* const> outs, int priority);

  // Operation queue.
  void Enqueue(int priority, std::vector<KeyWork> work, Kind kind);
  void EnqueueOp(Op op);
  // InGroupBefore returns whether an unfinished key-group operation issued before `seq`
  // includes `key`.
  bool InGroupBefore(uint64_t seq, const Key& key) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Dispatch();
  // SpinWhile yields while `busy()` and few operations are in flight, for a bounded time,
  // before a waiter sleeps on changed_.
  template <typename Busy>
  void SpinWhile(Busy busy) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ready returns whether every earlier operation on the op's keys has completed.
  bool Ready(uint64_t seq, const Op& op) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Complete(absl::Span<const std::pair<uint64_t, std::vector<Key>>> ops,
                const absl::Status& status);
  absl::Status JobOver() const;
  // Command runs a controller command on every server and returns their replies.
  absl::StatusOr<std::vector<std::string>> Command(int head, const std::string& body);
  // ServerError prefixes a server's error with its rank and address.
  absl::Status ServerError(int s, const absl::Status& status) const;

  // Sending. Transfer runs a push, pull or push-pull of `work` on every server involved and
  // calls `done` once with the first error.
  void Transfer(Kind kind, std::vector<KeyWork> work, const CompressionParams& compression,
                OpDone done);
  // TransferRowSparse runs a row-sparse push (each server gets the rows of its row range,
  // every part a header even without rows, so dist_sync rounds complete) or pull.
  void TransferRowSparse(Kind kind, std::vector<KeyWork> work, OpDone done);
  // TransferGroup runs a key-group push, pull or push-pull: one request per part, the member
  // list included while the server does not have it.
  void TransferGroup(Kind kind, std::shared_ptr<GroupPlan> group, GroupWork work, OpDone done);
  // Call sends one raw unary call to server `s`, retrying UNAVAILABLE with backoff.
  void Call(int s, const char* method, std::shared_ptr<grpc::ByteBuffer> request,
            std::function<void(absl::Status, grpc::ByteBuffer*)> done, int attempt = 0);
  // One unary call in flight on cq_.
  struct Rpc {
    grpc::ClientContext context;
    grpc::ByteBuffer reply;
    grpc::Status status;
    std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
    std::function<void(const grpc::Status&)> on_status;
  };
  // CompleteCalls runs every call's completion, on completer_, until cq_ shuts down.
  void CompleteCalls();
  // After runs `fn` on the timer thread after `delay`.
  void After(absl::Duration delay, std::function<void()> fn);
  void TimerLoop();
  void HeartbeatLoop();

  const DistOptions options_;
  std::string scheduler_address_;
  std::unique_ptr<proto::Scheduler::Stub> scheduler_;
  uint64_t node_id_ = 0;
  int rank_ = 0;
  int num_workers_ = 1;
  std::vector<Server> servers_;
  std::optional<Partitioner> partitioner_;
  int64_t chunk_bytes_ = kDefaultChunkBytes;
  absl::Duration heartbeat_interval_ = absl::Seconds(1);
  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<int64_t> push_payload_bytes_{0};

  // The keys' records, apart from mu_: checking a call's keys does not contend with the
  // dispatcher and the completion thread, which take mu_ for every operation.
  mutable absl::Mutex keys_mu_;
  absl::flat_hash_map<Key, std::shared_ptr<KeyInfo>> keys_ ABSL_GUARDED_BY(keys_mu_);
  std::optional<bool> int_keys_ ABSL_GUARDED_BY(keys_mu_);

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // Signalled when the queue or the in-flight set changes.
  CompressionParams compression_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Op> queued_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, absl::InlinedVector<uint64_t, 2>> unfinished_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, absl::Status> key_errors_ ABSL_GUARDED_BY(mu_);
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;
  // Every issued operation not yet completed; a key-group operation starts once it is the
  // oldest.
  std::set<uint64_t> live_ ABSL_GUARDED_BY(mu_);
  // Unfinished key-group operations, and the errors of failed ones (reported by Wait on any
  // member, or WaitAll).
  std::map<uint64_t, std::shared_ptr<GroupPlan>> group_ops_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::shared_ptr<GroupPlan>, absl::Status>> group_errors_
      ABSL_GUARDED_BY(mu_);
  // Key groups by the fingerprint of their key list; null for lists that cannot form one.
  absl::Mutex groups_mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<GroupPlan>> groups_ ABSL_GUARDED_BY(groups_mu_);
  uint64_t next_group_id_ ABSL_GUARDED_BY(groups_mu_) = 1;
  // The group used last: a training loop repeats one list, compared without a fingerprint.
  std::shared_ptr<GroupPlan> last_group_ ABSL_GUARDED_BY(groups_mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> job_over_{false};  // The scheduler said the job is over.

  absl::Mutex timer_mu_;
  std::multimap<absl::Time, std::function<void()>> timers_ ABSL_GUARDED_BY(timer_mu_);
  bool timer_stop_ ABSL_GUARDED_BY(timer_mu_) = false;

  absl::Notification stop_heartbeat_;
  // Calls complete on cq_, which completer_ alone polls (gRPC's async API: its callback API
  // keeps two threads polling, each event waking the other).
  grpc::CompletionQueue cq_;
  SplitLoop split_;  // Checks long key lists on two threads.
  std::thread completer_;
  std::thread dispatcher_;
  std::thread timer_;
  std::thread heartbeat_;
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_DIST_STORE_H_
