#include "client/dist_store.h"

#include <grpcpp/client_context.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/gpu/staging.h"
#include "client/key_groups.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/named_thread.h"
#include "common/proto_convert.h"
#include "common/reduce.h"
#include "common/row_sparse.h"
#include "common/status_macros.h"
#include "common/wire_frame.h"
#include "server/core/shard_store.h"
#include "server/core/updater_state.h"

namespace kvstore {
namespace {

constexpr char kInitMethod[] = "/kvstore.proto.KVServer/Init";
constexpr char kPushMethod[] = "/kvstore.proto.KVServer/Push";
constexpr char kPullMethod[] = "/kvstore.proto.KVServer/Pull";
constexpr char kPushPullMethod[] = "/kvstore.proto.KVServer/PushPull";
constexpr char kRowSparsePullMethod[] = "/kvstore.proto.KVServer/RowSparsePull";
// The servers' controller command that installs an optimizer (server/core/controller.h).
constexpr int kSetOptimizerCommand = 3;
constexpr int kCheckpointCommand = 4;
constexpr int kSaveStatesCommand = 5;
constexpr int kLoadStatesCommand = 6;


void FillHeader(const Key& key, DType dtype, const Shape& shape, const Slice& slice,
                proto::TensorHeader* header) {
  KeyToProto(key, header->mutable_key());
  header->set_dtype(DTypeToProto(dtype));
  for (int64_t d : shape) header->add_shape(d);
  header->set_element_offset(slice.offset);
  header->set_element_count(slice.count);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DistStore>> DistStore::Connect(std::string type,
                                                              const DistOptions& options) {
  if (options.scheduler_port <= 0 || options.scheduler_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheduler port ", options.scheduler_port, " is not in 1..65535"));
  }
  if (options.max_inflight < 1 || options.max_retries < 0 ||
      options.connections_per_server < 1 || options.fusion_bytes < 0) {
    return absl::InvalidArgumentError(
        "max_inflight and connections_per_server must be >= 1, max_retries and fusion_bytes "
        ">= 0");
  }
  std::unique_ptr<DistStore> store(new DistStore(std::move(type), options));
  RETURN_IF_ERROR(store->Join());
  store->completer_ = NamedThread("kv-completion", [s = store.get()] { s->CompleteCalls(); });
  store->dispatcher_ = NamedThread("kv-dispatch", [s = store.get()] { s->Dispatch(); });
  store->timer_ = NamedThread("kv-timer", [s = store.get()] { s->TimerLoop(); });
  store->heartbeat_ = NamedThread("kv-heartbeat", [s = store.get()] { s->HeartbeatLoop(); });
  return store;
}

absl::Status DistStore::Join() {
  scheduler_address_ = absl::StrCat(options_.scheduler_host, ":", options_.scheduler_port);
  scheduler_ = proto::Scheduler::NewStub(MakeChannel(scheduler_address_));
  proto::RegisterRequest request;
  request.set_role(proto::WORKER);
  request.set_requested_rank(options_.requested_rank);
  request.set_hostname(LocalHostname());
  // dist_sync_device (MXNet's alias dist_device_sync) is dist_sync with values on GPUs.
  request.set_mode(type() == "dist_async" ? "dist_async" : "dist_sync");
  proto::RegisterResponse reply;
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(absl::Now() + options_.register_timeout));
  context.set_wait_for_ready(true);  // The scheduler may still be starting.
  const grpc::Status status = scheduler_->Register(&context, request, &reply);
  if (!status.ok()) {
    const absl::Status error = FromGrpcStatus(status);
    return absl::Status(error.code(), absl::StrCat("joining the job through the scheduler at ",
                                                   scheduler_address_, ": ", error.message()));
  }
  const proto::ClusterView& view = reply.view();
  node_id_ = reply.node_id();
  rank_ = reply.rank();
  num_workers_ = view.num_workers();
  heartbeat_interval_ = absl::Milliseconds(std::max(10, view.heartbeat_interval_ms()));
  if (view.servers_size() == 0) return absl::InternalError("the cluster view lists no servers");
  for (const proto::ServerInfo& info : view.servers()) {
    Server server;
    server.rank = info.rank();
    server.address = info.address();
    for (int c = 0; c < options_.connections_per_server; ++c) {
      // MakeChannel gives every channel its own connection.
      server.stubs.push_back(std::make_unique<grpc::GenericStub>(MakeChannel(info.address())));
    }
    server.next_stub = std::make_unique<std::atomic<uint64_t>>(0);
    servers_.push_back(std::move(server));
  }
  ASSIGN_OR_RETURN(Partitioner partitioner,
                   Partitioner::Create(view.servers_size(), view.big_value_bound()));
  partitioner_ = partitioner;
  if (view.chunk_bytes() > 0) chunk_bytes_ = view.chunk_bytes();
  RETURN_IF_ERROR(WaitForServers());
  spdlog::debug("worker rank {} (node {}) joined a {} job of {} workers and {} servers", rank_,
                node_id_, view.mode(), num_workers_, servers_.size());
  return absl::OkStatus();
}

absl::Status DistStore::WaitForServers() {
  // A server answers UNAVAILABLE until it has set itself up after the job assembled (and
  // restored its checkpoint, with --restore): ask each one for nothing until it answers.
  const absl::Time give_up = absl::Now() + options_.register_timeout;
  proto::PullRequest empty;
  empty.set_node_id(node_id_);
  const grpc::ByteBuffer request = EncodeMessage(empty);
  for (size_t s = 0; s < servers_.size(); ++s) {
    while (true) {
      grpc::ClientContext context;
      context.set_deadline(GrpcDeadline(std::min(give_up, absl::Now() + absl::Seconds(10))));
      context.set_wait_for_ready(true);
      grpc::ByteBuffer reply;
      grpc::ByteBuffer copy = request;
      grpc::Status status;
      // A call of its own on a queue of its own, waited for here.
      grpc::CompletionQueue cq;
      auto call = servers_[s].stubs.front()->PrepareUnaryCall(&context, kPullMethod, copy, &cq);
      call->StartCall();
      call->Finish(&reply, &status, &status);
      void* tag;
      bool ok;
      cq.Next(&tag, &ok);  // The call's deadline bounds the wait.
      cq.Shutdown();
      while (cq.Next(&tag, &ok)) {
      }
      if (status.ok()) break;
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE || absl::Now() >= give_up) {
        return ServerError(static_cast<int>(s),
                           absl::Status(FromGrpcStatus(status).code(),
                                        absl::StrCat("not ready within ",
                                                     absl::FormatDuration(options_.register_timeout),
                                                     ": ", status.error_message())));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  return absl::OkStatus();
}

DistStore::~DistStore() {
  const absl::Status pending = WaitAll();
  if (!pending.ok()) spdlog::warn("worker {}: {}", rank_, pending.ToString());
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  if (dispatcher_.joinable()) dispatcher_.join();
  const bool over = job_over_;
  if (scheduler_ != nullptr && node_id_ != 0 && !over) {
    proto::FinishRequest request;
    request.set_node_id(node_id_);
    proto::FinishResponse reply;
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadline(absl::Now() + absl::Seconds(10)));
    const grpc::Status status = scheduler_->Finish(&context, request, &reply);
    if (!status.ok()) {
      spdlog::warn("worker {}: telling the scheduler at {} that it finished: {}", rank_,
                   scheduler_address_, status.error_message());
    }
  }
  if (!stop_heartbeat_.HasBeenNotified()) stop_heartbeat_.Notify();
  if (heartbeat_.joinable()) heartbeat_.join();
  {
    absl::MutexLock lock(&timer_mu_);
    timer_stop_ = true;
  }
  if (timer_.joinable()) timer_.join();
  // Every call has completed (WaitAll, and no timer left to retry one).
  cq_.Shutdown();
  if (completer_.joinable()) completer_.join();
}

// ---------------------------------------------------------------------------------------------
// Validation

absl::Status DistStore::CheckKeyKind(const Key& key) const {
  if (int_keys_.has_value() && *int_keys_ != key.is_int()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", key.Quoted(), " is a ", key.KindName(), " key but this store holds ",
        *int_keys_ ? "int" : "string", " keys; int and string keys cannot be mixed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<DistStore::KeyInfo>> DistStore::Lookup(const Key& key) const {
  RETURN_IF_ERROR(CheckKeyKind(key));
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    return absl::NotFoundError(absl::StrCat("key ", key.Quoted(), " was never initialised"));
  }
  return it->second;
}

absl::Status DistStore::JobOver() const {
  if (!job_over_) return absl::OkStatus();
  return absl::CancelledError(
      absl::StrCat("the job run by the scheduler at ", scheduler_address_, " is over"));
}

absl::StatusOr<std::vector<DistStore::KeyWork>> DistStore::Plan(
    absl::Span<const Key> keys, absl::Span<const Tensor> values,
    absl::Span<Tensor* const> outs) const {
  RETURN_IF_ERROR(JobOver());
  absl::ReaderMutexLock lock(&keys_mu_);
  std::vector<KeyWork> work;
  work.reserve(keys.size());
  // A key listed more than once gets one entry, its values summed. A short list is searched
  // as it is; a hash map would cost more than the search (most calls name one key).
  constexpr size_t kSearchedKeys = 16;
  absl::flat_hash_map<Key, size_t> index;
  auto entry_of = [&](const Key& key) -> size_t {
    if (keys.size() <= kSearchedKeys) {
      for (size_t w = 0; w < work.size(); ++w) {
        if (work[w].key == key) return w;
      }
      return work.size();
    }
    return index.emplace(key, work.size()).first->second;
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    const Key& key = keys[i];
    ASSIGN_OR_RETURN(std::shared_ptr<KeyInfo> info, Lookup(key));
    const TensorSpec spec{info->dtype, info->shape};
    const size_t w = entry_of(key);
    if (w == work.size()) work.push_back(KeyWork{key, std::move(info), {}, {}});
    KeyWork& entry = work[w];
    if (!values.empty()) {
      RETURN_IF_ERROR(CheckValueMatches(key, "pushed", values[i], spec));
      entry.values.push_back(values[i]);
    }
    if (!outs.empty()) {
      RETURN_IF_ERROR(gpu::CheckUsable(key, *outs[i]));
      RETURN_IF_ERROR(CheckValueMatches(key, "output", *outs[i], spec));
      entry.outs.push_back(outs[i]);
      // Outputs on GPUs: the value is received into the key's pinned buffer and copied to
      // every output when the operation completes.
      if (!outs[i]->device().is_cpu()) entry.via_host = true;
    }
  }
  // The values of one key are all on GPUs (summed there) or all on the CPU.
  for (const KeyWork& entry : work) {
    if (!entry.values.empty()) {
      RETURN_IF_ERROR(gpu::AllOnGpu(entry.key, entry.values).status());
    }
  }
  return work;
}

// ---------------------------------------------------------------------------------------------
// The operations

absl::Status DistStore::DoInit(absl::Span<const Key> keys, absl::Span<const Tensor> values) {
  std::vector<KeyWork> work;
  {
    RETURN_IF_ERROR(JobOver());
    absl::ReaderMutexLock lock(&keys_mu_);
    absl::flat_hash_set<Key> seen;
    for (size_t i = 0; i < keys.size(); ++i) {
      const Key& key = keys[i];
      RETURN_IF_ERROR(gpu::CheckUsable(key, values[i]));
      RETURN_IF_ERROR(CheckKeyKind(key));
      if (key.is_int() != keys.front().is_int()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "key ", key.Quoted(), " is a ", key.KindName(), " key but the same call has ",
            keys.front().KindName(), " keys; int and string keys cannot be mixed"));
      }
      if (keys_.contains(key) || !seen.insert(key).second) {
        return absl::AlreadyExistsError(
            absl::StrCat("key ", key.Quoted(), " is already initialised"));
      }
      auto info = std::make_shared<KeyInfo>();
      info->dtype = values[i].dtype();
      info->shape = values[i].shape();
      info->slices = partitioner_->Partition(key, values[i].num_elements(),
                                             RowElements(values[i].shape()));
      const size_t element = DTypeSize(info->dtype);
      info->bytes = static_cast<int64_t>(values[i].byte_size());
      for (const Slice& slice : info->slices) {
        const std::vector<Slice> chunks = ChunkSlice(slice, element, chunk_bytes_);
        for (const Slice& chunk : chunks) {
          info->chunks.push_back(chunk);
          info->alone.push_back(chunks.size() > 1);
        }
      }
      Tensor value = values[i];
      if (!value.device().is_cpu()) {
        value = Tensor::Zeros(value.dtype(), value.shape());
        RETURN_IF_ERROR(gpu::CopyTo(key, values[i], &value));
      }
      work.push_back(KeyWork{key, std::move(info), {value}, {}});
    }
  }
  absl::Status status;
  if (rank_ == 0) {
    // The Init, then the chunks of the parts it created deferred.
    for (const Kind kind : {Kind::kInit, Kind::kInitFill}) {
      absl::Notification sent;
      Transfer(kind, work, CompressionParams(), [&](absl::Status s) {
        status = s;
        sent.Notify();
      });
      sent.WaitForNotification();
      if (!status.ok()) break;
    }
  }
  // Every worker waits until rank 0's values are stored, even when they were refused, so that
  // no worker is left alone in the barrier.
  const absl::Status barrier = Barrier();
  if (status.ok()) status = barrier;
  if (!status.ok()) return status;
  absl::MutexLock lock(&keys_mu_);
  if (!keys.empty()) int_keys_ = keys.front().is_int();
  for (KeyWork& entry : work) keys_[entry.key] = std::move(entry.info);
  return absl::OkStatus();
}

absl::Status DistStore::DoPush(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                               int priority) {
  if (TryGroup(Kind::kPush, keys, values, {}, priority)) return absl::OkStatus();
  RETURN_IF_ERROR(CheckDefined(keys, values, "push"));
  ASSIGN_OR_RETURN(std::vector<KeyWork> work, Plan(keys, values, {}));
  Enqueue(priority, std::move(work), Kind::kPush);
  return absl::OkStatus();
}

absl::Status DistStore::DoPull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs,
                               int priority) {
  if (TryGroup(Kind::kPull, keys, {}, outs, priority)) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<KeyWork> work, Plan(keys, {}, outs));
  Enqueue(priority, std::move(work), Kind::kPull);
  return absl::OkStatus();
}

