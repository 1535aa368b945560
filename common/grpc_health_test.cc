#include "common/grpc_health.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"

namespace kvstore {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// HealthServer: a gRPC server on 127.0.0.1 with a DaemonHealth served on one queue and thread,
// stopped as a daemon stops it (server, StopServing, queue, thread).
class HealthServer {
 public:
  HealthServer() : health_("kvstore.test.Daemon") {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    health_.AddTo(&builder);
    cq_ = builder.AddCompletionQueue();
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
    thread_ = std::thread([this] { health_.Serve(cq_.get()); });
    stub_ = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }
  ~HealthServer() { Stop(); }

  void Stop() {
    if (!thread_.joinable()) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    health_.StopServing();
    cq_->Shutdown();
    thread_.join();
  }

  DaemonHealth& health() { return health_; }
  grpc::health::v1::Health::Stub& stub() { return *stub_; }

  // Check asks about `service`; the status code and, when OK, the state.
  grpc::StatusCode Check(const std::string& service, HealthCheckResponse::ServingStatus* state) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    const grpc::Status status = stub_->Check(&context, request, &response);
    *state = response.status();
    return status.error_code();
  }

 private:
  DaemonHealth health_;
  int port_ = 0;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::unique_ptr<grpc::Server> server_;
  std::thread thread_;
  std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
};

// Watch: one Watch stream, every read bounded by the context's deadline.
struct Watch {
  Watch(HealthServer* server, const std::string& service) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    HealthCheckRequest request;
    request.set_service(service);
    reader = server->stub().Watch(&context, request);
  }
  // Next returns the next state sent, or -1 when the stream ended.
  int Next() {
    HealthCheckResponse response;
    return reader->Read(&response) ? response.status() : -1;
  }
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader;
};

TEST_CASE("DaemonHealth, Check answers each service's state and NOT_FOUND for others", "[health]") {
  HealthServer server;
  HealthCheckResponse::ServingStatus state;
  REQUIRE(server.Check("", &state) == grpc::StatusCode::OK);
  CHECK(state == HealthCheckResponse::NOT_SERVING);
  REQUIRE(server.Check("kvstore.test.Daemon", &state) == grpc::StatusCode::OK);
  CHECK(state == HealthCheckResponse::NOT_SERVING);
  REQUIRE(server.Check(kAliveHealthService, &state) == grpc::StatusCode::OK);
  CHECK(state == HealthCheckResponse::SERVING);
  CHECK(server.Check("no.such.Service", &state) == grpc::StatusCode::NOT_FOUND);

  server.health().SetServing(true);
  server.health().Set(kJobHealthService, true);
  for (const char* service : {"", "kvstore.test.Daemon", kJobHealthService}) {
    REQUIRE(server.Check(service, &state) == grpc::StatusCode::OK);
    CHECK(state == HealthCheckResponse::SERVING);
  }
  server.health().Stopping();
  server.health().SetServing(true);  // Ignored from now on.
  for (const char* service : {"", kAliveHealthService, kJobHealthService}) {
    REQUIRE(server.Check(service, &state) == grpc::StatusCode::OK);
    CHECK(state == HealthCheckResponse::NOT_SERVING);
  }
}

TEST_CASE("DaemonHealth, Watch sends the state, each change, then ends when the daemon stops",
          "[health]") {
  HealthServer server;
  Watch daemon(&server, "");
  Watch job(&server, kJobHealthService);
  CHECK(daemon.Next() == HealthCheckResponse::NOT_SERVING);
  CHECK(job.Next() == HealthCheckResponse::SERVICE_UNKNOWN);
  server.health().SetServing(true);
  CHECK(daemon.Next() == HealthCheckResponse::SERVING);
  server.health().Set(kJobHealthService, true);
  CHECK(job.Next() == HealthCheckResponse::SERVING);
  server.health().Set(kJobHealthService, false);
  CHECK(job.Next() == HealthCheckResponse::NOT_SERVING);
  server.health().Stopping();
  CHECK(daemon.Next() == HealthCheckResponse::NOT_SERVING);
  CHECK(daemon.Next() == -1);
  CHECK(daemon.reader->Finish().error_code() == grpc::StatusCode::CANCELLED);
  CHECK(job.Next() == -1);  // Already NOT_SERVING: the stream just ends.
  CHECK(job.reader->Finish().error_code() == grpc::StatusCode::CANCELLED);
}

TEST_CASE("DaemonHealth, a daemon stops with watches open or abandoned", "[health]") {
  HealthServer server;
  Watch open(&server, "");
  CHECK(open.Next() == HealthCheckResponse::NOT_SERVING);
  {
    Watch gone(&server, "kvstore.test.Daemon");
    CHECK(gone.Next() == HealthCheckResponse::NOT_SERVING);
    gone.context.TryCancel();
    CHECK(gone.Next() == -1);
  }
  server.health().SetServing(true);  // Written to the open watch only.
  CHECK(open.Next() == HealthCheckResponse::SERVING);
  const auto start = std::chrono::steady_clock::now();
  server.Stop();  // Without Stopping: the server's shutdown cancels the open watch.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK(open.Next() == -1);
}

}  // namespace
}  // namespace kvstore
