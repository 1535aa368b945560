// kvbench: push / pull throughput and latency of a real job over 127.0.0.1, next to the
// machine's own ceilings measured in the same run.
//
// For one worker and one server, then two workers and two servers, it starts a scheduler and
// the kvservers as real processes (the binaries from the runfiles, the `sum` updater, dist_sync),
// joins the job with one DistStore per worker (each its own TCP connections, all sharing one
// completion thread unless --noshared_completion_thread) and times:
//   {push,pull,pushpull}_{4KB,1MB,16MB,100MB}_{1w1s,2w2s}  one float32 key, every worker at once
//                               (and _1GB_, only when --only names it)
//   {push,pull}_100kx16B_1w1s                              100,000 keys of 16 B in one call,
//                                                          the values views of one buffer
//   {push,pull}_100kx16B_bucket_1w1s                       the buffer itself, the keys as
//                                                          integers (PushBucket, as ZPush)
//   {push,pull}_100kx16B_scattered_1w1s                    the same, separately allocated
//   small_4KB_inflight64_1w1s                              64 pushes of 4 KB keys in flight
// Ceilings, same run: memcpy bandwidth (100 MiB, warm buffers, one thread) and, per case, a
// raw-socket request/response moving the same bytes over loopback to an echo process (W
// connections at once for W workers). `bytes` is the payload every worker together moves in
// one repetition (a push+pull counts it once); gbps = bytes / median; ratio = gbps /
// ceiling_gbps. With several workers a repetition lasts from the earliest worker's start to
// the latest worker's end, the workers' threads released untimed (as ps-lite's benchmark
// times its workers after a barrier). Beside them, once per run: the raw 4 KB exchange with both
// ends pinned to one CPU and to two (raw_4KB_one_cpu_us, raw_4KB_two_cpus_us), the two values an
// unpinned ceiling of a small exchange lands near.
//
// With the job secret by default (--secret=false: none, the daemons run --insecure); --tls puts
// every link of the job on TLS (tests/bench/kvbench_security.sh compares the three). --observe
// turns metrics on in the daemons and their logging to its default level, as a job runs
// (tests/bench/kvbench_observability.sh compares it with the run without); --observe_workers
// adds the workers' own metrics endpoints, which a job has only when asked.
// --interleave_observe runs two jobs side by side, one without and one with --observe, and
// alternates their repetitions (A B, B A, ...), so that both see the same moments of a noisy
// machine: every case is reported twice, the second as CASE@observe. --replicas=2 runs
// the job with a backup of every shard (scheduler --replicas=2): only the 2w2s cases, since a
// backup needs a second server. --signed_payloads runs the scheduler so (request signatures
// over payloads too: docs/security.md, "Signed requests").
//
//   bazel run -c opt //tests/bench:kvbench -- [--quick] [--format=json] [--only=SUBSTRING]
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/kvstore.h"
#include "common/flags_usage.h"
#include "tests/bench/bench_job.h"
#include "tests/process.h"

ABSL_FLAG(bool, quick, false, "Fewer repetitions: the whole run takes under a minute.");
ABSL_FLAG(std::string, format, "text", "text or json.");
ABSL_FLAG(std::string, only, "",
          "Run only the cases whose name contains this (comma-separated: any of these).");
ABSL_FLAG(std::string, kvserver, "", "kvserver binary (default: from the runfiles).");
ABSL_FLAG(std::string, scheduler, "", "scheduler binary (default: from the runfiles).");
ABSL_FLAG(int64_t, chunk_bytes, 0, "Chunk size of the job (0: the scheduler's default).");
ABSL_FLAG(int, connections, 0, "TCP connections per server (0: the SDK's default).");
ABSL_FLAG(bool, local_path, false,
          "The workers reach the kvservers through shared memory (a worker and a kvserver on one "
          "host, docs/colocated.md); false: over TCP, as they would on a cluster.");
