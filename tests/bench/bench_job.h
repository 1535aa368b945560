// The job of a benchmark (kvbench, kvscale): a scheduler and kvservers started as real
// processes over 127.0.0.1 (the binaries from the runfiles, the `sum` updater, dist_sync), the
// workers joined in this process, one DistStore each (each its own TCP connections, all sharing
// one completion thread, as the stores of one process should: DistOptions::completion_thread);
// and the timing helpers the benchmarks share.
#ifndef KVSTORE_TESTS_BENCH_BENCH_JOB_H_
#define KVSTORE_TESTS_BENCH_BENCH_JOB_H_

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/kvstore.h"
#include "common/security_options.h"
#include "tests/process.h"

namespace kvstore::bench {

using testing::Process;

// Die reports `message`, prefixed with the program's name, and exits; the daemons and echo
// processes die with the benchmark (tests/process.h).
[[noreturn]] void Die(const std::string& message);

// Binary returns `flag` when set, else the runfile `path` of the program `argv0`.
std::string Binary(const std::string& flag, const char* argv0, const std::string& path);

// Check dies with `what` and the status unless it is OK.
void Check(const absl::Status& status, const std::string& what);

// RandomTensor returns `elements` float32 values uniform in [-1, 1).
Tensor RandomTensor(std::mt19937_64& rng, size_t elements);

struct Timing {
  std::vector<double> seconds;
  double median() const {
    std::vector<double> s = seconds;
    std::sort(s.begin(), s.end());
    const size_t n = s.size();
    return n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  }
  double min() const { return *std::min_element(seconds.begin(), seconds.end()); }
  double max() const { return *std::max_element(seconds.begin(), seconds.end()); }
};

inline double Since(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

// Crew runs one function on W threads at once, repeatedly, and times each run from the common
// start until the last thread is done.
class Crew {
 public:
  explicit Crew(int n) : n_(n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this, i] { Loop(i); });
  }
  ~Crew() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    for (auto& t : threads_) t.join();
  }
  // Run calls fn(worker) on every thread and returns the seconds from the earliest thread's
  // start of fn to the latest one's end - as ps-lite's benchmark times its workers, which it
  // releases from an untimed barrier: the release of the threads is not timed. A crew of one
  // runs fn on the calling thread (no hand-off to a thread and back).
  double Run(std::function<void(int)> fn) {
    if (n_ == 1) {
      const absl::Time start = absl::Now();
      fn(0);
      return Since(start);
    }
    absl::MutexLock lock(&mu_);
    fn_ = std::move(fn);
    pending_ = n_;
    first_start_ = absl::InfiniteFuture();
    last_end_ = absl::InfinitePast();
    ++generation_;
    mu_.Await(absl::Condition(
        +[](int* p) { return *p == 0; }, &pending_));
    return absl::ToDoubleSeconds(last_end_ - first_start_);
  }

 private:
  void Loop(int i) {
    uint64_t seen = 0;
    while (true) {
      std::function<void(int)> fn;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [&] { return stop_ || generation_ != seen; };
        mu_.Await(absl::Condition(&ready));
        if (stop_) return;
        seen = generation_;
        fn = fn_;
      }
      const absl::Time start = absl::Now();
      fn(i);
      const absl::Time end = absl::Now();
      absl::MutexLock lock(&mu_);
      first_start_ = std::min(first_start_, start);
      last_end_ = std::max(last_end_, end);
      --pending_;
    }
  }

  const int n_;
  absl::Mutex mu_;
  std::function<void(int)> fn_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  absl::Time first_start_, last_end_;  // Of the repetition under way.
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

struct JobSecurity {
  std::string secret_file;   // Empty: the daemons run --insecure.
  std::string certificates;  // The folder of the TLS files; empty: no TLS.
  SecurityOptions workers;   // The secret and the TLS files, for the in-process workers.
};

// JobSpec: how a benchmark's job is run (the benchmarks' flags of the same names).
struct JobSpec {
  std::string scheduler;    // The scheduler binary; empty: from the runfiles.
  std::string kvserver;     // The kvserver binary; empty: from the runfiles.
  int64_t chunk_bytes = 0;  // The job's chunk size; 0: the scheduler's default.
  int connections = 0;      // TCP connections per server; 0: the SDK's default.
  // The workers reach the kvservers (all on this host) through shared memory
  // (DistOptions::local_transport); false: over TCP, as on a cluster.
  bool local_path = false;
  int serving_threads = 0;   // The kvservers' --serving_threads; 0: their default.
  std::string serving_poll;  // The kvservers' --serving_poll; empty: their default.
  bool secret = true;        // With a job secret; false: the daemons run --insecure.
  bool tls = false;          // TLS on every link, with a CA made by deploy/make-certs.sh.
  // Observability as a job runs by default: daemons at --log_level=info serving metrics
  // (--metrics_port=0); false: warnings only, no metrics.
  bool observe = false;
  bool observe_workers = false;  // The workers serve their metrics too (off by default).
  int replicas = 1;              // The scheduler's --replicas.
  bool signed_payloads = false;  // The scheduler's --signed_payloads.
  // The workers share one completion thread (NewCompletionThread); false: one each.
  bool shared_completion_thread = true;
  // The workers' store: "dist_sync", or "dist_sync_device" for values on GPUs.
  std::string store_type = "dist_sync";
};

struct Job {
  // The job ends when every worker has finished; the daemons get a moment to exit on their own
  // before they are killed.
  ~Job() {
    workers.clear();
    for (auto& daemon : daemons) daemon->Wait(absl::Seconds(2)).IgnoreError();
    if (!security.certificates.empty()) std::filesystem::remove_all(security.certificates);
  }

  JobSecurity security;
  std::vector<std::unique_ptr<Process>> daemons;
  std::vector<std::unique_ptr<KVStore>> workers;
};

// StartJob starts a scheduler and `servers` kvservers of a dist_sync job of `workers` workers
// as `spec` says (their logs in $TMPDIR), and joins the workers; dies when any step fails.
std::unique_ptr<Job> StartJob(const char* argv0, int servers, int workers, const JobSpec& spec);

}  // namespace kvstore::bench

#endif  // KVSTORE_TESTS_BENCH_BENCH_JOB_H_
