// Observability on real processes: a real Prometheus (Debian's `prometheus`, started here on
// 127.0.0.1 with a throwaway configuration and data directory) scrapes a running job - a
// scheduler, two kvservers and two workers, each a process of its own - and its HTTP API must
// report exactly the pushes the workers made; the daemons' gRPC health states follow the job
// (NOT_SERVING while registering, SERVING after); `kvctl status` exits 3 once a node is dead.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "tests/job_secret.h"
#include "tests/process.h"
#include "tests/test_files.h"
#include "tests/test_util.h"

namespace kvstore::testing {
namespace {

Variables Joined(Variables a, const Variables& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

int ExitCode(Process& process, absl::Duration timeout = absl::Seconds(30)) {
  const absl::StatusOr<int> code = process.Wait(timeout);
  INFO(process.name() << ": " << code.status().ToString() << "\n" << process.output());
  REQUIRE(code.ok());
  return *code;
}

// LoggedPort returns the port in the first match of `pattern` (one group) in `process`'s log,
// waiting up to 20 s for `text` to appear first.
int LoggedPort(Process& process, const std::string& text, const std::string& pattern) {
  INFO(process.output());
  REQUIRE(process.WaitForOutput(text, absl::Seconds(20)));
  std::smatch found;
  const std::string log = process.output();
  REQUIRE(std::regex_search(log, found, std::regex(pattern)));
  int port = 0;
  REQUIRE(absl::SimpleAtoi(found[1].str(), &port));
  return port;
}

int MetricsPort(Process& process) {
  return LoggedPort(process, "metrics on http://",
                    R"(metrics on http://127\.0\.0\.1:([0-9]+)/metrics)");
}

// Kvctl runs kvctl with `args`; returns its exit code and its output in `*output`.
int Kvctl(std::vector<std::string> args, std::string* output) {
  args.insert(args.begin(), {Runfile("client/kvctl/kvctl"), "--timeout=5s"});
  std::unique_ptr<Process> kvctl = StartProcess("kvctl", args);
  const int code = ExitCode(*kvctl);
  *output = kvctl->output();
  return code;
}

// Job: a scheduler and `servers` kvservers with metrics on OS-chosen ports.
struct Job {
  Job(int servers, int workers, const std::string& server0_trace = "") : num_workers(workers) {
    const std::string port_file = absl::StrCat(TempDir(), "/port-", getpid(), "-", ++jobs);
    scheduler = StartProcess(
        "scheduler",
        {Runfile("server/scheduler/scheduler"), "--port=0", "--port_file=" + port_file,
         absl::StrCat("--num_servers=", servers), absl::StrCat("--num_workers=", workers),
         "--heartbeat_interval=100ms", "--register_timeout=60s", "--metrics_port=0"});
    const absl::StatusOr<int> bound = scheduler->WaitForPortFile(port_file, absl::Seconds(20));
    INFO(bound.status().ToString() << "\n" << scheduler->output());
    REQUIRE(bound.ok());
    port = *bound;
    for (int i = 0; i < servers; ++i) {
      this->servers.push_back(StartProcess(
          absl::StrCat("server ", i),
          {Runfile("server/kvserver"), absl::StrCat("--scheduler=127.0.0.1:", port),
           absl::StrCat("--rank=", i), "--metrics_port=0"},
          i == 0 && !server0_trace.empty() ? Variables{{"KV_TRACE_FILE", server0_trace}}
                                           : Variables{}));
    }
  }

  Variables WorkerEnv(int rank) const {
    return {{"DMLC_ROLE", "worker"},
            {"DMLC_PS_ROOT_URI", "127.0.0.1"},
            {"DMLC_PS_ROOT_PORT", absl::StrCat(port)},
            {"DMLC_NUM_WORKER", absl::StrCat(num_workers)},
            {"DMLC_WORKER_ID", absl::StrCat(rank)}};
  }

  std::string ServerAddress(int rank) {
    return absl::StrCat("127.0.0.1:", LoggedPort(*servers[rank], "kvserver listening on",
                                                 R"(listening on 127\.0\.0\.1:([0-9]+))"));
  }

  static inline int jobs = 0;
  int num_workers;
  int port = 0;
  std::unique_ptr<Process> scheduler;
  std::vector<std::unique_ptr<Process>> servers;
};

// Prometheus: Debian's prometheus on 127.0.0.1, scraping `targets` every second, with a
// configuration and data directory of its own under the test's temporary directory.
class Prometheus {
 public:
  explicit Prometheus(const std::vector<std::string>& targets) {
    const std::string dir = absl::StrCat(TempDir(), "/prometheus-", getpid());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir + "/data");
    std::string list;
    for (const std::string& target : targets) {
      absl::StrAppend(&list, list.empty() ? "" : ", ", "'", target, "'");
    }
    {
      std::ofstream config(dir + "/prometheus.yml");
      config << "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
             << "scrape_configs:\n  - job_name: kvstore\n    static_configs:\n"
             << "      - targets: [" << list << "]\n";
      REQUIRE(config.good());
    }
    port_ = FreePort();
    process_ = StartProcess(
        "prometheus", {"/usr/bin/prometheus", "--config.file=" + dir + "/prometheus.yml",
                       "--storage.tsdb.path=" + dir + "/data",
                       absl::StrCat("--web.listen-address=127.0.0.1:", port_), "--log.level=warn"});
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_connection_timeout(2, 0);
    client_->set_read_timeout(5, 0);
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    bool ready = false;
    while (!ready && absl::Now() < give_up && !process_->Exited(absl::ZeroDuration())) {
      auto response = client_->Get("/-/ready");
      ready = response && response->status == 200;
      if (!ready) absl::SleepFor(absl::Milliseconds(100));
    }
    INFO(process_->output());
    REQUIRE(ready);
  }

  // Valid is OK when Prometheus accepts `query` (it may have no result), else names the error.
  absl::Status Valid(const std::string& query) {
    auto response =
        client_->Get("/api/v1/query", httplib::Params{{"query", query}}, httplib::Headers{});
    if (!response) return absl::UnavailableError("no answer from Prometheus");
    if (response->status == 200 &&
        response->body.find("\"status\":\"success\"") != std::string::npos) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(query, ": ", response->body));
  }

