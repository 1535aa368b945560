// kvscale: what growing a job costs. For every job of W workers and S servers in the sweep
// (--workers, --servers), it starts a real job as kvbench does (tests/bench/bench_job.h: the
// daemons as processes over 127.0.0.1, the workers in this process) and times, every worker
// at once:
//   pushpull_16MB   one float32 key of 16 MB, a push and a pull of it by every worker
//   push_100kx16B   100,000 keys of 16 B in one call (views of one buffer, a gradient bucket)
// For each it prints the median time of a repetition, the throughput per worker (the bytes one
// worker pushes in a repetition over the median; a push+pull counts them once, as kvbench
// does), the job's total, and the CPU seconds per GB moved: the CPU time of this process (the
// workers) and of every daemon (/proc/PID/stat) over the timed repetitions, divided by the
// bytes the workers sent and received (a push+pull counts them both ways). On a machine with
// fewer cores than processes, throughput per worker falls as the job grows whatever the
// software does; CPU per GB is the figure that shows what each added worker or server costs.
//
//   bazel run -c opt //tests/bench:kvscale -- [--workers=1,2,4,8] [--servers=1,2,4] [--quick]
//       [--format=json] [--secret=false]
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/kvstore.h"
#include "common/flags_usage.h"
#include "tests/bench/bench_job.h"

ABSL_FLAG(std::string, workers, "1,2,4,8", "Worker counts of the sweep, comma-separated.");
ABSL_FLAG(std::string, servers, "1,2,4", "Server counts of the sweep, comma-separated.");
ABSL_FLAG(bool, quick, false, "Fewer repetitions.");
ABSL_FLAG(int, reps, 0, "Repetitions of every case (0: each case's own).");
ABSL_FLAG(std::string, format, "text", "text or json.");
ABSL_FLAG(bool, secret, true, "With a job secret, as a launched job runs (false: --insecure).");
ABSL_FLAG(int, seed, 0, "Random seed of the pushed values (0: from the clock).");

namespace kvstore::bench {
namespace {

constexpr size_t kMB = 1000 * 1000;

std::vector<int> Counts(const std::string& list, const char* flag) {
  std::vector<int> counts;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > 64) {
      Die(absl::StrCat("--", flag, ": \"", part, "\" is not a count in 1..64"));
    }
    counts.push_back(n);
  }
  if (counts.empty()) Die(absl::StrCat("--", flag, " lists no count"));
  return counts;
}

// CpuSeconds returns the user and system CPU time of this process and of `daemons` so far.
double CpuSeconds(const std::vector<std::unique_ptr<Process>>& daemons) {
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  double seconds = self.ru_utime.tv_sec + self.ru_utime.tv_usec / 1e6 + self.ru_stime.tv_sec +
                   self.ru_stime.tv_usec / 1e6;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (const auto& daemon : daemons) {
    std::ifstream in(absl::StrCat("/proc/", daemon->pid(), "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Fields after the command's closing parenthesis: state is field 3; utime and stime are
    // fields 14 and 15.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) Die(absl::StrCat("cannot read /proc/", daemon->pid(), "/stat"));
    std::istringstream fields(stat.substr(close + 2));
    std::string field;
    double ticks = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i == 14 || i == 15) ticks += std::stod(field);
    }
    seconds += ticks / tick;
  }
  return seconds;
}

struct Row {
  std::string name;
  int workers = 0;
  int servers = 0;
  int reps = 0;
  double median_s = 0;
  double gbps_per_worker = 0;
  double gbps_total = 0;
  double cpu_s_per_gb = 0;
};

class Scale {
 public:
  Scale(const char* argv0, uint64_t seed) : argv0_(argv0), rng_(seed) {}

  void RunJob(int workers, int servers) {
    JobSpec spec;
    spec.secret = absl::GetFlag(FLAGS_secret);
    std::unique_ptr<Job> job = StartJob(argv0_, servers, workers, spec);
    Crew crew(workers);
    auto& kv = job->workers;
    const bool quick = absl::GetFlag(FLAGS_quick);
    const int flag_reps = absl::GetFlag(FLAGS_reps);

    // pushpull_16MB: one key, every worker's own values and output.
    {
      const size_t elements = 16 * kMB / 4;
      const Key key(int64_t{0});
      Tensor init = RandomTensor(rng_, elements);
      crew.Run([&](int w) { Check(kv[w]->Init(key, init), "init 16 MB"); });
      std::vector<Tensor> values, outs;
      for (int w = 0; w < workers; ++w) {
        values.push_back(RandomTensor(rng_, elements));
        outs.push_back(Tensor::Zeros(DType::kFloat32, {static_cast<int64_t>(elements)}));
      }
      Time("pushpull_16MB", workers, servers,
           flag_reps > 0 ? flag_reps
           : quick       ? 3
                         : 10,
           16.0 * kMB, /*both_ways=*/true, job->daemons, crew, [&](int w) {
             Check(kv[w]->PushPull(key, values[w], &outs[w]), "pushpull 16 MB");
             Check(kv[w]->WaitAll(), "pushpull 16 MB");
           });
    }
    // push_100kx16B: each worker's keys are views of one buffer of its own.
    {
      const int n = 100000;
      std::vector<Key> keys;
      for (int i = 0; i < n; ++i) keys.push_back(Key(int64_t{1000} + i));
      std::vector<Tensor> buckets;
      std::vector<std::vector<Tensor>> views(workers);
      for (int w = 0; w < workers; ++w) {
        buckets.push_back(RandomTensor(rng_, 4 * static_cast<size_t>(n)));
        for (int i = 0; i < n; ++i) {
          views[w].push_back(*buckets[w].View(16 * static_cast<size_t>(i), DType::kFloat32, {4}));
        }
      }
      crew.Run([&](int w) { Check(kv[w]->Init(keys, views[w]), "init 100k keys"); });
      Time("push_100kx16B", workers, servers,
           flag_reps > 0 ? flag_reps
           : quick       ? 5
                         : 20,
           16.0 * n, /*both_ways=*/false, job->daemons, crew, [&](int w) {
             Check(kv[w]->Push(keys, views[w]), "push 100k keys");
             Check(kv[w]->WaitAll(), "push 100k keys");
           });
    }
    job->workers.clear();  // Finish: the daemons exit.
  }