ABSL_FLAG(bool, shared_completion_thread, true,
          "The workers of the process share one completion thread (DistOptions::"
          "completion_thread); false: each its own.");
ABSL_FLAG(int, serving_threads, 0, "The kvservers' --serving_threads (0: their default).");
ABSL_FLAG(std::string, serving_poll, "",
          "The kvservers' --serving_poll, e.g. 0 (empty: their default).");
ABSL_FLAG(int, seed, 0, "Random seed of the pushed values (0: from the clock).");
ABSL_FLAG(bool, secret, true,
          "Authenticate every call with a fresh job secret, as a launched job does (false: the "
          "daemons run --insecure).");
ABSL_FLAG(bool, tls, false,
          "TLS on every link of the job, with a CA and certificate made by "
          "deploy/make-certs.sh for the job.");
ABSL_FLAG(bool, observe, false,
          "Observability on: the daemons serve Prometheus metrics (--metrics_port=0) and log at "
          "their default level (info); false: no metrics, daemons at --log_level=warn.");
ABSL_FLAG(bool, observe_workers, false,
          "The workers serve their own metrics too (DistOptions::metrics_port; off by default "
          "in a job).");
ABSL_FLAG(bool, interleave_observe, false,
          "Two jobs, without and with --observe, their repetitions alternated; the second's "
          "cases are named CASE@observe.");
ABSL_FLAG(int, replicas, 1, "The scheduler's --replicas (2: only the 2-server cases run).");
ABSL_FLAG(bool, signed_payloads, false,
          "The scheduler's --signed_payloads: request signatures cover payloads too.");
ABSL_FLAG(int, reps, 0, "Timed repetitions of every case (0: the case's own, fewer with --quick).");
ABSL_FLAG(int, raw_echo_port, 0, "Internal: run as the echo process of a raw-socket ceiling.");

namespace kvstore::bench {
namespace {

constexpr size_t kKB = 1000;
constexpr size_t kMB = 1000 * 1000;

// ---------------------------------------------------------------------------------------------
// Ceilings

double MemcpyGbps(int reps) {
  const size_t bytes = 100 << 20;
  std::vector<uint8_t> a(bytes, 1), b(bytes, 2);
  Timing t;
  for (int i = 0; i < reps; ++i) {
    const absl::Time start = absl::Now();
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), bytes);
    t.seconds.push_back(Since(start));
  }
  return bytes / t.median() / 1e9;
}

bool WriteAll(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// RawLink: a loopback TCP connection to an echo process (this binary run with
// --raw_echo_port) that reads a request of the announced size into a reused buffer and answers
// with the announced number of bytes. A process of its own, as the job's daemons are: two
// threads of one process may share a core and exchange in a few microseconds, which no pair of
// processes does here.
class RawLink {
 public:
  explicit RawLink(const std::string& argv0) {
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listener, 1) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      Die("raw socket ceiling: cannot listen on 127.0.0.1");
    }
    auto echo = Process::Start("raw socket echo",
                               {argv0, absl::StrCat("--raw_echo_port=", ntohs(addr.sin_port))});
    if (!echo.ok()) Die(absl::StrCat("raw socket ceiling: ", echo.status().ToString()));
    echo_ = *std::move(echo);
    pollfd waiting{listener, POLLIN, 0};
    if (poll(&waiting, 1, /*timeout_ms=*/30000) != 1) {
      Die("raw socket ceiling: the echo process did not connect within 30 s");
    }
    fd_ = accept(listener, nullptr, nullptr);
    close(listener);
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawLink() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    // The echo process ends with the connection.
    if (absl::StatusOr<int> code = echo_->Wait(absl::Seconds(30)); !code.ok()) {
      std::fprintf(stderr, "kvbench: %s\n", code.status().ToString().c_str());
    }
  }
  // Exchange sends `request` bytes and reads `response` bytes back.
  void Exchange(size_t request, size_t response) {
    buffer_.resize(std::max({buffer_.size(), request, response}));
    const uint64_t sizes[2] = {request, response};
    if (!WriteAll(fd_, sizes, sizeof(sizes)) || !WriteAll(fd_, buffer_.data(), request) ||
        !ReadAll(fd_, buffer_.data(), response)) {
      Die("raw socket ceiling: the loopback exchange failed");
    }
  }

  pid_t echo_pid() const { return echo_->pid(); }

 private:
  int fd_ = -1;
  std::unique_ptr<Process> echo_;
  std::vector<uint8_t> buffer_;
};