  // Query returns the value of the instant query `query`, or nothing when it has no result yet.
  std::optional<double> Query(const std::string& query) {
    auto response =
        client_->Get("/api/v1/query", httplib::Params{{"query", query}}, httplib::Headers{});
    if (!response || response->status != 200) return std::nullopt;
    std::smatch found;
    if (!std::regex_search(response->body, found,
                           std::regex(R"re("value":\[[-0-9.e+]+,"([^"]+)"\])re"))) {
      return std::nullopt;
    }
    double value;
    if (!absl::SimpleAtod(found[1].str(), &value)) return std::nullopt;
    return value;
  }

  // QueryUntil polls `query` (up to `timeout`) until it returns `want`, and returns its last
  // value.
  std::optional<double> QueryUntil(const std::string& query, double want,
                                   absl::Duration timeout = absl::Seconds(20)) {
    const absl::Time give_up = absl::Now() + timeout;
    std::optional<double> value;
    do {
      value = Query(query);
      if (value == want) break;
      absl::SleepFor(absl::Milliseconds(200));
    } while (absl::Now() < give_up);
    return value;
  }

  Process& process() { return *process_; }

 private:
  int port_ = 0;
  std::unique_ptr<Process> process_;
  std::unique_ptr<httplib::Client> client_;
};

// ReadTrace parses a Chrome trace (JSON Array Format) into its events.
google::protobuf::ListValue ReadTrace(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  google::protobuf::ListValue events;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &events);
  INFO(path << ": " << status.ToString() << "\n" << text.substr(0, 2000));
  REQUIRE(status.ok());
  return events;
}

// Field returns event field `name` as a string ("" when absent or not a string).
std::string Field(const google::protobuf::Struct& event, const std::string& name) {
  auto it = event.fields().find(name);
  return it == event.fields().end() ? "" : it->second.string_value();
}

std::string Arg(const google::protobuf::Struct& event, const std::string& name) {
  auto args = event.fields().find("args");
  if (args == event.fields().end()) return "";
  return Field(args->second.struct_value(), name);
}

TEST_CASE("Observability: Prometheus scrapes a running job; its push count is the workers'",
          "[observability][prometheus]") {
  TestRng rng;
  INFO(rng.Describe());
  const int keys = static_cast<int>(rng.Int(2, 6));
  const int rounds = static_cast<int>(rng.Int(3, 12));
  INFO("keys=" << keys << " rounds=" << rounds);
  const std::string worker_trace = absl::StrCat(TempDir(), "/worker0-", getpid(), ".trace.json");
  const std::string server_trace = absl::StrCat(TempDir(), "/server0-", getpid(), ".trace.json");
  Job job(2, 2, server_trace);
  std::vector<std::string> targets = {absl::StrCat("127.0.0.1:", MetricsPort(*job.scheduler))};
  for (auto& server : job.servers) {
    targets.push_back(absl::StrCat("127.0.0.1:", MetricsPort(*server)));
  }
  // Registering: the kvservers do not serve yet; the scheduler does (it takes registrations).
  std::string output;
  REQUIRE(Kvctl({"health", job.ServerAddress(0)}, &output) == 1);
  CHECK(output.find("NOT_SERVING") != std::string::npos);
  REQUIRE(Kvctl({"health", absl::StrCat("127.0.0.1:", job.port)}, &output) == 0);
  CHECK(Kvctl({"--service=kvstore.job", "health", absl::StrCat("127.0.0.1:", job.port)}, &output) ==
        1);

  const std::string release = absl::StrCat(TempDir(), "/release-", getpid());
  std::filesystem::remove(release);
  std::vector<std::unique_ptr<Process>> workers;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(StartProcess(
        absl::StrCat("worker ", w),
        {Runfile("tests/integration/metrics_worker"), absl::StrCat(rng.seed()), absl::StrCat(keys),
         absl::StrCat(rounds), release},
        Joined(job.WorkerEnv(w),
               w == 0 ? Variables{{"KV_METRICS_PORT", "0"}, {"KV_TRACE_FILE", worker_trace}}
                      : Variables{{"KV_METRICS_PORT", "0"}})));
  }
  for (auto& worker : workers) {
    targets.push_back(absl::StrCat(
        "127.0.0.1:", LoggedPort(*worker, "metrics on http://",
                                 R"(metrics on http://127\.0\.0\.1:([0-9]+)/metrics)")));
  }
  Prometheus prometheus(targets);
  int64_t pushed = 0;
  for (auto& worker : workers) {
    INFO(worker->output());
    REQUIRE(worker->WaitForOutput("DONE", absl::Seconds(60)));
    std::smatch found;
    const std::string log = worker->output();
    REQUIRE(std::regex_search(log, found, std::regex(R"(PUSHES ([0-9]+))")));
    pushed += std::stoll(found[1].str());
  }
  // The reference: every worker pushes every key once per round.
  REQUIRE(pushed == 2 * keys * rounds);

