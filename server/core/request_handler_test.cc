// Tests of the request handler on malformed frames: declared sizes that would cost memory,
// payloads that do not match their headers, and requests from nodes outside the job. Each is
// refused, and the stored values stay as they were.
#include "server/core/request_handler.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/proto_convert.h"
#include "common/server_commands.h"
#include "common/wire_frame.h"
#include "proto/kvstore.pb.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

constexpr uint64_t kWorker = 2;
constexpr int64_t kKey = 5;

struct Job {
  UpdaterRegistry registry = UpdaterRegistry::WithBuiltins();
  std::shared_ptr<ServerBackend> backend;

  explicit Job(int64_t max_value_bytes = kDefaultMaxValueBytes) {
    BackendSpec spec;
    spec.worker_node_ids = {kWorker};
    spec.registry = &registry;
    spec.max_value_bytes = max_value_bytes;
    auto made = MakeServerBackend(spec);
    REQUIRE(made.ok());
    backend = *std::move(made);
  }

  // Call runs one request and returns its status (every request here is answered at once).
  absl::Status Call(ServerMethod method, const grpc::ByteBuffer& request,
                    grpc::ByteBuffer* response = nullptr, const VerifiedCaller* caller = nullptr) {
    grpc::ByteBuffer ignored;
    absl::Status result = absl::UnknownError("not answered");
    absl::Notification answered;
    HandleServerRequest(
        backend, method, request, response != nullptr ? response : &ignored,
        [&](absl::Status s) {
          result = s;
          answered.Notify();
        },
        caller);
    // Some calls are answered from a thread of their own (a copy's pages).
    if (!answered.WaitForNotificationWithTimeout(absl::Seconds(30))) {
      return absl::DeadlineExceededError("the call was not answered within 30 s");
    }
    return result;
  }

  // Command runs controller command `head` with `body`, named as from node `from` and, in a
  // job with a secret, signed by node `signer` (0: no secret).
  absl::Status Command(uint64_t from, uint64_t signer, int head, const std::string& body) {
    proto::ServerCommandRequest command;
    command.set_node_id(from);
    command.set_head(head);
    command.set_body(body);
    const VerifiedCaller caller{signer};
    return Call(ServerMethod::kCommand, EncodeMessage(command), nullptr,
                signer == 0 ? nullptr : &caller);
  }

  // Stored returns the bytes of key kKey as a pull returns them.
  std::vector<uint8_t> Stored(const Shape& shape) {
    proto::PullRequest pull;
    pull.set_node_id(kWorker);
    proto::TensorHeader* h = pull.add_tensors();
    KeyToProto(kKey, h->mutable_key());
    h->set_dtype(proto::FLOAT32);
    for (int64_t d : shape) h->add_shape(d);
    h->set_element_count(NumElements(shape));
    grpc::ByteBuffer reply;
    REQUIRE(Call(ServerMethod::kPull, EncodeMessage(pull), &reply).ok());
    proto::PullResponse header;
    auto payload = DecodeFrame(reply, &header);
    REQUIRE(payload.ok());
    std::vector<uint8_t> bytes(payload->size());
    REQUIRE(payload->CopyTo(0, bytes.size(), bytes.data()).ok());
    return bytes;
  }
};

// Header describes `count` float32 elements of key kKey, of `shape`, at payload byte `offset`.
void Header(proto::TensorHeader* h, const Shape& shape, int64_t count, uint64_t offset,
            uint64_t bytes) {
  KeyToProto(kKey, h->mutable_key());
  h->set_dtype(proto::FLOAT32);
  for (int64_t d : shape) h->add_shape(d);
  h->set_element_count(count);
  h->set_payload_offset(offset);
  h->set_payload_bytes(bytes);
}

grpc::ByteBuffer Frame(const google::protobuf::MessageLite& header, const Tensor& payload) {
  auto frame = EncodeFrame(header, {PayloadPart{payload, 0, payload.byte_size()}});
  REQUIRE(frame.ok());
  return *std::move(frame);
}

