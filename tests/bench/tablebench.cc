// tablebench: what a table (docs/tables.md) costs next to the row-sparse path it replaces and
// next to memcpy. Batches of --ids ids drawn from Zipf(--zipf) over --vocab possible ids (the
// ids a recommender's batch looks up); each batch's unique ids are what an Embedding module
// pulls and pushes. For each job in --jobs (WwSs: W workers, S servers; a real job as kvbench
// starts, tests/bench/bench_job.h), every worker at once, per batch:
//   table pull / push     PullRows / PushRows of the batch's unique ids in a table of --dim
//                         float32 (sgd), keyed by the ids themselves
//   row-sparse pull/push  RowSparsePull / Push of RowSparse rows of the same count on a dense
//                         (U, --dim) key, U the distinct ids of every batch, whose rows the
//                         ids were mapped to beforehand (the path that needs no hash, and a
//                         vocabulary known in advance)
//   memcpy                the same bytes copied once in memory
// It prints rows per second (a batch's unique rows over the median time of a batch, summed
// over the workers), and the memory of a stored row: the table's own count (EmbeddingTable's
// TableStats.bytes over its rows, with an sgd row of --dim floats) and the kvservers' resident
// memory added while the table grew (over the table pushes, before the other cases), per row,
// next to the row's own bytes.
//
//   bazel run -c opt //tests/bench:tablebench -- [--jobs=1w1s,2w2s] [--batches=12]
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/kvstore.h"
#include "common/flags_usage.h"
#include "common/store/embedding_table.h"
#include "tests/bench/bench_job.h"

ABSL_FLAG(std::string, jobs, "1w1s,2w2s", "Jobs to run, as WwSs, comma-separated.");
ABSL_FLAG(int, batches, 12, "Batches per worker (repetitions of every case).");
ABSL_FLAG(int, ids, 65536, "Ids per batch.");
ABSL_FLAG(int, dim, 64, "Row width (float32 elements).");
ABSL_FLAG(double, vocab, 1e8, "Possible ids.");
ABSL_FLAG(double, zipf, 1.05, "Zipf exponent of the id distribution.");
ABSL_FLAG(int, seed, 0, "Random seed (0: from the clock).");

namespace kvstore::bench {
namespace {

// ZipfSampler draws ranks 1..n with P(k) proportional to k^-s by rejection-inversion (Hormann
// and Derflinger, 1996), in constant memory for any n.
class ZipfSampler {
 public:
  ZipfSampler(double n, double s)
      : n_(n),
        s_(s),
        h_x1_(H(1.5) - 1.0),
        h_n_(H(n + 0.5)),
        t_(2.0 - HInv(H(2.5) - std::pow(2.0, -s))) {}

  int64_t Draw(std::mt19937_64& rng) const {
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (;;) {
      const double u = h_n_ + uniform(rng) * (h_x1_ - h_n_);
      const double x = HInv(u);
      double k = std::floor(x + 0.5);
      if (k < 1) k = 1;
      if (k > n_) k = n_;
      if (k - x <= t_ || u >= H(k + 0.5) - std::pow(k, -s_)) return static_cast<int64_t>(k);
    }
  }

 private:
  // H(x) = ((x)^(1-s) - 1) / (1 - s), the integral of x^-s (log x when s = 1).
  double H(double x) const {
    const double e = 1.0 - s_;
    return std::abs(e) < 1e-9 ? std::log(x) : (std::pow(x, e) - 1.0) / e;
  }
  double HInv(double y) const {
    const double e = 1.0 - s_;
    return std::abs(e) < 1e-9 ? std::exp(y) : std::pow(1.0 + y * e, 1.0 / e);
  }