absl::Status DistStore::DoPushPull(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                                   absl::Span<Tensor* const> outs, int priority) {
  if (values.size() != outs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("pushpull of ", values.size(),
                                                   " values into ", outs.size(), " outputs"));
  }
  if (TryGroup(Kind::kPushPull, keys, values, outs, priority)) return absl::OkStatus();
  RETURN_IF_ERROR(CheckDefined(keys, values, "pushpull"));
  ASSIGN_OR_RETURN(std::vector<KeyWork> work, Plan(keys, values, outs));
  Enqueue(priority, std::move(work), Kind::kPushPull);
  return absl::OkStatus();
}

absl::Status DistStore::DoPushRowSparse(absl::Span<const Key> keys,
                                        absl::Span<const RowSparse> values, int priority) {
  std::vector<KeyWork> work;
  {
    RETURN_IF_ERROR(JobOver());
    absl::ReaderMutexLock lock(&keys_mu_);
    absl::flat_hash_map<Key, size_t> index;
    for (size_t i = 0; i < keys.size(); ++i) {
      const Key& key = keys[i];
      ASSIGN_OR_RETURN(std::shared_ptr<KeyInfo> info, Lookup(key));
      const RowSparse& value = values[i];
      RETURN_IF_ERROR(CheckRowSparseValue(key, info->dtype, info->shape, value));
      auto [it, inserted] = index.emplace(key, work.size());
      if (inserted) work.push_back(KeyWork{key, info, {}, {}, {}, {}, {}});
      work[it->second].sparse_values.push_back(value);
    }
  }
  Enqueue(priority, std::move(work), Kind::kRowSparsePush);
  return absl::OkStatus();
}

