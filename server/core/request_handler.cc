#include "server/core/request_handler.h"

#include <cstring>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_auth.h"
#include "common/proto_convert.h"
#include "common/server_commands.h"
#include "common/status_macros.h"
#include "common/wire_frame.h"
#include "proto/kvstore.pb.h"
#include "server/core/key_groups.h"
namespace kvstore {

using Done = std::function<void(absl::Status)>;

namespace {

absl::StatusOr<ValueSlice> SliceFromHeader(const proto::TensorHeader& header) {
  ValueSlice slice;
  ASSIGN_OR_RETURN(slice.key, KeyFromProto(header.key()));
  ASSIGN_OR_RETURN(slice.dtype, DTypeFromProto(header.dtype()));
  slice.shape.assign(header.shape().begin(), header.shape().end());
  slice.offset = header.element_offset();
  slice.count = header.element_count();
  if (header.num_rows() != 0 || header.row_sparse()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", slice.key.Quoted(), ": row-sparse values are accepted by Push only"));
  }
  return slice;
}

// CompressionFromHeader validates a header's compression fields.
absl::StatusOr<CompressionParams> CompressionFromHeader(const proto::TensorHeader& header,
                                                        const Key& key) {
  absl::StatusOr<CompressionType> type = CompressionFromInt(header.compression());
  absl::StatusOr<CompressionParams> params =
      type.ok() ? MakeCompressionParams(CompressionName(*type), header.compression_threshold())
                : type.status();
  if (!params.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", key.Quoted(), ": ", params.status().message()));
  }
  return params;
}

// IncomingValues reads the headers and points each value at its bytes in the payload, which
// must hold exactly the values' bytes back to back in header order: InvalidArgument naming the
// key for a value whose bytes do not start where the previous one's end or exceed the payload,
// and for bytes left over after the last.
absl::StatusOr<std::vector<IncomingValue>> IncomingValues(
    const google::protobuf::RepeatedPtrField<proto::TensorHeader>& headers, const Payload& payload,
    bool row_sparse_allowed) {
  std::vector<IncomingValue> values;
  values.reserve(headers.size());
  uint64_t next = 0;  // Where the next value's bytes start.
  for (const proto::TensorHeader& header : headers) {
    IncomingValue value;
    if (header.row_sparse() && row_sparse_allowed) {
      proto::TensorHeader dense = header;
      dense.set_row_sparse(false);
      dense.set_num_rows(0);
      ASSIGN_OR_RETURN(value.slice, SliceFromHeader(dense));
      value.row_sparse = true;
      value.num_rows = header.num_rows();
    } else {
      ASSIGN_OR_RETURN(value.slice, SliceFromHeader(header));
    }
    ASSIGN_OR_RETURN(value.compression, CompressionFromHeader(header, value.slice.key));
    if (header.payload_offset() != next) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", value.slice.key.Quoted(), ": its bytes start at payload byte ",
                       header.payload_offset(), " but the values before it end at byte ", next));
    }
    auto chunks = payload.Chunks(header.payload_offset(), header.payload_bytes());
    if (!chunks.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", value.slice.key.Quoted(), ": ", chunks.status().message()));
    }
    next += header.payload_bytes();  // Within the payload's size: no overflow.
    value.bytes = *std::move(chunks);
    values.push_back(std::move(value));
  }
  if (next != payload.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the payload holds ", payload.size(), " bytes but its ", values.size(), " values",
        values.empty() ? std::string()
                       : absl::StrCat(" (the last key ", values.back().slice.key.Quoted(), ", ",
                                      ShapeToString(values.back().slice.shape), ")"),
        " end at byte ", next));
  }
  return values;
}

absl::StatusOr<std::vector<ValueSlice>> SlicesFromHeaders(
    const google::protobuf::RepeatedPtrField<proto::TensorHeader>& headers);

// RegisterListedGroup registers the group a request lists the members of, if it does.
template <typename Request>
absl::Status RegisterListedGroup(const Request& header, ServerEngine* engine) {
  if (header.tensors_size() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<ValueSlice> members, SlicesFromHeaders(header.tensors()));
  return engine->groups().Register(header.node_id(), header.group_id(), members);
}

// PullGroupInto frames a group's packed values (no headers) into `*response`.
absl::Status PullGroupInto(const ServerEngine& engine, uint64_t node_id, uint64_t group_id,
                           grpc::ByteBuffer* response) {
  ASSIGN_OR_RETURN(PackedGroup packed, engine.groups().Pull(node_id, group_id));
  const PayloadPart part{packed.buffer, 0, packed.bytes};
  ASSIGN_OR_RETURN(*response, EncodeFrame(proto::PullResponse(), absl::MakeConstSpan(&part, 1)));
  return absl::OkStatus();
}

