// Fuzzing of the real daemons: the built scheduler and kvserver, joined by this test as the
// job's worker, receive a stream of requests to every method (tests/integration/
// request_fuzzer.h): mostly malformed ones - each with a defect it was built with, or random
// bytes - mixed with valid ones checked against a model of the stored values.
//
// What it checks:
// - no crash: both daemons still run and answer at the end, and exit 0 when the job ends;
// - every malformed request to the kvserver is refused (never OK), with the code its defect
//   calls for where one does, and never as a server failure (UNKNOWN, INTERNAL, UNAVAILABLE,
//   DEADLINE_EXCEEDED, ...); every valid one succeeds with the model's values;
// - every request to the scheduler whose bytes do not parse as the method's request is
//   refused: any code but OK, which code being the scheduler's own choice (a scheduler that
//   stops answering fails the check that both daemons are alive at the end);
// - the daemons' resident memory stays bounded;
// - the stored values end exactly as the model says (no malformed request changed any, none
//   created a key).
//
// KV_FUZZ_REQUESTS sets the number of requests (default 100,000; see docs/security.md,
// "Fuzzing", for a long run) and KV_FUZZ_SEED replays a seed; the seed is printed.
#include <catch2/catch.hpp>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "proto/kvstore.pb.h"
#include "tests/integration/daemon_job.h"
#include "tests/integration/request_fuzzer.h"
#include "tests/test_util.h"

namespace kvstore::testing {
namespace {

using Daemon = DaemonJob::Daemon;

constexpr int64_t kDefaultRequests = 100000;
constexpr int kWindow = 8;  // Malformed requests in flight at once.
// Each call's deadline: generous, as a machine running other tests may be slow; an answer
// later than this counts as a server failure.
constexpr absl::Duration kDeadline = absl::Seconds(30);
constexpr int64_t kMaxValueBytes = 16 << 20;
constexpr long kMiB = 1024;  // In KiB, as RSS is read.

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* text = std::getenv(name);
  int64_t value = 0;
  return text != nullptr && absl::SimpleAtoi(text, &value) ? value : fallback;
}

bool ServerFailure(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kAborted:
      return true;
    default:
      return false;
  }
}

// Tally: what the answers were, and what was wrong with them. Thread-safe.
class Tally {
 public:
  void Answer(const FuzzRequest& r, const absl::Status& status) {
    std::string problem;
    if (status.ok()) {
      problem = "answered OK";
    } else if (r.daemon == Daemon::kServer &&
               (ServerFailure(status.code()) || (r.code && status.code() != *r.code))) {
      problem = absl::StrCat("answered ", status.ToString().substr(0, 300));
      if (r.code) problem += absl::StrCat(" (expected ", absl::StatusCodeToString(*r.code), ")");
    }
    absl::MutexLock lock(&mu_);
    ++codes_[absl::StrCat(r.daemon == Daemon::kServer ? "kvserver " : "scheduler ",
                          absl::StatusCodeToString(status.code()))];
    ++kinds_[r.kind];
    if (!problem.empty()) Fail(r.kind + ": " + problem);
  }
  void Fail(const std::string& problem) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (failures_.size() < 40) failures_.push_back(problem);
    ++num_failures_;
  }
  void Failure(const std::string& problem) {
    absl::MutexLock lock(&mu_);
    Fail(problem);
  }
  // Send and Done bound the requests in flight.
  void Send() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Tally::HasRoom));
    ++in_flight_;
  }
  void Done() {
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }
  // Drain waits for every request in flight (each has a deadline, so this ends).
  void Drain() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Tally::Idle));
  }
  // Print prints the answers by code and the requests by kind, then the failures not printed
  // yet.
  void Print(bool summary) {
    absl::MutexLock lock(&mu_);
    if (summary) {
      std::printf("answers:\n");
      for (const auto& [code, n] : codes_) std::printf("  %8d %s\n", n, code.c_str());
      std::printf("requests by kind:\n");
      for (const auto& [kind, n] : kinds_) std::printf("  %8d %s\n", n, kind.c_str());
    }
    for (; printed_ < failures_.size(); ++printed_) {
      std::printf("FAILED: %s\n", failures_[printed_].c_str());
    }
  }
  int64_t num_failures() {
    absl::MutexLock lock(&mu_);
    return num_failures_;
  }

 private:
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ < kWindow; }
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; }

  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> codes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> kinds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> failures_ ABSL_GUARDED_BY(mu_);
  size_t printed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t num_failures_ ABSL_GUARDED_BY(mu_) = 0;
};

// RunValid sends a valid request, waits for it and checks its answer against the model.
void RunValid(DaemonJob& job, const FuzzRequest& r, Tally* tally) {
  grpc::ByteBuffer reply;
  const absl::Status status = job.Call(r.daemon, r.method, r.bytes, &reply, kDeadline);
  const std::string problem = r.check(status, reply);
  if (!problem.empty()) tally->Failure(r.kind + ": " + problem);
}

