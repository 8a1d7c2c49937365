// Data-parallel training of the digits MLP with a parameter server.
//
// ParameterServer holds the weights as one flat std::vector<float> and applies averaged
// gradients with momentum SGD. GradientWorker holds one shard of the training set and
// computes the gradient of a mini-batch on the weights it is given. Both are plain
// classes: main.cc registers them as raio actors, and TrainSyncLocal below runs the very
// same objects in one process, which is how the example checks that distributed
// synchronous training computes exactly what a single process would.
// Thread-safety: none; an actor runs one call at a time (max concurrency 1).
#pragma once

#include <raio/raio.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "dataset.h"

namespace digits {

// Hyperparameters and schedule of one training run.
struct TrainOptions {
  int hidden = 64;        // hidden units
  float lr = 0.1f;        // learning rate
  float momentum = 0.9f;  // heavy-ball momentum of the parameter server
  int batch_size = 16;    // rows per worker per step
  int epochs = 20;
  int64_t seed = 42;  // weight initialization and per-epoch shuffles
  RAIO_SERIALIZE(hidden, lr, momentum, batch_size, epochs, seed);
};

// One worker's gradient for one step.
struct WorkerGradient {
  std::vector<float> gradient;
  float loss = 0;
  RAIO_SERIALIZE(gradient, loss);
};

class ParameterServer {
 public:
  static ParameterServer* Create(std::vector<float> weights, float lr, float momentum);
  // The current weights (a copy).
  std::vector<float> GetWeights() const;
  // Averages `grads` (in order), takes one momentum SGD step: v = mu v + g; w -= lr v.
  // Returns the mean loss of the gradients. Throws std::invalid_argument on a size
  // mismatch.
  float ApplyGradients(std::vector<WorkerGradient> grads);
  // Number of ApplyGradients calls so far.
  int64_t Version() const { return version_; }

 private:
  ParameterServer(std::vector<float> weights, float lr, float momentum);
  std::vector<float> weights_;
  std::vector<float> velocity_;
  float lr_;
  float momentum_;
  int64_t version_ = 0;
};

class GradientWorker {
 public:
  // x: the shard's rows (row-major, 64 floats a row); y: their labels. `worker_index`
  // seeds the shard's per-epoch shuffle together with options.seed.
  static GradientWorker* Create(std::vector<float> x, std::vector<int32_t> y, TrainOptions options,
                                int worker_index);
  // Gradient of mini-batch `batch` of epoch `epoch` (batches wrap around the shard).
  WorkerGradient Compute(std::vector<float> weights, int epoch, int batch);
  // Asynchronous mode: `steps` times, pulls the weights from `ps`, computes a gradient
  // and pushes it, without waiting for the other workers. Returns the mean loss.
  float RunEpochAsync(raio::ActorHandle<ParameterServer> ps, int epoch, int steps);
  int NumRows() const { return static_cast<int>(y_.size()); }

 private:
  GradientWorker(std::vector<float> x, std::vector<int32_t> y, TrainOptions options,
                 int worker_index);
  std::vector<float> x_;
  std::vector<int32_t> y_;
  TrainOptions options_;
  int worker_index_;
  int order_epoch_ = -1;
  std::vector<int> order_;
};

// Steps in one epoch: enough batches to cover the largest shard once.
int StepsPerEpoch(const std::vector<Dataset>& shards, int batch_size);

// Synchronous data-parallel training of one shard per (virtual) worker, all in this
// process: each step every worker computes a gradient on the same weights and the
// parameter server averages them. `on_epoch(epoch, mean_loss, weights)` runs after
// each epoch. Returns the final weights.
std::vector<float> TrainSyncLocal(
    const std::vector<Dataset>& shards, const TrainOptions& options,
    const std::function<void(int, float, const std::vector<float>&)>& on_epoch = {});

}  // namespace digits
