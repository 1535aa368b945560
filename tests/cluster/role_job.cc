// role_job: one program for every role of a job, as MXNet's launcher runs one (DMLC_ROLE
// decides). Workers train a linear model by data-parallel SGD on the servers and check the
// weights against a float64 replay of the whole job.
//
//   role_job MODE STEPS
//
// MODE aware  MXNet's C++ pattern: a process that is not a worker calls RunServer with a
//             controller of its own (head 16: "ping" -> OK, anything else -> InvalidArgument),
//             which the workers check through SendCommandToServers.
// MODE naive  the program never looks at its role: server and scheduler processes serve from
//             their first store call and exit when the job ends.
// MODE async_no_updater  dist_async: a push before any updater is set must be refused with
//             FAILED_PRECONDITION naming the key; after SetOptimizer it applies.
//
// The data come from KV_TEST_SEED (same in every process), each worker's shard from its rank.
// Exit 0 on success; 1 with the reason on stderr.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/kvstore.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

constexpr int kFeatures = 16;
constexpr int kSamples = 48;  // Per worker.
constexpr double kLearningRate = 0.05;

struct Shard {
  std::vector<double> x;  // kSamples x kFeatures, row-major; values exact in float32.
  std::vector<double> y;
};

double Exact(std::mt19937_64& rng) {
  // Multiples of 1/64 in [-2, 2): exactly representable in float32.
  return static_cast<double>(static_cast<int>(rng() % 256) - 128) / 64.0;
}

Shard MakeShard(uint64_t seed, int rank) {
  std::mt19937_64 truth_rng(seed);
  std::vector<double> truth(kFeatures);
  for (double& t : truth) t = Exact(truth_rng);
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(rank) + 1);
  Shard shard;
  for (int i = 0; i < kSamples; ++i) {
    double label = 0;
    for (int j = 0; j < kFeatures; ++j) {
      const double v = Exact(rng);
      shard.x.push_back(v);
      label += v * truth[j];
    }
    shard.y.push_back(label + Exact(rng) / 16);
  }
  return shard;
}

// Gradient of the mean squared error / 2 over a shard at `w`.
std::vector<double> Gradient(const Shard& s, const std::vector<double>& w, double* loss) {
  std::vector<double> g(kFeatures, 0.0);
  *loss = 0;
  for (int i = 0; i < kSamples; ++i) {
    double r = -s.y[i];
    for (int j = 0; j < kFeatures; ++j) r += s.x[i * kFeatures + j] * w[j];
    *loss += r * r / 2 / kSamples;
    for (int j = 0; j < kFeatures; ++j) g[j] += r * s.x[i * kFeatures + j] / kSamples;
  }
  return g;
}

absl::Status Train(KVStore* kv, uint64_t seed, int steps, const std::string& mode) {
  const int rank = kv->rank(), workers = kv->num_workers();
  const Key key("weight");
  if (rank == 0) {
    OptimizerConfig sgd;
    sgd.name = "sgd";
    sgd.learning_rate = kLearningRate;
    sgd.rescale_grad = 1.0 / workers;
    RETURN_IF_ERROR(kv->SetOptimizer(sgd));
  }
  if (absl::Status s = kv->Init(key, Tensor::Zeros(DType::kFloat32, {kFeatures})); !s.ok()) {
    return s;
  }
  if (mode == "aware" && rank == 0) {
    // The servers run the program's own controller.
    if (absl::Status s = kv->SendCommandToServers(16, "ping"); !s.ok()) {
      return absl::InternalError(
          absl::StrCat("the servers' controller refused ping: ", s.ToString()));
    }
    const absl::Status bad = kv->SendCommandToServers(16, "bogus");
    if (!absl::IsInvalidArgument(bad) ||
        std::string(bad.message()).find("role_job controller") == std::string::npos) {
      return absl::InternalError(
          absl::StrCat("the servers' controller should refuse bogus: ", bad.ToString()));
    }
    std::printf("worker 0: the servers run the program's controller\n");
  }
  std::vector<Shard> shards;
  for (int r = 0; r < workers; ++r) shards.push_back(MakeShard(seed, r));
  std::vector<double> reference(kFeatures, 0.0);
  Tensor weight = Tensor::Zeros(DType::kFloat32, {kFeatures});
  Tensor grad = Tensor::Zeros(DType::kFloat32, {kFeatures});
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<double> w(kFeatures);
    for (int j = 0; j < kFeatures; ++j) w[j] = weight.data_as<float>()[j];
    double loss;
    const std::vector<double> g = Gradient(shards[rank], w, &loss);
    if (step == 0) first_loss = loss;
    last_loss = loss;
    for (int j = 0; j < kFeatures; ++j) grad.data_as<float>()[j] = static_cast<float>(g[j]);
    RETURN_IF_ERROR(kv->Push(key, grad));
    RETURN_IF_ERROR(kv->Pull(key, &weight));
    RETURN_IF_ERROR(kv->WaitAll());
    // The float64 replay: every worker's gradient at the reference weights.
    std::vector<double> sum(kFeatures, 0.0);
    for (int r = 0; r < workers; ++r) {
      double unused;
      const std::vector<double> gr = Gradient(shards[r], reference, &unused);
      for (int j = 0; j < kFeatures; ++j) sum[j] += gr[j];
    }
    for (int j = 0; j < kFeatures; ++j) reference[j] -= kLearningRate * sum[j] / workers;
  }
  double diff = 0;
  for (int j = 0; j < kFeatures; ++j) {
    diff = std::max(diff, std::abs(weight.data_as<float>()[j] - reference[j]));
  }
  if (!(diff <= 1e-3)) {
    return absl::InternalError(
        absl::StrCat("worker ", rank, ": weights off the float64 reference by ", diff));
  }
  if (!(last_loss < first_loss)) {
    return absl::InternalError(
        absl::StrCat("worker ", rank, ": loss did not fall (", first_loss, " -> ", last_loss, ")"));
  }
  std::printf(
      "worker %d: %d steps of dist_sync match the float64 reference (max diff %.2g, "
      "loss %.4f -> %.4f)\n",
      rank, steps, diff, first_loss, last_loss);
  return kv->Barrier();
}