// ServerKeys returns the keys the kvserver reported in its last heartbeat.
int64_t ServerKeys(DaemonJob& job) {
  proto::ClusterStatusRequest request;
  request.set_node_id(job.node_id());
  grpc::ByteBuffer reply;
  const absl::Status status = job.Call(Daemon::kScheduler, "/kvstore.proto.Scheduler/ClusterStatus",
                                       RawBytes(request.SerializeAsString()), &reply);
  INFO(status.ToString());
  REQUIRE(status.ok());
  grpc::Slice bytes;
  REQUIRE(reply.DumpToSingleSlice(&bytes).ok());
  proto::ClusterStatusResponse response;
  REQUIRE(response.ParseFromArray(bytes.begin(), static_cast<int>(bytes.size())));
  for (const proto::NodeStatus& node : response.nodes()) {
    if (node.role() == proto::SERVER) return node.num_keys();
  }
  return -1;
}

TEST_CASE(
    "Fuzz: malformed requests to both daemons are refused; none crashes, grows or changes "
    "a value",
    "[fuzz]") {
  const uint64_t seed =
      static_cast<uint64_t>(EnvInt("KV_FUZZ_SEED", static_cast<int64_t>(TestRng().seed())));
  const int64_t requests = EnvInt("KV_FUZZ_REQUESTS", kDefaultRequests);
  std::printf("fuzz: seed=%" PRIu64 " requests=%" PRId64 " (replay with KV_FUZZ_SEED=%" PRIu64
              ")\n",
              seed, requests, seed);
  INFO("seed=" << seed << " (replay with KV_FUZZ_SEED=" << seed << ")");

  // Small chunks, so that values span several; a 16 MiB value limit (32 MiB requests).
  DaemonJob job({"--chunk_bytes=1024"},
                {"--updater=assign", absl::StrCat("--max_value_bytes=", kMaxValueBytes),
                 "--memory_budget_bytes=268435456"});
  RequestFuzzer fuzzer(job.node_id(), job.chunk_bytes(), kMaxValueBytes, seed);
  Tally tally;
  for (const FuzzRequest& r : fuzzer.Setup()) RunValid(job, r, &tally);
  REQUIRE(tally.num_failures() == 0);

  const long server_before = job.RssKib(Daemon::kServer);
  const long scheduler_before = job.RssKib(Daemon::kScheduler);
  long server_peak = server_before, scheduler_peak = scheduler_before;
  const absl::Time start = absl::Now();
  int64_t valid = 0;
  for (int64_t i = 0; i < requests; ++i) {
    FuzzRequest r = fuzzer.Next();
    if (r.valid) {
      ++valid;
      RunValid(job, r, &tally);
    } else {
      tally.Send();
      auto request = std::make_shared<FuzzRequest>(std::move(r));
      job.CallAsync(
          request->daemon, request->method, request->bytes,
          [&tally, request](absl::Status status, const grpc::ByteBuffer&) {
            tally.Answer(*request, status);
            tally.Done();
          },
          kDeadline);
    }
    if (i % 1000 == 999) {
      server_peak = std::max(server_peak, job.RssKib(Daemon::kServer));
      scheduler_peak = std::max(scheduler_peak, job.RssKib(Daemon::kScheduler));
    }
    if (i % 10000 == 9999) {
      for (Daemon d : {Daemon::kServer, Daemon::kScheduler}) {
        const absl::Status alive = job.Alive(d);
        if (!alive.ok())
          tally.Failure(absl::StrCat("after request ", i + 1, ": ", alive.ToString()));
      }
      std::printf("fuzz: %" PRId64 " requests, %.0f/s\n", i + 1,
                  static_cast<double>(i + 1) / absl::ToDoubleSeconds(absl::Now() - start));
      std::fflush(stdout);
    }
  }
  tally.Drain();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  server_peak = std::max(server_peak, job.RssKib(Daemon::kServer));
  scheduler_peak = std::max(scheduler_peak, job.RssKib(Daemon::kScheduler));
  std::printf("fuzz: %" PRId64 " requests (%" PRId64 " valid) in %.1f s: %.0f requests/s\n",
              requests, valid, seconds, static_cast<double>(requests) / seconds);
  std::printf("fuzz: RSS kvserver %ld -> peak %ld KiB, scheduler %ld -> peak %ld KiB\n",
              server_before, server_peak, scheduler_before, scheduler_peak);

  tally.Print(/*summary=*/true);
  for (Daemon d : {Daemon::kServer, Daemon::kScheduler}) {
    const absl::Status alive = job.Alive(d);
    INFO(job.process(d).name() << ": " << alive.ToString() << "\n" << job.process(d).output());
    REQUIRE(alive.ok());
  }
  for (const FuzzRequest& r : fuzzer.Final()) RunValid(job, r, &tally);
  tally.Print(/*summary=*/false);
  REQUIRE(tally.num_failures() == 0);
  // No malformed Init created a key: the kvserver holds what Setup initialised (as its
  // heartbeats, every 100 ms, report).
  absl::SleepFor(absl::Milliseconds(300));
  REQUIRE(ServerKeys(job) == fuzzer.num_keys());
  REQUIRE(server_peak - server_before < 160 * kMiB);
  REQUIRE(scheduler_peak - scheduler_before < 160 * kMiB);
  const absl::Status finished = job.Finish();
  INFO(finished.ToString());
  REQUIRE(finished.ok());
}

}  // namespace
}  // namespace kvstore::testing
