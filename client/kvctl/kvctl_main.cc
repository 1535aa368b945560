// kvctl: the controller CLI of a KVStore job. It talks to the scheduler.
//
//   kvctl [--scheduler=HOST:PORT] [--json] [--timeout=10s] status
//   kvctl [--scheduler=HOST:PORT] command HEAD BODY
//   kvctl [--scheduler=HOST:PORT] checkpoint DIR   (DIR below each kvserver's --checkpoint_root)
//   kvctl [--scheduler=HOST:PORT] [--timeout=10s] servers drain RANK
//   kvctl [--scheduler=HOST:PORT] shutdown [REASON]
//   kvctl [--service=NAME] health ADDRESS
//
// --json prints the reply as one line of JSON: protobuf's JSON mapping of the Kvctl* messages
// of proto/kvstore.proto (proto field names, every field, 64-bit integers as strings, enums by
// name). --help lists the flags, --version prints the version.
//
// Without --scheduler the address comes from DMLC_PS_ROOT_URI / DMLC_PS_ROOT_PORT (or the KV_
// names). Exits 0 on success; on error prints one line "kvctl: reason" and exits 1 (2 for a
// usage error). `status` exits 3 when a registered node is dead (no heartbeat for 5 s).
// `health` asks one daemon's standard gRPC health service (grpc.health.v1, no job secret
// needed): exits 0 when it answers SERVING, 1 otherwise (NOT_SERVING, unreachable).
#include <google/protobuf/message.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/client_context.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/environment.h"
#include "common/etcd_client.h"
#include "common/flags_usage.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/job_auth.h"
#include "common/scheduler_endpoint.h"
#include "common/security_flags.h"
#include "common/server_commands.h"
#include "common/status_macros.h"
#include "proto/health.grpc.pb.h"
#include "proto/kvstore.grpc.pb.h"

ABSL_FLAG(std::string, scheduler, "", "The scheduler's host:port (default: DMLC_PS_ROOT_*).");
ABSL_FLAG(std::string, etcd, "",
          "etcd endpoints (HOST:PORT,...) holding the address of the job's leading scheduler "
          "(with --job), instead of --scheduler; default: KV_ETCD_ENDPOINTS.");
ABSL_FLAG(std::string, job, "", "The job's name in etcd (with --etcd); default: KV_JOB.");
ABSL_FLAG(bool, json, false, "Print machine-readable JSON instead of tables.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "Deadline of the request.");
ABSL_FLAG(std::string, service, "",
          "health: the service to ask about (\"\": the daemon; kvstore.alive, kvstore.job; see "
          "docs/operations.md).");

namespace kvstore {
namespace {

constexpr char kUsage[] =
    "kvctl [--scheduler=HOST:PORT] [--json] [--timeout=10s] COMMAND\n"
    "  status               every node: role, rank, address, alive, dead, finished, failed\n"
    "                       or left (and why), last heartbeat, keys and bytes held by each\n"
    "                       server\n"
    "  command HEAD BODY    run controller command HEAD (0 set updater, 1 stats, 2 ping, 16+\n"
    "                       custom) with BODY on every server; prints each server's reply\n"
    "  checkpoint DIR       one cut of every key at one round: every server writes its shard to\n"
    "                       ROOT/DIR/server-RANK.ckpt and then ROOT/DIR/MANIFEST on its own\n"
    "                       machine, ROOT its --checkpoint_root; DIR is relative to ROOT or\n"
    "                       absolute below it, and must stay below ROOT (no '..', no symbolic\n"
    "                       link); restart\n"
    "                       with kvserver --checkpoint_root=ROOT --restore=DIR\n"
    "  servers drain RANK   move server RANK's keys to the other servers and let it exit 0\n"
    "                       (a running dist_sync job; the servers above it\n"
    "                       move down a rank; `kvserver --join` adds one); returns once done\n"
    "  shutdown [REASON]    end the job: servers, scheduler and workers exit\n"
    "  health ADDRESS       ask one daemon (scheduler or kvserver) at ADDRESS whether it serves\n"
    "                       (gRPC health checking; --service=NAME for a named state)";

// PrintJson prints `message` as one line of JSON (see the top of this file). Fails with
// Internal when protobuf cannot print it.
absl::Status PrintJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("cannot print JSON: ", status.ToString()));
  }
  std::printf("%s\n", json.c_str());
  return absl::OkStatus();
}