absl::Status AsyncWithoutUpdater(KVStore* kv) {
  const Key key("weight");
  if (absl::Status s = kv->Init(key, Tensor::Full(DType::kFloat32, {kFeatures}, 1.5)); !s.ok()) {
    return s;
  }
  if (absl::Status s = kv->Push(key, Tensor::Full(DType::kFloat32, {kFeatures}, 0.5)); !s.ok()) {
    return s;
  }
  const absl::Status refused = kv->WaitAll();
  if (!absl::IsFailedPrecondition(refused) ||
      std::string(refused.message()).find("\"weight\"") == std::string::npos) {
    return absl::InternalError(absl::StrCat(
        "a dist_async push with no updater should be FAILED_PRECONDITION naming \"weight\", "
        "got: ",
        refused.ToString()));
  }
  std::printf("worker %d: refused as expected: %s\n", kv->rank(), refused.ToString().c_str());
  RETURN_IF_ERROR(kv->Barrier());
  if (kv->rank() == 0) {
    OptimizerConfig sgd;
    sgd.name = "sgd";
    sgd.learning_rate = 1.0;
    RETURN_IF_ERROR(kv->SetOptimizer(sgd));
  }
  RETURN_IF_ERROR(kv->Barrier());
  if (absl::Status s = kv->Push(key, Tensor::Full(DType::kFloat32, {kFeatures}, 0.5)); !s.ok()) {
    return s;
  }
  RETURN_IF_ERROR(kv->WaitAll());
  RETURN_IF_ERROR(kv->Barrier());
  Tensor out = Tensor::Zeros(DType::kFloat32, {kFeatures});
  RETURN_IF_ERROR(kv->Pull(key, &out));
  RETURN_IF_ERROR(kv->WaitAll());
  // 1.5 - 1.0 * 0.5 per worker.
  const double expected = 1.5 - 0.5 * kv->num_workers();
  if (std::abs(out.data_as<float>()[0] - expected) > 1e-6) {
    return absl::InternalError(
        absl::StrCat("after SetOptimizer: ", out.data_as<float>()[0], ", expected ", expected));
  }
  std::printf("worker %d: after SetOptimizer the pushes applied\n", kv->rank());
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: role_job aware|naive|async_no_updater STEPS\n");
    return 2;
  }
  const std::string mode = argv[1];
  int steps = 0;
  const char* seed_text = std::getenv("KV_TEST_SEED");
  uint64_t seed = 0;
  if (!absl::SimpleAtoi(argv[2], &steps) || seed_text == nullptr ||
      !absl::SimpleAtoi(seed_text, &seed)) {
    std::fprintf(stderr, "role_job: bad STEPS or KV_TEST_SEED\n");
    return 2;
  }
  const bool worker = KVStore::IsWorkerNode();
  std::printf("role_job %s: this process is a %s\n", mode.c_str(),
              worker                    ? "worker"
              : KVStore::IsServerNode() ? "server"
                                        : "scheduler");
  std::fflush(stdout);
  auto store = KVStore::Create(mode == "async_no_updater" ? "dist_async" : "dist_sync");
  if (!store.ok()) {
    std::fprintf(stderr, "role_job: %s\n", store.status().ToString().c_str());
    return 1;
  }
  KVStore* kv = store->get();
  absl::Status status;
  if (mode == "aware" && !worker) {
    status = kv->RunServer([](int head, absl::string_view body) -> absl::StatusOr<std::string> {
      if (head == 16 && body == "ping") return std::string("pong");
      return absl::InvalidArgumentError(
          absl::StrCat("role_job controller: unknown command ", head, " ", std::string(body)));
    });
    std::printf("role_job: RunServer returned %s\n", status.ToString().c_str());
  } else if (mode == "async_no_updater") {
    status = AsyncWithoutUpdater(kv);
  } else {
    status = Train(kv, seed, steps, mode);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "role_job: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kvstore

int main(int argc, char** argv) { return kvstore::Main(argc, argv); }
