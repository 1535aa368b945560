// Data-parallel training on a KVStore cluster (dist_sync): logistic regression on a generated
// dataset with a known answer. Run it under a launcher, one copy per worker:
//
//   python3 deploy/launch.py -n 2 -s 2 -- bazel-bin/examples/dist_training
//
// The store comes from the launch environment (DMLC_* variables). Rank 0 selects the servers'
// optimizer - SGD with momentum, run on the servers - before the keys are initialised; every
// worker trains on its own shard of the training set: it pulls the weights, computes the
// gradient of a minibatch, and pushes it. In dist_sync each server sums the workers' gradients
// of a round and applies one SGD step to the sum, so the job is equivalent to one worker with a
// W-times larger batch (rescale_grad = 1/W turns the sum into a mean). Every worker prints its
// loss as it falls; at the end each pulls the final weights and reports the test accuracy
// beside that of the true model that generated the labels, and fails if training did not
// converge.
#include <cstdio>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "client/kvstore.h"
#include "common/status_macros.h"
#include "examples/logistic_task.h"

namespace kvstore::examples {
namespace {

constexpr int kTrain = 8192;
constexpr int kTest = 2048;
constexpr int kBatch = 64;
constexpr int kSteps = 400;
constexpr double kLearningRate = 0.05;
constexpr double kMomentum = 0.9;
constexpr int kPrintEvery = 50;

absl::Status Run() {
  const Task task = MakeTask(kTrain, kTest);
  ASSIGN_OR_RETURN(std::unique_ptr<KVStore> kv, KVStore::Create("dist_sync"));
  const int rank = kv->rank(), workers = kv->num_workers();
  std::printf("store %s: worker %d of %d\n", kv->type().c_str(), rank, workers);

  if (rank == 0) {
    // Before Init: Init ends with a barrier, so no worker pushes before the optimizer is set.
    // The servers run SGD with momentum on the sum of the workers' gradients (a typed
    // configuration; nothing but data crosses the wire).
    OptimizerConfig sgd;
    sgd.name = "sgd";
    sgd.learning_rate = kLearningRate;
    sgd.momentum = kMomentum;
    sgd.rescale_grad = 1.0 / workers;
    RETURN_IF_ERROR(kv->SetOptimizer(sgd));
  }
  const std::vector<Key> keys = {"weight", "bias"};
  RETURN_IF_ERROR(kv->Init(
      keys, {Tensor::Zeros(DType::kFloat32, {kFeatures}), Tensor::Zeros(DType::kFloat32, {1})}));

  Tensor weight = Tensor::Zeros(DType::kFloat32, {kFeatures});
  Tensor bias = Tensor::Zeros(DType::kFloat32, {1});
  Tensor grad_w = Tensor::Zeros(DType::kFloat32, {kFeatures});
  Tensor grad_b = Tensor::Zeros(DType::kFloat32, {1});
  // This worker's shard of the training set.
  const int shard_begin = kTrain * rank / workers, shard_end = kTrain * (rank + 1) / workers;
  const int batches = (shard_end - shard_begin) / kBatch;

  double running_loss = 0;
  RETURN_IF_ERROR(kv->Pull(keys, {&weight, &bias}));
  for (int step = 1; step <= kSteps; ++step) {
    RETURN_IF_ERROR(kv->WaitAll());
    const int begin = shard_begin + ((step - 1) % batches) * kBatch;
    running_loss += Gradient(task.train, begin, begin + kBatch, weight, bias, &grad_w, &grad_b);
    // The pull after the push waits for the push (same keys keep their order), which in
    // dist_sync returns once every worker's gradient of this round has been applied.
    RETURN_IF_ERROR(kv->Push(keys, {grad_w, grad_b}));
    RETURN_IF_ERROR(kv->Pull(keys, {&weight, &bias}));
    if (step % kPrintEvery == 0) {
      std::printf("worker %d  step %4d  loss %.4f\n", rank, step, running_loss / kPrintEvery);
      std::fflush(stdout);
      running_loss = 0;
    }
  }
  RETURN_IF_ERROR(kv->WaitAll());
  RETURN_IF_ERROR(kv->Barrier());
  return Evaluate(task, weight, bias, absl::StrFormat("worker %d  ", rank));
}

}  // namespace
}  // namespace kvstore::examples

int main() { return kvstore::examples::Main("dist_training", kvstore::examples::Run); }
