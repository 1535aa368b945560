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
#include "common/wire_frame.h"
#include "proto/kvstore.pb.h"

namespace kvstore {

void TransferRowSparse(const TransferContext& ctx, Kind kind, std::vector<KeyWork> work,
                       OpDone done) {
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
  std::vector<Request> requests(static_cast<size_t>(ctx.caller->num_servers()));
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
        request.targets.push_back(
            Target{w, o, static_cast<size_t>(lo - ids.begin()), static_cast<size_t>(hi - lo)});
      }
    }
  }
  struct State : Replies {
    std::vector<KeyWork> work;
    OpDone done;
  };
  auto state = std::make_shared<State>();
  state->work = std::move(work);
  state->done = std::move(done);
  std::vector<std::pair<int, std::shared_ptr<const grpc::ByteBuffer>>> frames;
  std::vector<std::vector<Target>> targets;
  for (size_t s = 0; s < requests.size(); ++s) {
    Request& request = requests[s];
    if (request.headers.empty()) continue;
    absl::StatusOr<grpc::ByteBuffer> frame;
    if (push) {
      proto::PushRequest message;
      SetSender(ctx, &message);
      message.set_request_id((*ctx.next_request_id)++);
      for (proto::TensorHeader& header : request.headers)
        *message.add_tensors() = std::move(header);
      frame = EncodeFrame(message, request.parts);
      *ctx.push_payload_bytes += static_cast<int64_t>(request.payload_bytes);
    } else {
      proto::PullRequest message;
      SetSender(ctx, &message);
      for (proto::TensorHeader& header : request.headers)
        *message.add_tensors() = std::move(header);
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
  state->remaining = frames.size();
  for (size_t f = 0; f < frames.size(); ++f) {
    const int s = frames[f].first;
    ctx.caller->Call(
        s, push ? ServerMethod::kPush : ServerMethod::kRowSparsePull, frames[f].second,
        [ctx, state, s, push, targets = std::move(targets[f])](absl::Status status,
                                                               grpc::ByteBuffer* reply) {
          if (status.ok() && !push) {
            proto::PullResponse header;
            absl::StatusOr<Payload> payload = DecodeFrame(*reply, &header);
            status = payload.status();
            if (status.ok() && header.tensors_size() != static_cast<int>(targets.size())) {
              status = absl::InternalError(absl::StrCat("asked for rows of ", targets.size(),
                                                        " values, got ", header.tensors_size()));
            }
            for (size_t t = 0; status.ok() && t < targets.size(); ++t) {
              const Target& target = targets[t];
              KeyWork& entry = state->work[target.entry];
              RowSparse* out = entry.sparse_outs[target.out];
              const size_t row_bytes = static_cast<size_t>(RowElements(entry.info->shape)) *
                                       DTypeSize(entry.info->dtype);
              const proto::TensorHeader& got = header.tensors(static_cast<int>(t));
              if (got.payload_bytes() != target.rows * row_bytes) {
                status = absl::InternalError(
                    absl::StrCat("key ", entry.key.Quoted(), ": reply holds ", got.payload_bytes(),
                                 " bytes for ", target.rows, " rows of ", row_bytes, " bytes"));
                break;
              }
              status = payload->CopyTo(
                  got.payload_offset(), target.rows * row_bytes,
                  static_cast<uint8_t*>(out->data().data()) + target.first * row_bytes);
            }
            if (!status.ok()) status = ctx.caller->ServerError(s, status);
          }
          if (state->Record(status)) state->done(state->error);
        });
  }
}

}  // namespace kvstore