TEST_CASE("RequestHandler: a 100-byte Init declaring 2^40 elements is refused unallocated",
          "[kvserver][limits]") {
  Job job;
  for (bool deferred : {true, false}) {
    proto::InitRequest init;
    init.set_node_id(kWorker);
    init.set_deferred(deferred);
    Header(init.add_tensors(), {int64_t{1} << 40}, int64_t{1} << 40, 0, 0);
    const grpc::ByteBuffer frame = EncodeFrame(init, {}).value();
    REQUIRE(frame.Length() < 100);
    const absl::Status status = job.Call(ServerMethod::kInit, frame);
    INFO(status.ToString());
    // Not deferred, its missing bytes may be what is refused first.
    REQUIRE((status.code() == absl::StatusCode::kResourceExhausted ||
             (!deferred && status.code() == absl::StatusCode::kInvalidArgument)));
    if (deferred) REQUIRE_THAT(std::string(status.message()), Catch::Contains("(1099511627776,)"));
  }
  REQUIRE(job.backend->engine->stats().num_keys == 0);
}

TEST_CASE("RequestHandler: the payload must be exactly what the headers declare",
          "[kvserver][limits]") {
  TestRng rng;
  INFO(rng.Describe());
  Job job;
  const Shape shape = {2, 8};
  const Tensor init = rng.RandomTensor(DType::kFloat32, shape);
  proto::InitRequest init_request;
  init_request.set_node_id(kWorker);
  Header(init_request.add_tensors(), shape, 16, 0, 64);
  REQUIRE(job.Call(ServerMethod::kInit, Frame(init_request, init)).ok());
  const std::vector<uint8_t> before = job.Stored(shape);

  const Tensor pushed = rng.RandomTensor(DType::kFloat32, {32});  // 128 bytes.
  struct Case {
    const char* name;
    uint64_t offset, bytes;  // The header's payload fields.
    size_t sent;             // Payload bytes sent.
  };
  const std::vector<Case> cases = {
      {"trailing bytes after the value", 0, 64, 128},
      {"a payload shorter than declared", 0, 64, 32},
      {"no payload at all", 0, 64, 0},
      {"a value starting after a gap", 8, 64, 72},
      {"a payload_offset past the payload", 1u << 30, 64, 64},
      {"payload_bytes that wrap around", 0, UINT64_MAX - 63, 64},
  };
  for (ServerMethod method : {ServerMethod::kPush, ServerMethod::kPushPull}) {
    for (const Case& c : cases) {
      INFO(c.name << (method == ServerMethod::kPush ? " (Push)" : " (PushPull)"));
      proto::PushRequest push;
      push.set_node_id(kWorker);
      push.set_request_id(rng.Int(1, 1 << 30));
      Header(push.add_tensors(), shape, 16, c.offset, c.bytes);
      const auto frame = EncodeFrame(push, {PayloadPart{pushed, 0, c.sent}});
      REQUIRE(frame.ok());
      const absl::Status status = job.Call(method, *frame);
      INFO(status.ToString());
      REQUIRE(status.code() == absl::StatusCode::kInvalidArgument);
    }
  }
  REQUIRE(job.Stored(shape) == before);
}

TEST_CASE("RequestHandler: pulled values and group members declare no payload",
          "[kvserver][limits]") {
  TestRng rng;
  INFO(rng.Describe());
  Job job;
  const Tensor init = rng.RandomTensor(DType::kFloat32, {4});
  proto::InitRequest init_request;
  init_request.set_node_id(kWorker);
  Header(init_request.add_tensors(), {4}, 4, 0, 16);
  REQUIRE(job.Call(ServerMethod::kInit, Frame(init_request, init)).ok());
  for (uint64_t group : {uint64_t{0}, uint64_t{9}}) {
    INFO("group " << group);
    proto::PullRequest pull;
    pull.set_node_id(kWorker);
    pull.set_group_id(group);
    Header(pull.add_tensors(), {4}, 4, 0, 1u << 20);
    const absl::Status status = job.Call(ServerMethod::kPull, EncodeMessage(pull));
    INFO(status.ToString());
    REQUIRE(absl::IsInvalidArgument(status));
  }
}