  // Serving now: every daemon, and the scheduler's job.
  for (int s = 0; s < 2; ++s) {
    REQUIRE(Kvctl({"health", job.ServerAddress(s)}, &output) == 0);
    CHECK(output.find("SERVING") != std::string::npos);
  }
  REQUIRE(Kvctl({"--service=kvstore.job", "health", absl::StrCat("127.0.0.1:", job.port)},
                &output) == 0);
  REQUIRE(Kvctl({"status", absl::StrCat("--scheduler=127.0.0.1:", job.port)}, &output) == 0);

  // What Prometheus scraped.
  INFO(prometheus.process().output());
  CHECK(prometheus.QueryUntil("count(up{job=\"kvstore\"} == 1)", 5) == 5);
  // What the workers sent is what the servers answered.
  CHECK(prometheus.QueryUntil("sum(kvstore_worker_requests_total{method=\"push\"})", pushed) ==
        pushed);
  CHECK(prometheus.QueryUntil("sum(kvstore_worker_operations_total{kind=\"push\"})", pushed) ==
        pushed);
  CHECK(prometheus.QueryUntil("sum(kvstore_server_requests_total{method=\"push\"})", pushed) ==
        pushed);
  CHECK(prometheus.QueryUntil("sum(kvstore_server_errors_total{method=\"push\"})", 0) == 0);
  // One dist_sync round per key and round (each key is one chunk on one server), each with a
  // last worker.
  CHECK(prometheus.QueryUntil("sum(kvstore_server_rounds_total)", keys * rounds) == keys * rounds);
  CHECK(prometheus.QueryUntil("sum(kvstore_server_round_last_worker_total)", keys * rounds) ==
        keys * rounds);
  CHECK(prometheus.QueryUntil("sum(kvstore_server_round_wait_seconds_count)", keys * rounds) ==
        keys * rounds);
  CHECK(prometheus.QueryUntil("sum(kvstore_server_keys)", keys) == keys);
  CHECK(prometheus.QueryUntil("sum(kvstore_server_held_bytes)", keys * 8 * 4) == keys * 8 * 4);
  // The table "t": 5 rows of each worker's and one both pushed, spread over the servers.
  CHECK(prometheus.QueryUntil("sum(kvstore_server_table_rows)", 11) == 11);
  CHECK(prometheus.QueryUntil("sum(kvstore_server_table_admitted_total)", 11) == 11);
  CHECK(prometheus.QueryUntil("sum(kvstore_server_table_evicted_total)", 0) == 0);
  CHECK(prometheus.QueryUntil("sum(kvstore_server_table_round)", 2) == 2);
  CHECK(prometheus.Query("min(kvstore_server_table_bytes)").value_or(0) > 0);
  CHECK(prometheus.QueryUntil("sum(kvstore_scheduler_nodes{state=\"alive\"})", 4) == 4);
  CHECK(prometheus.QueryUntil("sum(kvstore_scheduler_nodes{state=\"dead\"})", 0) == 0);
  // Two explicit barriers per worker and the one that ends Init.
  const std::optional<double> barriers =
      prometheus.Query("kvstore_scheduler_barrier_wait_seconds_count");
  REQUIRE(barriers.has_value());
  CHECK(*barriers >= 4);
  CHECK(prometheus.Query("min(process_resident_memory_bytes)").value_or(0) > 1e6);