absl::Status DistStore::DoRowSparsePull(absl::Span<const Key> keys,
                                        absl::Span<RowSparse* const> outs,
                                        absl::Span<const std::vector<int64_t>> row_ids,
                                        int priority) {
  std::vector<KeyWork> work;
  std::vector<std::vector<int64_t>> unique(keys.size());
  {
    RETURN_IF_ERROR(JobOver());
    absl::ReaderMutexLock lock(&keys_mu_);
    absl::flat_hash_map<Key, size_t> index;
    for (size_t i = 0; i < keys.size(); ++i) {
      const Key& key = keys[i];
      ASSIGN_OR_RETURN(std::shared_ptr<KeyInfo> info, Lookup(key));
      ASSIGN_OR_RETURN(unique[i],
                       CheckRowSparseOutput(key, info->dtype, info->shape, *outs[i], row_ids[i]));
      auto [it, inserted] = index.emplace(key, work.size());
      if (inserted) work.push_back(KeyWork{key, info, {}, {}, {}, {}, {}});
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      KeyWork& entry = work[index[keys[i]]];
      entry.sparse_outs.push_back(outs[i]);
      entry.sparse_rows.push_back(unique[i]);
    }
  }
  // The outputs get their ids and row buffers now; the rows arrive when the operation runs.
  for (size_t i = 0; i < keys.size(); ++i) {
    const int64_t n = static_cast<int64_t>(unique[i].size());
    outs[i]->Reset(std::move(unique[i]), Tensor::Zeros(outs[i]->dtype(),
                                                       RowShape(outs[i]->shape(), n)));
  }
  Enqueue(priority, std::move(work), Kind::kRowSparsePull);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// The queue

void DistStore::Enqueue(int priority, std::vector<KeyWork> work, Kind kind) {
  Op op;
  op.priority = priority;
  op.kind = kind;
  op.keys.reserve(work.size());
  for (const KeyWork& entry : work) {
    op.keys.push_back(entry.key);
    op.bytes += entry.info->bytes;
  }
  op.work = std::move(work);
  EnqueueOp(std::move(op));
}

void DistStore::EnqueueOp(Op op) {
  absl::MutexLock lock(&mu_);
  const uint64_t seq = next_seq_++;
  if (op.kind == Kind::kPush || op.kind == Kind::kPushPull) op.compression = compression_;
  for (const Key& key : op.keys) unfinished_[key].push_back(seq);
  if (op.group != nullptr) group_ops_.emplace(seq, op.group);
  live_.insert(seq);
  queued_.emplace(seq, std::move(op));
  changed_.SignalAll();
}

bool DistStore::InGroupBefore(uint64_t seq, const Key& key) const {
  for (const auto& [group_seq, group] : group_ops_) {
    if (group_seq >= seq) break;
    if (group->members.contains(key)) return true;
  }
  return false;
}

bool DistStore::Ready(uint64_t seq, const Op& op) const {
  // A key-group operation waits for every earlier operation (checking its members one by one
  // against the queue would cost what the group saves).
  if (op.group != nullptr) return *live_.begin() == seq;
  for (const Key& key : op.keys) {
    if (unfinished_.at(key).front() != seq) return false;
    if (!group_ops_.empty() && InGroupBefore(seq, key)) return false;
  }
  return true;
}

void DistStore::Dispatch() {
  mu_.Lock();
  while (true) {
    if (stopping_ && queued_.empty()) break;
    auto best = queued_.end();
    if (inflight_ < options_.max_inflight) {
      for (auto it = queued_.begin(); it != queued_.end(); ++it) {
        if ((best == queued_.end() || it->second.priority > best->second.priority) &&
            Ready(it->first, it->second)) {
          best = it;
        }
      }
    }
    if (best == queued_.end()) {
      changed_.Wait(&mu_);
      continue;
    }
    // Fusion: other ready operations of the same kind and priority travel with this one, one
    // request per server, while the payload stays small. Ready operations never share a key.
    std::vector<std::pair<uint64_t, std::vector<Key>>> fused;
    const Kind kind = best->second.kind;
    const int priority = best->second.priority;
    const CompressionParams compression = best->second.compression;
    int64_t bytes = best->second.bytes;
    if (best->second.group != nullptr) {
      Op op = std::move(best->second);
      const uint64_t seq = best->first;
      queued_.erase(best);
      ++inflight_;
      mu_.Unlock();
      TransferGroup(kind, std::move(op.group), std::move(op.group_work),
                    [this, seq](absl::Status status) {
                      const std::pair<uint64_t, std::vector<Key>> done[] = {{seq, {}}};
                      Complete(done, status);
                    });
      mu_.Lock();
      continue;
    }
    std::vector<KeyWork> work = std::move(best->second.work);
    fused.emplace_back(best->first, std::move(best->second.keys));
    queued_.erase(best);
    const bool dense = kind == Kind::kPush || kind == Kind::kPull || kind == Kind::kPushPull;
    if (dense && bytes < options_.fusion_bytes) {
      for (auto it = queued_.begin(); it != queued_.end();) {
        Op& other = it->second;
        if (other.kind != kind || other.priority != priority || other.group != nullptr ||
            other.compression != compression ||
            bytes + other.bytes > options_.fusion_bytes || !Ready(it->first, other)) {
          ++it;
          continue;
        }
        bytes += other.bytes;
        for (KeyWork& entry : other.work) work.push_back(std::move(entry));
        fused.emplace_back(it->first, std::move(other.keys));
        it = queued_.erase(it);
      }
    }
    inflight_ += static_cast<int>(fused.size());
    mu_.Unlock();
    auto complete = [this, fused = std::move(fused)](absl::Status status) {
      Complete(fused, status);
    };
    if (kind == Kind::kRowSparsePush || kind == Kind::kRowSparsePull) {
      TransferRowSparse(kind, std::move(work), std::move(complete));
    } else {
      Transfer(kind, std::move(work), compression, std::move(complete));
    }
    mu_.Lock();
  }
  mu_.Unlock();
}

namespace {
// Empty per-key maps with more slots than this are given back.
constexpr size_t kShrinkAbove = 4096;
}  // namespace

void DistStore::Complete(absl::Span<const std::pair<uint64_t, std::vector<Key>>> ops,
                         const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  for (const auto& [seq, keys] : ops) {
    --inflight_;
    live_.erase(seq);
    if (auto it = group_ops_.find(seq); it != group_ops_.end()) {
      if (!status.ok()) group_errors_.emplace_back(it->second, status);
      group_ops_.erase(it);
    }
    for (const Key& key : keys) {
      auto it = unfinished_.find(key);
      if (it != unfinished_.end()) {
        auto& queue = it->second;
        queue.erase(std::find(queue.begin(), queue.end(), seq));
        if (queue.empty()) unfinished_.erase(it);
      }
      if (!status.ok()) key_errors_.emplace(key, status);
    }
  }
  // A call with many keys (an Init of 100,000) leaves the map that large but empty; every later
  // small operation would then touch a table of megabytes.
  if (unfinished_.empty() && unfinished_.capacity() > kShrinkAbove) unfinished_ = {};
  if (key_errors_.empty() && key_errors_.capacity() > kShrinkAbove) key_errors_ = {};
  // One wake-up for the whole batch: waiters re-check once, not once per operation.
  changed_.SignalAll();
}

absl::Status DistStore::Wait(absl::Span<const Key> keys) {
  absl::MutexLock lock(&mu_);
  auto busy = [&] {
    for (const Key& key : keys) {
      if (unfinished_.contains(key)) return true;
      if (!group_ops_.empty() && InGroupBefore(next_seq_, key)) return true;
    }
    return false;
  };
  SpinWhile(busy);
  while (busy()) changed_.Wait(&mu_);
  absl::Status first;
  for (const Key& key : keys) {
    auto it = key_errors_.find(key);
    if (it == key_errors_.end()) continue;
    if (first.ok()) first = it->second;
    key_errors_.erase(it);
  }
  for (auto it = group_errors_.begin(); it != group_errors_.end();) {
    const bool member = std::any_of(keys.begin(), keys.end(), [&](const Key& key) {
      return it->first->members.contains(key);
    });
    if (!member) {
      ++it;
      continue;
    }
    if (first.ok()) first = it->second;
    it = group_errors_.erase(it);
  }
  return first;
}

namespace {
// Wait and WaitAll spin (yielding) this long before sleeping, when at most kSpinMaxOps
// operations are in flight.
constexpr absl::Duration kWaitSpin = absl::Microseconds(250);
constexpr size_t kSpinMaxOps = 2;
}  // namespace

template <typename Busy>
void DistStore::SpinWhile(Busy busy) {
  // Only for a few operations in flight: a round trip then takes about as long as the sleep
  // and wake-up the spin avoids (tens of microseconds each on a VM); many operations finish
  // later and the waiter sleeps.
  if (live_.size() > kSpinMaxOps) return;
  const absl::Time until = absl::Now() + kWaitSpin;
  while (busy() && absl::Now() < until) {
    mu_.Unlock();
    std::this_thread::yield();
    mu_.Lock();
  }
}

absl::Status DistStore::WaitAll() {
  absl::MutexLock lock(&mu_);
  auto busy = [&] { return !live_.empty() || inflight_ > 0; };
  SpinWhile(busy);
  while (busy()) changed_.Wait(&mu_);
  absl::Status first;
  for (const auto& [key, status] : key_errors_) {
    if (first.ok()) first = status;
  }
  for (const auto& [group, status] : group_errors_) {
    if (first.ok()) first = status;
  }
  key_errors_.clear();
  group_errors_.clear();
  return first;
}

// ---------------------------------------------------------------------------------------------
// Sending

absl::Status DistStore::ServerError(int s, const absl::Status& status) const {
  return absl::Status(status.code(), absl::StrCat("server ", servers_[s].rank, " at ",
                                                  servers_[s].address, ": ", status.message()));
}

void DistStore::Transfer(Kind kind, std::vector<KeyWork> work,
                         const CompressionParams& compression, OpDone done) {
  struct Target {
    size_t work_index;
    Slice chunk;
  };
  // One request: the small values bound for a server together, or one chunk of a cut value.
  struct Request {
    int server = 0;
    bool deferred = false;  // An Init of parts whose bytes follow (kInitFill).
    std::vector<proto::TensorHeader> headers;
    std::vector<PayloadPart> parts;
    uint64_t payload_bytes = 0;
    std::vector<Target> targets;
  };
  struct State {
    absl::Mutex mu;
    int remaining = 0;
    absl::Status error;
    std::vector<KeyWork> work;
    OpDone done;
    std::vector<std::function<void()>> launches;  // One per request, started in order.
    size_t next_launch = 0;
  };
  auto state = std::make_shared<State>();
  state->work = std::move(work);
  state->done = std::move(done);
  const bool sends = kind != Kind::kPull;
  const bool receives = kind == Kind::kPull || kind == Kind::kPushPull;
  if (receives) {
    for (KeyWork& entry : state->work) {
      if (!entry.via_host) continue;
      Tensor& staging = entry.info->pull_staging;
      if (!staging.defined()) {
        absl::StatusOr<Tensor> pinned = gpu::Pinned(entry.info->dtype, entry.info->shape);
        if (!pinned.ok()) {
          state->done(pinned.status());
          return;
        }
        staging = *std::move(pinned);
      }
    }
  }

  // The value each key sends: the one pushed, or the sum of several (in the reused buffer).
  std::vector<Tensor> sent(state->work.size());
  if (sends) {
    for (size_t i = 0; i < state->work.size(); ++i) {
      KeyWork& entry = state->work[i];
      if (!entry.values.front().device().is_cpu()) {
        // Summed on the GPU, staged into pinned host memory once.
        const absl::Status status = gpu::SumToHost(entry.key, entry.values,
                                                   &entry.info->gpu_scratch,
                                                   &entry.info->gpu_staging);
        if (!status.ok()) {
          state->done(status);
          return;
        }
        sent[i] = entry.info->gpu_staging;
        continue;
      }
      if (entry.values.size() == 1) {
        sent[i] = entry.values[0];
        continue;
      }
      Tensor& buffer = entry.info->merge_buffer;
      if (!buffer.defined()) buffer = Tensor::Zeros(entry.info->dtype, entry.info->shape);
      const absl::Status status = SumInto(entry.values, &buffer);
      if (!status.ok()) {
        state->done(status);
        return;
      }
      sent[i] = buffer;
    }
  }
  // Compressed pushes: each chunk's codes, quantised with the key's residual, in the key's
  // reused code buffer. code_offset[i][c] is where chunk c's codes start.
  std::vector<std::vector<size_t>> code_offset(state->work.size());
  if (sends && kind != Kind::kInit && compression.enabled()) {
    for (size_t i = 0; i < state->work.size(); ++i) {
      KeyInfo& info = *state->work[i].info;
      if (info.dtype != DType::kFloat32) continue;
      if (!info.residual.defined() || info.residual_params != compression) {
        info.residual = Tensor::Zeros(DType::kFloat32, {static_cast<int64_t>(info.bytes / 4)});
        info.residual_params = compression;
      }
      size_t total = 0;
      for (const Slice& chunk : info.chunks) {
        code_offset[i].push_back(total);
        total += CompressedBytes(compression.type, chunk.count);
      }
      const int64_t words = static_cast<int64_t>(total / 4);
      if (!info.codes.defined() || info.codes.num_elements() != words) {
        info.codes = Tensor::Zeros(DType::kInt32, {words});
      }
      const auto* grad = sent[i].data_as<const float>();
      auto* residual = info.residual.data_as<float>();
      auto* codes = info.codes.data_as<uint8_t>();
      for (size_t c = 0; c < info.chunks.size(); ++c) {
        const Slice& chunk = info.chunks[c];
        Quantize(compression, grad + chunk.offset, residual + chunk.offset, chunk.count,
                 codes + code_offset[i][c]);
      }
    }
  }

  std::vector<Request> requests;
  std::vector<int> shared_request(servers_.size(), -1);  // Per server: its shared request.
  std::vector<int> deferred_request(servers_.size(), -1);  // Per server: its deferred Init.
  for (size_t i = 0; i < state->work.size(); ++i) {
    const KeyWork& entry = state->work[i];
    const KeyInfo& info = *entry.info;
    const size_t element = DTypeSize(info.dtype);
    // Init sends each server its whole part, which the server cuts into chunks itself; a part
    // cut in several chunks goes as a deferred header, its chunks then as fills, one request
    // each (so that no request holds a whole big value).
    const bool init = kind == Kind::kInit;
    const std::vector<Slice>& chunks = init ? info.slices : info.chunks;
    auto cut = [&](int server) {
      for (size_t c = 0; c < info.chunks.size(); ++c) {
        if (info.chunks[c].server == server && info.alone[c]) return true;
      }
      return false;
    };
    for (size_t c = 0; c < chunks.size(); ++c) {
      const Slice& chunk = chunks[c];
      if (kind == Kind::kInitFill && !info.alone[c]) continue;  // Sent whole by the Init.
      const bool deferred = init && cut(chunk.server);
      Request* request;
      if (!init && info.alone[c]) {
        requests.emplace_back();
        request = &requests.back();
        request->server = chunk.server;
      } else {
        int& index = (deferred ? deferred_request : shared_request)[chunk.server];
        if (index < 0) {
          index = static_cast<int>(requests.size());
          requests.emplace_back();
          requests.back().server = chunk.server;
          requests.back().deferred = deferred;
        }
        request = &requests[index];
      }
      proto::TensorHeader& header = request->headers.emplace_back();
      FillHeader(entry.key, info.dtype, info.shape, chunk, &header);
      if (sends && !code_offset[i].empty()) {
        const size_t bytes = CompressedBytes(compression.type, chunk.count);
        header.set_compression(static_cast<proto::Compression>(compression.type));
        header.set_compression_threshold(compression.threshold);
        header.set_payload_offset(request->payload_bytes);
        header.set_payload_bytes(bytes);
        request->parts.push_back(PayloadPart{info.codes, code_offset[i][c], bytes});
        request->payload_bytes += bytes;
      } else if (sends && !deferred) {
        const size_t bytes = static_cast<size_t>(chunk.count) * element;
        header.set_payload_offset(request->payload_bytes);
        header.set_payload_bytes(bytes);
        request->parts.push_back(
            PayloadPart{sent[i], static_cast<size_t>(chunk.offset) * element, bytes});
        request->payload_bytes += bytes;
      }
      request->targets.push_back(Target{i, chunk});
    }
  }

  std::vector<std::shared_ptr<grpc::ByteBuffer>> frames;
  for (Request& request : requests) {
    absl::StatusOr<grpc::ByteBuffer> frame;
    auto encode = [&](auto message, bool with_request_id) {
      message.set_node_id(node_id_);
      if constexpr (!std::is_same_v<decltype(message), proto::PullRequest> &&
                    !std::is_same_v<decltype(message), proto::InitRequest>) {
        if (with_request_id) message.set_request_id(next_request_id_++);
      }
      message.mutable_tensors()->Reserve(static_cast<int>(request.headers.size()));
      for (proto::TensorHeader& header : request.headers) {
        *message.add_tensors() = std::move(header);
      }
      return sends ? EncodeFrame(message, request.parts) : EncodeMessage(message);
    };
    proto::InitRequest init;
    init.set_deferred(request.deferred);
    init.set_fill(kind == Kind::kInitFill);
    switch (kind) {
      case Kind::kInit:
      case Kind::kInitFill: frame = encode(init, false); break;
      case Kind::kPush: frame = encode(proto::PushRequest(), true); break;
      case Kind::kPull: frame = encode(proto::PullRequest(), false); break;
      case Kind::kPushPull: frame = encode(proto::PushPullRequest(), true); break;
    }
    if (!frame.ok()) {
      state->done(frame.status());
      return;
    }
    frames.push_back(std::make_shared<grpc::ByteBuffer>(*std::move(frame)));
    if (kind == Kind::kPush || kind == Kind::kPushPull) {
      push_payload_bytes_ += static_cast<int64_t>(request.payload_bytes);
    }
  }
  state->remaining = static_cast<int>(requests.size());
  if (requests.empty()) {
    state->done(absl::OkStatus());
    return;
  }
  static constexpr const char* kMethods[] = {kInitMethod, kPushMethod, kPullMethod,
                                             kPushPullMethod};
  const char* method = kind == Kind::kInitFill ? kInitMethod : kMethods[static_cast<int>(kind)];
  // Requests start in order, at most `window` at a time: chunks then arrive one after another
  // (rather than all interleaved and complete only at the end), so the server sums and updates
  // each while the next is on the wire.
  const size_t window = static_cast<size_t>(options_.connections_per_server) * servers_.size();
  state->launches.resize(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    const int s = requests[r].server;
    state->launches[r] = [this, state, s, method, frame = frames[r], receives,
                          targets = std::move(requests[r].targets)]() mutable {
    Call(s, method, std::move(frame),
         [this, state, s, receives, targets = std::move(targets)](
             absl::Status status, grpc::ByteBuffer* reply) {
           if (status.ok() && receives) {
             // Copy each returned chunk from the received bytes into the first output.
             proto::PullResponse header;
             absl::StatusOr<Payload> payload = DecodeFrame(*reply, &header);
             status = payload.status();
             if (status.ok() && header.tensors_size() != static_cast<int>(targets.size())) {
               status = absl::InternalError(absl::StrCat("asked for ", targets.size(),
                                                         " values, got ", header.tensors_size()));
             }
             for (size_t t = 0; status.ok() && t < targets.size(); ++t) {
               const proto::TensorHeader& got = header.tensors(static_cast<int>(t));
               KeyWork& entry = state->work[targets[t].work_index];
               Tensor* out = entry.via_host ? &entry.info->pull_staging : entry.outs.front();
               const size_t element = DTypeSize(entry.info->dtype);
               const Slice& chunk = targets[t].chunk;
               const size_t bytes = static_cast<size_t>(chunk.count) * element;
               if (got.element_offset() != chunk.offset || got.payload_bytes() != bytes) {
                 status = absl::InternalError(absl::StrCat(
                     "key ", entry.key.Quoted(), ": reply holds elements from ",
                     got.element_offset(), " in ", got.payload_bytes(), " bytes, expected ",
                     chunk.offset, " in ", bytes));
                 break;
               }
               status = payload->CopyTo(
                   got.payload_offset(), bytes,
                   static_cast<uint8_t*>(out->data()) + chunk.offset * element);
             }
             if (!status.ok()) status = ServerError(s, status);
           }
           bool last;
           std::function<void()> next;
           {
             absl::MutexLock lock(&state->mu);
             if (!status.ok() && state->error.ok()) state->error = status;
             last = --state->remaining == 0;
             if (state->next_launch < state->launches.size()) {
               next = std::move(state->launches[state->next_launch++]);
             }
           }
           if (next) next();
           if (!last) return;
           if (state->error.ok() && receives) {
             // One key pulled into several outputs: copy the first into the others; with
             // outputs on GPUs, copy the pinned buffer into every output.
             for (KeyWork& entry : state->work) {
               if (entry.via_host) {
                 for (Tensor* out : entry.outs) {
                   const absl::Status copied =
                       gpu::CopyTo(entry.key, entry.info->pull_staging, out);
                   if (!copied.ok() && state->error.ok()) state->error = copied;
                 }
                 continue;
               }
               for (size_t o = 1; o < entry.outs.size(); ++o) {
                 if (entry.outs[o]->data() == entry.outs[0]->data()) continue;
                 const absl::Status copied = CopyInto(*entry.outs[0], entry.outs[o]);
                 if (!copied.ok() && state->error.ok()) state->error = copied;
               }
             }
           }
           state->done(state->error);
         });
    };
  }
  std::vector<std::function<void()>> first;
  {
    absl::MutexLock lock(&state->mu);
    while (state->next_launch < std::min(window, state->launches.size())) {
      first.push_back(std::move(state->launches[state->next_launch++]));
    }
  }
  for (auto& launch : first) launch();
}

void DistStore::TransferRowSparse(Kind kind, std::vector<KeyWork> work, OpDone done) {
  const bool push = kind == Kind::kRowSparsePush;
  // Where a pulled part's rows go: output `out` of work entry `entry`, from row `first`.
  struct Target {
    size_t entry;
    size_t out;
    size_t first;
    size_t rows;
  };
  struct Request {
    std::vector<proto::TensorHeader> headers;
    std::vector<proto::RowIds> row_ids;
    std::vector<PayloadPart> parts;
    uint64_t payload_bytes = 0;
    std::vector<Target> targets;
  };
  std::vector<Request> requests(servers_.size());
  for (size_t w = 0; w < work.size(); ++w) {
    const KeyWork& entry = work[w];
    const KeyInfo& info = *entry.info;
    const int64_t row = RowElements(info.shape);
    const size_t row_bytes = static_cast<size_t>(row) * DTypeSize(info.dtype);
    for (const Slice& part : info.slices) {
      const int64_t first_row = part.offset / std::max<int64_t>(1, row);
      const int64_t end_row = (part.offset + part.count) / std::max<int64_t>(1, row);
      Request& request = requests[part.server];
      if (push) {
        // The rows of every pushed value that fall in this part, ids first.
        std::vector<int64_t> ids;
        std::vector<std::pair<const RowSparse*, int64_t>> rows;
        for (const RowSparse& value : entry.sparse_values) {
          for (int64_t i = 0; i < value.num_rows(); ++i) {
            const int64_t id = value.row_ids()[i];
            if (id < first_row || id >= end_row) continue;
            ids.push_back(id);
            rows.emplace_back(&value, i);
          }
        }
        Tensor ids_tensor = Tensor::Zeros(DType::kInt64, {static_cast<int64_t>(ids.size())});
        std::copy(ids.begin(), ids.end(), ids_tensor.data_as<int64_t>());
        Tensor data = Tensor::Zeros(info.dtype, RowShape(info.shape, ids.size()));
        for (size_t r = 0; r < rows.size(); ++r) {
          std::memcpy(static_cast<uint8_t*>(data.data()) + r * row_bytes,
                      static_cast<const uint8_t*>(rows[r].first->data().data()) +
                          static_cast<size_t>(rows[r].second) * row_bytes,
                      row_bytes);
        }
        proto::TensorHeader& header = request.headers.emplace_back();
        FillHeader(entry.key, info.dtype, info.shape, part, &header);
        header.set_row_sparse(true);
        header.set_num_rows(static_cast<int64_t>(ids.size()));
        header.set_payload_offset(request.payload_bytes);
        header.set_payload_bytes(ids_tensor.byte_size() + data.byte_size());
        request.payload_bytes += ids_tensor.byte_size() + data.byte_size();
        request.parts.push_back(PayloadPart{ids_tensor, 0, ids_tensor.byte_size()});
        request.parts.push_back(PayloadPart{data, 0, data.byte_size()});
        continue;
      }
      for (size_t o = 0; o < entry.sparse_outs.size(); ++o) {
        // The sorted ids of this part are a contiguous run of the output's ids.
        const std::vector<int64_t>& ids = entry.sparse_rows[o];
        const auto lo = std::lower_bound(ids.begin(), ids.end(), first_row);
        const auto hi = std::lower_bound(ids.begin(), ids.end(), end_row);
        if (lo == hi) continue;
        proto::TensorHeader& header = request.headers.emplace_back();
        FillHeader(entry.key, info.dtype, info.shape, part, &header);
        request.row_ids.emplace_back().mutable_ids()->Add(lo, hi);
        request.targets.push_back(Target{w, o, static_cast<size_t>(lo - ids.begin()),
                                         static_cast<size_t>(hi - lo)});
      }
    }
  }
  struct State {
    absl::Mutex mu;
    int remaining = 0;
    absl::Status error;
    std::vector<KeyWork> work;
    OpDone done;
  };
  auto state = std::make_shared<State>();
  state->work = std::move(work);
  state->done = std::move(done);
  std::vector<std::pair<int, std::shared_ptr<grpc::ByteBuffer>>> frames;
  std::vector<std::vector<Target>> targets;
  for (size_t s = 0; s < requests.size(); ++s) {
    Request& request = requests[s];
    if (request.headers.empty()) continue;
    absl::StatusOr<grpc::ByteBuffer> frame;
    if (push) {
      proto::PushRequest message;
      message.set_node_id(node_id_);
      message.set_request_id(next_request_id_++);
      for (proto::TensorHeader& header : request.headers) *message.add_tensors() = std::move(header);
      frame = EncodeFrame(message, request.parts);
      push_payload_bytes_ += static_cast<int64_t>(request.payload_bytes);
    } else {
      proto::PullRequest message;
      message.set_node_id(node_id_);
      for (proto::TensorHeader& header : request.headers) *message.add_tensors() = std::move(header);
      for (proto::RowIds& ids : request.row_ids) *message.add_row_ids() = std::move(ids);
      frame = EncodeMessage(message);
    }
    if (!frame.ok()) {
      state->done(frame.status());
      return;
    }
    frames.emplace_back(static_cast<int>(s), std::make_shared<grpc::ByteBuffer>(*std::move(frame)));
    targets.push_back(std::move(request.targets));
  }
  if (frames.empty()) {
    state->done(absl::OkStatus());
    return;
  }
  state->remaining = static_cast<int>(frames.size());
  for (size_t f = 0; f < frames.size(); ++f) {
    const int s = frames[f].first;
    Call(s, push ? kPushMethod : kRowSparsePullMethod, frames[f].second,
         [this, state, s, push, targets = std::move(targets[f])](absl::Status status,
                                                                 grpc::ByteBuffer* reply) {
           if (status.ok() && !push) {
             proto::PullResponse header;
             absl::StatusOr<Payload> payload = DecodeFrame(*reply, &header);
             status = payload.status();
             if (status.ok() && header.tensors_size() != static_cast<int>(targets.size())) {
               status = absl::InternalError(absl::StrCat(
                   "asked for rows of ", targets.size(), " values, got ", header.tensors_size()));
             }
             for (size_t t = 0; status.ok() && t < targets.size(); ++t) {
               const Target& target = targets[t];
               KeyWork& entry = state->work[target.entry];
               RowSparse* out = entry.sparse_outs[target.out];
               const size_t row_bytes = static_cast<size_t>(RowElements(entry.info->shape)) *
                                        DTypeSize(entry.info->dtype);
               const proto::TensorHeader& got = header.tensors(static_cast<int>(t));
               if (got.payload_bytes() != target.rows * row_bytes) {
                 status = absl::InternalError(absl::StrCat(
                     "key ", entry.key.Quoted(), ": reply holds ", got.payload_bytes(),
                     " bytes for ", target.rows, " rows of ", row_bytes, " bytes"));
                 break;
               }
               status = payload->CopyTo(got.payload_offset(), target.rows * row_bytes,
                                        static_cast<uint8_t*>(out->data().data()) +
                                            target.first * row_bytes);
             }
             if (!status.ok()) status = ServerError(s, status);
           }
           bool last;
           {
             absl::MutexLock lock(&state->mu);
             if (!status.ok() && state->error.ok()) state->error = status;
             last = --state->remaining == 0;
           }
           if (last) state->done(state->error);
         });
  }
}

// ---------------------------------------------------------------------------------------------
// Key groups

namespace {

// A member of a key group travels whole in its server's packed array; bigger values take the
// per-key path, which cuts them into chunks.
constexpr int64_t kGroupMemberMaxBytes = 64 << 10;
// A group's packed arrays together stay under this (one gRPC message per part).
constexpr int64_t kGroupMaxBytes = 256 << 20;
// Groups remembered per store; servers keep more (ServerEngine::kMaxGroupsPerNode), so a
// group still in this cache is still registered.
constexpr size_t kMaxGroups = 64;
// GroupPlan::Piece holds offsets within a member and within a part in 32 bits.
static_assert(kGroupMaxBytes < (int64_t{1} << 32) && kGroupMemberMaxBytes < kGroupMaxBytes);

// Fingerprint hashes a key list; a list of integer keys hashes alike as Keys and as integers.
template <typename List, typename Value>
uint64_t FingerprintOf(const List& keys, Value value) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ keys.size();
  for (const auto& key : keys) {
    h = (h ^ value(key)) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h;
}

uint64_t Fingerprint(absl::Span<const Key> keys) {
  return FingerprintOf(keys, [](const Key& key) {
    return key.is_int() ? static_cast<uint64_t>(key.int_key())
                        : absl::Hash<std::string>()(key.str_key());
  });
}

uint64_t Fingerprint(absl::Span<const int64_t> keys) {
  return FingerprintOf(keys, [](int64_t key) { return static_cast<uint64_t>(key); });
}

}  // namespace

bool DistStore::GroupsUsable(size_t n, bool pushes) const {
  if (options_.group_min_keys <= 0 || n < static_cast<size_t>(options_.group_min_keys)) {
    return false;
  }
  absl::ReaderMutexLock lock(&mu_);
  return !(pushes && compression_.enabled()) && !job_over_;
}

std::shared_ptr<DistStore::GroupPlan> DistStore::IntGroupFor(absl::Span<const int64_t> keys,
                                                            bool pushes) {
  if (!GroupsUsable(keys.size(), pushes)) return nullptr;
  {
    absl::MutexLock lock(&groups_mu_);
    if (last_group_ != nullptr && absl::MakeConstSpan(last_group_->int_keys) == keys) {
      return last_group_;
    }
  }
  const uint64_t fingerprint = Fingerprint(keys);
  absl::MutexLock lock(&groups_mu_);
  auto it = groups_.find(fingerprint);
  if (it == groups_.end() || it->second == nullptr ||
      absl::MakeConstSpan(it->second->int_keys) != keys) {
    return nullptr;
  }
  last_group_ = it->second;
  return last_group_;
}

std::shared_ptr<DistStore::GroupPlan> DistStore::RecentGroup(absl::Span<const Key> keys,
                                                            bool pushes) {
  if (!GroupsUsable(keys.size(), pushes)) return nullptr;
  absl::MutexLock lock(&groups_mu_);
  if (last_group_ == nullptr || last_group_->keys.size() != keys.size()) return nullptr;
  return last_group_;
}

std::shared_ptr<DistStore::GroupPlan> DistStore::GroupFor(absl::Span<const Key> keys,
                                                         bool pushes) {
  if (!GroupsUsable(keys.size(), pushes)) return nullptr;
  {
    absl::MutexLock lock(&groups_mu_);
    if (last_group_ != nullptr && SameKeys(*last_group_, keys)) {
      return last_group_;
    }
  }
  const uint64_t fingerprint = Fingerprint(keys);
  {
    absl::MutexLock lock(&groups_mu_);
    auto it = groups_.find(fingerprint);
    if (it != groups_.end()) {
      const std::shared_ptr<GroupPlan>& group = it->second;
      if (group != nullptr && SameKeys(*group, keys)) {
        last_group_ = group;
        return group;
      }
      return nullptr;  // A list that cannot form a group, or another list with the same print.
    }
  }
  auto group = std::make_shared<GroupPlan>();
  group->keys.assign(keys.begin(), keys.end());
  if (std::all_of(keys.begin(), keys.end(), [](const Key& key) { return key.is_int(); })) {
    group->int_keys.reserve(keys.size());
    for (const Key& key : keys) group->int_keys.push_back(key.int_key());
  }
  group->infos.reserve(keys.size());
  group->members.reserve(keys.size());
  bool eligible = true;
  {
    absl::ReaderMutexLock lock(&keys_mu_);
    for (const Key& key : keys) {
      if (!CheckKeyKind(key).ok()) return nullptr;  // The per-key path reports it.
      auto it = keys_.find(key);
      if (it == keys_.end()) return nullptr;
      const KeyInfo& info = *it->second;
      group->infos.push_back(&info);
      group->dtypes.push_back(info.dtype);
      group->dims_at.push_back(static_cast<uint32_t>(group->dims.size()));
      group->dims.insert(group->dims.end(), info.shape.begin(), info.shape.end());
      group->bytes += info.bytes;
      // Every key has a piece (a value of no elements, one empty chunk): checking a call goes
      // through the pieces.
      if (!group->members.insert(key).second || info.bytes > kGroupMemberMaxBytes ||
          info.chunks.empty()) {
        eligible = false;
      }
    }
  }
  group->dims_at.push_back(static_cast<uint32_t>(group->dims.size()));
  if (group->bytes > kGroupMaxBytes) eligible = false;
  if (eligible) {
    std::vector<int> part_index(servers_.size(), -1);
    for (size_t i = 0; i < keys.size(); ++i) {
      const KeyInfo& info = *group->infos[i];
      const size_t element = DTypeSize(info.dtype);
      for (const Slice& chunk : info.chunks) {
        if (part_index[chunk.server] < 0) {
          part_index[chunk.server] = static_cast<int>(group->parts.size());
          group->parts.emplace_back().server = chunk.server;
          group->parts.back().offsets.push_back(0);
        }
        const uint32_t p = static_cast<uint32_t>(part_index[chunk.server]);
        GroupPlan::Part& part = group->parts[p];
        const size_t value_offset = static_cast<size_t>(chunk.offset) * element;
        const size_t bytes = static_cast<size_t>(chunk.count) * element;
        group->pieces.push_back(GroupPlan::Piece{
            static_cast<uint32_t>(i), p, static_cast<uint32_t>(value_offset),
            static_cast<uint32_t>(part.offsets.back()), static_cast<uint32_t>(bytes)});
        part.members.push_back(GroupPlan::Member{static_cast<uint32_t>(i), chunk, value_offset});
        part.offsets.push_back(part.offsets.back() + bytes);
      }
    }
    group->key_offsets.reserve(keys.size() + 1);
    group->key_offsets.push_back(0);
    for (size_t i = 0; i < keys.size(); ++i) {
      group->key_offsets.push_back(group->key_offsets.back() + group->infos[i]->bytes);
      group->one_dtype = group->one_dtype && group->dtypes[i] == group->dtypes[0];
    }
    for (GroupPlan::Part& part : group->parts) {
      const GroupPlan::Member& first = part.members.front();
      part.bucket_base = group->key_offsets[first.key] + first.value_offset;
      for (size_t j = 0; j < part.members.size(); ++j) {
        const GroupPlan::Member& m = part.members[j];
        if (group->key_offsets[m.key] + m.value_offset != part.bucket_base + part.offsets[j]) {
          part.bucket_base = GroupPlan::kScattered;
          break;
        }
      }
    }
    group->uniform = group->pieces.size() == keys.size() && !group->int_keys.empty() &&
                     group->one_dtype;
    const size_t rank = group->dims_at[1];
    for (size_t i = 0; group->uniform && i < keys.size(); ++i) {
      const GroupPlan::Piece& piece = group->pieces[i];
      // Parts are numbered in order of appearance: a part's keys form a stretch when the
      // part index never goes back.
      if (i == 0 || piece.part != group->pieces[i - 1].part) group->part_first.push_back(i);
      group->uniform = piece.key == i && piece.value_offset == 0 &&
                       piece.part + 1 == group->part_first.size() &&
                       piece.bytes == group->pieces[0].bytes &&
                       piece.packed_offset ==
                           (i - group->part_first.back()) * size_t{piece.bytes} &&
                       group->dims_at[i + 1] - group->dims_at[i] == rank &&
                       std::equal(group->dims.begin() + group->dims_at[i],
                                  group->dims.begin() + group->dims_at[i + 1],
                                  group->dims.begin());
    }
    if (group->uniform) {
      group->uniform_bytes = group->pieces[0].bytes;
      group->consecutive = true;
      for (size_t i = 1; group->consecutive && i < keys.size(); ++i) {
        group->consecutive = group->int_keys[i - 1] < std::numeric_limits<int64_t>::max() &&
                             group->int_keys[i] == group->int_keys[i - 1] + 1;
      }
      group->part_first.push_back(keys.size());
    } else {
      group->part_first.clear();
    }
    group->registered = std::make_unique<std::atomic<bool>[]>(group->parts.size());
    for (size_t p = 0; p < group->parts.size(); ++p) group->registered[p] = false;
  }
  absl::MutexLock lock(&groups_mu_);
  if (groups_.size() >= kMaxGroups) groups_.erase(groups_.begin());
  if (!eligible) {
    groups_[fingerprint] = nullptr;
    return nullptr;
  }
  group->id = next_group_id_++;
  groups_[fingerprint] = group;
  last_group_ = group;
  return group;
}

bool DistStore::SameKeys(const GroupPlan& group, absl::Span<const Key> keys) {
  if (keys.size() != group.keys.size()) return false;
  if (group.int_keys.empty()) return std::equal(keys.begin(), keys.end(), group.keys.begin());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i].is_int() || keys[i].int_key() != group.int_keys[i]) return false;
  }
  return true;
}

