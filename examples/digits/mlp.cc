#include "mlp.h"

#include <Eigen/Dense>
#include <cmath>
#include <random>
#include <stdexcept>

#include "dataset.h"

namespace digits {
namespace {

using Matrix = Eigen::MatrixXf;
using ConstMap = Eigen::Map<const Eigen::MatrixXf>;
using ConstVec = Eigen::Map<const Eigen::VectorXf>;

// Views of the four parameter blocks inside a flat vector.
struct Layers {
  Layers(const float* p, int hidden)
      : w1(p, hidden, kNumFeatures),
        b1(p + hidden * kNumFeatures, hidden),
        w2(p + hidden * (kNumFeatures + 1), kNumClasses, hidden),
        b2(p + hidden * (kNumFeatures + 1) + kNumClasses * hidden, kNumClasses) {}
  ConstMap w1;
  ConstVec b1;
  ConstMap w2;
  ConstVec b2;
};

void CheckSize(const std::vector<float>& weights, int hidden) {
  if (static_cast<int>(weights.size()) != NumParameters(hidden)) {
    throw std::invalid_argument("weights have " + std::to_string(weights.size()) +
                                " values; a network with " + std::to_string(hidden) +
                                " hidden units needs " + std::to_string(NumParameters(hidden)));
  }
}

// Logits (10 x n) of the columns of `input` (64 x n); `h` receives the hidden activations.
Matrix Forward(const Layers& l, const Matrix& input, Matrix& h) {
  h = ((l.w1 * input).colwise() + l.b1).cwiseMax(0.0f);
  return (l.w2 * h).colwise() + l.b2;
}

}  // namespace

int NumParameters(int hidden) { return hidden * (kNumFeatures + 1) + kNumClasses * (hidden + 1); }

std::vector<float> InitialWeights(int hidden, uint64_t seed) {
  std::vector<float> w(NumParameters(hidden), 0.0f);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n1(0.0f, std::sqrt(2.0f / kNumFeatures));
  std::normal_distribution<float> n2(0.0f, std::sqrt(2.0f / hidden));
  for (int i = 0; i < hidden * kNumFeatures; ++i) w[i] = n1(rng);
  int w2 = hidden * (kNumFeatures + 1);
  for (int i = 0; i < kNumClasses * hidden; ++i) w[w2 + i] = n2(rng);
  return w;
}

LossAndGradient ComputeGradient(const std::vector<float>& weights, int hidden, const float* x,
                                const int32_t* y, const std::vector<int>& rows) {
  CheckSize(weights, hidden);
  Layers l(weights.data(), hidden);
  const int n = static_cast<int>(rows.size());
  Matrix input(kNumFeatures, n);
  for (int j = 0; j < n; ++j) {
    input.col(j) = ConstVec(x + static_cast<std::ptrdiff_t>(rows[j]) * kNumFeatures, kNumFeatures);
  }
  Matrix h;
  Matrix z = Forward(l, input, h);
  // Softmax per column, shifted by the column max for stability.
  Eigen::RowVectorXf max = z.colwise().maxCoeff();
  Matrix p = (z.rowwise() - max).array().exp();
  p.array().rowwise() /= p.colwise().sum().array();
  LossAndGradient out;
  double loss = 0;
  for (int j = 0; j < n; ++j) {
    loss -= std::log(std::max(p(y[rows[j]], j), 1e-12f));
    p(y[rows[j]], j) -= 1.0f;  // p becomes d loss_j / d z
  }
  out.loss = static_cast<float>(loss / n);
  Matrix dz = p / static_cast<float>(n);
  out.gradient.resize(weights.size());
  float* g = out.gradient.data();
  Eigen::Map<Matrix> dw1(g, hidden, kNumFeatures);
  Eigen::Map<Eigen::VectorXf> db1(g + hidden * kNumFeatures, hidden);
  Eigen::Map<Matrix> dw2(g + hidden * (kNumFeatures + 1), kNumClasses, hidden);
  Eigen::Map<Eigen::VectorXf> db2(g + hidden * (kNumFeatures + 1) + kNumClasses * hidden,
                                  kNumClasses);
  dw2.noalias() = dz * h.transpose();
  db2 = dz.rowwise().sum();
  Matrix dh = (l.w2.transpose() * dz).cwiseProduct((h.array() > 0.0f).cast<float>().matrix());
  dw1.noalias() = dh * input.transpose();
  db1 = dh.rowwise().sum();
  return out;
}

double Accuracy(const std::vector<float>& weights, int hidden, const float* x, const int32_t* y,
                int n) {
  CheckSize(weights, hidden);
  if (n == 0) return 0;
  Layers l(weights.data(), hidden);
  Matrix input = ConstMap(x, kNumFeatures, n);
  Matrix h;
  Matrix z = Forward(l, input, h);
  int correct = 0;
  for (int j = 0; j < n; ++j) {
    Eigen::Index best = 0;
    z.col(j).maxCoeff(&best);
    correct += static_cast<int>(best) == y[j];
  }
  return static_cast<double>(correct) / n;
}

}  // namespace digits