// EncodePulled frames the pulled tensors after their headers.
absl::StatusOr<grpc::ByteBuffer> EncodePulled(absl::Span<const ValueSlice> slices,
                                              const std::vector<Tensor>& tensors) {
  proto::PullResponse reply;
  std::vector<PayloadPart> parts;
  uint64_t offset = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    proto::TensorHeader* header = reply.add_tensors();
    KeyToProto(slices[i].key, header->mutable_key());
    header->set_dtype(DTypeToProto(slices[i].dtype));
    for (int64_t d : slices[i].shape) header->add_shape(d);
    header->set_element_offset(slices[i].offset);
    header->set_element_count(slices[i].count);
    header->set_payload_offset(offset);
    header->set_payload_bytes(tensors[i].byte_size());
    parts.push_back(PayloadPart{tensors[i], 0, tensors[i].byte_size()});
    offset += tensors[i].byte_size();
  }
  return EncodeFrame(reply, parts);
}

absl::StatusOr<std::vector<ValueSlice>> SlicesFromHeaders(
    const google::protobuf::RepeatedPtrField<proto::TensorHeader>& headers) {
  std::vector<ValueSlice> slices;
  for (const proto::TensorHeader& header : headers) {
    ASSIGN_OR_RETURN(ValueSlice slice, SliceFromHeader(header));
    if (header.compression() != proto::COMPRESSION_NONE) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", slice.key.Quoted(), ": pulls are never compressed"));
    }
    if (header.payload_offset() != 0 || header.payload_bytes() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", slice.key.Quoted(),
                       ": a value pulled or listed in a key group has no bytes "
                       "in the request, but its header declares ",
                       header.payload_bytes(), " at byte ", header.payload_offset()));
    }
    slices.push_back(std::move(slice));
  }
  return slices;
}

// StartGroupPush registers the group a Push or PushPull lists (if it does) and pushes the
// packed values; `done` runs at once with the error, or when `ack` says (KeyGroups::Push).
template <typename Request>
void StartGroupPush(ServerEngine* engine, const Request& header, const Payload& payload,
                    ServerEngine::Ack ack, Done done) {
  absl::Status status = RegisterListedGroup(header, engine);
  absl::StatusOr<ByteChunks> bytes = status.ok() ? payload.Chunks(0, payload.size()) : status;
  if (!bytes.ok()) return done(bytes.status());
  engine->groups().Push(header.node_id(), header.request_id(), header.group_id(), *bytes,
                        std::move(done), ack);
}

}  // namespace