bool DistStore::Matches(const GroupPlan& group, size_t i, const Tensor& t) {
  const uint32_t first = group.dims_at[i];
  return MatchesShape(t, group.dtypes[i], group.dims.data() + first,
                      group.dims_at[i + 1] - first);
}

bool DistStore::MatchesShape(const Tensor& t, DType dtype, const int64_t* dims, size_t rank) {
  if (!t.defined() || !t.device().is_cpu() || t.dtype() != dtype) return false;
  // A loop, not std::equal: that becomes a call to memcmp per key, for one or two dimensions.
  const Shape& shape = t.shape();
  if (shape.size() != rank) return false;
  for (size_t d = 0; d < rank; ++d) {
    if (shape[d] != dims[d]) return false;
  }
  return true;
}

namespace {
// Lists of at least this many pieces are checked on two threads, in blocks of kCheckBlock.
constexpr size_t kSplitCheckPieces = 16384;
constexpr size_t kCheckBlock = 4096;

// What one block of a check found for one part: the start of the part that its pieces imply,
// in the buffer of `head` (its first piece's tensor; null: the block has none), unless they
// disagree (`scattered`).
struct SeenPart {
  uintptr_t base = 0;
  const Tensor* head = nullptr;
  bool scattered = false;
};

enum class BlockCheck { kOk, kMismatch, kOtherKeys };

// How a uniform check compares the call's keys: not at all (the call named no keys), as
// consecutive integers from the group's first, or against the group's integer keys.
enum class KeyCompare { kNone, kConsecutive, kListed };

// Checks pieces [begin, end) of a uniform group (piece k is key k, of `bytes` bytes at
// (k - first[p]) * bytes in part p, whose keys are [first[p], first[p + 1])), starting in part
// p: key k must be integer key listed[k] (key0 + k when consecutive) and differs(tensor(k))
// must be 0. Records into mine[p] where each part's pieces imply the part starts, and whether
// they agree. Other keys win over a tensor that does not match (the call then belongs to
// another group, which checks it again).
//
// This loop is the whole cost of checking a long list, so it has no branch per piece: each
// piece ORs what differs into three words, which are looked at once per part. Everything
// comes by value and the loop stores only to locals, so that the compiler keeps it all in
// registers.
template <KeyCompare kKeys, typename TensorAt, typename Differs>
BlockCheck CheckUniformBlock(size_t begin, size_t end, TensorAt tensor, Differs differs,
                             const Key* keys, const int64_t* listed, int64_t key0, size_t bytes,
                             const size_t* first, size_t p, SeenPart* mine) {
  uint64_t keys_differ = 0;
  uint64_t kinds_differ = 0;
  for (size_t k = begin; k < end; ++p) {
    const size_t part_first = first[p];
    const size_t stop = std::min(end, first[p + 1]);
    if (k == stop) continue;  // A part without keys.
    const Tensor& head = tensor(k);
    const uintptr_t base =
        reinterpret_cast<uintptr_t>(head.data()) - (k - part_first) * bytes;
    uintptr_t apart = 0;
    for (; k < stop; ++k) {
      if constexpr (kKeys != KeyCompare::kNone) {
        const int64_t want =
            kKeys == KeyCompare::kListed ? listed[k] : key0 + static_cast<int64_t>(k);
        keys_differ |= static_cast<uint64_t>(!keys[k].is_int()) |
                       static_cast<uint64_t>(keys[k].int_key() ^ want);
      }
      const Tensor& t = tensor(k);
      kinds_differ |= differs(t);
      apart |= (reinterpret_cast<uintptr_t>(t.data()) - (k - part_first) * bytes) ^ base;
      apart |= static_cast<uintptr_t>(!t.SameBuffer(head));
    }
    mine[p] = SeenPart{base, &head, apart != 0};
  }
  if (keys_differ != 0) return BlockCheck::kOtherKeys;
  return kinds_differ != 0 ? BlockCheck::kMismatch : BlockCheck::kOk;
}
}  // namespace

