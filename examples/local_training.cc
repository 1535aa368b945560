// Data-parallel training on the in-process KVStore: logistic regression on a generated dataset
// with a known answer.
//
// Two "devices" each compute the gradient of their half of every minibatch; both gradients are
// pushed to the same keys, where the store sums them and its updater (SGD with momentum) updates
// the weights; each device then pulls the new weights. This is MXNet's `local` KVStore workflow.
// Prints the loss as it falls and the final test accuracy, which should approach the accuracy of
// the true weights that generated the labels.
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/kvstore.h"
#include "common/status_macros.h"
#include "examples/logistic_task.h"

namespace kvstore::examples {
namespace {

constexpr int kTrain = 8192;
constexpr int kTest = 2048;
constexpr int kDevices = 2;
constexpr int kBatchPerDevice = 64;
constexpr int kSteps = 500;
constexpr double kLearningRate = 0.05;
constexpr double kMomentum = 0.9;
constexpr int kPrintEvery = 50;

absl::Status Run() {
  const Task task = MakeTask(kTrain, kTest);
  const Dataset& train = task.train;

  ASSIGN_OR_RETURN(std::unique_ptr<KVStore> kv, KVStore::Create("local"));
  std::printf("store type %s, %d devices, rank %d of %d workers\n", kv->type().c_str(), kDevices,
              kv->rank(), kv->num_workers());

  // SGD with momentum, run by the store on the summed gradient of every push.
  std::map<std::string, std::vector<double>> velocity;
  RETURN_IF_ERROR(kv->SetUpdater([&velocity](const Key& key, const Tensor& grad, Tensor* weight) {
    std::vector<double>& v = velocity[key.ToString()];
    v.resize(weight->num_elements(), 0.0);
    float* w = weight->data_as<float>();
    const float* g = grad.data_as<const float>();
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = kMomentum * v[i] - kLearningRate * g[i] / kDevices;
      w[i] = static_cast<float>(w[i] + v[i]);
    }
  }));

  const std::vector<Key> keys = {"weight", "bias"};
  RETURN_IF_ERROR(kv->Init(
      keys, {Tensor::Zeros(DType::kFloat32, {kFeatures}), Tensor::Zeros(DType::kFloat32, {1})}));

  // Each device holds its own copy of the weights and its own gradient buffers.
  std::vector<Tensor> weights, biases, grad_w, grad_b;
  for (int d = 0; d < kDevices; ++d) {
    weights.push_back(Tensor::Zeros(DType::kFloat32, {kFeatures}));
    biases.push_back(Tensor::Zeros(DType::kFloat32, {1}));
    grad_w.push_back(Tensor::Zeros(DType::kFloat32, {kFeatures}));
    grad_b.push_back(Tensor::Zeros(DType::kFloat32, {1}));
  }
  std::vector<Key> push_keys;
  std::vector<Tensor> grads;
  std::vector<Tensor*> outs;
  for (int d = 0; d < kDevices; ++d) {
    push_keys.insert(push_keys.end(), keys.begin(), keys.end());
    grads.push_back(grad_w[d]);
    grads.push_back(grad_b[d]);
    outs.push_back(&weights[d]);
    outs.push_back(&biases[d]);
  }

  double running_loss = 0;
  for (int step = 1; step <= kSteps; ++step) {
    const int batch_start = ((step - 1) * kDevices * kBatchPerDevice) % kTrain;
    for (int d = 0; d < kDevices; ++d) {
      const int begin = batch_start + d * kBatchPerDevice;
      running_loss += Gradient(train, begin, begin + kBatchPerDevice, weights[d], biases[d],
                               &grad_w[d], &grad_b[d]) /
                      kDevices;
    }
    // Push both devices' gradients (summed by the store, then the updater runs once per key)
    // and pull the new weights into both devices.
    RETURN_IF_ERROR(kv->Push(push_keys, grads));
    RETURN_IF_ERROR(kv->Pull(push_keys, outs));
    RETURN_IF_ERROR(kv->WaitAll());
    if (step % kPrintEvery == 0) {
      std::printf("step %4d  loss %.4f\n", step, running_loss / kPrintEvery);
      running_loss = 0;
    }
  }

  return Evaluate(task, weights[0], biases[0], "");
}

}  // namespace
}  // namespace kvstore::examples

int main() { return kvstore::examples::Main("local_training", kvstore::examples::Run); }