namespace {

// CheckCaller: with `caller` (a job with a secret), refuses a request that names another node
// than the one that signed it, or a command from any node but the scheduler
// (PERMISSION_DENIED). Runs on the decoded header, before anything else of the request is read.
template <typename Header>
absl::Status CheckCaller(const Header& header, const VerifiedCaller* caller) {
  if (caller == nullptr) return absl::OkStatus();
  if (header.node_id() != caller->node_id) {
    return absl::PermissionDeniedError(absl::StrCat("the request names node ", header.node_id(),
                                                    " but is signed by node ", caller->node_id));
  }
  if (std::is_same_v<Header, proto::ServerCommandRequest> && caller->node_id != kSchedulerNodeId) {
    return absl::PermissionDeniedError(absl::StrCat(
        "node ", caller->node_id, " sent a server command; commands come through the scheduler"));
  }
  return absl::OkStatus();
}

void HandleInit(const std::shared_ptr<ServerBackend>& backend, const grpc::ByteBuffer* request,
                grpc::ByteBuffer* response, Done done, const VerifiedCaller* caller) {
  proto::InitRequest header;
  absl::StatusOr<Payload> payload = DecodeFrame(*request, &header);
  if (!payload.ok()) return done(payload.status());
  if (absl::Status status = CheckCaller(header, caller); !status.ok()) return done(status);
  auto decoded = IncomingValues(header.tensors(), *payload, /*row_sparse_allowed=*/false);
  if (!decoded.ok()) return done(decoded.status());
  const std::vector<IncomingValue>& values = *decoded;
  absl::Status status;
  if (header.deferred() && header.fill()) {
    status = absl::InvalidArgumentError("an Init request is deferred or a fill, not both");
  } else if (header.fill()) {
    status = backend->engine->InitFill(header.node_id(), values);
  } else {
    status = backend->engine->Init(header.node_id(), values, header.deferred());
  }
  if (status.ok()) *response = EncodeMessage(proto::InitResponse());
  return done(status);
}

void HandlePush(const std::shared_ptr<ServerBackend>& backend, const grpc::ByteBuffer* request,
                grpc::ByteBuffer* response, Done done, const VerifiedCaller* caller) {
  proto::PushRequest header;
  absl::StatusOr<Payload> payload = DecodeFrame(*request, &header);
  if (!payload.ok()) return done(payload.status());
  if (absl::Status status = CheckCaller(header, caller); !status.ok()) return done(status);
  // The payload's slices are kept until `done` has run - it may run later, on the thread whose
  // push completes the round, as `response` stays valid until then - so that a dist_sync round
  // may keep the pushed bytes instead of copying them (IncomingValue::bytes_outlive_call).
  auto kept = std::make_shared<const Payload>(*std::move(payload));
  auto finish = [response, kept, done = std::move(done)](absl::Status status) {
    if (status.ok()) *response = EncodeMessage(proto::PushResponse());
    done(status);
  };
  if (header.group_id() != 0) {
    // The reply may leave before the sum is done: a later reader waits for it (KeyGroups::Push).
    return StartGroupPush(backend->engine.get(), header, *kept, ServerEngine::Ack::kOrdered,
                          std::move(finish));
  }
  auto values = IncomingValues(header.tensors(), *kept, /*row_sparse_allowed=*/true);
  if (!values.ok()) return finish(values.status());
  for (IncomingValue& value : *values) value.bytes_outlive_call = true;
  backend->engine->Push(header.node_id(), header.request_id(), *values, std::move(finish));
}

void HandlePull(const std::shared_ptr<ServerBackend>& backend, const grpc::ByteBuffer* request,
                grpc::ByteBuffer* response, Done done, const VerifiedCaller* caller) {
  proto::PullRequest header;
  absl::Status status = DecodeMessage(*request, &header);
  if (status.ok()) status = CheckCaller(header, caller);
  if (!status.ok()) return done(status);
  if (header.group_id() != 0) {
    status = RegisterListedGroup(header, backend->engine.get());
    if (status.ok()) {
      status = PullGroupInto(*backend->engine, header.node_id(), header.group_id(), response);
    }
    return done(status);
  }
  auto slices = SlicesFromHeaders(header.tensors());
  if (!slices.ok()) return done(slices.status());
  auto pulled = backend->engine->Pull(header.node_id(), *slices);
  if (!pulled.ok()) return done(pulled.status());
  auto frame = EncodePulled(*slices, *pulled);
  if (frame.ok()) *response = *std::move(frame);
  return done(frame.status());
}

void HandlePushPull(const std::shared_ptr<ServerBackend>& backend, const grpc::ByteBuffer* request,
                    grpc::ByteBuffer* response, Done done, const VerifiedCaller* caller) {
  proto::PushPullRequest header;
  absl::StatusOr<Payload> payload = DecodeFrame(*request, &header);
  if (!payload.ok()) return done(payload.status());
  if (absl::Status status = CheckCaller(header, caller); !status.ok()) return done(status);
  const uint64_t node_id = header.node_id();
  const uint64_t group_id = header.group_id();
  if (group_id != 0) {
    return StartGroupPush(
        backend->engine.get(), header, *payload, ServerEngine::Ack::kApplied,
        [response, backend, node_id, group_id, done = std::move(done)](absl::Status status) {
          if (status.ok()) status = PullGroupInto(*backend->engine, node_id, group_id, response);
          done(status);
        });
  }
  // The payload is kept until `done` has run, as in HandlePush.
  auto kept = std::make_shared<const Payload>(*std::move(payload));
  auto decoded = IncomingValues(header.tensors(), *kept, /*row_sparse_allowed=*/false);
  if (!decoded.ok()) return done(decoded.status());
  std::vector<IncomingValue>& values = *decoded;
  std::vector<ValueSlice> slices;
  for (IncomingValue& value : values) {
    value.bytes_outlive_call = true;
    slices.push_back(value.slice);
  }
  backend->engine->Push(node_id, header.request_id(), values,
                        [response, backend, node_id, kept, slices = std::move(slices),
                         done = std::move(done)](absl::Status status) {
                          if (status.ok()) {
                            auto pulled = backend->engine->Pull(node_id, slices);
                            status = pulled.status();
                            if (status.ok()) {
                              auto frame = EncodePulled(slices, *pulled);
                              status = frame.status();
                              if (status.ok()) *response = *std::move(frame);
                            }
                          }
                          done(status);
                        });
}

void HandleRowSparsePull(const std::shared_ptr<ServerBackend>& backend,
                         const grpc::ByteBuffer* request, grpc::ByteBuffer* response, Done done,
                         const VerifiedCaller* caller) {
  proto::PullRequest header;
  absl::Status status = DecodeMessage(*request, &header);
  if (status.ok()) status = CheckCaller(header, caller);
  if (status.ok()) status = backend->engine->workers().CheckSender(header.node_id());
  if (!status.ok()) return done(status);
  if (header.row_ids_size() != header.tensors_size()) {
    return done(absl::InvalidArgumentError(absl::StrCat("RowSparsePull of ", header.tensors_size(),
                                                        " values with ", header.row_ids_size(),
                                                        " row id lists")));
  }
  auto slices = SlicesFromHeaders(header.tensors());
  if (!slices.ok()) return done(slices.status());
  proto::PullResponse reply;
  std::vector<PayloadPart> parts;
  uint64_t offset = 0;
  for (int i = 0; i < header.tensors_size(); ++i) {
    const ValueSlice& slice = (*slices)[i];
    const auto& ids = header.row_ids(i).ids();
    auto rows = backend->engine->PullRows(header.node_id(), slice,
                                          absl::MakeConstSpan(ids.data(), ids.size()),
                                          static_cast<int64_t>(offset));
    if (!rows.ok()) return done(rows.status());
    proto::TensorHeader* out = reply.add_tensors();
    *out = header.tensors(i);
    out->set_row_sparse(true);
    out->set_num_rows(ids.size());
    out->set_payload_offset(offset);
    out->set_payload_bytes(rows->byte_size());
    parts.push_back(PayloadPart{*rows, 0, rows->byte_size()});
    offset += rows->byte_size();
  }
  auto frame = EncodeFrame(reply, parts);
  if (frame.ok()) *response = *std::move(frame);
  return done(frame.status());
}

void HandleCommand(const std::shared_ptr<ServerBackend>& backend, const grpc::ByteBuffer* request,
                   grpc::ByteBuffer* response, Done done, const VerifiedCaller* caller) {
  proto::ServerCommandRequest command;
  absl::Status status = DecodeMessage(*request, &command);
  // A page of a copy sent server to server (command 15 "put") comes from the server the
  // scheduler's "begin" named, signed by that server; every other command from the scheduler.
  const uint64_t copy_sender = backend->controller->copy_sender();
  const bool copy_page = status.ok() && copy_sender != 0 && command.node_id() == copy_sender &&
                         command.head() == kCommandCopyIn &&
                         absl::StartsWith(command.body(), "put ");
  if (copy_page) {
    if (caller != nullptr && caller->node_id != copy_sender) {
      status = absl::PermissionDeniedError(absl::StrCat(
          "the page names node ", copy_sender, " but is signed by node ", caller->node_id));
    }
  } else {
    if (status.ok()) status = CheckCaller(command, caller);
    if (status.ok()) status = backend->engine->workers().CheckSender(command.node_id());
  }
  if (!status.ok()) return done(status);
  auto run = [backend, response, done = std::move(done)](const proto::ServerCommandRequest& c) {
    auto reply = backend->controller->Run(c.head(), c.body());
    if (reply.ok()) {
      proto::ServerCommandResponse message;
      message.set_reply(*reply);
      *response = EncodeMessage(message);
    }
    done(reply.status());
  };
  if (copy_page ||
      (command.head() == kCommandCopyOut &&
       (absl::StartsWith(command.body(), "send ") || absl::StartsWith(command.body(), "part ") ||
        absl::StartsWith(command.body(), "sendpart ") ||
        absl::StartsWith(command.body(), "keeppart ")))) {
    // A copy sent to another server takes as long as its bytes: it runs on a thread of its
    // own, which answers the call, so that this serving thread goes on with the reads that
    // the living copy still serves meanwhile. So does a page of a copy received (checked and
    // copied into place, its memory touched for the first time): this thread goes on reading
    // the next pages from the socket meanwhile (the sender keeps a few in flight).
    std::thread([run = std::move(run), command = std::move(command)] { run(command); }).detach();
    return;
  }
  run(command);
}

void HandleTableInit(const std::shared_ptr<ServerBackend>& backend, const grpc::ByteBuffer* request,
                     grpc::ByteBuffer* response, Done done, const VerifiedCaller* caller) {
  proto::TableInitRequest header;
  absl::Status status = DecodeMessage(*request, &header);
  if (status.ok()) status = CheckCaller(header, caller);
  absl::StatusOr<Key> key = status.ok() ? KeyFromProto(header.key()) : status;
  if (!key.ok()) return done(key.status());
  status = backend->tables->Init(header.node_id(), *key, header.spec());
  if (status.ok()) *response = EncodeMessage(proto::TableInitResponse());
  done(status);
}

void HandleTablePush(const std::shared_ptr<ServerBackend>& backend, const grpc::ByteBuffer* request,
                     grpc::ByteBuffer* response, Done done, const VerifiedCaller* caller,
                     uint64_t view_epoch) {
  proto::TablePushRequest header;
  absl::StatusOr<Payload> payload = DecodeFrame(*request, &header);
  if (!payload.ok()) return done(payload.status());
  if (absl::Status status = CheckCaller(header, caller); !status.ok()) return done(status);
  absl::StatusOr<Key> key = KeyFromProto(header.key());
  if (!key.ok()) return done(key.status());
  if (payload->size() % sizeof(float) != 0) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("key ", key->Quoted(), ": ", payload->size(),
                     " bytes of gradients is not a whole number of float32 values")));
  }
  // The engine keeps the gradients of a push that waits for its round: one copy, out of the
  // received slices.
  std::vector<float> grads(payload->size() / sizeof(float));
  if (absl::Status copied = payload->CopyTo(0, payload->size(), grads.data()); !copied.ok()) {
    return done(copied);
  }
  std::vector<int64_t> ids(header.ids().begin(), header.ids().end());
  backend->tables->Push(
      header.node_id(), header.request_id(), *key, std::move(ids), std::move(grads),
      [response, done = std::move(done)](absl::Status pushed) {
        if (pushed.ok()) *response = EncodeMessage(proto::TablePushResponse());
        done(pushed);
      },
      view_epoch);
}

