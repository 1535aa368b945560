// kvctl: the controller CLI of a KVStore job. It talks to the scheduler.
//
//   kvctl [--scheduler=HOST:PORT] [--json] [--timeout=10s] status
//   kvctl [--scheduler=HOST:PORT] command HEAD BODY
//   kvctl [--scheduler=HOST:PORT] checkpoint DIR
//   kvctl [--scheduler=HOST:PORT] shutdown [REASON]
//
// Without --scheduler the address comes from DMLC_PS_ROOT_URI / DMLC_PS_ROOT_PORT (or the KV_
// names). Exits 0 on success; on error prints one line "kvctl: reason" and exits 1 (2 for a
// usage error).
#include <grpcpp/client_context.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/environment.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "proto/kvstore.grpc.pb.h"

ABSL_FLAG(std::string, scheduler, "", "The scheduler's host:port (default: DMLC_PS_ROOT_*).");
ABSL_FLAG(bool, json, false, "Print machine-readable JSON instead of tables.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "Deadline of the request.");

namespace kvstore {
namespace {

constexpr char kUsage[] =
    "kvctl [--scheduler=HOST:PORT] [--json] [--timeout=10s] COMMAND\n"
    "  status               every node: role, rank, address, alive or dead, last heartbeat,\n"
    "                       keys and bytes held by each server\n"
    "  command HEAD BODY    run controller command HEAD (0 set updater, 1 stats, 2 ping, 16+\n"
    "                       custom) with BODY on every server; prints each server's reply\n"
    "  checkpoint DIR       every server writes its shard to DIR/server-RANK.ckpt on its own\n"
    "                       machine (between rounds); restart with kvserver --restore DIR\n"
    "  shutdown [REASON]    end the job: servers, scheduler and workers exit";

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
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
  if (!env.scheduler_port) {
    return absl::InvalidArgumentError(
        "no scheduler address: pass --scheduler=HOST:PORT or set DMLC_PS_ROOT_URI and "
        "DMLC_PS_ROOT_PORT");
  }
  return absl::StrCat(env.scheduler_host.value_or("127.0.0.1"), ":", *env.scheduler_port);
}

absl::Status Failed(const grpc::Status& status, absl::string_view what,
                    absl::string_view address) {
  const absl::Status error = FromGrpcStatus(status);
  return absl::Status(error.code(), absl::StrCat(what, " at the scheduler ", address, ": ",
                                                 error.message()));
}

absl::Status Status(proto::Scheduler::Stub& stub, const std::string& address) {
  proto::ClusterStatusRequest request;
  request.set_group(proto::GROUP_SERVERS_AND_WORKERS);
  proto::ClusterStatusResponse reply;
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(absl::Now() + absl::GetFlag(FLAGS_timeout)));
  const grpc::Status status = stub.ClusterStatus(&context, request, &reply);
  if (!status.ok()) return Failed(status, "status", address);
  if (absl::GetFlag(FLAGS_json)) {
    std::vector<std::string> nodes;
    for (const proto::NodeStatus& node : reply.nodes()) {
      const bool server = node.role() == proto::SERVER;
      nodes.push_back(absl::StrFormat(
          "{\"role\": %s, \"rank\": %d, \"node_id\": %d, \"address\": %s, \"hostname\": %s, "
          "\"alive\": %s, \"finished\": %s, \"last_heartbeat_age_s\": %.3f%s}",
          JsonString(server ? "server" : "worker"), node.rank(), node.node_id(),
          JsonString(node.address()), JsonString(node.hostname()),
          node.alive() ? "true" : "false", node.finished() ? "true" : "false",
          node.last_heartbeat_age_s(),
          server ? absl::StrFormat(", \"num_keys\": %d, \"num_bytes\": %d", node.num_keys(),
                                   node.num_bytes())
                 : std::string()));
    }
    std::printf("{\"scheduler\": %s, \"num_dead\": %d, \"nodes\": [%s]}\n",
                JsonString(address).c_str(), reply.num_dead(),
                absl::StrJoin(nodes, ", ").c_str());
    return absl::OkStatus();
  }
  std::printf("scheduler %s: %d nodes, %d dead\n", address.c_str(), reply.nodes_size(),
              reply.num_dead());
  std::printf("%-7s %4s %5s  %-21s %-16s %-8s %10s %8s %10s\n", "ROLE", "RANK", "NODE",
              "ADDRESS", "HOST", "STATE", "HEARTBEAT", "KEYS", "BYTES");
  for (const proto::NodeStatus& node : reply.nodes()) {
    const bool server = node.role() == proto::SERVER;
    const std::string state = node.finished() ? "finished" : node.alive() ? "alive" : "dead";
    std::printf("%-7s %4d %5lu  %-21s %-16s %-8s %9.1fs %8s %10s\n", server ? "server" : "worker",
                node.rank(), static_cast<unsigned long>(node.node_id()),
                node.address().empty() ? "-" : node.address().c_str(), node.hostname().c_str(),
                state.c_str(), node.last_heartbeat_age_s(),
                server ? absl::StrCat(node.num_keys()).c_str() : "-",
                server ? HumanBytes(node.num_bytes()).c_str() : "-");
  }
  return absl::OkStatus();
}

absl::Status Command(proto::Scheduler::Stub& stub, const std::string& address,
                     const std::vector<char*>& args) {
  int head;
  std::string body;
  if (std::string(args[1]) == "checkpoint") {
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
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(absl::Now() + absl::GetFlag(FLAGS_timeout)));
  const grpc::Status status = stub.Command(&context, request, &reply);
  if (!status.ok()) return Failed(status, absl::StrCat("command ", head), address);
  if (absl::GetFlag(FLAGS_json)) {
    std::vector<std::string> replies;
    for (const std::string& r : reply.replies()) replies.push_back(JsonString(r));
    std::printf("{\"head\": %d, \"replies\": [%s]}\n", head, absl::StrJoin(replies, ", ").c_str());
    return absl::OkStatus();
  }
  for (int i = 0; i < reply.replies_size(); ++i) {
    std::printf("server %d: %s\n", i, reply.replies(i).c_str());
  }
  return absl::OkStatus();
}

absl::Status Shutdown(proto::Scheduler::Stub& stub, const std::string& address,
                      const std::vector<char*>& args) {
  proto::ShutdownRequest request;
  request.set_reason(args.size() > 2 ? args[2] : "kvctl shutdown");
  proto::ShutdownResponse reply;
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(absl::Now() + absl::GetFlag(FLAGS_timeout)));
  const grpc::Status status = stub.Shutdown(&context, request, &reply);
  if (!status.ok()) return Failed(status, "shutdown", address);
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("{\"shutdown\": true}\n");
  } else {
    std::printf("the job at %s is shutting down\n", address.c_str());
  }
  return absl::OkStatus();
}

int Run(const std::vector<char*>& args) {
  if (args.size() < 2) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  const std::string verb = args[1];
  if (verb != "status" && verb != "command" && verb != "checkpoint" && verb != "shutdown") {
    std::fprintf(stderr, "kvctl: unknown command \"%s\"\nusage: %s\n", verb.c_str(), kUsage);
    return 2;
  }
  absl::StatusOr<std::string> address = SchedulerAddress();
  absl::Status status = address.status();
  if (status.ok()) {
    auto stub = proto::Scheduler::NewStub(MakeChannel(*address));
    if (verb == "status") {
      status = Status(*stub, *address);
    } else if (verb == "command" || verb == "checkpoint") {
      status = Command(*stub, *address, args);
    } else {
      status = Shutdown(*stub, *address, args);
    }
  }
  if (status.ok()) return 0;
  std::fprintf(stderr, "kvctl: %s\n", std::string(status.message()).c_str());
  return absl::IsInvalidArgument(status) && !address.ok() ? 2 : 1;
}

}  // namespace
}  // namespace kvstore

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kvstore::kUsage);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  return kvstore::Run(args);
}