std::string HumanBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, units[unit]);
}

absl::StatusOr<std::string> SchedulerAddress() {
  std::string address = absl::GetFlag(FLAGS_scheduler);
  if (!address.empty()) return address;
  ASSIGN_OR_RETURN(const JobEnvironment env, ReadJobEnvironment());
  std::string etcd = absl::GetFlag(FLAGS_etcd);
  if (etcd.empty()) etcd = env.etcd_endpoints.value_or("");
  std::string job = absl::GetFlag(FLAGS_job);
  if (job.empty()) job = env.job.value_or("");
  if (!etcd.empty() || !job.empty()) {
    // The job's leading scheduler, as etcd names it now.
    if (etcd.empty() || job.empty()) {
      return absl::InvalidArgumentError(
          "--etcd and --job go together (or KV_ETCD_ENDPOINTS "
          "and KV_JOB)");
    }
    ASSIGN_OR_RETURN(const EtcdClient client, EtcdClient::Create(etcd));
    return client.Get(SchedulerKey(job));
  }
  if (!env.scheduler_port) {
    return absl::InvalidArgumentError(
        "no scheduler address: pass --scheduler=HOST:PORT or set DMLC_PS_ROOT_URI and "
        "DMLC_PS_ROOT_PORT");
  }
  return absl::StrCat(env.scheduler_host.value_or("127.0.0.1"), ":", *env.scheduler_port);
}

// Context: a call's context, with the command's deadline and, when the job has a secret, its
// job token.
struct Context : grpc::ClientContext {
  explicit Context(const std::string& job_token) {
    set_deadline(GrpcDeadline(absl::Now() + absl::GetFlag(FLAGS_timeout)));
    if (!job_token.empty()) AddMetadata(kJobTokenKey, job_token);
  }
};

absl::Status Failed(const grpc::Status& status, absl::string_view what, absl::string_view address) {
  const absl::Status error = FromGrpcStatus(status);
  return absl::Status(error.code(),
                      absl::StrCat(what, " at the scheduler ", address, ": ", error.message()));
}

absl::Status DeadNodes(int dead);