  const double n_, s_, h_x1_, h_n_, t_;
};

// Scattered ids: the rank through a bijection of 64-bit integers, as real ids are hashes.
int64_t IdOf(int64_t rank) {
  return static_cast<int64_t>(static_cast<uint64_t>(rank) * 0x9e3779b97f4a7c15ULL);
}

std::vector<std::pair<int, int>> Jobs(const std::string& list) {
  std::vector<std::pair<int, int>> jobs;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    const std::vector<std::string> ws = absl::StrSplit(part, 'w');
    int w = 0, s = 0;
    if (ws.size() != 2 || ws[1].empty() || ws[1].back() != 's' || !absl::SimpleAtoi(ws[0], &w) ||
        !absl::SimpleAtoi(ws[1].substr(0, ws[1].size() - 1), &s) || w < 1 || s < 1) {
      Die(absl::StrCat("--jobs: \"", part, "\" is not WwSs (e.g. 2w2s)"));
    }
    jobs.emplace_back(w, s);
  }
  return jobs;
}

// RssKib returns the resident memory of `process`, in KiB.
long RssKib(const Process& process) {
  std::ifstream in(absl::StrCat("/proc/", process.pid(), "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

struct Batch {
  std::vector<int64_t> ids;    // The batch's unique ids.
  std::vector<int64_t> dense;  // Their rows in the dense key, in the same order.
  Tensor grads;                // (ids, dim) float32.
};

void Run(const char* argv0) {
  uint64_t seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  if (seed == 0) seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  const int batches = absl::GetFlag(FLAGS_batches), per_batch = absl::GetFlag(FLAGS_ids);
  const int64_t dim = absl::GetFlag(FLAGS_dim);
  const std::vector<std::pair<int, int>> jobs = Jobs(absl::GetFlag(FLAGS_jobs));
  int max_workers = 0;
  for (const auto& [w, s] : jobs) max_workers = std::max(max_workers, w);
  std::printf(
      "tablebench: seed %llu; batches of %d ids from Zipf(%.3g) over %.3g ids, rows of "
      "%lld float32\n",
      static_cast<unsigned long long>(seed), per_batch, absl::GetFlag(FLAGS_zipf),
      absl::GetFlag(FLAGS_vocab), static_cast<long long>(dim));
  // Every worker's batches, and the dense row of each distinct id.
  const ZipfSampler zipf(absl::GetFlag(FLAGS_vocab), absl::GetFlag(FLAGS_zipf));
  absl::flat_hash_map<int64_t, int64_t> dense_row;
  std::vector<std::vector<Batch>> work(max_workers);
  double unique_rows = 0;
  for (int w = 0; w < max_workers; ++w) {
    std::mt19937_64 rng(seed + 1000003 * w);
    for (int b = 0; b < batches; ++b) {
      std::vector<int64_t> ids(per_batch);
      for (int64_t& id : ids) id = IdOf(zipf.Draw(rng));
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      Batch batch;
      batch.ids = ids;
      for (int64_t id : ids) {
        batch.dense.push_back(dense_row.try_emplace(id, dense_row.size()).first->second);
      }
      std::sort(batch.dense.begin(), batch.dense.end());  // RowSparse wants them sorted.
      batch.grads = RandomTensor(rng, ids.size() * dim);
      batch.grads =
          batch.grads.View(0, DType::kFloat32, {static_cast<int64_t>(ids.size()), dim}).value();
      unique_rows += static_cast<double>(ids.size());
      work[w].push_back(std::move(batch));
    }
  }
  const int64_t vocab_rows = static_cast<int64_t>(dense_row.size());
  std::printf("unique ids per batch: %.0f on average; %lld distinct ids in all batches\n",
              unique_rows / (max_workers * batches), static_cast<long long>(vocab_rows));

  // A row's memory in a table, by the table's own count.
  {
    TableConfig config;
    config.dim = dim;
    std::unique_ptr<EmbeddingTable> table = EmbeddingTable::Create(config).value();
    std::vector<int64_t> ids;
    for (const auto& [id, row] : dense_row) ids.push_back(id);
    std::vector<float> grads(ids.size() * dim, 1.0f);
    Check(table->Push(ids, grads, 1), "filling the table");
    const TableStats stats = table->stats();
    const double own = static_cast<double>(dim * sizeof(float));
    std::printf(
        "memory per stored row (the table's count, sgd, %lld rows): %.1f bytes, the "
        "row's own %.0f; goal at most 1.5x + 64 = %.0f\n",
        static_cast<long long>(stats.rows),
        static_cast<double>(stats.bytes) / static_cast<double>(stats.rows), own, 1.5 * own + 64);
  }

  std::printf("\n%-7s %-16s %14s %14s %10s\n", "job", "case", "median batch", "rows/s",
              "vs memcpy");
  for (const auto& [workers, servers] : jobs) {
    JobSpec spec;
    std::unique_ptr<Job> job = StartJob(argv0, servers, workers, spec);
    const Key table_key("table"), sparse_key("sparse");
    TableConfig config;
    config.dim = dim;
    std::vector<std::thread> init;
    std::vector<absl::Status> status(workers);
    for (int w = 0; w < workers; ++w) {
      init.emplace_back([&, w] {
        KVStore& kv = *job->workers[w];
        status[w] = kv.Init(sparse_key, Tensor::Zeros(DType::kFloat32, {vocab_rows, dim}));
        if (status[w].ok()) status[w] = kv.InitTable(table_key, config);
      });
    }
    for (auto& t : init) t.join();
    for (const absl::Status& s : status) Check(s, "init");
    long rss_before = 0;
    for (const auto& daemon : job->daemons) rss_before += RssKib(*daemon);
    Crew crew(workers);
    double rows_per_batch = 0;
    for (int w = 0; w < workers; ++w) {
      for (const Batch& b : work[w]) rows_per_batch += static_cast<double>(b.ids.size());
    }
    rows_per_batch /= batches;  // Over the workers of a batch together.
    struct Case {
      const char* name;
      std::function<absl::Status(KVStore&, const Batch&, Tensor*)> run;
    };
    const std::vector<Case> cases = {
        {"table push", [&](KVStore& kv, const Batch& b,
                           Tensor*) { return kv.PushRows(table_key, b.ids, b.grads); }},
        {"table pull", [&](KVStore& kv, const Batch& b,
                           Tensor* out) { return kv.PullRows(table_key, b.ids, out); }},
        {"row-sparse push",
         [&](KVStore& kv, const Batch& b, Tensor*) {
           absl::StatusOr<RowSparse> rows = RowSparse::Create({vocab_rows, dim}, b.dense, b.grads);
           if (!rows.ok()) return rows.status();
           absl::Status s = kv.Push(sparse_key, *rows);
           return s.ok() ? kv.Wait({sparse_key}) : s;
         }},
        {"row-sparse pull",
         [&](KVStore& kv, const Batch& b, Tensor*) {
           RowSparse out = RowSparse::Empty(DType::kFloat32, {vocab_rows, dim});
           absl::Status s = kv.RowSparsePull(sparse_key, &out, b.dense);
           return s.ok() ? kv.Wait({sparse_key}) : s;
         }},
        {"memcpy",
         [&](KVStore&, const Batch& b, Tensor* out) {
           std::memcpy(out->data(), b.grads.data(), b.grads.byte_size());
           return absl::OkStatus();
         }},
    };
    std::vector<double> medians;
    long rss_after = 0;
    for (const Case& c : cases) {
      Timing timing;
      for (int b = 0; b < batches; ++b) {
        std::vector<absl::Status> results(workers);
        timing.seconds.push_back(crew.Run([&](int w) {
          const Batch& batch = work[w][b];
          Tensor out =
              Tensor::Zeros(DType::kFloat32, {static_cast<int64_t>(batch.ids.size()), dim});
          results[w] = c.run(*job->workers[w], batch, &out);
        }));
        for (const absl::Status& s : results) Check(s, c.name);
      }
      medians.push_back(timing.median());
      if (medians.size() == 1) {  // The table has grown: every batch is pushed.
        for (const auto& daemon : job->daemons) rss_after += RssKib(*daemon);
      }
    }
    const double memcpy_median = medians.back();
    for (size_t i = 0; i < cases.size(); ++i) {
      std::printf("%dw%ds   %-16s %11.2f ms %14.0f %9.3fx\n", workers, servers, cases[i].name,
                  medians[i] * 1e3, rows_per_batch / medians[i], memcpy_median / medians[i]);
    }
    std::printf("%dw%ds  table / row-sparse rows/s: push %.2fx, pull %.2fx\n", workers, servers,
                medians[2] / medians[0], medians[3] / medians[1]);
    absl::flat_hash_map<int64_t, bool> held;  // The rows the table holds now: every id pushed.
    for (int w = 0; w < workers; ++w) {
      for (const Batch& b : work[w]) {
        for (int64_t id : b.ids) held[id] = true;
      }
    }
    std::printf(
        "%dw%ds  kvservers' resident memory added while the table grew to %zu rows: "
        "%.1f MiB, %.0f bytes a row (with the processes' buffers and allocator caches)\n",
        workers, servers, held.size(), (rss_after - rss_before) / 1024.0,
        (rss_after - rss_before) * 1024.0 / static_cast<double>(held.size()));
  }
}

}  // namespace
}  // namespace kvstore::bench

int main(int argc, char** argv) {
  kvstore::InitFlags(argc, argv,
                     "embedding tables next to row-sparse values and memcpy: rows per second, "
                     "memory per row.\n\n  tablebench [--jobs=1w1s,2w2s] [--batches=12]",
                     __FILE__);
  signal(SIGPIPE, SIG_IGN);
  kvstore::bench::Run(argv[0]);
  return 0;
}
