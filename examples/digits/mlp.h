// A one-hidden-layer perceptron, 64 -> hidden (ReLU) -> 10 (softmax), on Eigen.
// Parameters travel as one flat std::vector<float> so that the parameter server and
// the workers exchange plain arrays: [W1 (hidden x 64, column-major), b1 (hidden),
// W2 (10 x hidden, column-major), b2 (10)].
#pragma once

#include <cstdint>
#include <vector>

namespace digits {

// Number of floats in the flat parameter vector of a network with `hidden` units.
int NumParameters(int hidden);

// He-initialized weights (normal, stddev sqrt(2 / fan_in)), zero biases; deterministic
// for a given seed.
std::vector<float> InitialWeights(int hidden, uint64_t seed);

struct LossAndGradient {
  float loss = 0;               // mean softmax cross-entropy over the batch
  std::vector<float> gradient;  // d loss / d weights, same layout as the weights
};

// Forward and backward pass over the rows `rows` of `x` (row-major, 64 floats a row)
// with labels `y`.
LossAndGradient ComputeGradient(const std::vector<float>& weights, int hidden, const float* x,
                                const int32_t* y, const std::vector<int>& rows);

// Fraction of the `n` rows of `x` whose arg-max prediction equals the label.
double Accuracy(const std::vector<float>& weights, int hidden, const float* x, const int32_t* y,
                int n);

}  // namespace digits