// The raw 4 KB exchange (4 KB each way) with both ends pinned to one CPU, then to two: where
// idle CPUs halt, an exchange between two CPUs pays a wake-up per message that one CPU does
// not, and an unpinned raw ceiling lands on either, run by run. Zero: not measured (one CPU).
struct RawPlacements {
  double one_cpu_s = 0;
  double two_cpus_s = 0;
};

RawPlacements MeasureRawPlacements(const std::string& argv0, int reps) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return {};
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  auto pin = [](pid_t pid, int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(pid, sizeof(one), &one) == 0;
  };
  auto time_on = [&](int mine, int echo) {
    RawLink link(argv0);
    double median = 0;
    if (pin(0, mine) && pin(link.echo_pid(), echo)) {
      for (int i = 0; i < 10; ++i) link.Exchange(4 * kKB, 4 * kKB);  // Warm up.
      Timing t;
      for (int r = 0; r < reps; ++r) {
        const absl::Time start = absl::Now();
        link.Exchange(4 * kKB, 4 * kKB);
        t.seconds.push_back(Since(start));
      }
      median = t.median();
    }
    sched_setaffinity(0, sizeof(allowed), &allowed);
    return median;
  };
  RawPlacements placements;
  if (cpus.empty()) return placements;
  placements.one_cpu_s = time_on(cpus[0], cpus[0]);
  if (cpus.size() >= 2) placements.two_cpus_s = time_on(cpus[0], cpus[1]);
  return placements;
}

