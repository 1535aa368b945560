#include "client/row_sparse_transfer.h"

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
#include "client/gpu/staging.h"
#include "client/request_header.h"
#include "common/reduce.h"
#include "common/row_sparse.h"
#include "common/status_macros.h"
#include "common/wire_frame.h"
#include "proto/kvstore.pb.h"

namespace kvstore {
namespace {

// Where a pulled part's rows go: output `out` of work entry `entry`, from row `first`.
struct Target {
  size_t entry;
  size_t out;
  size_t first;
  size_t rows;
};

// One server's request, as it is being built.
struct Request {
  std::vector<proto::TensorHeader> headers;
  std::vector<proto::RowIds> row_ids;
  std::vector<PayloadPart> parts;
  uint64_t payload_bytes = 0;
  std::vector<Target> targets;
};

struct State : Replies {
  std::vector<KeyWork> work;
  OpDone done;
};

// AddPushedRows adds to `request` the rows of every value pushed to `entry` that fall in rows
// [first_row, end_row) of `part`, ids first - a header even when there are none.
void AddPushedRows(const KeyWork& entry, const Slice& part, int64_t first_row, int64_t end_row,
                   Request* request) {
  const KeyInfo& info = *entry.info;
  const size_t row_bytes = static_cast<size_t>(RowElements(info.shape)) * DTypeSize(info.dtype);
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
  proto::TensorHeader& header = request->headers.emplace_back();
  FillHeader(entry.key, info.dtype, info.shape, part, &header);
  header.set_row_sparse(true);
  header.set_num_rows(static_cast<int64_t>(ids.size()));
  header.set_payload_offset(request->payload_bytes);
  header.set_payload_bytes(ids_tensor.byte_size() + data.byte_size());
  request->payload_bytes += ids_tensor.byte_size() + data.byte_size();
  request->parts.push_back(PayloadPart{ids_tensor, 0, ids_tensor.byte_size()});
  request->parts.push_back(PayloadPart{data, 0, data.byte_size()});
}

// AddPulledRows asks, in `request`, for the ids of each output of work entry `w` that fall in
// rows [first_row, end_row) of `part`, and records where their rows go.
void AddPulledRows(size_t w, const KeyWork& entry, const Slice& part, int64_t first_row,
                   int64_t end_row, Request* request) {
  const KeyInfo& info = *entry.info;
  for (size_t o = 0; o < entry.sparse_outs.size(); ++o) {
    // The sorted ids of this part are a contiguous run of the output's ids.
    const std::vector<int64_t>& ids = entry.sparse_rows[o];
    const auto lo = std::lower_bound(ids.begin(), ids.end(), first_row);
    const auto hi = std::lower_bound(ids.begin(), ids.end(), end_row);
    if (lo == hi) continue;
    proto::TensorHeader& header = request->headers.emplace_back();
    FillHeader(entry.key, info.dtype, info.shape, part, &header);
    request->row_ids.emplace_back().mutable_ids()->Add(lo, hi);
    request->targets.push_back(
        Target{w, o, static_cast<size_t>(lo - ids.begin()), static_cast<size_t>(hi - lo)});
  }
}

// Encode makes one server's request frame: a PushRequest with the rows as payload, or a
// PullRequest with the ids.
absl::StatusOr<grpc::ByteBuffer> Encode(const TransferContext& ctx, bool push, Request& request) {
  if (push) {
    proto::PushRequest message;
    SetSender(ctx, &message);
    message.set_request_id((*ctx.next_request_id)++);
    for (proto::TensorHeader& header : request.headers) *message.add_tensors() = std::move(header);
    *ctx.push_payload_bytes += static_cast<int64_t>(request.payload_bytes);
    return EncodeFrame(message, request.parts);
  }
  proto::PullRequest message;
  SetSender(ctx, &message);
  for (proto::TensorHeader& header : request.headers) *message.add_tensors() = std::move(header);
  for (proto::RowIds& ids : request.row_ids) *message.add_row_ids() = std::move(ids);
  return EncodeMessage(message);
}

// CopyPulledRows copies the rows of a pull's reply into the outputs `targets` names.
absl::Status CopyPulledRows(const grpc::ByteBuffer& reply, const std::vector<Target>& targets,
                            std::vector<KeyWork>& work) {
  proto::PullResponse header;
  ASSIGN_OR_RETURN(Payload payload, DecodeFrame(reply, &header));
  if (header.tensors_size() != static_cast<int>(targets.size())) {
    return absl::InternalError(
        absl::StrCat("asked for rows of ", targets.size(), " values, got ", header.tensors_size()));
  }
  for (size_t t = 0; t < targets.size(); ++t) {
    const Target& target = targets[t];
    KeyWork& entry = work[target.entry];
    RowSparse* out = entry.sparse_outs[target.out];
    const size_t row_bytes =
        static_cast<size_t>(RowElements(entry.info->shape)) * DTypeSize(entry.info->dtype);
    const proto::TensorHeader& got = header.tensors(static_cast<int>(t));
    if (got.payload_bytes() != target.rows * row_bytes) {
      return absl::InternalError(absl::StrCat("key ", entry.key.Quoted(), ": reply holds ",
                                              got.payload_bytes(), " bytes for ", target.rows,
                                              " rows of ", row_bytes, " bytes"));
    }
    RETURN_IF_ERROR(
        payload.CopyTo(got.payload_offset(), target.rows * row_bytes,
                       static_cast<uint8_t*>(out->data().data()) + target.first * row_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

void TransferRowSparse(const TransferContext& ctx, Kind kind, std::vector<KeyWork> work,
                       OpDone done) {
  const bool push = kind == Kind::kRowSparsePush;
  std::vector<Request> requests(static_cast<size_t>(ctx.caller->num_servers()));
  for (size_t w = 0; w < work.size(); ++w) {
    const KeyInfo& info = *work[w].info;
    const int64_t row = std::max<int64_t>(1, RowElements(info.shape));
    for (const Slice& part : info.slices) {
      const int64_t first_row = part.offset / row;
      const int64_t end_row = (part.offset + part.count) / row;
      Request* request = &requests[part.server];
      if (push) {
        AddPushedRows(work[w], part, first_row, end_row, request);
      } else {
        AddPulledRows(w, work[w], part, first_row, end_row, request);
      }
    }
  }
  auto state = std::make_shared<State>();
  state->work = std::move(work);
  state->done = std::move(done);
  std::vector<std::pair<int, std::shared_ptr<const grpc::ByteBuffer>>> frames;
  std::vector<std::vector<Target>> targets;
  for (size_t s = 0; s < requests.size(); ++s) {
    if (requests[s].headers.empty()) continue;
    absl::StatusOr<grpc::ByteBuffer> frame = Encode(ctx, push, requests[s]);
    if (!frame.ok()) {
      state->done(frame.status());
      return;
    }
    frames.emplace_back(static_cast<int>(s), std::make_shared<grpc::ByteBuffer>(*std::move(frame)));
    targets.push_back(std::move(requests[s].targets));
  }
  if (frames.empty()) {
    state->done(absl::OkStatus());
    return;
  }
  state->remaining = frames.size();
  for (size_t f = 0; f < frames.size(); ++f) {
    const int s = frames[f].first;
    ctx.caller->Call(s, push ? ServerMethod::kPush : ServerMethod::kRowSparsePull, frames[f].second,
                     [ctx, state, s, push, targets = std::move(targets[f])](
                         absl::Status status, grpc::ByteBuffer* reply) {
                       if (status.ok() && !push) {
                         status = CopyPulledRows(*reply, targets, state->work);
                         if (!status.ok()) status = ctx.caller->ServerError(s, status);
                       }
                       if (state->Record(status)) state->done(state->error);
                     });
  }
}

}  // namespace kvstore