TEST_CASE("RequestHandler: a RowSparsePull of nothing from a node outside the job is refused",
          "[kvserver][limits]") {
  Job job;
  proto::PullRequest pull;
  pull.set_node_id(987654);
  REQUIRE(absl::IsPermissionDenied(job.Call(ServerMethod::kRowSparsePull, EncodeMessage(pull))));
  pull.set_node_id(kWorker);
  REQUIRE(job.Call(ServerMethod::kRowSparsePull, EncodeMessage(pull)).ok());
}

TEST_CASE("RequestHandler: a RowSparsePull reply over max_value_bytes is refused",
          "[kvserver][limits]") {
  TestRng rng;
  INFO(rng.Describe());
  Job job(/*max_value_bytes=*/1024);
  const Tensor init = rng.RandomTensor(DType::kFloat32, {4, 4});  // Rows of 16 bytes.
  proto::InitRequest init_request;
  init_request.set_node_id(kWorker);
  Header(init_request.add_tensors(), {4, 4}, 16, 0, 64);
  REQUIRE(job.Call(ServerMethod::kInit, Frame(init_request, init)).ok());
  // Each list alone fits (40 rows: 640 bytes); the two together do not.
  proto::PullRequest pull;
  pull.set_node_id(kWorker);
  for (int i = 0; i < 2; ++i) {
    Header(pull.add_tensors(), {4, 4}, 16, 0, 0);
    proto::RowIds* ids = pull.add_row_ids();
    for (int r = 0; r < 40; ++r) ids->add_ids(r % 4);
  }
  const absl::Status status = job.Call(ServerMethod::kRowSparsePull, EncodeMessage(pull));
  INFO(status.ToString());
  REQUIRE(absl::IsResourceExhausted(status));
}

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

TEST_CASE("RequestHandler: a copy's pages come from the server its begin named, and only pages",
          "[kvserver][replicas]") {
  constexpr uint64_t kSender = 9, kOther = 10;
  for (const bool secret : {false, true}) {
    INFO((secret ? "with" : "without") << " a secret");
    Job job;
    auto signer = [&](uint64_t node) { return secret ? node : 0; };
    // Before a begin names it, a server may send no page.
    CHECK(absl::IsPermissionDenied(
        job.Command(kSender, signer(kSender), kCommandCopyIn, "put 0\nabcd")));
    REQUIRE(job.Command(kSchedulerNodeId, signer(kSchedulerNodeId), kCommandCopyIn,
                        absl::StrCat("begin 8 ", kSender))
                .ok());
    CHECK(job.Command(kSender, signer(kSender), kCommandCopyIn, "put 0\nabcd").ok());
    // Another server, a page signed by another node, and any other command are refused.
    CHECK(absl::IsPermissionDenied(
        job.Command(kOther, signer(kOther), kCommandCopyIn, "put 4\nefgh")));
    if (secret) {
      CHECK(absl::IsPermissionDenied(
          job.Command(kSender, signer(kOther), kCommandCopyIn, "put 4\nefgh")));
    }
    CHECK(absl::IsPermissionDenied(
        job.Command(kSender, signer(kSender), kCommandCopyIn, "load 8 0")));
    CHECK(absl::IsPermissionDenied(job.Command(kSender, signer(kSender), kCommandStats, "")));
    // The scheduler's load finds the half that was put, and ends the copy: no more pages.
    const absl::Status load =
        job.Command(kSchedulerNodeId, signer(kSchedulerNodeId), kCommandCopyIn, "load 8 0");
    INFO(load.ToString());
    CHECK(absl::IsDataLoss(load));
    CHECK(load.message().find("received 4 bytes") != absl::string_view::npos);
    CHECK(absl::IsPermissionDenied(
        job.Command(kSender, signer(kSender), kCommandCopyIn, "put 4\nefgh")));
  }
}

}  // namespace
}  // namespace kvstore