template <typename TensorAt>
DistStore::GroupCheck DistStore::CheckGroupTensors(const GroupPlan& group,
                                                   absl::Span<const Key> keys, TensorAt tensor,
                                                   std::vector<uint8_t*>* bases) {
  // A part's members lie back to back in one buffer when every piece implies the same start of
  // the part (its address less its offset in the part) in the same buffer. Each block of
  // pieces finds, per part, the start its pieces imply and whether they all agree; the blocks
  // are then merged in order.
  const size_t parts = group.parts.size();
  const size_t n = group.pieces.size();
  const size_t block = n >= kSplitCheckPieces ? kCheckBlock : std::max<size_t>(n, 1);
  const size_t blocks = (n + block - 1) / block;
  std::vector<SeenPart> seen(blocks * parts);
  std::atomic<bool> mismatched{false};
  std::atomic<bool> other_keys{false};
  auto agree = [](SeenPart& into, uintptr_t base, const Tensor& t) {
    if (into.head == nullptr) {
      into.head = &t;
      into.base = base;
    } else if (base != into.base || !t.SameBuffer(*into.head)) {
      into.scattered = true;
    }
  };
  if (group.uniform) {
    // No piece, dtype or shape to read per key.
    const DType dtype = group.dtypes[0];
    const int64_t* dims = group.dims.data();
    const size_t rank = group.dims_at[1];
    const size_t bytes = group.uniform_bytes;
    const std::vector<size_t>& first = group.part_first;
    // Consecutive keys: key k is key0 + k, computed rather than read from int_keys.
    const int64_t* expected = group.consecutive ? nullptr : group.int_keys.data();
    const int64_t key0 = group.int_keys[0];
    // A small shape is compared through the handle's code, without reading its dimensions.
    const uint32_t code = ShapeCode(Shape(dims, dims + rank));
    const Key* const key_list = keys.empty() ? nullptr : keys.data();
    // A tensor of the group's small shape, dtype and device has this signature.
    const uint64_t signature = Tensor::Signature(dtype, code, Device::CPU());
    split_.Run(n, block, [&](size_t begin, size_t end) {
      const size_t p = static_cast<size_t>(
          std::upper_bound(first.begin(), first.end(), begin) - first.begin()) - 1;
      SeenPart* mine = &seen[begin / block * parts];
      // One instantiation per way of comparing keys and tensors, each a loop of its own.
      auto run = [&](auto differs) {
        if (key_list == nullptr) {
          return CheckUniformBlock<KeyCompare::kNone>(begin, end, tensor, differs, key_list,
                                                      expected, key0, bytes, first.data(), p,
                                                      mine);
        }
        if (expected == nullptr) {
          return CheckUniformBlock<KeyCompare::kConsecutive>(begin, end, tensor, differs,
                                                             key_list, expected, key0, bytes,
                                                             first.data(), p, mine);
        }
        return CheckUniformBlock<KeyCompare::kListed>(begin, end, tensor, differs, key_list,
                                                      expected, key0, bytes, first.data(), p,
                                                      mine);
      };
      const BlockCheck result =
          code != 0 ? run([signature](const Tensor& t) { return t.signature() ^ signature; })
                    : run([dtype, dims, rank](const Tensor& t) {
                        return static_cast<uint64_t>(!MatchesShape(t, dtype, dims, rank));
                      });
      if (result == BlockCheck::kOtherKeys) other_keys.store(true, std::memory_order_relaxed);
      if (result == BlockCheck::kMismatch) mismatched.store(true, std::memory_order_relaxed);
    });
  } else {
    split_.Run(n, block, [&](size_t begin, size_t end) {
      SeenPart* mine = &seen[begin / block * parts];
      size_t checked = std::numeric_limits<size_t>::max();
      for (size_t k = begin; k < end; ++k) {
        const GroupPlan::Piece& piece = group.pieces[k];
        const Tensor& t = tensor(piece.key);
        if (piece.key != checked) {
          if (!keys.empty() && !SameKey(group, piece.key, keys[piece.key])) {
            other_keys.store(true, std::memory_order_relaxed);
            return;
          }
          if (!Matches(group, piece.key, t)) {
            mismatched.store(true, std::memory_order_relaxed);
            return;
          }
          checked = piece.key;
        }
        SeenPart& part = mine[piece.part];
        if (part.scattered) continue;
        const uintptr_t data = reinterpret_cast<uintptr_t>(t.data());
        agree(part, data + piece.value_offset - piece.packed_offset, t);
      }
    });
  }
  // A block stops at its first key that differs (a uniform block looks at every key and
  // reports other keys first), so a tensor that did not match belongs to a key of the group's
  // list: with other keys the call is checked again against their group.
  if (other_keys.load(std::memory_order_relaxed)) return GroupCheck::kOtherKeys;
  if (mismatched.load(std::memory_order_relaxed)) return GroupCheck::kMismatch;
  bases->assign(parts, nullptr);
  for (size_t p = 0; p < parts; ++p) {
    SeenPart whole;
    for (size_t b = 0; b < blocks && !whole.scattered; ++b) {
      const SeenPart& part = seen[b * parts + p];
      if (part.head == nullptr) continue;
      if (part.scattered) whole.scattered = true;
      agree(whole, part.base, *part.head);
    }
    if (!whole.scattered && whole.head != nullptr) {
      (*bases)[p] = reinterpret_cast<uint8_t*>(whole.base);
    }
  }
  return GroupCheck::kOk;
}

