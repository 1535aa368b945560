#include "client/dense_transfer.h"

#include <grpcpp/support/byte_buffer.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/chunk_requests.h"
#include "client/gpu/staging.h"
#include "client/launch_order.h"
#include "client/request_header.h"
#include "common/reduce.h"
#include "common/row_sparse.h"
#include "common/status_macros.h"
#include "common/wire_frame.h"
#include "proto/kvstore.pb.h"

namespace kvstore {
namespace {

// Target: where a reply's chunk goes - key work[work_index], elements `chunk`.
struct Target {
  size_t work_index;
  Slice chunk;
};

// Request: the small values bound for a server together, or chunks of a cut value.
struct Request {
  int server = 0;
  bool deferred = false;  // An Init of parts whose bytes follow (kInitFill).
  std::vector<proto::TensorHeader> headers;
  std::vector<PayloadPart> parts;
  uint64_t payload_bytes = 0;
  std::vector<Target> targets;
};

// State: a transfer in flight, shared by its requests' completions.
struct State : Replies {
  std::vector<KeyWork> work;
  OpDone done;
  std::vector<std::function<void()>> launches;  // One per request, started in order.
  size_t next_launch = 0;                       // Guarded by mu.
};

// StagePulls gives each key pulled through the host (outputs on GPUs) its pinned buffer.
absl::Status StagePulls(std::vector<KeyWork>* work) {
  for (KeyWork& entry : *work) {
    if (!entry.via_host) continue;
    Tensor& staging = entry.info->pull_staging;
    if (!staging.defined()) {
      absl::StatusOr<Tensor> pinned = gpu::Pinned(entry.info->dtype, entry.info->shape);
      if (!pinned.ok()) return pinned.status();
      staging = *std::move(pinned);
    }
  }
  return absl::OkStatus();
}

// Sent: the value each key sends, and for values on GPUs their sum's way into pinned memory.
struct Sent {
  std::vector<Tensor> values;
  // Per key, null off the GPU; empty when no key is on a GPU (nothing to allocate or scan on
  // the CPU path).
  std::vector<std::shared_ptr<gpu::HostStaging>> staging;
};

// StageEnds returns where the stages of a key's sum on its way to pinned memory end
// (gpu::StageEnds over its chunks).
std::vector<size_t> StageEnds(const KeyInfo& info) {
  std::vector<size_t> chunk_ends;
  const size_t element = DTypeSize(info.dtype);
  for (const Slice& chunk : info.chunks) {
    chunk_ends.push_back(static_cast<size_t>(chunk.offset + chunk.count) * element);
  }
  return gpu::StageEnds(std::move(chunk_ends), static_cast<size_t>(info.bytes));
}

// ValuesToSend returns the value each key sends: the one pushed, or the sum of several (in the
// key's reused buffer). Values on GPUs are summed there and staged into pinned memory chunk by
// chunk, without waiting: each request waits for its own chunks (Sent::staging).
absl::StatusOr<Sent> ValuesToSend(std::vector<KeyWork>* work) {
  Sent sent;
  sent.values.resize(work->size());
  for (size_t i = 0; i < work->size(); ++i) {
    KeyWork& entry = (*work)[i];
    if (!entry.values.front().device().is_cpu()) {
      sent.staging.resize(work->size());
      ASSIGN_OR_RETURN(sent.staging[i],
                       gpu::StageToHost(entry.key, entry.values, StageEnds(*entry.info),
                                        &entry.info->gpu_scratch, &entry.info->gpu_staging));
      sent.values[i] = entry.info->gpu_staging;
      continue;
    }
    if (entry.values.size() == 1) {
      sent.values[i] = entry.values[0];
      continue;
    }
    Tensor& buffer = entry.info->merge_buffer;
    if (!buffer.defined()) buffer = Tensor::Zeros(entry.info->dtype, entry.info->shape);
    RETURN_IF_ERROR(SumInto(entry.values, &buffer));
    sent.values[i] = buffer;
  }
  return sent;
}

// StagedWait: a request's wait for the chunks it sends from pinned memory - up to `bytes` of
// one key's staging.
struct StagedWait {
  std::shared_ptr<gpu::HostStaging> staging;
  size_t bytes = 0;
};

// WaitForAllStaging waits until every key's sum on a GPU has landed in pinned memory: for
// what reads the sums on the CPU before sending (compression) or sends them whole (Init).
absl::Status WaitForAllStaging(const Sent& sent, const std::vector<KeyWork>& work) {
  for (size_t i = 0; i < sent.staging.size(); ++i) {
    if (sent.staging[i]) RETURN_IF_ERROR(sent.staging[i]->WaitFor(work[i].info->bytes));
  }
  return absl::OkStatus();
}

// StagedWaits returns, per request, the chunks of sums on GPUs it must wait for before it is
// sent (nothing at all when no key is on a GPU), and waits here for the chunks small enough
// that EncodeFrame copies them.
absl::StatusOr<std::vector<std::vector<StagedWait>>> StagedWaits(
    const Sent& sent, const std::vector<KeyWork>& work, const std::vector<Request>& requests) {
  std::vector<std::vector<StagedWait>> waits;
  if (sent.staging.empty()) return waits;
  waits.resize(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    for (const Target& target : requests[r].targets) {
      const std::shared_ptr<gpu::HostStaging>& staging = sent.staging[target.work_index];
      if (!staging) continue;
      const size_t element = DTypeSize(work[target.work_index].info->dtype);
      const size_t end = static_cast<size_t>(target.chunk.offset + target.chunk.count) * element;
      if (static_cast<size_t>(target.chunk.count) * element < kFrameCopyBelowBytes) {
        RETURN_IF_ERROR(staging->WaitFor(end));
        continue;
      }
      auto same = std::find_if(waits[r].begin(), waits[r].end(),
                               [&](const StagedWait& w) { return w.staging == staging; });
      if (same == waits[r].end()) {
        waits[r].push_back(StagedWait{staging, end});
      } else {
        same->bytes = std::max(same->bytes, end);
      }
    }
  }
  return waits;
}

// Compress quantises each float32 key's chunks with the key's residual into its reused code
// buffer, and returns where each chunk's codes start: code_offset[i][c] (empty for a key sent
// as it is).
std::vector<std::vector<size_t>> Compress(const CompressionParams& compression,
                                          const std::vector<KeyWork>& work,
                                          const std::vector<Tensor>& sent) {
  std::vector<std::vector<size_t>> code_offset(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    KeyInfo& info = *work[i].info;
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
  return code_offset;
}

// RequestStarts returns which chunks of a cut value start a request (chunk_requests.h); the
// others join the request of the chunk before them. Empty (no allocation) for a value not cut,
// and for an Init.
std::vector<bool> RequestStarts(Kind kind, const KeyInfo& info, const std::vector<Slice>& chunks) {
  std::vector<bool> starts;
  if (kind == Kind::kInit ||
      std::find(info.alone.begin(), info.alone.end(), true) == info.alone.end()) {
    return starts;
  }
  const size_t element = DTypeSize(info.dtype);
  starts.assign(chunks.size(), true);
  for (size_t c = 0; c < chunks.size();) {
    size_t end = c;
    std::vector<int64_t> sizes;
    while (end < chunks.size() && info.alone[end] && chunks[end].server == chunks[c].server) {
      sizes.push_back(chunks[end].count * static_cast<int64_t>(element));
      ++end;
    }
    if (end == c) {
      ++c;
      continue;
    }
    for (size_t run : RequestRuns(kind, sizes, kRequestBytes)) {
      for (size_t k = 1; k < run; ++k) starts[c + k] = false;
      c += run;
    }
  }
  return starts;
}

// Plan: the requests of a transfer, built key by key (AddKey), then put in the servers' turns.
class Plan {
 public:
  Plan(Kind kind, int num_servers, const CompressionParams& compression)
      : kind_(kind),
        sends_(kind != Kind::kPull),
        compression_(compression),
        shared_request_(static_cast<size_t>(num_servers), -1),
        deferred_request_(static_cast<size_t>(num_servers), -1) {}

  // AddKey adds key work[i]'s chunks: `sent` its value, `code_offset` its codes (empty: sent
  // as it is).
  void AddKey(size_t i, const KeyWork& entry, const Tensor& sent,
              const std::vector<size_t>& code_offset) {
    const KeyInfo& info = *entry.info;
    const size_t element = DTypeSize(info.dtype);
    // Init sends each server its whole part, which the server cuts into chunks itself; a part
    // cut in several chunks goes as a deferred header, its chunks then as fills, one request
    // each (so that no request holds a whole big value).
    const bool init = kind_ == Kind::kInit;
    const std::vector<Slice>& chunks = init ? info.slices : info.chunks;
    auto cut = [&](int server) {
      for (size_t c = 0; c < info.chunks.size(); ++c) {
        if (info.chunks[c].server == server && info.alone[c]) return true;
      }
      return false;
    };
    const std::vector<bool> starts = RequestStarts(kind_, info, chunks);
    size_t run_request = 0;  // The request of the current run of chunks.
    for (size_t c = 0; c < chunks.size(); ++c) {
      const Slice& chunk = chunks[c];
      if (kind_ == Kind::kInitFill && !info.alone[c]) continue;  // Sent whole by the Init.
      const bool deferred = init && cut(chunk.server);
      Request* request;
      if (!init && info.alone[c]) {
        if (starts.empty() || starts[c]) {
          run_request = requests_.size();
          requests_.emplace_back();
          requests_.back().server = chunk.server;
        }
        request = &requests_[run_request];
      } else {
        int& index = (deferred ? deferred_request_ : shared_request_)[chunk.server];
        if (index < 0) {
          index = static_cast<int>(requests_.size());
          requests_.emplace_back();
          requests_.back().server = chunk.server;
          requests_.back().deferred = deferred;
        }
        request = &requests_[index];
      }
      proto::TensorHeader& header = request->headers.emplace_back();
      FillHeader(entry.key, info.dtype, info.shape, chunk, &header);
      if (sends_ && !code_offset.empty()) {
        const size_t bytes = CompressedBytes(compression_.type, chunk.count);
        header.set_compression(static_cast<proto::Compression>(compression_.type));
        header.set_compression_threshold(compression_.threshold);
        header.set_payload_offset(request->payload_bytes);
        header.set_payload_bytes(bytes);
        request->parts.push_back(PayloadPart{info.codes, code_offset[c], bytes});
        request->payload_bytes += bytes;
      } else if (sends_ && !deferred) {
        const size_t bytes = static_cast<size_t>(chunk.count) * element;
        header.set_payload_offset(request->payload_bytes);
        header.set_payload_bytes(bytes);
        request->parts.push_back(
            PayloadPart{sent, static_cast<size_t>(chunk.offset) * element, bytes});
        request->payload_bytes += bytes;
      }
      request->targets.push_back(Target{i, chunk});
    }
  }

  // TakeRequests returns the requests with the servers taking turns (launch_order.h), each
  // server's requests keeping their order.
  std::vector<Request> TakeRequests() {
    std::vector<int> servers;
    servers.reserve(requests_.size());
    for (const Request& request : requests_) servers.push_back(request.server);
    std::vector<Request> turns;
    turns.reserve(requests_.size());
    for (size_t r : TakeTurns(servers)) turns.push_back(std::move(requests_[r]));
    requests_.clear();
    return turns;
  }

 private:
  const Kind kind_;
  const bool sends_;
  const CompressionParams& compression_;
  std::vector<Request> requests_;
  std::vector<int> shared_request_;    // Per server: its shared request.
  std::vector<int> deferred_request_;  // Per server: its deferred Init.
};

// EncodeFrames encodes each request as the frame of `kind`'s method (its headers moved out);
// a push takes this worker's next request id. Counts the pushed payload bytes.
absl::StatusOr<std::vector<std::shared_ptr<const grpc::ByteBuffer>>> EncodeFrames(
    const TransferContext& ctx, Kind kind, std::vector<Request>* requests) {
  const bool sends = kind != Kind::kPull;
  std::vector<std::shared_ptr<const grpc::ByteBuffer>> frames;
  for (Request& request : *requests) {
    absl::StatusOr<grpc::ByteBuffer> frame;
    auto encode = [&](auto message, bool with_request_id) {
      SetSender(ctx, &message);
      if constexpr (!std::is_same_v<decltype(message), proto::PullRequest> &&
                    !std::is_same_v<decltype(message), proto::InitRequest>) {
        if (with_request_id) message.set_request_id((*ctx.next_request_id)++);
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
      case Kind::kInitFill:
        frame = encode(init, false);
        break;
      case Kind::kPush:
        frame = encode(proto::PushRequest(), true);
        break;
      case Kind::kPull:
        frame = encode(proto::PullRequest(), false);
        break;
      case Kind::kPushPull:
        frame = encode(proto::PushPullRequest(), true);
        break;
    }
    if (!frame.ok()) return frame.status();
    frames.push_back(std::make_shared<grpc::ByteBuffer>(*std::move(frame)));
    if (kind == Kind::kPush || kind == Kind::kPushPull) {
      *ctx.push_payload_bytes += static_cast<int64_t>(request.payload_bytes);
    }
  }
  return frames;
}

// CopyReply copies each chunk a reply returns from the received bytes into the key's first
// output (its pinned staging buffer for outputs on GPUs).
absl::Status CopyReply(State* state, const std::vector<Target>& targets,
                       const grpc::ByteBuffer& reply) {
  proto::PullResponse header;
  absl::StatusOr<Payload> payload = DecodeFrame(reply, &header);
  RETURN_IF_ERROR(payload.status());
  if (header.tensors_size() != static_cast<int>(targets.size())) {
    return absl::InternalError(
        absl::StrCat("asked for ", targets.size(), " values, got ", header.tensors_size()));
  }
  for (size_t t = 0; t < targets.size(); ++t) {
    const proto::TensorHeader& got = header.tensors(static_cast<int>(t));
    KeyWork& entry = state->work[targets[t].work_index];
    Tensor* out = entry.via_host ? &entry.info->pull_staging : entry.outs.front();
    const size_t element = DTypeSize(entry.info->dtype);
    const Slice& chunk = targets[t].chunk;
    const size_t bytes = static_cast<size_t>(chunk.count) * element;
    if (got.element_offset() != chunk.offset || got.payload_bytes() != bytes) {
      return absl::InternalError(absl::StrCat(
          "key ", entry.key.Quoted(), ": reply holds elements from ", got.element_offset(), " in ",
          got.payload_bytes(), " bytes, expected ", chunk.offset, " in ", bytes));
    }
    RETURN_IF_ERROR(payload->CopyTo(got.payload_offset(), bytes,
                                    static_cast<uint8_t*>(out->data()) + chunk.offset * element));
  }
  return absl::OkStatus();
}

// FillOtherOutputs copies, once every chunk has arrived, a key pulled into several outputs from
// its first output into the others; with outputs on GPUs, the pinned buffer into every output.
absl::Status FillOtherOutputs(State* state) {
  absl::Status error;
  for (KeyWork& entry : state->work) {
    if (entry.via_host) {
      for (Tensor* out : entry.outs) {
        const absl::Status copied = gpu::CopyTo(entry.key, entry.info->pull_staging, out);
        if (!copied.ok() && error.ok()) error = copied;
      }
      continue;
    }
    for (size_t o = 1; o < entry.outs.size(); ++o) {
      if (entry.outs[o]->data() == entry.outs[0]->data()) continue;
      const absl::Status copied = CopyInto(*entry.outs[0], entry.outs[o]);
      if (!copied.ok() && error.ok()) error = copied;
    }
  }
  return error;
}

// LaunchNext starts the next request not started yet, if any.
void LaunchNext(State* state) {
  std::function<void()> next;
  {
    absl::MutexLock lock(&state->mu);
    if (state->next_launch < state->launches.size()) {
      next = std::move(state->launches[state->next_launch++]);
    }
  }
  if (next) next();
}

// OnReply handles request completion: starts the next request first (its server works while
// this reply is copied out), copies a pull's chunks, and, on the last, fills the other outputs
// and calls done with the first error.
void OnReply(const TransferContext& ctx, const std::shared_ptr<State>& state, int server,
             bool receives, const std::vector<Target>& targets, absl::Status status,
             grpc::ByteBuffer* reply) {
  LaunchNext(state.get());
  if (status.ok() && receives) {
    status = CopyReply(state.get(), targets, *reply);
    if (!status.ok()) status = ctx.caller->ServerError(server, status);
  }
  bool last;
  {
    absl::MutexLock lock(&state->mu);
    if (!status.ok() && state->error.ok()) state->error = status;
    last = --state->remaining == 0;
  }
  if (!last) return;
  if (state->error.ok() && receives) state->error = FillOtherOutputs(state.get());
  state->done(state->error);
}

}  // namespace

void TransferDense(const TransferContext& ctx, Kind kind, std::vector<KeyWork> work,
                   const CompressionParams& compression, OpDone done) {
  auto state = std::make_shared<State>();
  state->work = std::move(work);
  state->done = std::move(done);
  const bool sends = kind != Kind::kPull;
  const bool receives = kind == Kind::kPull || kind == Kind::kPushPull;
  if (receives) {
    if (absl::Status staged = StagePulls(&state->work); !staged.ok()) {
      return state->done(staged);
    }
  }
  Sent sent;
  sent.values.resize(state->work.size());
  if (sends) {
    absl::StatusOr<Sent> values = ValuesToSend(&state->work);
    if (!values.ok()) return state->done(values.status());
    sent = *std::move(values);
  }
  const bool compressed = sends && kind != Kind::kInit && compression.enabled();
  // Compression reads the sums on the CPU, and an Init sends them whole: no overlap.
  const bool whole = compressed || kind == Kind::kInit || kind == Kind::kInitFill;
  if (whole) {
    if (absl::Status staged = WaitForAllStaging(sent, state->work); !staged.ok()) {
      return state->done(staged);
    }
  }
  std::vector<std::vector<size_t>> code_offset(state->work.size());
  if (compressed) code_offset = Compress(compression, state->work, sent.values);
  Plan plan(kind, ctx.caller->num_servers(), compression);
  for (size_t i = 0; i < state->work.size(); ++i) {
    plan.AddKey(i, state->work[i], sent.values[i], code_offset[i]);
  }
  std::vector<Request> requests = plan.TakeRequests();
  absl::StatusOr<std::vector<std::vector<StagedWait>>> waits =
      std::vector<std::vector<StagedWait>>();
  if (!whole) waits = StagedWaits(sent, state->work, requests);
  if (!waits.ok()) return state->done(waits.status());
  absl::StatusOr<std::vector<std::shared_ptr<const grpc::ByteBuffer>>> frames =
      EncodeFrames(ctx, kind, &requests);
  if (!frames.ok()) return state->done(frames.status());
  state->remaining = requests.size();
  if (requests.empty()) return state->done(absl::OkStatus());
  static constexpr ServerMethod kMethods[] = {ServerMethod::kInit, ServerMethod::kPush,
                                              ServerMethod::kPull, ServerMethod::kPushPull};
  const ServerMethod method =
      kind == Kind::kInitFill ? ServerMethod::kInit : kMethods[static_cast<int>(kind)];
  // Requests start in order, at most `window` at a time: chunks then arrive one after another
  // (rather than all interleaved and complete only at the end), so the server sums and updates
  // each while the next is on the wire.
  state->launches.resize(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    const int s = requests[r].server;
    state->launches[r] = [ctx, state, s, method, frame = (*frames)[r], receives,
                          targets = std::move(requests[r].targets),
                          staged = waits->empty() ? std::vector<StagedWait>()
                                                  : std::move((*waits)[r])]() mutable {
      // The chunks this request sends from pinned memory have landed there.
      for (const StagedWait& wait : staged) {
        if (absl::Status ready = wait.staging->WaitFor(wait.bytes); !ready.ok()) {
          return OnReply(ctx, state, s, receives, targets, std::move(ready), nullptr);
        }
      }
      ctx.caller->Call(s, method, std::move(frame),
                       [ctx, state, s, receives, targets = std::move(targets)](
                           absl::Status status, grpc::ByteBuffer* reply) {
                         OnReply(ctx, state, s, receives, targets, std::move(status), reply);
                       });
    };
  }
  std::vector<std::function<void()>> first;
  {
    absl::MutexLock lock(&state->mu);
    while (state->next_launch < std::min(ctx.window, state->launches.size())) {
      first.push_back(std::move(state->launches[state->next_launch++]));
    }
  }
  for (auto& launch : first) launch();
}

}  // namespace kvstore
