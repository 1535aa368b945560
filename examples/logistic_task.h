// A logistic-regression task with a known answer, shared by the example training jobs.
//
// Labels come from a fixed "true" model (weights drawn from a seeded normal distribution) with 5%
// of them flipped, so a trained model should approach, but not pass, the true model's accuracy.
#ifndef KVSTORE_EXAMPLES_LOGISTIC_TASK_H_
#define KVSTORE_EXAMPLES_LOGISTIC_TASK_H_

#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/kvstore.h"

namespace kvstore::examples {

inline constexpr int kFeatures = 16;

struct Dataset {
  std::vector<std::vector<float>> x;
  std::vector<float> y;
};

// Task: the true model and its train and test sets, the same in every process for one seed.
struct Task {
  std::vector<double> true_w;
  double true_b = 0.5;
  Dataset train;
  Dataset test;
};

Task MakeTask(int num_train, int num_test, uint64_t seed = 2026);

// Gradient returns the mean log-loss over examples [begin, end) and writes its gradient into
// grad_w (kFeatures float32) and grad_b (1 float32), given weights w and bias b.
double Gradient(const Dataset& data, int begin, int end, const Tensor& w, const Tensor& b,
                Tensor* grad_w, Tensor* grad_b);

// Accuracy returns the fraction of `data` the model (w, b) classifies correctly.
double Accuracy(const Dataset& data, const std::vector<double>& w, double b);

// Evaluate prints "<prefix>test accuracy A% (the true model ...: B%)" for the trained weights
// (kFeatures float32) and bias, and returns Internal when A is more than 5 points below B.
absl::Status Evaluate(const Task& task, const Tensor& weight, const Tensor& bias,
                      const std::string& prefix);

// Main runs `run` and maps its status to an exit code with a one-line reason named `program`.
int Main(const char* program, absl::Status (*run)());

}  // namespace kvstore::examples

#endif  // KVSTORE_EXAMPLES_LOGISTIC_TASK_H_