DistStore::GroupCheck DistStore::PackGroup(GroupPlan& group, absl::Span<const Key> keys,
                                           absl::Span<const Tensor> values, GroupWork* work) {
  std::vector<uint8_t*> bases;
  const GroupCheck check = CheckGroupTensors(
      group, keys, [&](size_t i) -> const Tensor& { return values[i]; }, &bases);
  if (check != GroupCheck::kOk) return check;
  // Values already back to back in each part's order (views of one bucket) go as they are.
  if (std::none_of(bases.begin(), bases.end(), [](uint8_t* b) { return b == nullptr; })) {
    SendFrom(group, bases,
             [&](const GroupPlan::Part& part) { return values[part.members.front().key]; }, work);
    return GroupCheck::kOk;
  }
  PackPieces(group, [&](size_t i) { return static_cast<const uint8_t*>(values[i].data()); },
             work);
  return GroupCheck::kOk;
}

template <typename Owner>
void DistStore::SendFrom(const GroupPlan& group, const std::vector<uint8_t*>& bases,
                         Owner owner, GroupWork* work) {
  for (size_t p = 0; p < group.parts.size(); ++p) {
    const GroupPlan::Part& part = group.parts[p];
    // Every dtype is 2, 4 or 8 bytes, so a part is whole 16-bit words; the handle keeps the
    // owner's buffer alive until the request is sent.
    work->packed.push_back(Tensor::Adopt(bases[p], DType::kFloat16,
                                         {static_cast<int64_t>(part.offsets.back() / 2)},
                                         Device::CPU(), [keep = owner(part)] {}));
  }
  work->direct = true;
}

