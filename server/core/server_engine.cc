#include "server/core/server_engine.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/reduce.h"
#include "common/status_macros.h"

namespace kvstore {

void GatherBytes(const ByteChunks& bytes, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  for (const absl::Span<const uint8_t>& chunk : bytes) {
    if (chunk.empty()) continue;
    std::memcpy(out, chunk.data(), chunk.size());
    out += chunk.size();
  }
}

absl::StatusOr<std::unique_ptr<ServerEngine>> ServerEngine::Create(
    ServerEngineOptions options, std::unique_ptr<Updater> updater) {
  if (options.worker_node_ids.empty()) {
    return absl::InvalidArgumentError("a server engine needs the job's worker node ids");
  }
  if (updater == nullptr) updater = MakeAssignUpdater();
  return std::unique_ptr<ServerEngine>(new ServerEngine(std::move(options), std::move(updater)));
}

ServerEngine::ServerEngine(ServerEngineOptions options, std::unique_ptr<Updater> updater)
    : options_(std::move(options)), store_(std::move(updater)) {
  senders_.insert(options_.worker_node_ids.begin(), options_.worker_node_ids.end());
  senders_.insert(kSchedulerNodeId);
}

absl::Status ServerEngine::CheckSender(uint64_t node_id) const {
  if (senders_.contains(node_id)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "node id ", node_id, " is not a worker of this job (the scheduler never issued it)"));
}

Shape ServerEngine::StoredShape(const ValueSlice& slice) {
  int64_t total = 1;
  for (int64_t d : slice.shape) total *= d;
  if (slice.offset == 0 && slice.count == total) return slice.shape;
  return Shape{slice.count};
}

absl::Status ServerEngine::CheckBytes(const IncomingValue& value) {
  const ValueSlice& s = value.slice;
  int64_t total = 1;
  for (int64_t d : s.shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", s.key.Quoted(), ": negative dimension in shape ",
                       ShapeToString(s.shape)));
    }
    total *= d;
  }
  if (s.offset < 0 || s.count < 0 || s.offset > total || s.count > total - s.offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", s.key.Quoted(), ": slice [", s.offset, ", ", s.offset + s.count,
        ") lies outside a value of shape ", ShapeToString(s.shape)));
  }
  size_t received = 0;
  for (const auto& chunk : value.bytes) received += chunk.size();
  const size_t expected = static_cast<size_t>(s.count) * DTypeSize(s.dtype);
  if (received != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", s.key.Quoted(), ": ", received, " bytes received for ", s.count, " ",
        DTypeName(s.dtype), " elements (", expected, " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status ServerEngine::CheckSlice(const ValueSlice& slice, absl::string_view verb) const {
  auto it = layout_.find(slice.key);
  if (it == layout_.end()) {
    return absl::NotFoundError(
        absl::StrCat("key ", slice.key.Quoted(), " was never initialised on this server"));
  }
  const ValueSlice& stored = it->second;
  if (slice.dtype != stored.dtype || slice.shape != stored.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", slice.key.Quoted(), ": ", verb, " ", DTypeName(slice.dtype),
        ShapeToString(slice.shape), " but the stored value is ", DTypeName(stored.dtype),
        ShapeToString(stored.shape)));
  }
  if (slice.offset != stored.offset || slice.count != stored.count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", slice.key.Quoted(), ": ", verb, " elements [", slice.offset, ", ",
        slice.offset + slice.count, ") but this server holds [", stored.offset, ", ",
        stored.offset + stored.count, ")"));
  }
  return absl::OkStatus();
}

absl::Status ServerEngine::Init(uint64_t node_id, absl::Span<const IncomingValue> values) {
  RETURN_IF_ERROR(CheckSender(node_id));
  absl::MutexLock lock(&mu_);
  std::vector<KeyValue> staged;
  staged.reserve(values.size());
  for (const IncomingValue& value : values) {
    RETURN_IF_ERROR(CheckBytes(value));
    if (layout_.contains(value.slice.key)) {
      return absl::AlreadyExistsError(
          absl::StrCat("key ", value.slice.key.Quoted(), " is already initialised"));
    }
    Tensor tensor = Tensor::Zeros(value.slice.dtype, StoredShape(value.slice));
    GatherBytes(value.bytes, tensor.data());
    staged.push_back(KeyValue{value.slice.key, std::move(tensor)});
  }
  // The store checks repeated keys and key kinds, and stores all or nothing.
  RETURN_IF_ERROR(store_.Init(staged));
  for (const IncomingValue& value : values) layout_.insert_or_assign(value.slice.key, value.slice);
  return absl::OkStatus();
}

Tensor& ServerEngine::Staging(const Key& key) {
  const ValueSlice& slice = layout_.at(key);
  Tensor& buffer = staging_[key];
  if (!buffer.defined()) buffer = Tensor::Zeros(slice.dtype, StoredShape(slice));
  return buffer;
}