  void Print() const {
    if (absl::GetFlag(FLAGS_format) == "json") {
      std::string out = "{\"cases\": [";
      for (size_t i = 0; i < rows_.size(); ++i) {
        const Row& r = rows_[i];
        absl::StrAppendFormat(&out,
                              "%s\n  {\"name\": \"%s\", \"workers\": %d, \"servers\": %d, "
                              "\"reps\": %d, \"median_s\": %.6f, \"gbps_per_worker\": %.4f, "
                              "\"gbps_total\": %.4f, \"cpu_s_per_gb\": %.3f}",
                              i ? "," : "", r.name, r.workers, r.servers, r.reps, r.median_s,
                              r.gbps_per_worker, r.gbps_total, r.cpu_s_per_gb);
      }
      out += "\n]}\n";
      std::fputs(out.c_str(), stdout);
      return;
    }
    std::printf("%-16s %3s %3s %10s %14s %10s %12s\n", "case", "w", "s", "median_ms", "GB/s/worker",
                "GB/s job", "cpu_s/GB");
    for (const Row& r : rows_) {
      std::printf("%-16s %3d %3d %10.2f %14.3f %10.3f %12.3f\n", r.name.c_str(), r.workers,
                  r.servers, r.median_s * 1e3, r.gbps_per_worker, r.gbps_total, r.cpu_s_per_gb);
    }
  }

 private:
  // Time runs `once` on every worker: once to warm up, then `reps` timed repetitions, and
  // records the row. `bytes`: what one worker pushes in a repetition.
  void Time(const std::string& name, int workers, int servers, int reps, double bytes,
            bool both_ways, const std::vector<std::unique_ptr<Process>>& daemons, Crew& crew,
            const std::function<void(int)>& once) {
    crew.Run(once);
    Timing timing;
    const double cpu_before = CpuSeconds(daemons);
    for (int r = 0; r < reps; ++r) timing.seconds.push_back(crew.Run(once));
    const double cpu = CpuSeconds(daemons) - cpu_before;
    Row row{name, workers, servers, reps};
    row.median_s = timing.median();
    row.gbps_per_worker = bytes / row.median_s / 1e9;
    row.gbps_total = row.gbps_per_worker * workers;
    const double moved_gb = bytes * workers * reps * (both_ways ? 2 : 1) / 1e9;
    row.cpu_s_per_gb = cpu / moved_gb;
    std::fprintf(stderr, "kvscale: %s %dw%ds %.2f ms\n", name.c_str(), workers, servers,
                 row.median_s * 1e3);
    rows_.push_back(row);
  }

  const char* argv0_;
  std::mt19937_64 rng_;
  std::vector<Row> rows_;
};

}  // namespace
}  // namespace kvstore::bench

int main(int argc, char** argv) {
  kvstore::InitFlags(argc, argv,
                     "what growing a job costs: throughput per worker and CPU seconds per GB "
                     "for jobs of\nW workers and S servers.\n\n"
                     "  kvscale [--workers=1,2,4,8] [--servers=1,2,4] [--quick] [--format=json]",
                     __FILE__);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "text" && format != "json") {
    std::fprintf(stderr, "kvscale: --format must be text or json, not \"%s\"\n", format.c_str());
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  uint64_t seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  if (seed == 0) seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  std::fprintf(stderr, "kvscale: seed %llu\n", static_cast<unsigned long long>(seed));
  const std::vector<int> workers = kvstore::bench::Counts(absl::GetFlag(FLAGS_workers), "workers");
  const std::vector<int> servers = kvstore::bench::Counts(absl::GetFlag(FLAGS_servers), "servers");
  kvstore::bench::Scale scale(argv[0], seed);
  for (int s : servers) {
    for (int w : workers) scale.RunJob(w, s);
  }
  scale.Print();
  return 0;
}
