#include "training.h"

#include <algorithm>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>

#include "mlp.h"

namespace digits {

ParameterServer* ParameterServer::Create(std::vector<float> weights, float lr, float momentum) {
  return new ParameterServer(std::move(weights), lr, momentum);
}

ParameterServer::ParameterServer(std::vector<float> weights, float lr, float momentum)
    : weights_(std::move(weights)),
      velocity_(weights_.size(), 0.0f),
      lr_(lr),
      momentum_(momentum) {}

std::vector<float> ParameterServer::GetWeights() const { return weights_; }

float ParameterServer::ApplyGradients(std::vector<WorkerGradient> grads) {
  if (grads.empty()) throw std::invalid_argument("ApplyGradients: no gradients");
  std::vector<float> sum(weights_.size(), 0.0f);
  float loss = 0;
  for (const WorkerGradient& g : grads) {
    if (g.gradient.size() != weights_.size()) {
      throw std::invalid_argument("ApplyGradients: gradient has " +
                                  std::to_string(g.gradient.size()) + " values, weights have " +
                                  std::to_string(weights_.size()));
    }
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += g.gradient[i];
    loss += g.loss;
  }
  const float scale = 1.0f / static_cast<float>(grads.size());
  for (std::size_t i = 0; i < weights_.size(); ++i) {
    velocity_[i] = momentum_ * velocity_[i] + sum[i] * scale;
    weights_[i] -= lr_ * velocity_[i];
  }
  ++version_;
  return loss * scale;
}

GradientWorker* GradientWorker::Create(std::vector<float> x, std::vector<int32_t> y,
                                       TrainOptions options, int worker_index) {
  if (y.empty() || x.size() != y.size() * kNumFeatures) {
    throw std::invalid_argument("GradientWorker: shard has " + std::to_string(y.size()) +
                                " labels and " + std::to_string(x.size()) + " features");
  }
  return new GradientWorker(std::move(x), std::move(y), options, worker_index);
}

GradientWorker::GradientWorker(std::vector<float> x, std::vector<int32_t> y, TrainOptions options,
                               int worker_index)
    : x_(std::move(x)), y_(std::move(y)), options_(options), worker_index_(worker_index) {}

WorkerGradient GradientWorker::Compute(std::vector<float> weights, int epoch, int batch) {
  const int n = NumRows();
  if (order_epoch_ != epoch) {  // a fresh shuffle of the shard for each epoch
    order_.resize(n);
    for (int i = 0; i < n; ++i) order_[i] = i;
    std::mt19937_64 rng(static_cast<uint64_t>(options_.seed) * 1000003u +
                        static_cast<uint64_t>(worker_index_) * 7919u +
                        static_cast<uint64_t>(epoch));
    for (int i = n - 1; i > 0; --i)
      std::swap(order_[i], order_[rng() % static_cast<uint64_t>(i + 1)]);
    order_epoch_ = epoch;
  }
  const int size = std::min(options_.batch_size, n);
  std::vector<int> rows(size);
  for (int k = 0; k < size; ++k) {
    rows[k] = order_[(static_cast<int64_t>(batch) * options_.batch_size + k) % n];
  }
  LossAndGradient lg = ComputeGradient(weights, options_.hidden, x_.data(), y_.data(), rows);
  return WorkerGradient{std::move(lg.gradient), lg.loss};
}

float GradientWorker::RunEpochAsync(raio::ActorHandle<ParameterServer> ps, int epoch, int steps) {
  float loss = 0;
  for (int b = 0; b < steps; ++b) {
    std::vector<float> weights = ps.Task(&ParameterServer::GetWeights).Remote().Get();
    WorkerGradient g = Compute(std::move(weights), epoch, b);
    loss += ps.Task(&ParameterServer::ApplyGradients)
                .Remote(std::vector<WorkerGradient>{std::move(g)})
                .Get();
  }
  return steps > 0 ? loss / static_cast<float>(steps) : 0.0f;
}

int StepsPerEpoch(const std::vector<Dataset>& shards, int batch_size) {
  int max_rows = 0;
  for (const Dataset& s : shards) max_rows = std::max(max_rows, s.NumRows());
  return std::max(1, (max_rows + batch_size - 1) / batch_size);
}

std::vector<float> TrainSyncLocal(
    const std::vector<Dataset>& shards, const TrainOptions& options,
    const std::function<void(int, float, const std::vector<float>&)>& on_epoch) {
  std::unique_ptr<ParameterServer> ps(
      ParameterServer::Create(InitialWeights(options.hidden, static_cast<uint64_t>(options.seed)),
                              options.lr, options.momentum));
  std::vector<std::unique_ptr<GradientWorker>> workers;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    workers.emplace_back(
        GradientWorker::Create(shards[i].x, shards[i].y, options, static_cast<int>(i)));
  }
  const int steps = StepsPerEpoch(shards, options.batch_size);
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    float loss = 0;
    for (int b = 0; b < steps; ++b) {
      std::vector<float> weights = ps->GetWeights();
      std::vector<WorkerGradient> grads;
      for (auto& w : workers) grads.push_back(w->Compute(weights, epoch, b));
      loss += ps->ApplyGradients(std::move(grads));
    }
    if (on_epoch) on_epoch(epoch, loss / static_cast<float>(steps), ps->GetWeights());
  }
  return ps->GetWeights();
}

}  // namespace digits