template <typename KeyData>
void DistStore::PackPieces(GroupPlan& group, KeyData key_data, GroupWork* work) {
  std::vector<Tensor>* packed = &work->packed;
  {
    absl::MutexLock lock(&group.spare_mu);
    while (!group.spare.empty() && packed->empty()) {
      std::vector<Tensor> candidate = std::move(group.spare.back());
      group.spare.pop_back();
      if (std::none_of(candidate.begin(), candidate.end(),
                       [](const Tensor& t) { return t.shared(); })) {
        *packed = std::move(candidate);
      }
    }
  }
  if (packed->empty()) {
    for (const GroupPlan::Part& part : group.parts) {
      const int64_t words = static_cast<int64_t>((part.offsets.back() + 3) / 4);
      packed->push_back(Tensor::Zeros(DType::kInt32, {std::max<int64_t>(words, 1)}));
    }
  }
  std::vector<uint8_t*> arrays;
  for (Tensor& t : *packed) arrays.push_back(static_cast<uint8_t*>(t.data()));
  for (const GroupPlan::Piece& piece : group.pieces) {
    std::memcpy(arrays[piece.part] + piece.packed_offset, key_data(piece.key) + piece.value_offset,
                piece.bytes);
  }
}

DistStore::GroupCheck DistStore::CheckGroupOutputs(const GroupPlan& group,
                                                   absl::Span<const Key> keys,
                                                   absl::Span<Tensor* const> outs,
                                                   GroupWork* work) {
  const GroupCheck check = CheckGroupTensors(
      group, keys, [&](size_t i) -> const Tensor& { return *outs[i]; }, &work->out_bases);
  if (check != GroupCheck::kOk) return check;
  if (std::any_of(work->out_bases.begin(), work->out_bases.end(),
                  [](uint8_t* b) { return b == nullptr; })) {
    for (Tensor* out : outs) work->out_data.push_back(static_cast<uint8_t*>(out->data()));
  }
  return GroupCheck::kOk;
}

bool DistStore::TryGroupBucket(Kind kind, absl::Span<const Key> keys, const Tensor* in,
                               Tensor* out, int priority) {
  std::shared_ptr<GroupPlan> group = GroupFor(keys, kind != Kind::kPull);
  return group != nullptr && EnqueueBucket(kind, std::move(group), in, out, priority);
}

bool DistStore::EnqueueBucket(Kind kind, std::shared_ptr<GroupPlan> group, const Tensor* in,
                              Tensor* out, int priority) {
  const bool pushes = kind != Kind::kPull;
  if (!group->one_dtype) return false;
  for (const Tensor* bucket : {in, static_cast<const Tensor*>(out)}) {
    if (bucket != nullptr &&
        (bucket->dtype() != group->dtypes.front() ||
         bucket->byte_size() != group->key_offsets.back())) {
      return false;
    }
  }
  Op op;
  op.priority = priority;
  op.kind = kind;
  op.bytes = group->bytes;
  if (pushes) {
    auto* data = static_cast<uint8_t*>(in->data());
    if (std::all_of(group->parts.begin(), group->parts.end(), [](const GroupPlan::Part& part) {
          return part.bucket_base != GroupPlan::kScattered;
        })) {
      std::vector<uint8_t*> bases;
      for (const GroupPlan::Part& part : group->parts) bases.push_back(data + part.bucket_base);
      SendFrom(*group, bases, [&](const GroupPlan::Part&) { return *in; }, &op.group_work);
    } else {
      PackPieces(*group, [&](size_t i) { return data + group->key_offsets[i]; },
                 &op.group_work);
    }
  }
  if (kind != Kind::kPush) {
    auto* data = static_cast<uint8_t*>(out->data());
    bool scattered = false;
    for (const GroupPlan::Part& part : group->parts) {
      scattered = scattered || part.bucket_base == GroupPlan::kScattered;
      op.group_work.out_bases.push_back(
          part.bucket_base == GroupPlan::kScattered ? nullptr : data + part.bucket_base);
    }
    if (scattered) {
      for (size_t i = 0; i + 1 < group->key_offsets.size(); ++i) {
        op.group_work.out_data.push_back(data + group->key_offsets[i]);
      }
    }
  }
  op.group = std::move(group);
  EnqueueOp(std::move(op));
  return true;
}

absl::Status DistStore::DoPushBucket(absl::Span<const Key> keys, const Tensor& bucket,
                                     int priority) {
  if (TryGroupBucket(Kind::kPush, keys, &bucket, nullptr, priority)) return absl::OkStatus();
  return KVStore::DoPushBucket(keys, bucket, priority);
}

absl::Status DistStore::DoIntKeyBucket(absl::Span<const int64_t> keys, const Tensor* in,
                                       Tensor* out, int priority) {
  const Kind kind = in == nullptr    ? Kind::kPull
                    : out == nullptr ? Kind::kPush
                                     : Kind::kPushPull;
  std::shared_ptr<GroupPlan> group = IntGroupFor(keys, kind != Kind::kPull);
  if (group != nullptr && EnqueueBucket(kind, std::move(group), in, out, priority)) {
    return absl::OkStatus();
  }
  return KVStore::DoIntKeyBucket(keys, in, out, priority);
}

absl::Status DistStore::DoPullBucket(absl::Span<const Key> keys, Tensor* bucket, int priority) {
  if (TryGroupBucket(Kind::kPull, keys, nullptr, bucket, priority)) return absl::OkStatus();
  return KVStore::DoPullBucket(keys, bucket, priority);
}

absl::Status DistStore::DoPushPullBucket(absl::Span<const Key> keys, const Tensor& bucket,
                                         Tensor* out, int priority) {
  if (TryGroupBucket(Kind::kPushPull, keys, &bucket, out, priority)) return absl::OkStatus();
  return KVStore::DoPushPullBucket(keys, bucket, out, priority);
}

absl::StatusOr<std::pair<DType, Shape>> DistStore::StoredSpec(const Key& key) const {
  absl::ReaderMutexLock lock(&keys_mu_);
  absl::StatusOr<std::shared_ptr<KeyInfo>> info = Lookup(key);
  if (!info.ok()) return info.status();
  return std::make_pair((*info)->dtype, (*info)->shape);
}

bool DistStore::TryGroup(Kind kind, absl::Span<const Key> keys, absl::Span<const Tensor> values,
                         absl::Span<Tensor* const> outs, int priority) {
  const bool pushes = kind != Kind::kPull;
  // The group used last, its keys compared while the tensors are checked; when the list turns
  // out to be another, its own group (GroupFor compares the list before returning it).
  if (std::shared_ptr<GroupPlan> recent = RecentGroup(keys, pushes); recent != nullptr) {
    const GroupCheck check = EnqueueGroup(kind, std::move(recent), keys, values, outs, priority);
    if (check != GroupCheck::kOtherKeys) return check == GroupCheck::kOk;
  }
  std::shared_ptr<GroupPlan> group = GroupFor(keys, pushes);
  return group != nullptr &&
         EnqueueGroup(kind, std::move(group), {}, values, outs, priority) == GroupCheck::kOk;
}

DistStore::GroupCheck DistStore::EnqueueGroup(Kind kind, std::shared_ptr<GroupPlan> group,
                                              absl::Span<const Key> unchecked,
                                              absl::Span<const Tensor> values,
                                              absl::Span<Tensor* const> outs, int priority) {
  Op op;
  op.priority = priority;
  op.kind = kind;
  op.bytes = group->bytes;
  if (kind != Kind::kPull) {
    const GroupCheck check = PackGroup(*group, unchecked, values, &op.group_work);
    if (check != GroupCheck::kOk) return check;
    unchecked = {};  // Compared by PackGroup.
  }
  if (kind != Kind::kPush) {
    const GroupCheck check = CheckGroupOutputs(*group, unchecked, outs, &op.group_work);
    if (check != GroupCheck::kOk) return check;
  }
  op.group = std::move(group);
  EnqueueOp(std::move(op));
  return GroupCheck::kOk;
}

