#include "tests/integration/daemon_job.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/support/channel_arguments.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/job_auth.h"
#include "proto/kvstore.grpc.pb.h"
#include "tests/signed_request.h"

namespace kvstore::testing {
namespace {

std::string TestTempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// Started starts `argv` as `name`, its output in a log of its own, or fails the test.
std::unique_ptr<Process> Started(const std::string& name, std::vector<std::string> argv) {
  static int started = 0;
  ProcessOptions options;
  options.log_path = absl::StrCat(TestTempDir(), "/", name, "-", getpid(), "-", started++, ".log");
  auto process = Process::Start(name, std::move(argv), std::move(options));
  INFO(process.status().ToString());
  REQUIRE(process.ok());
  return *std::move(process);
}

// Channel: no size limit on replies; requests are what the daemons limit.
std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

grpc::ByteBuffer Serialized(const google::protobuf::MessageLite& message) {
  return RawBytes(message.SerializeAsString());
}

// SecretFile writes a fresh job secret to a file only its owner can read.
std::string SecretFile() {
  static int written = 0;
  const std::string path = absl::StrCat(TestTempDir(), "/secret-", getpid(), "-", written++);
  {
    std::ofstream out(path);
    out << NewSecret() << "\n";
    REQUIRE(out.good());
  }
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  return path;
}

}  // namespace

grpc::ByteBuffer RawBytes(absl::string_view bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

grpc::ByteBuffer RawFrame(const google::protobuf::MessageLite& header, absl::string_view payload,
                          std::optional<uint32_t> prefix) {
  const std::string head = header.SerializeAsString();
  const uint32_t n = prefix.value_or(static_cast<uint32_t>(head.size()));
  std::string frame = {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 24)};
  frame.reserve(4 + head.size() + payload.size());
  frame.append(head);
  frame.append(payload.data(), payload.size());
  return RawBytes(frame);
}

std::string RuntimeFile(const std::string& path) {
  const char* root = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(root != nullptr ? root : ".", "/",
                      workspace != nullptr ? workspace : "kvstore", "/", path);
}

DaemonJob::DaemonJob(std::vector<std::string> scheduler_args,
                     std::vector<std::string> server_args) {
  const std::string secret_file = SecretFile();
  const absl::StatusOr<std::string> secret = ReadSecretFile(secret_file);
  REQUIRE(secret.ok());
  static int jobs = 0;
  const std::string port_file =
      absl::StrCat(TestTempDir(), "/scheduler-port-", getpid(), "-", jobs++);
  std::vector<std::string> scheduler = {RuntimeFile("server/scheduler/scheduler"), "--port=0",
                                        "--port_file=" + port_file, "--num_servers=1",
                                        "--num_workers=1", "--heartbeat_interval=100ms",
                                        "--register_timeout=30s", "--secret_file=" + secret_file,
                                        // The limit the tests' oversized requests exceed.
                                        "--max_request_bytes=4194304", "--log_level=warn"};
  scheduler.insert(scheduler.end(), scheduler_args.begin(), scheduler_args.end());
  scheduler_ = Started("scheduler", std::move(scheduler));
  const absl::StatusOr<int> port = scheduler_->WaitForPortFile(port_file, absl::Seconds(20));
  INFO(port.status().ToString() << "\n" << scheduler_->output());
  REQUIRE(port.ok());
  scheduler_address_ = absl::StrCat("127.0.0.1:", *port);
  const std::string& scheduler_address = scheduler_address_;
  std::vector<std::string> server = {RuntimeFile("server/kvserver"),
                                     "--scheduler=" + scheduler_address,
                                     "--secret_file=" + secret_file, "--log_level=warn"};
  server.insert(server.end(), server_args.begin(), server_args.end());
  server_ = Started("kvserver", std::move(server));

  auto stub = proto::Scheduler::NewStub(Channel(scheduler_address));
  proto::RegisterRequest request;
  request.set_role(proto::WORKER);
  request.set_requested_rank(-1);
  request.set_hostname("daemon-job");
  request.set_mode("dist_sync");
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  context.set_wait_for_ready(true);
  context.AddMetadata(kJobTokenKey, JobToken(*secret));
  const grpc::Status registered = stub->Register(&context, request, &registration_);
  INFO(registered.error_message() << "\nscheduler:\n"
                                  << scheduler_->output() << "\nkvserver:\n"
                                  << server_->output());
  REQUIRE(registered.ok());
  REQUIRE(registration_.view().servers_size() == 1);
  credential_ = NodeCredential(node_id(), registration_.node_token());
  signer_ = std::make_unique<RequestSigner>(node_id(), registration_.node_token());
  scheduler_stub_ = Connection(Daemon::kScheduler);
  server_stub_ = Connection(Daemon::kServer);
  heartbeats_ = std::thread([this] { Heartbeats(); });
  // The kvserver answers UNAVAILABLE until it has its own registration's answer.
  absl::Status serving = Alive(Daemon::kServer);
  for (const absl::Time give_up = absl::Now() + absl::Seconds(20);
       absl::IsUnavailable(serving) && absl::Now() < give_up &&
       !server_->Exited(absl::ZeroDuration());) {
    absl::SleepFor(absl::Milliseconds(10));
    serving = Alive(Daemon::kServer);
  }
  INFO(serving.ToString() << "\nkvserver:\n" << server_->output());
  REQUIRE(serving.ok());
}

DaemonJob::~DaemonJob() {
  if (!stop_heartbeats_.HasBeenNotified()) stop_heartbeats_.Notify();
  if (heartbeats_.joinable()) heartbeats_.join();
  server_->Kill();
  scheduler_->Kill();
}

void DaemonJob::Heartbeats() {
  proto::HeartbeatRequest beat;
  beat.set_node_id(node_id());
  const grpc::ByteBuffer request = Serialized(beat);
  while (!stop_heartbeats_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    Call(Daemon::kScheduler, "/kvstore.proto.Scheduler/Heartbeat", request, nullptr,
         absl::Seconds(2))
        .IgnoreError();  // Alive() is what tests check.
  }
}

absl::Status DaemonJob::Call(Daemon daemon, const std::string& method,
                             const grpc::ByteBuffer& request, grpc::ByteBuffer* reply,
                             absl::Duration timeout) {
  struct Answer {
    absl::Notification done;
    absl::Status status;
    grpc::ByteBuffer reply;
  };
  auto answer = std::make_shared<Answer>();
  CallAsync(
      daemon, method, request,
      [answer](absl::Status status, const grpc::ByteBuffer& got) {
        answer->reply = got;
        answer->status = std::move(status);
        answer->done.Notify();
      },
      timeout);
  // The call's deadline bounds the wait; the margin covers a late gRPC thread.
  if (!answer->done.WaitForNotificationWithTimeout(timeout + absl::Seconds(30))) {
    return absl::DeadlineExceededError(absl::StrCat(method, " was never answered"));
  }
  if (reply != nullptr) *reply = answer->reply;
  return answer->status;
}

std::unique_ptr<grpc::GenericStub> DaemonJob::Connection(Daemon daemon) const {
  return std::make_unique<grpc::GenericStub>(
      Channel(daemon == Daemon::kScheduler ? scheduler_address_
                                           : registration_.view().servers(0).address()));
}

void DaemonJob::CallAsync(Daemon daemon, const std::string& method, grpc::ByteBuffer request,
                          std::function<void(absl::Status, const grpc::ByteBuffer&)> done,
                          absl::Duration timeout, grpc::GenericStub* via) {
  struct Pending {
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer reply;
    std::function<void(absl::Status, const grpc::ByteBuffer&)> done;
  };
  auto* call = new Pending;
  call->done = std::move(done);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (daemon == Daemon::kServer) {
    call->request =
        SignRequest(method, request, signer_.get(), registration_.view().servers(0).address());
  } else {
    call->request = std::move(request);
    call->context.AddMetadata(kNodeTokenKey, credential_);
  }
  (via != nullptr ? *via : Stub(daemon))
      .UnaryCall(&call->context, method, grpc::StubOptions(), &call->request, &call->reply,
                 [call](grpc::Status status) {
                   call->done(FromGrpc(status), call->reply);
                   delete call;
                 });
}

absl::Status DaemonJob::Alive(Daemon daemon) {
  Process& p = process(daemon);
  if (p.Exited(absl::ZeroDuration())) {
    return absl::UnavailableError(
        absl::StrCat(p.name(), " exited with code ", p.exit_code().value_or(-1)));
  }
  if (daemon == Daemon::kScheduler) {
    proto::ClusterStatusRequest request;
    request.set_node_id(node_id());
    return Call(daemon, "/kvstore.proto.Scheduler/ClusterStatus", Serialized(request));
  }
  proto::PullRequest nothing;
  nothing.set_node_id(node_id());
  return Call(daemon, "/kvstore.proto.KVServer/Pull", Serialized(nothing));
}

long DaemonJob::RssKib(Daemon daemon) const {
  const Process& p = daemon == Daemon::kScheduler ? *scheduler_ : *server_;
  std::ifstream status(absl::StrCat("/proc/", p.pid(), "/status"));
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view value = line;
    long kib = 0;
    if (absl::ConsumePrefix(&value, "VmRSS:") &&
        absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(value), " kB"), &kib)) {
      return kib;
    }
  }
  return 0;
}

absl::Status DaemonJob::Finish() {
  proto::FinishRequest finish;
  finish.set_node_id(node_id());
  const absl::Status sent =
      Call(Daemon::kScheduler, "/kvstore.proto.Scheduler/Finish", Serialized(finish));
  if (!sent.ok()) return sent;
  stop_heartbeats_.Notify();
  heartbeats_.join();
  for (Process* p : {server_.get(), scheduler_.get()}) {
    const absl::StatusOr<int> code = p->Wait(absl::Seconds(30));
    if (!code.ok()) return code.status();
    if (*code != 0) {
      return absl::InternalError(
          absl::StrCat(p->name(), " exited with code ", *code, ":\n", p->output()));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvstore::testing
