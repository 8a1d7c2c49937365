// The small MLP training that the Trainer's tests run (trainer_test.cc on the embedded
// cluster, multinode_trainer_test.cc on node daemons): synthetic regression data that every
// process generates alike from a fixed seed, the data-parallel training function TrainMlp
// (registered with RAIO_TRAIN_FUNCTION, so include this header in one file per binary), and
// the same training in one process to compare with.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "raio/raio.h"
#include "raio/testkit/time_scale.h"
#include "raio/train/train.h"

namespace raio_train_test {

namespace fs = std::filesystem;
using raio::testkit::Scaled;
using raio::train::Metrics;
using raio::train::TrainContext;

constexpr int kSamples = 256;
constexpr int kFeatures = 8;

struct Data {
  torch::Tensor x, y;
};

inline Data MakeData() {
  torch::manual_seed(123);
  Data d;
  d.x = torch::randn({kSamples, kFeatures});
  torch::Tensor w = torch::randn({kFeatures, 1});
  d.y = torch::tanh(d.x.matmul(w)) + 0.05 * torch::randn({kSamples, 1});
  return d;
}

struct Mlp : torch::nn::Module {
  explicit Mlp(uint64_t seed) {
    torch::manual_seed(seed);
    fc1 = register_module("fc1", torch::nn::Linear(kFeatures, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

inline double FullLoss(Mlp& model, const Data& d) {
  torch::NoGradGuard no_grad;
  return torch::mse_loss(model.forward(d.x), d.y).item<double>();
}

inline void SaveWeights(Mlp& model, const fs::path& dir) {
  fs::create_directories(dir);
  std::vector<torch::Tensor> weights;
  for (const auto& p : model.parameters()) weights.push_back(p.detach().clone());
  torch::save(weights, (dir / "model.pt").string());
}

inline std::vector<torch::Tensor> LoadWeights(const std::string& dir) {
  std::vector<torch::Tensor> weights;
  torch::load(weights, (fs::path(dir) / "model.pt").string());
  return weights;
}

// Waits for `path` to exist; false after `timeout`.
inline bool WaitForFile(const fs::path& path, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!fs::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// The training function. Config: epochs, global_batch, lr, seed; optional kill_epoch and
// kill_rank with marker_dir (that rank, at the start of that epoch of a run without a
// checkpoint marker, writes its pid to marker_dir/pid and waits to be killed), throw_epoch
// and throw_rank (that rank throws), started_marker (a file every worker creates),
// until_world_size (elastic: after `epochs`, go on, one epoch per 250 ms, until two epochs
// ran in a group of at least that size; at most 400 epochs), world_marker_dir (rank 0
// creates world_<world size> there at start). Reports epoch, loss and world_size every
// epoch, rank 0 with a checkpoint.
inline void TrainMlp(TrainContext& ctx) {
  const nlohmann::json& cfg = ctx.GetConfig();
  const int epochs = cfg.at("epochs");
  const int world = ctx.GetWorldSize(), rank = ctx.GetWorldRank();
  const int local_batch = cfg.at("global_batch").get<int>() / world;
  if (cfg.contains("started_marker")) std::ofstream(cfg["started_marker"].get<std::string>());
  if (cfg.contains("world_marker_dir") && rank == 0) {
    std::ofstream(fs::path(cfg["world_marker_dir"].get<std::string>()) /
                  ("world_" + std::to_string(world)));
  }
  Data data = MakeData();
  Mlp model(cfg.at("seed").get<uint64_t>() + rank);  // unequal until PrepareModel
  int start_epoch = 0;
  if (const auto& checkpoint = ctx.GetCheckpoint()) {
    std::vector<torch::Tensor> saved = LoadWeights(checkpoint->path);
    torch::NoGradGuard no_grad;
    auto params = model.parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(saved[i]);
    start_epoch = static_cast<int>(checkpoint->metrics.at("epoch")) + 1;
  }
  raio::train::GradientAllReducer reducer = raio::train::PrepareModel(ctx, model);
  torch::optim::SGD optimizer(model.parameters(), cfg.at("lr").get<double>());
  raio::train::DistributedSampler sampler(kSamples, world, rank, /*shuffle=*/true,
                                          cfg.at("seed").get<uint64_t>());
  const int until_world = cfg.value("until_world_size", 0);
  const int end_epoch = world >= until_world ? std::max(epochs, start_epoch + 2) : 400;
  for (int epoch = start_epoch; epoch < end_epoch; ++epoch) {
    if (epoch >= epochs) std::this_thread::sleep_for(std::chrono::milliseconds(250));  // pacing
    if (cfg.contains("kill_epoch") && epoch == cfg["kill_epoch"] && rank == cfg["kill_rank"] &&
        !fs::exists(fs::path(cfg["marker_dir"].get<std::string>()) / "killed_once")) {
      const fs::path dir = cfg["marker_dir"].get<std::string>();
      std::ofstream(dir / "killed_once");
      { std::ofstream(dir / "pid.tmp") << ::getpid(); }
      fs::rename(dir / "pid.tmp", dir / "pid");
      // The test kills this process; the other ranks wait in the next all-reduce.
      const auto wait = Scaled(std::chrono::seconds(60));
      const auto deadline = std::chrono::steady_clock::now() + wait;
      while (std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      throw std::runtime_error("not killed within " + std::to_string(wait.count()) + " s");
    }
    if (cfg.contains("throw_epoch") && epoch == cfg["throw_epoch"] && rank == cfg["throw_rank"]) {
      throw std::runtime_error("bad batch in epoch " + std::to_string(epoch));
    }
    sampler.SetEpoch(epoch);
    std::vector<int64_t> indices = sampler.Indices();
    for (size_t begin = 0; begin + local_batch <= indices.size(); begin += local_batch) {
      torch::Tensor idx = torch::tensor(
          std::vector<int64_t>(indices.begin() + begin, indices.begin() + begin + local_batch));
      optimizer.zero_grad();
      torch::mse_loss(model.forward(data.x.index_select(0, idx)), data.y.index_select(0, idx))
          .backward();
      reducer.AllReduce();
      optimizer.step();
    }
    Metrics metrics{{"epoch", epoch}, {"loss", FullLoss(model, data)}, {"world_size", world}};
    if (rank == 0) {
      const fs::path dir =
          fs::temp_directory_path() / ("raio_train_test_ckpt_" + std::to_string(::getpid()));
      SaveWeights(model, dir);
      ctx.Report(metrics, dir.string());
      fs::remove_all(dir);
    } else {
      ctx.Report(metrics);
    }
  }
}
RAIO_TRAIN_FUNCTION(TrainMlp);

// The same training in this process with one replica and the global batch.
inline std::vector<torch::Tensor> TrainInOneProcess(int epochs, int batch, double lr, uint64_t seed,
                                                    double* final_loss) {
  Data data = MakeData();
  Mlp model(seed);
  torch::optim::SGD optimizer(model.parameters(), lr);
  raio::train::DistributedSampler sampler(kSamples, 1, 0, true, seed);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    sampler.SetEpoch(epoch);
    std::vector<int64_t> indices = sampler.Indices();
    for (size_t begin = 0; begin + batch <= indices.size(); begin += batch) {
      torch::Tensor idx = torch::tensor(
          std::vector<int64_t>(indices.begin() + begin, indices.begin() + begin + batch));
      optimizer.zero_grad();
      torch::mse_loss(model.forward(data.x.index_select(0, idx)), data.y.index_select(0, idx))
          .backward();
      optimizer.step();
    }
  }
  *final_loss = FullLoss(model, data);
  std::vector<torch::Tensor> weights;
  for (const auto& p : model.parameters()) weights.push_back(p.detach().clone());
  return weights;
}

inline nlohmann::json Config(int epochs) {
  return {{"epochs", epochs}, {"global_batch", 32}, {"lr", 0.1}, {"seed", 5}};
}

}  // namespace raio_train_test