absl::Status Status(proto::Scheduler::Stub& stub, const std::string& address,
                    const std::string& job_token) {
  proto::ClusterStatusRequest request;
  request.set_group(proto::GROUP_SERVERS_AND_WORKERS);
  proto::ClusterStatusResponse reply;
  Context context(job_token);
  const grpc::Status status = stub.ClusterStatus(&context, request, &reply);
  if (!status.ok()) return Failed(status, "status", address);
  // Dead: registered and silent (a node still expected is not counted here: see num_dead).
  int dead = 0;
  for (const proto::NodeStatus& node : reply.nodes()) dead += !node.alive();
  if (absl::GetFlag(FLAGS_json)) {
    proto::KvctlStatus out;
    out.set_scheduler(address);
    out.set_num_dead(reply.num_dead());
    out.mutable_nodes()->Swap(reply.mutable_nodes());
    RETURN_IF_ERROR(PrintJson(out));
    return dead > 0 ? DeadNodes(dead) : absl::OkStatus();
  }
  std::printf("scheduler %s: %d nodes, %d dead\n", address.c_str(), reply.nodes_size(),
              reply.num_dead());
  std::printf("%-7s %4s %5s  %-21s %-16s %-8s %10s %8s %10s\n", "ROLE", "RANK", "NODE", "ADDRESS",
              "HOST", "STATE", "HEARTBEAT", "KEYS", "BYTES");
  for (const proto::NodeStatus& node : reply.nodes()) {
    const bool server = node.role() == proto::SERVER;
    const std::string state = node.left()       ? "left"
                              : node.failed()   ? "failed"
                              : node.finished() ? "finished"
                              : node.alive()    ? "alive"
                                                : "dead";
    std::printf("%-7s %4d %5lu  %-21s %-16s %-8s %9.1fs %8s %10s\n", server ? "server" : "worker",
                node.rank(), static_cast<unsigned long>(node.node_id()),
                node.address().empty() ? "-" : node.address().c_str(), node.hostname().c_str(),
                state.c_str(), node.last_heartbeat_age_s(),
                server ? absl::StrCat(node.num_keys()).c_str() : "-",
                server ? HumanBytes(node.num_bytes()).c_str() : "-");
    for (const proto::TableStatus& table : node.tables()) {
      std::printf(
          "        table %s: %lld rows of %lld (%lld ids counting), %lld admitted, %lld evicted, "
          "%s, round %lld\n",
          table.key().c_str(), static_cast<long long>(table.rows()),
          static_cast<long long>(table.dim()), static_cast<long long>(table.counting()),
          static_cast<long long>(table.admitted()), static_cast<long long>(table.evicted()),
          HumanBytes(table.bytes()).c_str(), static_cast<long long>(table.round()));
    }
    if (node.failed()) {
      std::printf("        %s %d failed: %s\n", server ? "server" : "worker", node.rank(),
                  node.failure().c_str());
    }
    if (node.left()) {
      std::printf("        worker %d left the job: %s\n", node.rank(), node.failure().c_str());
    }
  }
  if (dead > 0) return DeadNodes(dead);
  return absl::OkStatus();
}

// DeadNodes is the error `status` returns when registered nodes are dead (exit code 3).
absl::Status DeadNodes(int dead) {
  return absl::DataLossError(
      absl::StrCat(dead, " node", dead == 1 ? " is" : "s are", " dead (no heartbeat for 5 s)"));
}

// Health asks the daemon at `address` about `service` and prints its state.
absl::Status Health(const std::string& address, const std::string& service,
                    const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  auto stub = grpc::health::v1::Health::NewStub(MakeChannel(address, credentials));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse reply;
  Context context("");
  const grpc::Status status = stub->Check(&context, request, &reply);
  if (!status.ok()) {
    const absl::Status error = FromGrpcStatus(status);
    return absl::Status(error.code(), absl::StrCat("health of ", address,
                                                   service.empty() ? "" : " service " + service,
                                                   ": ", error.message()));
  }
  const std::string state =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(reply.status());
  std::printf("%s%s: %s\n", address.c_str(), service.empty() ? "" : (" " + service).c_str(),
              state.c_str());
  if (reply.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat(address, " is ", state));
  }
  return absl::OkStatus();
}

absl::Status Command(proto::Scheduler::Stub& stub, const std::string& address,
                     const std::string& job_token, const std::vector<char*>& args) {
  int head;
  std::string body;
  if (std::string(args[1]) == "servers") {
    if (args.size() != 4 || std::string(args[2]) != "drain") {
      return absl::InvalidArgumentError("usage: kvctl servers drain RANK");
    }
    head = kCommandDrainServer;
    body = args[3];
  } else if (std::string(args[1]) == "checkpoint") {
    if (args.size() != 3) return absl::InvalidArgumentError("usage: kvctl checkpoint DIR");
    head = 4;  // kCommandCheckpoint (server/core/controller.h).
    body = args[2];
  } else {
    if (args.size() != 4) return absl::InvalidArgumentError("usage: kvctl command HEAD BODY");
    if (!absl::SimpleAtoi(args[2], &head)) {
      return absl::InvalidArgumentError(absl::StrCat("HEAD \"", args[2], "\" is not an integer"));
    }
    body = args[3];
  }
  proto::CommandRequest request;
  request.set_head(head);
  request.set_body(body);
  proto::CommandResponse reply;
  Context context(job_token);
  const grpc::Status status = stub.Command(&context, request, &reply);
  if (!status.ok()) return Failed(status, absl::StrCat("command ", head), address);
  if (absl::GetFlag(FLAGS_json)) {
    proto::KvctlCommand out;
    out.set_head(head);
    out.mutable_replies()->Swap(reply.mutable_replies());
    return PrintJson(out);
  }
  for (int i = 0; i < reply.replies_size(); ++i) {
    if (head == kCommandDrainServer) {
      std::printf("%s\n", reply.replies(i).c_str());
    } else {
      std::printf("server %d: %s\n", i, reply.replies(i).c_str());
    }
  }
  return absl::OkStatus();
}