void HandleTablePull(const std::shared_ptr<ServerBackend>& backend, const grpc::ByteBuffer* request,
                     grpc::ByteBuffer* response, Done done, const VerifiedCaller* caller) {
  proto::TablePullRequest header;
  absl::Status status = DecodeMessage(*request, &header);
  if (status.ok()) status = CheckCaller(header, caller);
  absl::StatusOr<Key> key = status.ok() ? KeyFromProto(header.key()) : status;
  if (!key.ok()) return done(key.status());
  absl::StatusOr<Tensor> rows = backend->tables->Pull(
      header.node_id(), *key, absl::MakeConstSpan(header.ids().data(), header.ids().size()));
  if (!rows.ok()) return done(rows.status());
  // The rows go out as the frame's payload, from the pulled tensor (no copy).
  const PayloadPart part{*rows, 0, rows->byte_size()};
  absl::StatusOr<grpc::ByteBuffer> frame =
      EncodeFrame(proto::TablePullResponse(), absl::MakeConstSpan(&part, 1));
  if (frame.ok()) *response = *std::move(frame);
  done(frame.status());
}

}  // namespace

void HandleServerRequest(const std::shared_ptr<ServerBackend>& backend, ServerMethod method,
                         const grpc::ByteBuffer& request, grpc::ByteBuffer* response, Done done,
                         const VerifiedCaller* caller, uint64_t view_epoch) {
  if (backend == nullptr) {
    return done(absl::UnavailableError("this server is waiting for the job's nodes to register"));
  }
  if (method != ServerMethod::kCommand && !backend->refusal.ok()) return done(backend->refusal);
  if (method != ServerMethod::kCommand) {
    absl::Status view = backend->engine->view_floor().Check(view_epoch, Mutates(method));
    if (!view.ok()) return done(std::move(view));
  }
  switch (method) {
    case ServerMethod::kInit:
      return HandleInit(backend, &request, response, std::move(done), caller);
    case ServerMethod::kPush:
      return HandlePush(backend, &request, response, std::move(done), caller);
    case ServerMethod::kPull:
      return HandlePull(backend, &request, response, std::move(done), caller);
    case ServerMethod::kPushPull:
      return HandlePushPull(backend, &request, response, std::move(done), caller);
    case ServerMethod::kRowSparsePull:
      return HandleRowSparsePull(backend, &request, response, std::move(done), caller);
    case ServerMethod::kCommand:
      return HandleCommand(backend, &request, response, std::move(done), caller);
    case ServerMethod::kTableInit:
      return HandleTableInit(backend, &request, response, std::move(done), caller);
    case ServerMethod::kTablePush:
      return HandleTablePush(backend, &request, response, std::move(done), caller, view_epoch);
    case ServerMethod::kTablePull:
      return HandleTablePull(backend, &request, response, std::move(done), caller);
  }
  done(absl::InvalidArgumentError(
      absl::StrCat("unknown kvserver method ", static_cast<int>(method))));
}

}  // namespace kvstore
