// DaemonJob: a real job for tests that send the daemons raw requests - malformed ones
// included - and check that they stay up: the built scheduler and one kvserver, each its own
// process on 127.0.0.1 with ports the OS chooses, with a job secret of their own, and this
// process as the job's only worker, joined through a real Register (dist_sync). Every call
// carries the worker's node credential (common/job_auth.h): calls to the kvserver are signed
// with its key (common/request_signature.h).
//
// Contract:
// - The constructor starts both daemons, registers, starts heartbeats and returns once the
//   kvserver serves; a failure is a Catch2 REQUIRE failure naming the process and its output.
//   Every wait is bounded.
// - Call and CallAsync send one raw unary call (any method path, any bytes) with a deadline.
// - Finish ends the job the way a worker does (Finish, then both daemons exit 0); the
//   destructor kills whatever still runs.
//
// Threading: construct, Finish and destroy on one thread (the daemons die with the thread
// that started them: tests/process.h). Call, CallAsync, alive checks and RSS reads may run on
// any thread.
#ifndef KVSTORE_TESTS_INTEGRATION_DAEMON_JOB_H_
#define KVSTORE_TESTS_INTEGRATION_DAEMON_JOB_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/request_signature.h"
#include "proto/kvstore.pb.h"
#include "tests/process.h"

namespace kvstore::testing {

class DaemonJob {
 public:
  enum class Daemon { kScheduler, kServer };

  // Starts the job; `scheduler_args` and `server_args` are added to each daemon's flags.
  DaemonJob(std::vector<std::string> scheduler_args, std::vector<std::string> server_args);
  ~DaemonJob();
  DaemonJob(const DaemonJob&) = delete;
  DaemonJob& operator=(const DaemonJob&) = delete;

  // The worker's node id, and the chunk size of the job's cluster view.
  uint64_t node_id() const { return registration_.node_id(); }
  int64_t chunk_bytes() const { return registration_.view().chunk_bytes(); }

  // Call sends `request` to `method` ("/kvstore.proto.KVServer/Push") of `daemon` and waits
  // for the answer (at most `timeout`); the reply goes to `*reply` when given.
  absl::Status Call(Daemon daemon, const std::string& method, const grpc::ByteBuffer& request,
                    grpc::ByteBuffer* reply = nullptr, absl::Duration timeout = absl::Seconds(10));
  // CallAsync sends the same way and returns at once; `done` runs once, on a gRPC thread, with
  // the status and the reply. With `via` (Connection), the call goes over that connection.
  void CallAsync(Daemon daemon, const std::string& method, grpc::ByteBuffer request,
                 std::function<void(absl::Status, const grpc::ByteBuffer&)> done,
                 absl::Duration timeout = absl::Seconds(10), grpc::GenericStub* via = nullptr);
  // Connection returns a stub on a new TCP connection of its own to `daemon`.
  std::unique_ptr<grpc::GenericStub> Connection(Daemon daemon) const;
  // address returns the address `daemon` advertises ("127.0.0.1:PORT").
  std::string address(Daemon daemon) const {
    return daemon == Daemon::kScheduler ? scheduler_address_
                                        : registration_.view().servers(0).address();
  }

  // Alive is OK when `daemon` still runs and answers a valid request (a ClusterStatus, or a
  // Pull of nothing), else names what failed.
  absl::Status Alive(Daemon daemon);
  // RssKib returns the resident memory of `daemon` now, in KiB (0 once it has exited).
  long RssKib(Daemon daemon) const;

  // Finish ends the job: OK once both daemons have exited 0 (within 30 s).
  absl::Status Finish();

  Process& process(Daemon daemon) { return daemon == Daemon::kScheduler ? *scheduler_ : *server_; }

 private:
  grpc::GenericStub& Stub(Daemon daemon) {
    return daemon == Daemon::kScheduler ? *scheduler_stub_ : *server_stub_;
  }
  void Heartbeats();

  std::unique_ptr<Process> scheduler_;
  std::unique_ptr<Process> server_;
  std::string scheduler_address_;
  std::unique_ptr<grpc::GenericStub> scheduler_stub_;
  std::unique_ptr<grpc::GenericStub> server_stub_;
  proto::RegisterResponse registration_;
  std::string credential_;  // This worker's node credential, for the scheduler's calls.
  std::unique_ptr<RequestSigner> signer_;  // Signs its calls to the kvserver.
  absl::Notification stop_heartbeats_;
  std::thread heartbeats_;
};

// RuntimeFile returns the path of a file of this test's runfiles ("server/kvserver").
std::string RuntimeFile(const std::string& path);

// RawBytes returns `bytes` as one message, as they are.
grpc::ByteBuffer RawBytes(absl::string_view bytes);
// RawFrame returns [fixed32 N][N bytes: `header`][`payload`] (proto/kvstore.proto), or with
// `prefix` in place of N when set.
grpc::ByteBuffer RawFrame(const google::protobuf::MessageLite& header, absl::string_view payload,
                          std::optional<uint32_t> prefix = std::nullopt);

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_INTEGRATION_DAEMON_JOB_H_