void DistStore::TransferGroup(Kind kind, std::shared_ptr<GroupPlan> group, GroupWork work,
                              OpDone done) {
  struct State {
    absl::Mutex mu;
    size_t remaining = 0;
    absl::Status error;
    std::shared_ptr<GroupPlan> group;
    GroupWork work;
    OpDone done;
  };
  auto state = std::make_shared<State>();
  state->remaining = group->parts.size();
  state->group = std::move(group);
  state->work = std::move(work);
  state->done = std::move(done);
  const GroupPlan& g = *state->group;
  if (g.parts.empty()) {
    state->done(absl::OkStatus());
    return;
  }
  const bool sends = kind != Kind::kPull;
  const bool receives = kind != Kind::kPush;
  const char* method = kind == Kind::kPush   ? kPushMethod
                       : kind == Kind::kPull ? kPullMethod
                                             : kPushPullMethod;
  const uint64_t request_id = sends ? next_request_id_.fetch_add(g.parts.size()) : 0;
  // Frame builds part p's request, listing the members when the server may not have them.
  auto frame = [this, state, kind, sends, request_id](size_t p, bool list) {
    const GroupPlan& g = *state->group;
    const GroupPlan::Part& part = g.parts[p];
    auto fill = [&](auto message) -> absl::StatusOr<grpc::ByteBuffer> {
      message.set_node_id(node_id_);
      message.set_group_id(g.id);
      if constexpr (!std::is_same_v<decltype(message), proto::PullRequest>) {
        message.set_request_id(request_id + p);
      }
      if (list) {
        message.mutable_tensors()->Reserve(static_cast<int>(part.members.size()));
        for (const GroupPlan::Member& m : part.members) {
          const KeyInfo& info = *g.infos[m.key];
          FillHeader(g.keys[m.key], info.dtype, info.shape, m.chunk, message.add_tensors());
        }
      }
      if (!sends) return EncodeMessage(message);
      const PayloadPart payload{state->work.packed[p], 0, part.offsets.back()};
      return EncodeFrame(message, absl::MakeConstSpan(&payload, 1));
    };
    switch (kind) {
      case Kind::kPush: return fill(proto::PushRequest());
      case Kind::kPull: return fill(proto::PullRequest());
      default: return fill(proto::PushPullRequest());
    }
  };
  auto finish = [state](absl::Status status) {
    bool last;
    {
      absl::MutexLock lock(&state->mu);
      if (!status.ok() && state->error.ok()) state->error = status;
      last = --state->remaining == 0;
    }
    if (!last) return;
    if (!state->work.packed.empty() && !state->work.direct) {
      absl::MutexLock lock(&state->group->spare_mu);
      if (state->group->spare.size() < 2) {
        state->group->spare.push_back(std::move(state->work.packed));
      }
    }
    state->done(state->error);
  };
  // Send sends part p; a server that does not know the group gets the member list once more.
  auto send = std::make_shared<std::function<void(size_t, bool)>>();
  *send = [this, state, frame, finish, receives, method, send_weak = std::weak_ptr(send)](
              size_t p, bool retried) {
    const GroupPlan& g = *state->group;
    const bool list = !g.registered[p].load();
    absl::StatusOr<grpc::ByteBuffer> request = frame(p, list);
    if (!request.ok()) {
      finish(request.status());
      return;
    }
    const int s = g.parts[p].server;
    Call(s, method, std::make_shared<grpc::ByteBuffer>(*std::move(request)),
         [this, state, finish, receives, p, s, list, retried, send = send_weak.lock()](
             absl::Status status, grpc::ByteBuffer* reply) {
           const GroupPlan& g = *state->group;
           if (status.code() == absl::StatusCode::kFailedPrecondition && !list && !retried &&
               absl::StrContains(status.message(), "no key group")) {
             g.registered[p] = false;  // The server lost it (it restarted): list it again.
             (*send)(p, true);
             return;
           }
           if (status.ok() && list) g.registered[p] = true;
           if (status.ok() && receives) {
             proto::PullResponse header;
             absl::StatusOr<Payload> payload = DecodeFrame(*reply, &header);
             status = payload.status();
             const GroupPlan::Part& part = g.parts[p];
             if (status.ok() && payload->size() != part.offsets.back()) {
               status = absl::InternalError(absl::StrCat(
                   "key group reply holds ", payload->size(), " bytes, expected ",
                   part.offsets.back()));
             }
             if (status.ok() && state->work.out_bases[p] != nullptr) {
               status = payload->CopyTo(0, part.offsets.back(), state->work.out_bases[p]);
             }
             for (size_t j = 0; status.ok() && state->work.out_bases[p] == nullptr &&
                                j < part.members.size();
                  ++j) {
               const size_t begin = part.offsets[j], bytes = part.offsets[j + 1] - begin;
               const GroupPlan::Member& m = part.members[j];
               void* out = state->work.out_data[m.key] + m.value_offset;
               status = payload->CopyTo(begin, bytes, out);
             }
             if (!status.ok()) status = ServerError(s, status);
           }
           finish(status);
         });
  };
  for (size_t p = 0; p < g.parts.size(); ++p) (*send)(p, false);
}

void DistStore::Call(int s, const char* method, std::shared_ptr<grpc::ByteBuffer> request,
                     std::function<void(absl::Status, grpc::ByteBuffer*)> done, int attempt) {
  auto rpc = std::make_unique<Rpc>();
  rpc->context.set_deadline(GrpcDeadline(absl::Now() + options_.rpc_timeout));
  Server& server = servers_[s];
  grpc::GenericStub* stub = server.stubs[(*server.next_stub)++ % server.stubs.size()].get();
  rpc->on_status = [this, s, method, request, done = std::move(done), attempt,
                    reply = &rpc->reply](const grpc::Status& status) {
    if (status.ok()) {
      done(absl::OkStatus(), reply);
      return;
    }
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE && attempt < options_.max_retries) {
      const absl::Duration backoff =
          std::min(options_.retry_backoff * (1 << std::min(attempt, 16)), absl::Seconds(2));
      After(backoff, [this, s, method, request, done, attempt] {
        Call(s, method, request, done, attempt + 1);
      });
      return;
    }
    absl::Status error = FromGrpcStatus(status);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      error = absl::UnavailableError(absl::StrCat("unreachable after ", attempt + 1,
                                                  " attempts: ", error.message()));
    } else if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      error = absl::DeadlineExceededError(absl::StrCat(
          "no answer within ", absl::FormatDuration(options_.rpc_timeout), " (", method,
          "; in dist_sync a push waits for every worker's push of the key)"));
    }
    done(ServerError(s, error), nullptr);
  };
  rpc->reader = stub->PrepareUnaryCall(&rpc->context, method, *request, &cq_);
  rpc->reader->StartCall();
  Rpc* raw = rpc.release();  // Owned by cq_ until CompleteCalls takes it back.
  raw->reader->Finish(&raw->reply, &raw->status, raw);
}

void DistStore::CompleteCalls() {
  void* tag;
  bool ok;
  while (cq_.Next(&tag, &ok)) {
    std::unique_ptr<Rpc> rpc(static_cast<Rpc*>(tag));
    rpc->on_status(rpc->status);
  }
}

void DistStore::After(absl::Duration delay, std::function<void()> fn) {
  absl::MutexLock lock(&timer_mu_);
  timers_.emplace(absl::Now() + delay, std::move(fn));
}

void DistStore::TimerLoop() {
  while (true) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&timer_mu_);
      if (timer_stop_) return;
      if (!timers_.empty() && timers_.begin()->first <= absl::Now()) {
        fn = std::move(timers_.begin()->second);
        timers_.erase(timers_.begin());
      }
    }
    if (fn) {
      fn();
    } else {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
}

void DistStore::HeartbeatLoop() {
  bool warned = false;
  while (!stop_heartbeat_.WaitForNotificationWithTimeout(heartbeat_interval_)) {
    proto::HeartbeatRequest request;
    request.set_node_id(node_id_);
    proto::HeartbeatResponse reply;
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadline(absl::Now() + std::max(heartbeat_interval_,
                                                             absl::Seconds(2))));
    const grpc::Status status = scheduler_->Heartbeat(&context, request, &reply);
    if (!status.ok()) {
      if (!warned) {
        spdlog::warn("worker {}: heartbeat to the scheduler at {} failed: {}", rank_,
                     scheduler_address_, status.error_message());
      }
      warned = true;
      continue;
    }
    warned = false;
    if (reply.shutdown()) {
      job_over_ = true;
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Scheduler calls

absl::Status DistStore::Barrier() {
  proto::BarrierRequest request;
  request.set_node_id(node_id_);
  request.set_group(proto::GROUP_WORKERS);
  proto::BarrierResponse reply;
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(absl::Now() + options_.barrier_timeout));
  const grpc::Status status = scheduler_->Barrier(&context, request, &reply);
  if (status.ok()) return absl::OkStatus();
  const absl::Status error = FromGrpcStatus(status);
  return absl::Status(error.code(), absl::StrCat("barrier at the scheduler ", scheduler_address_,
                                                 ": ", error.message()));
}

absl::Status DistStore::SetUpdater(Updater /*updater*/) {
  return absl::FailedPreconditionError(
      "a distributed store runs updaters on its servers: select one by name with "
      "SendCommandToServers(0, \"sgd lr=0.1 momentum=0.9\") or kvserver --updater");
}

absl::Status DistStore::DoSetOptimizer(const OptimizerConfig& config) {
  proto::OptimizerConfig message;
  OptimizerConfigToProto(config, &message);
  return SendCommandToServers(kSetOptimizerCommand, message.SerializeAsString());
}

absl::Status DistStore::DoSetGradientCompression(const CompressionParams& params) {
  // Pushes issued from now on use `params`; a key's residual restarts from zero when its next
  // compressed push finds different parameters.
  absl::MutexLock lock(&mu_);
  compression_ = params;
  return absl::OkStatus();
}

absl::Status DistStore::SendCommandToServers(int head, const std::string& body) {
  return Command(head, body).status();
}

absl::Status DistStore::SaveOptimizerStates(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<std::string> replies, Command(kSaveStatesCommand, ""));
  UpdaterStateData merged;
  for (size_t s = 0; s < replies.size(); ++s) {
    proto::UpdaterState message;
    if (!message.ParseFromString(replies[s])) {
      return absl::InternalError(absl::StrCat("server ", s, " sent optimizer state that does not parse"));
    }
    ASSIGN_OR_RETURN(UpdaterStateData state, UpdaterStateFromProto(message));
    if (s > 0 && state.optimizer != merged.optimizer) {
      return absl::FailedPreconditionError(absl::StrCat(
          "servers run different updaters (\"", merged.optimizer, "\" and \"", state.optimizer,
          "\"); set one optimizer on all of them first"));
    }
    merged.optimizer = state.optimizer;
    merged.num_update = std::max(merged.num_update, state.num_update);
    for (PartStateData& part : state.parts) merged.parts.push_back(std::move(part));
  }
  return SaveOptimizerStateFile(path, merged);
}

absl::Status DistStore::LoadOptimizerStates(const std::string& path) {
  ASSIGN_OR_RETURN(UpdaterStateData state, LoadOptimizerStateFile(path));
  proto::UpdaterState message;
  UpdaterStateToProto(state, &message);
  const absl::Status status = Command(kLoadStatesCommand, message.SerializeAsString()).status();
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

absl::Status DistStore::Checkpoint(const std::string& dir) {
  return Command(kCheckpointCommand, dir).status();
}

absl::StatusOr<std::vector<std::string>> DistStore::Command(int head, const std::string& body) {
  proto::CommandRequest request;
  request.set_node_id(node_id_);
  request.set_head(head);
  request.set_body(body);
  proto::CommandResponse reply;
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(absl::Now() + options_.rpc_timeout));
  const grpc::Status status = scheduler_->Command(&context, request, &reply);
  if (status.ok()) return std::vector<std::string>(reply.replies().begin(), reply.replies().end());
  const absl::Status error = FromGrpcStatus(status);
  return absl::Status(error.code(), absl::StrCat("command ", head, " through the scheduler at ",
                                                 scheduler_address_, ": ", error.message()));
}

absl::StatusOr<int> DistStore::NumDeadNodes(NodeGroup group, absl::Duration timeout) {
  proto::ClusterStatusRequest request;
  request.set_node_id(node_id_);
  request.set_group(static_cast<proto::Group>(group));
  request.set_timeout_s(
      static_cast<int32_t>(std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(
                                                    timeout, absl::Seconds(1))))));
  proto::ClusterStatusResponse reply;
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(absl::Now() + absl::Seconds(30)));
  const grpc::Status status = scheduler_->ClusterStatus(&context, request, &reply);
  if (!status.ok()) {
    const absl::Status error = FromGrpcStatus(status);
    return absl::Status(error.code(), absl::StrCat("asking the scheduler at ", scheduler_address_,
                                                   " for dead nodes: ", error.message()));
  }
  return reply.num_dead();
}

}  // namespace kvstore