  // Every query of the Grafana dashboard is one Prometheus accepts, over metrics that exist.
  {
    std::ifstream in(Runfile("deploy/grafana-dashboard.json"));
    REQUIRE(in.good());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    google::protobuf::Struct dashboard;
    REQUIRE(google::protobuf::util::JsonStringToMessage(text, &dashboard).ok());
    int queries = 0;
    for (const auto& panel : dashboard.fields().at("panels").list_value().values()) {
      for (const auto& target : panel.struct_value().fields().at("targets").list_value().values()) {
        const std::string expr = Field(target.struct_value(), "expr");
        REQUIRE(!expr.empty());
        const absl::Status valid = prometheus.Valid(expr);
        INFO(valid.ToString());
        CHECK(valid.ok());
        // Names the metrics it reads: every kvstore_ name in it is one the job exports.
        std::smatch name;
        std::string rest = expr;
        while (std::regex_search(rest, name, std::regex(R"((kvstore_[a-z_]+))"))) {
          std::string metric = name[1].str();
          for (const char* suffix : {"_bucket"}) {
            if (absl::EndsWith(metric, suffix)) metric.resize(metric.size() - strlen(suffix));
          }
          INFO(metric);
          CHECK(prometheus.Query(absl::StrCat("count({__name__=~\"", metric, "(_bucket)?\"})"))
                    .value_or(0) > 0);
          rest = name.suffix();
        }
        ++queries;
      }
    }
    CHECK(queries >= 15);
  }

  const std::optional<double> server0_rounds =
      prometheus.Query(absl::StrCat("kvstore_server_rounds_total{instance=\"", targets[1], "\"}"));
  REQUIRE(server0_rounds.has_value());

  std::ofstream(release).put('\n');
  for (auto& worker : workers) CHECK(ExitCode(*worker) == 0);
  for (auto& server : job.servers) CHECK(ExitCode(*server) == 0);

