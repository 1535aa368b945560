#include "examples/logistic_task.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvstore::examples {

// Labels come from a fixed "true" model; 5% of them are flipped so the task is not trivial.
namespace {

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

}  // namespace

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

Task MakeTask(int num_train, int num_test, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  Task task;
  task.true_w.resize(kFeatures);
  for (double& v : task.true_w) v = normal(rng);
  task.train = Generate(num_train, task.true_w, task.true_b, &rng);
  task.test = Generate(num_test, task.true_w, task.true_b, &rng);
  return task;
}

absl::Status Evaluate(const Task& task, const Tensor& weight, const Tensor& bias,
                      const std::string& prefix) {
  std::vector<double> w(kFeatures);
  for (int j = 0; j < kFeatures; ++j) w[j] = weight.GetAsDouble(j);
  const double accuracy = Accuracy(task.test, w, bias.GetAsDouble(0));
  const double ceiling = Accuracy(task.test, task.true_w, task.true_b);
  std::printf("%stest accuracy %.2f%% (the true model that made the labels: %.2f%%)\n",
              prefix.c_str(), 100 * accuracy, 100 * ceiling);
  if (accuracy < ceiling - 0.05) {
    return absl::InternalError("training did not converge: accuracy too far below the true model");
  }
  return absl::OkStatus();
}

int Main(const char* program, absl::Status (*run)()) {
  const absl::Status status = run();
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", program, status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace kvstore::examples
