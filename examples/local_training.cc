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

namespace kvstore::examples {
namespace {

constexpr int kFeatures = 16;
constexpr int kTrain = 8192;
constexpr int kTest = 2048;
constexpr int kDevices = 2;
constexpr int kBatchPerDevice = 64;
constexpr int kSteps = 500;
constexpr double kLearningRate = 0.05;
constexpr double kMomentum = 0.9;
constexpr int kPrintEvery = 50;

struct Dataset {
  std::vector<std::vector<float>> x;
  std::vector<float> y;
};

// Labels come from a fixed "true" model; 5% of them are flipped so the task is not trivial.
Dataset Generate(int n, const std::vector<double>& true_w, double true_b, std::mt19937_64* rng) {
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform;
  Dataset data;
  for (int i = 0; i < n; ++i) {
    std::vector<float> x(kFeatures);
    double z = true_b;
    for (int j = 0; j < kFeatures; ++j) {
      x[j] = static_cast<float>(normal(*rng));
      z += true_w[j] * x[j];
    }
    bool label = z > 0;
    if (uniform(*rng) < 0.05) label = !label;
    data.x.push_back(std::move(x));
    data.y.push_back(label ? 1.0f : 0.0f);
  }
  return data;
}

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// Mean log-loss over examples [begin, end), and its gradient (weights, bias) written into the
// device's gradient tensors.
double Gradient(const Dataset& data, int begin, int end, const Tensor& w, const Tensor& b,
                Tensor* grad_w, Tensor* grad_b) {
  const float* wv = w.data_as<const float>();
  float* gw = grad_w->data_as<float>();
  std::fill(gw, gw + kFeatures, 0.0f);
  double gb = 0, loss = 0;
  for (int i = begin; i < end; ++i) {
    double z = b.data_as<const float>()[0];
    for (int j = 0; j < kFeatures; ++j) z += wv[j] * data.x[i][j];
    const double p = Sigmoid(z);
    const double y = data.y[i];
    loss -= y * std::log(p + 1e-12) + (1 - y) * std::log(1 - p + 1e-12);
    const double err = (p - y) / (end - begin);
    for (int j = 0; j < kFeatures; ++j) gw[j] += static_cast<float>(err * data.x[i][j]);
    gb += err;
  }
  grad_b->data_as<float>()[0] = static_cast<float>(gb);
  return loss / (end - begin);
}

double Accuracy(const Dataset& data, const std::vector<double>& w, double b) {
  int correct = 0;
  for (size_t i = 0; i < data.y.size(); ++i) {
    double z = b;
    for (int j = 0; j < kFeatures; ++j) z += w[j] * data.x[i][j];
    correct += (z > 0) == (data.y[i] > 0.5);
  }
  return static_cast<double>(correct) / data.y.size();
}

absl::Status Run() {
  std::mt19937_64 rng(2026);
  std::normal_distribution<double> normal;
  std::vector<double> true_w(kFeatures);
  for (double& v : true_w) v = normal(rng);
  const double true_b = 0.5;
  const Dataset train = Generate(kTrain, true_w, true_b, &rng);
  const Dataset test = Generate(kTest, true_w, true_b, &rng);

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
  RETURN_IF_ERROR(kv->Init(keys, {Tensor::Zeros(DType::kFloat32, {kFeatures}),
                                  Tensor::Zeros(DType::kFloat32, {1})}));

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
                               &grad_w[d], &grad_b[d]) / kDevices;
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

  std::vector<double> w(kFeatures);
  for (int j = 0; j < kFeatures; ++j) w[j] = weights[0].GetAsDouble(j);
  const double accuracy = Accuracy(test, w, biases[0].GetAsDouble(0));
  const double ceiling = Accuracy(test, true_w, true_b);
  std::printf("test accuracy %.2f%% (the true model that made the labels: %.2f%%)\n",
              100 * accuracy, 100 * ceiling);
  if (accuracy < ceiling - 0.05) {
    return absl::InternalError("training did not converge: accuracy too far below the true model");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvstore::examples

int main() {
  const absl::Status status = kvstore::examples::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "local_training: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