  // Worker 0's timeline: one operation per push and pull it issued, each naming its key, and
  // one request per push on the row of its server.
  {
    const google::protobuf::ListValue events = ReadTrace(worker_trace);
    std::vector<int> pushes_per_key(keys, 0);
    int push_requests = 0, pulls = 0;
    for (const auto& value : events.values()) {
      const google::protobuf::Struct& event = value.struct_value();
      if (Field(event, "ph") != "X") continue;
      const std::string name = Field(event, "name");
      if (Field(event, "cat") == "operation" && name.rfind("push ", 0) == 0) {
        int key = -1;
        REQUIRE(absl::SimpleAtoi(Arg(event, "key_list"), &key));
        REQUIRE(key >= 0);
        REQUIRE(key < keys);
        ++pushes_per_key[key];
      } else if (Field(event, "cat") == "operation" && name.rfind("pull ", 0) == 0) {
        ++pulls;
      } else if (Field(event, "cat") == "request" && name == "push") {
        ++push_requests;
        CHECK(!Arg(event, "server").empty());
      }
    }
    for (int key = 0; key < keys; ++key) CHECK(pushes_per_key[key] == rounds);
    CHECK(pulls == keys * rounds);
    CHECK(push_requests == keys * rounds);
  }
  // Server 0's timeline: one event per round it completed, as Prometheus counted them.
  {
    const google::protobuf::ListValue events = ReadTrace(server_trace);
    int rounds_traced = 0;
    for (const auto& value : events.values()) {
      const google::protobuf::Struct& event = value.struct_value();
      if (Field(event, "ph") == "X" && Field(event, "name") == "round") ++rounds_traced;
    }
    CHECK(rounds_traced == *server0_rounds);
  }
  CHECK(ExitCode(*job.scheduler) == 0);
  const std::string log = job.scheduler->output();
  CHECK(log.find("the job is assembled") != std::string::npos);
  CHECK(log.find("the job ended: every worker finished") != std::string::npos);
}

TEST_CASE("Observability: health follows the job; kvctl status exits 3 once a node is dead",
          "[observability][health]") {
  Job job(1, 1);
  const std::string server = job.ServerAddress(0);
  const std::string scheduler = absl::StrCat("127.0.0.1:", job.port);
  std::string output;
  // Registering: the kvserver is alive but does not serve yet.
  REQUIRE(Kvctl({"health", server}, &output) == 1);
  CHECK(output.find("NOT_SERVING") != std::string::npos);
  REQUIRE(Kvctl({"--service=kvstore.alive", "health", server}, &output) == 0);
  // The scheduler logs what it waits for.
  REQUIRE(job.scheduler->WaitForOutput("waiting for 1 worker", absl::Seconds(10)));

  const std::string release = absl::StrCat(TempDir(), "/never-", getpid());
  std::unique_ptr<Process> worker =
      StartProcess("worker", {Runfile("tests/integration/metrics_worker"), "7", "1", "1", release},
                   job.WorkerEnv(0));
  REQUIRE(worker->WaitForOutput("DONE", absl::Seconds(60)));
  REQUIRE(Kvctl({"health", server}, &output) == 0);
  REQUIRE(Kvctl({"status", "--scheduler=" + scheduler}, &output) == 0);
  CHECK(output.find("0 dead") != std::string::npos);
  // The worker dies without finishing: within 5 s of silence it is dead.
  worker->Kill();
  const absl::Time give_up = absl::Now() + absl::Seconds(15);
  int code = 0;
  do {
    absl::SleepFor(absl::Milliseconds(250));
    code = Kvctl({"status", "--scheduler=" + scheduler}, &output);
  } while (code == 0 && absl::Now() < give_up);
  INFO(output);
  CHECK(code == 3);
  CHECK(output.find("1 node is dead") != std::string::npos);
  CHECK(Kvctl({"--json", "status", "--scheduler=" + scheduler}, &output) == 3);
  CHECK(output.find("\"alive\":false") != std::string::npos);
  REQUIRE(job.scheduler->WaitForOutput("worker 0 (node", absl::Seconds(5)));
  CHECK(job.scheduler->output().find("is dead: no heartbeat") != std::string::npos);
  REQUIRE(Kvctl({"shutdown", "--scheduler=" + scheduler}, &output) == 0);
  CHECK(ExitCode(*job.servers[0]) == 0);
  ExitCode(*job.scheduler);
}

}  // namespace
}  // namespace kvstore::testing

namespace kvstore::testing {
namespace {

TEST_CASE("Observability: a kvserver given a port where no scheduler listens says so",
          "[observability][logs]") {
  const int nobody = FreePort();
  const absl::Time started = absl::Now();
  std::unique_ptr<Process> server = StartProcess(
      "server", {Runfile("server/kvserver"), absl::StrCat("--scheduler=127.0.0.1:", nobody),
                 "--register_timeout=7s"});
  // A progress line names the address and the reason while it retries, then it fails with
  // them.
  REQUIRE(server->WaitForOutput("is not reachable yet", absl::Seconds(10)));
  CHECK(ExitCode(*server) == 1);
  CHECK(absl::Now() - started < absl::Seconds(20));
  const std::string log = server->output();
  INFO(log);
  CHECK(log.find(absl::StrCat("the scheduler at 127.0.0.1:", nobody, " is not reachable yet")) !=
        std::string::npos);
  CHECK(log.find("Connection refused") != std::string::npos);
  CHECK(log.find(absl::StrCat("the scheduler at 127.0.0.1:", nobody, " was not reachable")) !=
        std::string::npos);
  // Every line names the node and carries a UTC timestamp.
  CHECK(std::regex_search(
      log, std::regex(R"(\[20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z\] \[kvserver\] \[warning\])")));
}

}  // namespace
}  // namespace kvstore::testing