absl::Status Shutdown(proto::Scheduler::Stub& stub, const std::string& address,
                      const std::string& job_token, const std::vector<char*>& args) {
  proto::ShutdownRequest request;
  request.set_reason(args.size() > 2 ? args[2] : "kvctl shutdown");
  proto::ShutdownResponse reply;
  Context context(job_token);
  const grpc::Status status = stub.Shutdown(&context, request, &reply);
  if (!status.ok()) return Failed(status, "shutdown", address);
  if (absl::GetFlag(FLAGS_json)) {
    proto::KvctlShutdown out;
    out.set_shutdown(true);
    return PrintJson(out);
  }
  std::printf("the job at %s is shutting down\n", address.c_str());
  return absl::OkStatus();
}

int Run(const std::vector<char*>& args) {
  if (args.size() < 2) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  const std::string verb = args[1];
  if (verb != "status" && verb != "command" && verb != "checkpoint" && verb != "shutdown" &&
      verb != "health" && verb != "servers") {
    std::fprintf(stderr, "kvctl: unknown command \"%s\"\nusage: %s\n", verb.c_str(), kUsage);
    return 2;
  }
  if (verb == "health" && args.size() != 3) {
    std::fprintf(stderr, "kvctl: health needs the daemon's ADDRESS\nusage: %s\n", kUsage);
    return 2;
  }
  absl::StatusOr<std::string> address =
      verb == "health" ? absl::StatusOr<std::string>(args[2]) : SchedulerAddress();
  absl::Status status = address.status();
  absl::StatusOr<JobEnvironment> env = ReadJobEnvironment();
  if (status.ok()) status = env.status();
  absl::StatusOr<SecurityOptions> security =
      status.ok() ? SecurityFromFlags(*env, SecurityRole()) : status;
  if (status.ok()) status = security.status();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      status.ok() ? ChannelCredentialsFor(security->tls) : status;
  if (status.ok()) status = credentials.status();
  if (status.ok()) {
    auto stub = proto::Scheduler::NewStub(MakeChannel(*address, *credentials));
    const std::string job_token = security->secret.empty() ? "" : JobToken(security->secret);
    if (verb == "health") {
      status = Health(*address, absl::GetFlag(FLAGS_service), *credentials);
    } else if (verb == "status") {
      status = Status(*stub, *address, job_token);
    } else if (verb == "command" || verb == "checkpoint" || verb == "servers") {
      status = Command(*stub, *address, job_token, args);
    } else {
      status = Shutdown(*stub, *address, job_token, args);
    }
  }
  if (status.ok()) return 0;
  std::fprintf(stderr, "kvctl: %s\n", std::string(status.message()).c_str());
  if (verb == "status" && absl::IsDataLoss(status)) return 3;
  return absl::IsInvalidArgument(status) && !address.ok() ? 2 : 1;
}

}  // namespace
}  // namespace kvstore

int main(int argc, char** argv) {
  const std::vector<char*> args = kvstore::InitFlags(
      argc, argv,
      absl::StrCat("the controller CLI of a KVStore job: asks its scheduler.\n\n", kvstore::kUsage),
      __FILE__);
  return kvstore::Run(args);
}