void ServerEngine::RecordApplied(uint64_t node_id, uint64_t request_id) {
  NodeRequests& requests = requests_[node_id];
  requests.pending.erase(request_id);
  if (requests.applied.insert(request_id).second) {
    requests.applied_order.push_back(request_id);
    while (requests.applied_order.size() > options_.dedup_window) {
      requests.applied.erase(requests.applied_order.front());
      requests.applied_order.pop_front();
    }
  }
}

void ServerEngine::Push(uint64_t node_id, uint64_t request_id,
                        absl::Span<const IncomingValue> values, Done done) {
  std::vector<Done> completed;
  absl::Status error = CheckSender(node_id);
  {
    absl::MutexLock lock(&mu_);
    NodeRequests& requests = requests_[node_id];
    if (error.ok() && requests.applied.contains(request_id)) {
      completed.push_back(std::move(done));  // A retry of an applied push.
    } else if (auto it = requests.pending.find(request_id);
               error.ok() && it != requests.pending.end()) {
      it->second->done.push_back(std::move(done));  // A retry of a push waiting for its round.
      return;
    } else {
      // Validate everything before changing anything.
      absl::flat_hash_set<Key> seen;
      for (const IncomingValue& value : values) {
        if (!error.ok()) break;
        error = CheckBytes(value);
        if (error.ok()) error = CheckSlice(value.slice, "pushed");
        if (error.ok() && !seen.insert(value.slice.key).second) {
          error = absl::InvalidArgumentError(absl::StrCat(
              "key ", value.slice.key.Quoted(), " appears twice in one push request"));
        }
        if (error.ok() && options_.sync) {
          auto round = rounds_.find(value.slice.key);
          if (round != rounds_.end() &&
              std::find(round->second.contributors.begin(), round->second.contributors.end(),
                        node_id) != round->second.contributors.end()) {
            error = absl::FailedPreconditionError(absl::StrCat(
                "key ", value.slice.key.Quoted(), ": node ", node_id,
                " pushed twice in one dist_sync round (the round still waits for other "
                "workers)"));
          }
        }
      }
      if (error.ok() && !options_.sync) {
        std::vector<KeyValue> received;
        received.reserve(values.size());
        for (const IncomingValue& value : values) {
          Tensor& staging = Staging(value.slice.key);
          GatherBytes(value.bytes, staging.data());
          received.push_back(KeyValue{value.slice.key, staging});
        }
        error = store_.Push(received);
        if (error.ok()) RecordApplied(node_id, request_id);
        completed.push_back(std::move(done));
      } else if (error.ok()) {
        auto call = std::make_shared<PushCall>();
        call->node_id = node_id;
        call->request_id = request_id;
        call->remaining = static_cast<int>(values.size());
        call->done.push_back(std::move(done));
        requests.pending[request_id] = call;
        std::vector<std::shared_ptr<PushCall>> finished_calls;
        if (values.empty()) finished_calls.push_back(call);
        for (const IncomingValue& value : values) {
          Round& round = rounds_[value.slice.key];
          if (round.contributors.empty()) {
            if (!round.sum.defined()) {
              round.sum = Tensor::Zeros(value.slice.dtype, StoredShape(value.slice));
            }
            GatherBytes(value.bytes, round.sum.data());
          } else {
            Tensor& staging = Staging(value.slice.key);
            GatherBytes(value.bytes, staging.data());
            const absl::Status sum = AddInto(staging, &round.sum);
            if (!sum.ok()) error = sum;  // Same layout by construction; kept for safety.
          }
          round.contributors.push_back(node_id);
          round.calls.push_back(call);
          if (round.contributors.size() == options_.worker_node_ids.size()) {
            const absl::Status applied = store_.Push({KeyValue{value.slice.key, round.sum}});
            if (!applied.ok()) error = applied;
            for (auto& waiting : round.calls) {
              if (--waiting->remaining == 0) finished_calls.push_back(waiting);
            }
            round.contributors.clear();
            round.calls.clear();
          }
        }
        for (auto& finished : finished_calls) {
          RecordApplied(finished->node_id, finished->request_id);
          for (Done& d : finished->done) completed.push_back(std::move(d));
        }
      } else {
        completed.push_back(std::move(done));
      }
    }
  }
  for (Done& d : completed) d(error);
}

absl::StatusOr<std::vector<Tensor>> ServerEngine::Pull(
    uint64_t node_id, absl::Span<const ValueSlice> slices) const {
  RETURN_IF_ERROR(CheckSender(node_id));
  std::vector<Key> keys;
  std::vector<Tensor> outs;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const ValueSlice& slice : slices) {
      RETURN_IF_ERROR(CheckSlice(slice, "pulled"));
      keys.push_back(slice.key);
      outs.push_back(Tensor::Zeros(slice.dtype, StoredShape(slice)));
    }
  }
  std::vector<Tensor*> out_ptrs;
  for (Tensor& out : outs) out_ptrs.push_back(&out);
  RETURN_IF_ERROR(store_.Pull(keys, out_ptrs));
  return outs;
}

}  // namespace kvstore
