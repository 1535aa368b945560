#include "client/table_transfer.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/proto_convert.h"
#include "common/table_wire.h"
#include "common/wire_frame.h"

namespace kvstore {
namespace {

// Calls sends `requests[s]` (when set) to server s as `method` and waits for every answer;
// `reply(s, buffer)` reads server s's reply. Returns the first error.
absl::Status Calls(const TransferContext& ctx, ServerMethod method,
                   std::vector<std::shared_ptr<const grpc::ByteBuffer>> requests,
                   const std::function<absl::Status(int, grpc::ByteBuffer*)>& reply) {
  struct Shared : Replies {
    absl::Notification done;
  };
  auto shared = std::make_shared<Shared>();
  for (const auto& request : requests) shared->remaining += request != nullptr;
  if (shared->remaining == 0) return absl::OkStatus();
  for (size_t s = 0; s < requests.size(); ++s) {
    if (requests[s] == nullptr) continue;
    const int server = static_cast<int>(s);
    ctx.caller->Call(server, method, std::move(requests[s]),
                     [shared, server, &reply](absl::Status status, grpc::ByteBuffer* buffer) {
                       if (status.ok() && reply) status = reply(server, buffer);
                       if (shared->Record(status)) shared->done.Notify();
                     });
  }
  // Bounded: every call ends by its deadline and retries (ServerCaller).
  shared->done.WaitForNotification();
  absl::MutexLock lock(&shared->mu);
  return shared->error;
}

// ByServer splits `ids` by the server that holds each: the positions of each server's ids.
std::vector<std::vector<size_t>> ByServer(absl::Span<const int64_t> ids, int num_servers) {
  std::vector<std::vector<size_t>> positions(num_servers);
  for (size_t i = 0; i < ids.size(); ++i) {
    positions[TableServerOf(ids[i], num_servers)].push_back(i);
  }
  return positions;
}

}  // namespace

absl::Status InitTableOnServers(const TransferContext& ctx, const Key& key,
                                const proto::TableSpec& spec) {
  proto::TableInitRequest request;
  SetSender(ctx, &request);
  KeyToProto(key, request.mutable_key());
  *request.mutable_spec() = spec;
  auto encoded = std::make_shared<const grpc::ByteBuffer>(EncodeMessage(request));
  return Calls(
      ctx, ServerMethod::kTableInit,
      std::vector<std::shared_ptr<const grpc::ByteBuffer>>(ctx.caller->num_servers(), encoded),
      nullptr);
}

absl::Status PushTableRows(const TransferContext& ctx, const Key& key, int64_t dim,
                           absl::Span<const int64_t> ids, const float* grads, bool every_server) {
  const int num_servers = ctx.caller->num_servers();
  const std::vector<std::vector<size_t>> positions = ByServer(ids, num_servers);
  std::vector<std::shared_ptr<const grpc::ByteBuffer>> requests(num_servers);
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  for (int s = 0; s < num_servers; ++s) {
    if (positions[s].empty() && !every_server) continue;
    proto::TablePushRequest request;
    SetSender(ctx, &request);
    request.set_request_id(ctx.next_request_id->fetch_add(1));
    KeyToProto(key, request.mutable_key());
    request.mutable_ids()->Reserve(static_cast<int>(positions[s].size()));
    // The server's rows, gathered into one buffer that the frame's payload references.
    const size_t bytes = positions[s].size() * row_bytes;
    float* gathered = new float[std::max<size_t>(1, bytes / sizeof(float))];
    Tensor rows =
        Tensor::Adopt(gathered, DType::kFloat32, {static_cast<int64_t>(bytes / sizeof(float))},
                      Device::CPU(), [gathered] { delete[] gathered; });
    char* at = reinterpret_cast<char*>(gathered);
    for (const size_t i : positions[s]) {
      request.add_ids(ids[i]);
      std::memcpy(at, grads + i * dim, row_bytes);
      at += row_bytes;
    }
    if (ctx.push_payload_bytes != nullptr) ctx.push_payload_bytes->fetch_add(bytes);
    const PayloadPart part{rows, 0, bytes};
    absl::StatusOr<grpc::ByteBuffer> frame = EncodeFrame(request, absl::MakeConstSpan(&part, 1));
    if (!frame.ok()) return frame.status();
    requests[s] = std::make_shared<const grpc::ByteBuffer>(*std::move(frame));
  }
  return Calls(ctx, ServerMethod::kTablePush, std::move(requests), nullptr);
}

absl::Status PullTableRows(const TransferContext& ctx, const Key& key, int64_t dim,
                           absl::Span<const int64_t> ids, float* out) {
  const int num_servers = ctx.caller->num_servers();
  const std::vector<std::vector<size_t>> positions = ByServer(ids, num_servers);
  std::vector<std::shared_ptr<const grpc::ByteBuffer>> requests(num_servers);
  for (int s = 0; s < num_servers; ++s) {
    if (positions[s].empty()) continue;
    proto::TablePullRequest request;
    SetSender(ctx, &request);
    KeyToProto(key, request.mutable_key());
    request.mutable_ids()->Reserve(static_cast<int>(positions[s].size()));
    for (const size_t i : positions[s]) request.add_ids(ids[i]);
    requests[s] = std::make_shared<const grpc::ByteBuffer>(EncodeMessage(request));
  }
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  return Calls(ctx, ServerMethod::kTablePull, std::move(requests),
               [&](int s, grpc::ByteBuffer* buffer) -> absl::Status {
                 proto::TablePullResponse reply;
                 absl::StatusOr<Payload> payload = DecodeFrame(*buffer, &reply);
                 if (!payload.ok()) return payload.status();
                 if (payload->size() != positions[s].size() * row_bytes) {
                   return absl::InternalError(absl::StrCat(
                       "key ", key.Quoted(), ": the server sent ", payload->size(), " bytes for ",
                       positions[s].size(), " rows of ", dim, " float32"));
                 }
                 // Each row from the received slices, into its place in the output.
                 size_t at = 0;
                 for (const size_t i : positions[s]) {
                   float* into = out + i * dim;
                   if (const void* row = payload->Contiguous(at, row_bytes)) {
                     std::memcpy(into, row, row_bytes);
                   } else {
                     absl::Status copied = payload->CopyTo(at, row_bytes, into);
                     if (!copied.ok()) return copied;
                   }
                   at += row_bytes;
                 }
                 return absl::OkStatus();
               });
}

}  // namespace kvstore
