// Limits of the real daemons against hostile requests: a kvserver refuses declared sizes that
// would cost memory (a 100-byte Init of 2^40 elements, shapes whose element count overflows
// int64, payloads longer or shorter than their headers) and requests above its receive limit,
// and stays up with flat memory; the scheduler refuses requests above 4 MiB, and floods of
// concurrent requests, over the limit or under it, leave its memory bounded.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/proto_convert.h"
#include "common/server_methods.h"
#include "proto/kvstore.pb.h"
#include "tests/integration/daemon_job.h"

namespace kvstore::testing {
namespace {

using Daemon = DaemonJob::Daemon;

constexpr int64_t kKey = 3;
constexpr long kMiB = 1024;  // In KiB, as RSS is read.

proto::TensorHeader Header(const Shape& shape, int64_t count, uint64_t bytes) {
  proto::TensorHeader h;
  KeyToProto(kKey, h.mutable_key());
  h.set_dtype(proto::FLOAT32);
  for (int64_t d : shape) h.add_shape(d);
  h.set_element_count(count);
  h.set_payload_bytes(bytes);
  return h;
}

grpc::ByteBuffer InitFrame(uint64_t node, const proto::TensorHeader& h, bool deferred,
                           const std::string& payload) {
  proto::InitRequest init;
  init.set_node_id(node);
  init.set_deferred(deferred);
  *init.add_tensors() = h;
  return RawFrame(init, payload);
}

grpc::ByteBuffer PushFrame(uint64_t node, uint64_t request_id, const proto::TensorHeader& h,
                           const std::string& payload) {
  proto::PushRequest push;
  push.set_node_id(node);
  push.set_request_id(request_id);
  *push.add_tensors() = h;
  return RawFrame(push, payload);
}

// Stored pulls key kKey, of `count` float32 elements, and returns its bytes.
std::string Stored(DaemonJob& job, int64_t count) {
  proto::PullRequest pull;
  pull.set_node_id(job.node_id());
  *pull.add_tensors() = Header({count}, count, 0);
  grpc::ByteBuffer reply;
  const absl::Status status = job.Call(Daemon::kServer, GrpcMethodPath(ServerMethod::kPull),
                                       RawBytes(pull.SerializeAsString()), &reply);
  INFO(status.ToString());
  REQUIRE(status.ok());
  grpc::Slice all;
  REQUIRE(reply.DumpToSingleSlice(&all).ok());
  const std::string frame(reinterpret_cast<const char*>(all.begin()), all.size());
  REQUIRE(frame.size() >= static_cast<size_t>(count) * 4);
  return frame.substr(frame.size() - static_cast<size_t>(count) * 4);
}

void RequireCode(const absl::Status& status, std::vector<absl::StatusCode> codes,
                 const char* what) {
  INFO(what << ": " << status.ToString());
  REQUIRE(std::find(codes.begin(), codes.end(), status.code()) != codes.end());
  std::printf("refused %s: %s\n", what, status.ToString().substr(0, 200).c_str());
}

// FloodResult: what a flood of concurrent requests did to a daemon.
struct FloodResult {
  long growth_kib = 0;  // The peak resident memory during the flood, less that before it.
  int refused = 0;
};

// Flood sends `calls` copies of `request` to `method` of `daemon` at once, spread over
// `connections` connections of their own (each may have a window of data in flight), and
// waits for every answer (each call has a deadline).
FloodResult Flood(DaemonJob& job, Daemon daemon, const char* method,
                  const grpc::ByteBuffer& request, int calls, int connections) {
  const long before = job.RssKib(daemon);
  long peak = before;
  absl::Mutex mu;
  int answered = 0, refused = 0;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int c = 0; c < connections; ++c) stubs.push_back(job.Connection(daemon));
  for (int i = 0; i < calls; ++i) {
    job.CallAsync(
        daemon, method, request,
        [&](absl::Status status, const grpc::ByteBuffer&) {
          absl::MutexLock lock(&mu);
          ++answered;
          refused += !status.ok();
        },
        absl::Seconds(60), stubs[static_cast<size_t>(i % connections)].get());
    if (i % 50 == 0) peak = std::max(peak, job.RssKib(daemon));
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(90);
  for (bool all = false; !all && absl::Now() < give_up; absl::SleepFor(absl::Milliseconds(20))) {
    peak = std::max(peak, job.RssKib(daemon));
    absl::MutexLock lock(&mu);
    all = answered == calls;
  }
  absl::MutexLock lock(&mu);
  REQUIRE(answered == calls);
  std::printf(
      "%d concurrent requests of %zu bytes over %d connections: RSS %ld KiB before, "
      "peak %ld KiB; %d refused\n",
      calls, request.Length(), connections, before, peak, refused);
  return FloodResult{peak - before, refused};
}

TEST_CASE("Limits: a kvserver refuses hostile sizes and oversized requests, stays up, memory flat",
          "[limits][kvserver]") {
  // Values up to 1 MiB: requests up to 17 MiB.
  DaemonJob job({}, {"--max_value_bytes=1048576", "--memory_budget_bytes=67108864"});
  const uint64_t node = job.node_id();
  const std::string init_bytes(64, '\x2a');
  const absl::Status initialised =
      job.Call(Daemon::kServer, GrpcMethodPath(ServerMethod::kInit),
               InitFrame(node, Header({16}, 16, 64), false, init_bytes));
  INFO(initialised.ToString());
  REQUIRE(initialised.ok());
  const std::string before = Stored(job, 16);
  const long rss_before = job.RssKib(Daemon::kServer);
  const char* init = GrpcMethodPath(ServerMethod::kInit);
  const char* push = GrpcMethodPath(ServerMethod::kPush);

  for (int round = 0; round < 20; ++round) {
    // 2^40 float32 elements declared in about 100 bytes, deferred (zeros to allocate) or not.
    const int64_t huge = int64_t{1} << 40;
    proto::TensorHeader h = Header({huge}, huge, 0);
    KeyToProto(int64_t{100 + round}, h.mutable_key());
    const grpc::ByteBuffer frame = InitFrame(node, h, true, "");
    REQUIRE(frame.Length() < 100);
    RequireCode(job.Call(Daemon::kServer, init, frame), {absl::StatusCode::kResourceExhausted},
                "a deferred Init of 2^40 elements");
    RequireCode(job.Call(Daemon::kServer, init, InitFrame(node, h, false, "")),
                {absl::StatusCode::kResourceExhausted, absl::StatusCode::kInvalidArgument},
                "an Init of 2^40 elements without their bytes");
    // Element counts that wrap to 0 and 2 in int64.
    for (const Shape& shape : {Shape{int64_t{1} << 62, 4}, Shape{3, 6148914691236517206}}) {
      for (int64_t count : {0, 2}) {
        proto::TensorHeader wrapped = Header(shape, count, static_cast<uint64_t>(count) * 4);
        KeyToProto(int64_t{200 + round}, wrapped.mutable_key());
        RequireCode(job.Call(Daemon::kServer, init,
                             InitFrame(node, wrapped, false, std::string(count * 4, '\1'))),
                    {absl::StatusCode::kInvalidArgument}, "a shape whose element count wraps");
      }
    }
    // Payloads longer and shorter than the header declares.
    RequireCode(
        job.Call(Daemon::kServer, push,
                 PushFrame(node, 1000 + round, Header({16}, 16, 64), std::string(64 + 4000, '\7'))),
        {absl::StatusCode::kInvalidArgument}, "a push with 4,000 trailing bytes");
    RequireCode(
        job.Call(Daemon::kServer, push,
                 PushFrame(node, 2000 + round, Header({16}, 16, 64), std::string(60, '\7'))),
        {absl::StatusCode::kInvalidArgument}, "a push shorter than declared");
  }
  // Above the receive limit (17 MiB): refused before any handler sees it.
  RequireCode(job.Call(Daemon::kServer, push,
                       PushFrame(node, 3000, Header({16}, 16, 64), std::string(18 << 20, '\7'))),
              {absl::StatusCode::kResourceExhausted}, "an 18 MiB push");

  REQUIRE(job.Alive(Daemon::kServer).ok());
  REQUIRE(Stored(job, 16) == before);
  const long rss_after = job.RssKib(Daemon::kServer);
  std::printf("kvserver RSS %ld KiB before, %ld KiB after\n", rss_before, rss_after);
  REQUIRE(rss_after - rss_before < 96 * kMiB);
  // Requests over the limit are read whole before gRPC refuses them: the quota (64 MiB here)
  // bounds how many bytes it holds meanwhile.
  const FloodResult oversized =
      Flood(job, Daemon::kServer, push,
            PushFrame(node, 4000, Header({16}, 16, 64), std::string(24 << 20, '\7')), 40, 40);
  REQUIRE(oversized.refused == 40);
  REQUIRE(oversized.growth_kib < 192 * kMiB);
  REQUIRE(Stored(job, 16) == before);
  REQUIRE(job.Finish().ok());
}

TEST_CASE("Limits: the scheduler refuses requests above 4 MiB; floods leave its memory bounded",
          "[limits][scheduler]") {
  DaemonJob job({}, {});
  const char* status_method = "/kvstore.proto.Scheduler/ClusterStatus";
  // A ClusterStatus request padded with an unknown field: it parses, and is answered.
  auto padded = [&job](size_t bytes) {
    proto::ClusterStatusRequest request;
    request.set_node_id(job.node_id());
    std::string message = request.SerializeAsString();
    message += "\xfa\x3f";  // Field 1023, length-delimited.
    for (uint64_t n = bytes;; n >>= 7) {
      if (n < 0x80) {
        message += static_cast<char>(n);
        break;
      }
      message += static_cast<char>(0x80 | (n & 0x7f));
    }
    return message + std::string(bytes, 'p');
  };
  REQUIRE(job.Call(Daemon::kScheduler, status_method, RawBytes(padded(1000))).ok());
  RequireCode(job.Call(Daemon::kScheduler, status_method, RawBytes(padded(5 << 20))),
              {absl::StatusCode::kResourceExhausted}, "a 5 MiB request to the scheduler");

  // Requests over the limit are read whole before gRPC refuses them: the quota bounds how
  // many bytes it holds meanwhile (without it, these take over 1 GiB).
  const FloodResult oversized =
      Flood(job, Daemon::kScheduler, status_method, RawBytes(padded(50 << 20)), 40, 40);
  REQUIRE(oversized.refused == 40);
  REQUIRE(oversized.growth_kib < 192 * kMiB);
  // Requests under the limit: at most 32 open per connection, and the quota (without them,
  // these take about 800 MiB).
  const FloodResult small =
      Flood(job, Daemon::kScheduler, status_method, RawBytes(padded(1 << 20)), 3000, 30);
  REQUIRE(small.growth_kib < 448 * kMiB);
  REQUIRE(job.Alive(Daemon::kScheduler).ok());
  REQUIRE(job.Finish().ok());
}

}  // namespace
}  // namespace kvstore::testing