// RawEcho is the echo process of a RawLink: it connects to `port` and answers until the
// connection closes.
int RawEcho(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return 1;
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<uint8_t> buffer;
  uint64_t sizes[2];
  while (ReadAll(fd, sizes, sizeof(sizes))) {
    buffer.resize(std::max<size_t>({buffer.size(), sizes[0], sizes[1]}));
    if (!ReadAll(fd, buffer.data(), sizes[0])) break;
    if (!WriteAll(fd, buffer.data(), sizes[1])) break;
  }
  close(fd);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Cases

struct Result {
  std::string name;
  double bytes = 0;
  Timing timing;
  double ceiling_s = 0;  // Median seconds of the raw-socket exchange of the same bytes.
  double ops = 1;        // Operations per repetition.
};

// Spec: the job the flags ask for.
JobSpec Spec() {
  JobSpec spec;
  spec.scheduler = absl::GetFlag(FLAGS_scheduler);
  spec.kvserver = absl::GetFlag(FLAGS_kvserver);
  spec.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  spec.connections = absl::GetFlag(FLAGS_connections);
  spec.local_path = absl::GetFlag(FLAGS_local_path);
  spec.shared_completion_thread = absl::GetFlag(FLAGS_shared_completion_thread);
  spec.serving_threads = absl::GetFlag(FLAGS_serving_threads);
  spec.serving_poll = absl::GetFlag(FLAGS_serving_poll);
  spec.secret = absl::GetFlag(FLAGS_secret);
  spec.tls = absl::GetFlag(FLAGS_tls);
  spec.observe = absl::GetFlag(FLAGS_observe);
  spec.observe_workers = absl::GetFlag(FLAGS_observe_workers);
  spec.replicas = absl::GetFlag(FLAGS_replicas);
  spec.signed_payloads = absl::GetFlag(FLAGS_signed_payloads);
  return spec;
}

class Bench {
 public:
  Bench(const char* argv0, uint64_t seed) : argv0_(argv0), rng_(seed) {}

  bool Wanted(const std::string& name) const {
    const std::string only = absl::GetFlag(FLAGS_only);
    if (only.empty()) return true;
    for (absl::string_view part : absl::StrSplit(only, ',')) {
      if (!part.empty() && absl::StrContains(name, part)) return true;
    }
    return false;
  }

  // RawCeiling times W concurrent loopback exchanges of (request, response) bytes.
  // Reps returns the repetitions of a case: --reps when given, else `own`.
  static int Reps(int own) {
    const int flag = absl::GetFlag(FLAGS_reps);
    return flag > 0 ? flag : own;
  }

  double RawCeiling(int w, size_t request, size_t response, int reps) {
    std::vector<std::unique_ptr<RawLink>> links;
    for (int i = 0; i < w; ++i) links.push_back(std::make_unique<RawLink>(argv0_));
    Crew crew(w);
    crew.Run([&](int i) { links[i]->Exchange(request, response); });  // Warm up.
    Timing t;
    for (int r = 0; r < reps; ++r) {
      t.seconds.push_back(crew.Run([&](int i) { links[i]->Exchange(request, response); }));
    }
    return t.median();
  }

  void RunConfig(int servers, int workers) {
    const std::string suffix = absl::StrCat("_", workers, "w", servers, "s");
    const bool quick = absl::GetFlag(FLAGS_quick);
    struct Size {
      const char* label;
      size_t bytes;
      int reps;
    };
    std::vector<Size> sizes = {{"4KB", 4 * kKB, quick ? 200 : 1000},
                               {"1MB", kMB, quick ? 30 : 100},
                               {"16MB", 16 * kMB, quick ? 8 : 20},
                               {"100MB", 100 * kMB, quick ? 3 : 9}};
    // 1 GB values only when --only names them (kvbench_join.sh's big shards): several GB of
    // memory, and seconds a repetition.
    if (absl::StrContains(absl::GetFlag(FLAGS_only), "_1GB_")) {
      sizes.push_back({"1GB", 1024 * kMB, quick ? 2 : 5});
    }
    std::vector<std::string> names;
    for (const Size& size : sizes) {
      for (const char* op : {"push_", "pull_", "pushpull_"}) {
        names.push_back(absl::StrCat(op, size.label, suffix));
      }
    }
    const bool small_cases = workers == 1 && servers == 1;
    if (small_cases) {
      names.push_back("push_100kx16B_1w1s");
      names.push_back("pull_100kx16B_1w1s");
      names.push_back("push_100kx16B_bucket_1w1s");
      names.push_back("pull_100kx16B_bucket_1w1s");
      names.push_back("push_100kx16B_scattered_1w1s");
      names.push_back("pull_100kx16B_scattered_1w1s");
      names.push_back("small_4KB_inflight64_1w1s");
    }
    if (std::none_of(names.begin(), names.end(), [&](auto& n) { return Wanted(n); })) return;
    if (servers < absl::GetFlag(FLAGS_replicas)) return;  // A backup needs another server.

    // One job, or with --interleave_observe two: without and with observability.
    std::vector<std::unique_ptr<Job>> jobs;
    std::vector<std::string> job_suffix = {""};
    if (absl::GetFlag(FLAGS_interleave_observe)) {
      JobSpec spec = Spec();
      spec.observe = false;
      jobs.push_back(StartJob(argv0_, servers, workers, spec));
      spec.observe = true;
      jobs.push_back(StartJob(argv0_, servers, workers, spec));
      job_suffix.push_back("@observe");
    } else {
      jobs.push_back(StartJob(argv0_, servers, workers, Spec()));
    }
    const size_t num_jobs = jobs.size();
    Crew crew(workers);

    // One key per size, pushed by every worker; pulled into one output per worker.
    for (size_t k = 0; k < sizes.size(); ++k) {
      const size_t elements = sizes[k].bytes / 4;
      const std::string op_names[3] = {absl::StrCat("push_", sizes[k].label, suffix),
                                       absl::StrCat("pull_", sizes[k].label, suffix),
                                       absl::StrCat("pushpull_", sizes[k].label, suffix)};
      if (!Wanted(op_names[0]) && !Wanted(op_names[1]) && !Wanted(op_names[2])) continue;
      const Key key = static_cast<int64_t>(k);
      Tensor init = RandomTensor(rng_, elements);
      for (auto& job : jobs) {
        crew.Run([&](int w) { Check(job->workers[w]->Init(key, init), "init"); });
      }
      std::vector<Tensor> values, outs;
      for (int w = 0; w < workers; ++w) {
        values.push_back(RandomTensor(rng_, elements));
        outs.push_back(Tensor::Zeros(DType::kFloat32, {static_cast<int64_t>(elements)}));
      }
      const double bytes = static_cast<double>(sizes[k].bytes) * workers;
      const int reps = Reps(sizes[k].reps);
      for (int op = 0; op < 3; ++op) {
        if (!Wanted(op_names[op])) continue;
        std::vector<std::unique_ptr<KVStore>>* kv = &jobs[0]->workers;
        auto once = [&](int w) {
          switch (op) {
            case 0:
              Check((*kv)[w]->Push(key, values[w]), op_names[op]);
              break;
            case 1:
              Check((*kv)[w]->Pull(key, &outs[w]), op_names[op]);
              break;
            case 2:
              Check((*kv)[w]->PushPull(key, values[w], &outs[w]), op_names[op]);
              break;
          }
          Check((*kv)[w]->WaitAll(), op_names[op]);
        };
        std::vector<Result> results;
        for (size_t j = 0; j < num_jobs; ++j) {
          results.push_back(Result{op_names[op] + job_suffix[j], bytes});
          kv = &jobs[j]->workers;
          crew.Run(once);  // Warm up: connections, buffers.
        }
        for (int r = 0; r < reps; ++r) {
          for (size_t i = 0; i < num_jobs; ++i) {
            const size_t j = r % 2 == 0 ? i : num_jobs - 1 - i;  // A B, then B A.
            kv = &jobs[j]->workers;
            results[j].timing.seconds.push_back(crew.Run(once));
          }
        }
        const size_t b = sizes[k].bytes;
        const size_t request = op == 1 ? 16 : b;
        const size_t response = op == 0 ? 8 : b;
        const double ceiling_s = RawCeiling(workers, request, response, std::min(reps, 50));
        for (Result& result : results) {
          result.ceiling_s = ceiling_s;
          results_.push_back(std::move(result));
        }
      }
    }
    for (size_t j = 0; small_cases && j < num_jobs; ++j) {
      const size_t first = results_.size();
      RunSmallCases(*jobs[j]->workers[0], quick);
      for (size_t i = first; i < results_.size(); ++i) results_[i].name += job_suffix[j];
    }
    for (auto& job : jobs) job->workers.clear();  // Finish: the daemons exit.
  }

  void RunSmallCases(KVStore& kv, bool quick) {
    const int reps = Reps(quick ? 10 : 300);
    // 100,000 keys of 16 B in one call: a list of views of one buffer (a gradient bucket, as
    // PyTorch DDP lays gradients out), the buffer itself through PushBucket / PullBucket (as
    // ps-lite's ZPush takes one array of values), and a list of separately allocated tensors.
    enum Layout { kViews, kBucket, kScattered };
    for (const Layout layout : {kViews, kBucket, kScattered}) {
      const std::string suffix = layout == kViews    ? "_1w1s"
                                 : layout == kBucket ? "_bucket_1w1s"
                                                     : "_scattered_1w1s";
      const std::string names[2] = {"push_100kx16B" + suffix, "pull_100kx16B" + suffix};
      if (!Wanted(names[0]) && !Wanted(names[1])) continue;
      const int n = 100000;
      const int64_t first_key = 1000 + 200000 * static_cast<int64_t>(layout);
      Tensor values_bucket = RandomTensor(rng_, 4 * n);
      Tensor outs_bucket = Tensor::Zeros(DType::kFloat32, {4 * n});
      std::vector<Key> keys;
      std::vector<int64_t> int_keys;  // The bucket calls take them as ps-lite's ZPush does.
      std::vector<Tensor> values, outs;
      std::vector<Tensor*> out_ptrs;
      for (int i = 0; i < n; ++i) {
        keys.push_back(Key(first_key + i));
        int_keys.push_back(first_key + i);
        if (layout == kScattered) {
          values.push_back(RandomTensor(rng_, 4));
          outs.push_back(Tensor::Zeros(DType::kFloat32, {4}));
        } else {
          values.push_back(*values_bucket.View(16 * static_cast<size_t>(i), DType::kFloat32, {4}));
          outs.push_back(*outs_bucket.View(16 * static_cast<size_t>(i), DType::kFloat32, {4}));
        }
      }
      for (Tensor& t : outs) out_ptrs.push_back(&t);
      Check(kv.Init(keys, values), "init 100k keys");
      const double bytes = 16.0 * n;
      for (int op = 0; op < 2; ++op) {
        const std::string& name = names[op];
        if (!Wanted(name)) continue;
        auto once = [&] {
          if (layout == kBucket) {
            Check(op == 0 ? kv.PushBucket(int_keys, values_bucket)
                          : kv.PullBucket(int_keys, &outs_bucket),
                  name);
          } else {
            Check(op == 0 ? kv.Push(keys, values) : kv.Pull(keys, out_ptrs), name);
          }
          Check(kv.WaitAll(), name);
        };
        once();
        Result result{name, bytes};
        for (int r = 0; r < reps; ++r) {
          const absl::Time start = absl::Now();
          once();
          result.timing.seconds.push_back(Since(start));
        }
        result.ceiling_s = RawCeiling(1, op == 0 ? n * 16 : 16, op == 0 ? 8 : n * 16, 20);
        results_.push_back(std::move(result));
      }
    }
    if (Wanted("small_4KB_inflight64_1w1s")) {
      const int inflight = 64;
      std::vector<Key> keys;
      std::vector<Tensor> values;
      for (int i = 0; i < inflight; ++i) {
        keys.push_back(Key(int64_t{500 + i}));
        values.push_back(RandomTensor(rng_, 1024));
      }
      Check(kv.Init(keys, values), "init 64 keys");
      auto once = [&] {
        for (int i = 0; i < inflight; ++i) Check(kv.Push(keys[i], values[i]), "push 4KB");
        Check(kv.WaitAll(), "push 4KB");
      };
      once();
      Result result{"small_4KB_inflight64_1w1s", 4.0 * kKB * inflight};
      result.ops = inflight;
      for (int r = 0, reps = Reps(quick ? 50 : 1000); r < reps; ++r) {
        const absl::Time start = absl::Now();
        once();
        result.timing.seconds.push_back(Since(start));
      }
      // Ceiling: the same bytes as 64 sequential raw 4 KB request/response exchanges.
      result.ceiling_s = RawCeiling(1, 4 * kKB, 8, 200) * inflight;
      results_.push_back(std::move(result));
    }
  }

  void Print(double memcpy_gbps, const RawPlacements& raw, uint64_t seed) const {
    if (absl::GetFlag(FLAGS_format) == "json") {
      std::string out = absl::StrFormat(
          "{\"seed\": %d, \"memcpy_gbps\": %.4f, \"raw_4KB_one_cpu_us\": %.2f, "
          "\"raw_4KB_two_cpus_us\": %.2f, \"cases\": [",
          seed, memcpy_gbps, raw.one_cpu_s * 1e6, raw.two_cpus_s * 1e6);
      for (size_t i = 0; i < results_.size(); ++i) {
        const Result& r = results_[i];
        const double median = r.timing.median();
        const double gbps = r.bytes / median / 1e9;
        const double ceiling = r.bytes / r.ceiling_s / 1e9;
        absl::StrAppendFormat(
            &out,
            "%s\n  {\"name\": \"%s\", \"bytes\": %.0f, \"reps\": %d, \"median_s\": %.9f, "
            "\"min_s\": %.9f, \"max_s\": %.9f, \"gbps\": %.4f, \"ceiling_gbps\": %.4f, "
            "\"ratio\": %.4f, \"ops_per_s\": %.1f, \"latency_us\": %.2f, "
            "\"ceiling_latency_us\": %.2f}",
            i ? "," : "", r.name, r.bytes, static_cast<int>(r.timing.seconds.size()), median,
            r.timing.min(), r.timing.max(), gbps, ceiling, gbps / ceiling, r.ops / median,
            median * 1e6 / r.ops, r.ceiling_s * 1e6 / r.ops);
      }
      out += "\n]}\n";
      std::fputs(out.c_str(), stdout);
      return;
    }
    std::printf("memcpy (100 MiB, 1 thread): %.2f GB/s; seed %llu\n", memcpy_gbps,
                static_cast<unsigned long long>(seed));
    std::printf("raw 4 KB exchange, both ends pinned: %.1f us on one CPU, %.1f us on two\n",
                raw.one_cpu_s * 1e6, raw.two_cpus_s * 1e6);
    std::printf("%-28s %10s %10s %10s %8s %9s %8s %12s %10s\n", "case", "median_ms", "min_ms",
                "max_ms", "GB/s", "ceil GB/s", "ratio", "ops/s", "lat_us");
    for (const Result& r : results_) {
      const double median = r.timing.median();
      const double gbps = r.bytes / median / 1e9;
      const double ceiling = r.bytes / r.ceiling_s / 1e9;
      std::printf("%-28s %10.3f %10.3f %10.3f %8.3f %9.3f %8.3f %12.0f %10.1f\n", r.name.c_str(),
                  median * 1e3, r.timing.min() * 1e3, r.timing.max() * 1e3, gbps, ceiling,
                  gbps / ceiling, r.ops / median, median * 1e6 / r.ops);
    }
  }

 private:
  const char* argv0_;
  std::mt19937_64 rng_;
  std::vector<Result> results_;
};

}  // namespace
}  // namespace kvstore::bench

int main(int argc, char** argv) {
  kvstore::InitFlags(argc, argv,
                     "push / pull throughput and latency of a real job over 127.0.0.1, next to "
                     "the machine's\nown ceilings measured in the same run.\n\n"
                     "  kvbench [--quick] [--format=json] [--only=SUBSTRING] [--secret=false] "
                     "[--tls]",
                     __FILE__);
  if (absl::GetFlag(FLAGS_raw_echo_port) > 0) {
    return kvstore::bench::RawEcho(absl::GetFlag(FLAGS_raw_echo_port));
  }
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "text" && format != "json") {
    std::fprintf(stderr, "kvbench: --format must be text or json, not \"%s\"\n", format.c_str());
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  uint64_t seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  if (seed == 0) seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  const double memcpy_gbps = kvstore::bench::MemcpyGbps(absl::GetFlag(FLAGS_quick) ? 5 : 11);
  const kvstore::bench::RawPlacements raw =
      kvstore::bench::MeasureRawPlacements(argv[0], absl::GetFlag(FLAGS_quick) ? 100 : 500);
  kvstore::bench::Bench bench(argv[0], seed);
  bench.RunConfig(/*servers=*/1, /*workers=*/1);
  bench.RunConfig(/*servers=*/2, /*workers=*/2);
  bench.Print(memcpy_gbps, raw, seed);
  return 0;
}
