// Distributed training and hyperparameter search on the UCI digits data set.
//
//   1. loads digits.csv.gz and splits it 60/20/20 (train / validation / test);
//   2. puts the training shards in the object store once;
//   3. searches learning rate x hidden size: each trial is a remote task that trains the
//      MLP with the synchronous scheme in its own process; trials run in parallel and are
//      reported as they finish (raio::Wait);
//   4. trains the best configuration with a parameter-server actor and N worker actors,
//      synchronously or asynchronously (--mode), and reports test accuracy.
//
// --check-equivalence instead trains synchronously on the cluster and in this process and
// exits non-zero unless the weights agree.
#include <raio/raio.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "dataset.h"
#include "mlp.h"
#include "training.h"

namespace digits {

// The result of one hyperparameter trial.
struct TrialResult {
  int trial = 0;
  int hidden = 0;
  float lr = 0;
  double validation_accuracy = 0;
  float final_loss = 0;
  double seconds = 0;
  RAIO_SERIALIZE(trial, hidden, lr, validation_accuracy, final_loss, seconds);
};

// A remote task: trains `options` synchronously over the shards in this worker process
// and scores the result on the validation set.
TrialResult RunTrial(int trial, TrainOptions options, std::vector<std::vector<float>> shard_x,
                     std::vector<std::vector<int32_t>> shard_y, std::vector<float> val_x,
                     std::vector<int32_t> val_y) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Dataset> shards(shard_x.size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    shards[i].x = std::move(shard_x[i]);
    shards[i].y = std::move(shard_y[i]);
  }
  float loss = 0;
  std::vector<float> w =
      TrainSyncLocal(shards, options, [&](int, float l, const std::vector<float>&) { loss = l; });
  TrialResult r;
  r.trial = trial;
  r.hidden = options.hidden;
  r.lr = options.lr;
  r.validation_accuracy =
      Accuracy(w, options.hidden, val_x.data(), val_y.data(), static_cast<int>(val_y.size()));
  r.final_loss = loss;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace digits

RAIO_REMOTE(digits::RunTrial, digits::ParameterServer::Create, &digits::ParameterServer::GetWeights,
            &digits::ParameterServer::ApplyGradients, digits::GradientWorker::Create,
            &digits::GradientWorker::Compute, &digits::GradientWorker::RunEpochAsync);

namespace {

using digits::Dataset;
using digits::GradientWorker;
using digits::ParameterServer;
using digits::TrainOptions;
using digits::WorkerGradient;

struct Flags {
  std::string data = digits::kDefaultDataPath;
  std::string mode = "sync";
  int workers = 2;
  int epochs = 20;
  int trials = 8;
  int64_t seed = 42;
  int subset = 0;
  int batch_size = 16;
  float lr = 0.1f;
  int hidden = 64;
  bool check_equivalence = false;
  bool quiet = false;
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// The training shards, each in the object store once.
struct ShardRefs {
  std::vector<raio::ObjectRef<std::vector<float>>> x;
  std::vector<raio::ObjectRef<std::vector<int32_t>>> y;
};

ShardRefs PutShards(const std::vector<Dataset>& shards) {
  ShardRefs refs;
  for (const Dataset& s : shards) {
    refs.x.push_back(raio::Put(s.x));
    refs.y.push_back(raio::Put(s.y));
  }
  return refs;
}

// Trains `options` on the cluster: a parameter-server actor and one worker actor per
// shard. Sync: each step every worker computes a gradient on the same weights and the
// server averages them. Async: each worker pulls weights and pushes its gradient on its
// own; the server's learning rate is divided by the number of workers since it applies
// every gradient alone. `on_epoch(epoch, loss, weights)` runs after each epoch.
std::vector<float> TrainDistributed(
    const ShardRefs& shards, int steps_per_epoch, const TrainOptions& options, bool async,
    const std::function<void(int, float, const std::vector<float>&)>& on_epoch) {
  const int num_workers = static_cast<int>(shards.x.size());
  const float lr = async ? options.lr / static_cast<float>(num_workers) : options.lr;
  auto ps = raio::Actor(ParameterServer::Create)
                .Remote(digits::InitialWeights(options.hidden, static_cast<uint64_t>(options.seed)),
                        lr, options.momentum);
  std::vector<raio::ActorHandle<GradientWorker>> workers;
  for (int i = 0; i < num_workers; ++i) {
    workers.push_back(
        raio::Actor(GradientWorker::Create).Remote(shards.x[i], shards.y[i], options, i));
  }
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    float loss = 0;
    if (!async) {
      // Calls from the driver to the server run in order, so the steps pipeline: the
      // next GetWeights runs after this step's ApplyGradients without a round trip here.
      std::vector<raio::ObjectRef<float>> losses;
      for (int b = 0; b < steps_per_epoch; ++b) {
        auto weights = ps.Task(&ParameterServer::GetWeights).Remote();
        std::vector<raio::ObjectRef<WorkerGradient>> grads;
        for (auto& w : workers)
          grads.push_back(w.Task(&GradientWorker::Compute).Remote(weights, epoch, b));
        losses.push_back(ps.Task(&ParameterServer::ApplyGradients).Remote(grads));
      }
      for (float l : raio::Get(losses)) loss += l / static_cast<float>(steps_per_epoch);
    } else {
      std::vector<raio::ObjectRef<float>> losses;
      for (auto& w : workers) {
        losses.push_back(w.Task(&GradientWorker::RunEpochAsync).Remote(ps, epoch, steps_per_epoch));
      }
      for (float l : raio::Get(losses)) loss += l / static_cast<float>(num_workers);
    }
    if (on_epoch) on_epoch(epoch, loss, ps.Task(&ParameterServer::GetWeights).Remote().Get());
  }
  std::vector<float> weights = ps.Task(&ParameterServer::GetWeights).Remote().Get();
  for (auto& w : workers) w.Kill();
  ps.Kill();
  return weights;
}

// The search grid: learning rate x hidden size, the first eight being 4 x 2.
std::vector<std::pair<float, int>> SearchGrid(int trials) {
  std::vector<std::pair<float, int>> grid;
  for (int hidden : {32, 64, 16, 128}) {
    for (float lr : {0.02f, 0.05f, 0.1f, 0.2f, 0.01f, 0.4f}) grid.emplace_back(lr, hidden);
  }
  std::stable_partition(grid.begin(), grid.end(), [](const auto& c) {
    return (c.second == 32 || c.second == 64) && c.first >= 0.02f && c.first <= 0.2f;
  });
  grid.resize(std::min<std::size_t>(grid.size(), static_cast<std::size_t>(trials)));
  return grid;
}

int CheckEquivalence(const ShardRefs& refs, const std::vector<Dataset>& shards,
                     const TrainOptions& options) {
  const int steps = digits::StepsPerEpoch(shards, options.batch_size);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> distributed = TrainDistributed(refs, steps, options, /*async=*/false, {});
  double t_dist = Seconds(t0);
  t0 = std::chrono::steady_clock::now();
  std::vector<float> local = digits::TrainSyncLocal(shards, options);
  double t_local = Seconds(t0);
  if (distributed.size() != local.size()) {
    std::cerr << "equivalence: FAILED: " << distributed.size() << " vs " << local.size()
              << " weights\n";
    return 1;
  }
  double max_diff = 0;
  for (std::size_t i = 0; i < local.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(distributed[i] - local[i])));
  }
  bool ok = max_diff <= 1e-4;
  std::printf(
      "equivalence: %zu weights, %d workers x %d epochs x %d steps: max |distributed - "
      "single-process| = %.3g (%s; %.2f s distributed, %.2f s single-process)\n",
      local.size(), static_cast<int>(shards.size()), options.epochs, steps, max_diff,
      ok ? "OK" : "FAILED, tolerance 1e-4", t_dist, t_local);
  return ok ? 0 : 1;
}

int Run(const Flags& flags) {
  auto t0 = std::chrono::steady_clock::now();
  Dataset data;
  try {
    data = digits::LoadDigitsCsv(flags.data, flags.subset);
  } catch (const std::exception& e) {
    std::cerr << "digits: error: " << e.what() << "\n";
    return 2;
  }
  digits::Split split = digits::SplitDataset(data, static_cast<uint64_t>(flags.seed));
  if (split.train.NumRows() < flags.workers || split.validation.NumRows() == 0) {
    std::cerr << "digits: error: " << data.NumRows() << " rows give " << split.train.NumRows()
              << " training and " << split.validation.NumRows()
              << " validation rows; need at least --workers (" << flags.workers
              << ") training rows and one validation row (raise --subset or lower --workers)\n";
    return 2;
  }
  std::vector<Dataset> shards = digits::Shard(split.train, flags.workers);
  ShardRefs refs = PutShards(shards);
  auto val_x = raio::Put(split.validation.x);
  auto val_y = raio::Put(split.validation.y);
  std::printf(
      "data: %d rows from %s: %d train in %d shards (each Put once), %d validation, "
      "%d test\n",
      data.NumRows(), flags.data.c_str(), split.train.NumRows(), flags.workers,
      split.validation.NumRows(), split.test.NumRows());

  TrainOptions options;
  options.hidden = flags.hidden;
  options.lr = flags.lr;
  options.batch_size = flags.batch_size;
  options.epochs = flags.epochs;
  options.seed = flags.seed;
  if (flags.check_equivalence) return CheckEquivalence(refs, shards, options);

  // Hyperparameter search: one remote task per trial, reported as each finishes.
  if (flags.trials > 0) {
    auto grid = SearchGrid(flags.trials);
    std::printf("search: %zu trials (learning rate x hidden units), %d epochs each, in parallel\n",
                grid.size(), flags.epochs);
    std::vector<raio::ObjectRef<digits::TrialResult>> pending;
    for (std::size_t i = 0; i < grid.size(); ++i) {
      TrainOptions o = options;
      o.lr = grid[i].first;
      o.hidden = grid[i].second;
      pending.push_back(raio::Task(digits::RunTrial)
                            .SetName("trial-" + std::to_string(i))
                            .Remote(static_cast<int>(i), o, refs.x, refs.y, val_x, val_y));
    }
    std::vector<digits::TrialResult> results;
    while (!pending.empty()) {
      auto [ready, rest] = raio::Wait(pending, 1);
      for (const auto& ref : ready) {
        digits::TrialResult r = ref.Get();
        std::printf(
            "  trial %d: lr %-5g hidden %-3d -> validation accuracy %.4f (loss %.4f, "
            "%.2f s)\n",
            r.trial, r.lr, r.hidden, r.validation_accuracy, r.final_loss, r.seconds);
        std::fflush(stdout);
        results.push_back(r);
      }
      pending = std::move(rest);
    }
    auto best = *std::max_element(results.begin(), results.end(), [](const auto& a, const auto& b) {
      if (a.validation_accuracy != b.validation_accuracy) {
        return a.validation_accuracy < b.validation_accuracy;
      }
      return a.trial > b.trial;  // ties: the earlier trial wins
    });
    options.lr = best.lr;
    options.hidden = best.hidden;
    std::printf("best configuration: lr %g, hidden %d (trial %d, validation accuracy %.4f)\n",
                best.lr, best.hidden, best.trial, best.validation_accuracy);
  }

  // Final training on the cluster with the parameter server.
  const bool async = flags.mode == "async";
  const int steps = digits::StepsPerEpoch(shards, options.batch_size);
  std::printf(
      "training: %s, parameter server + %d workers, lr %g, hidden %d, %d epochs x %d "
      "steps\n",
      async ? "asynchronous" : "synchronous", flags.workers, options.lr, options.hidden,
      options.epochs, steps);
  auto t_train = std::chrono::steady_clock::now();
  std::vector<float> weights = TrainDistributed(
      refs, steps, options, async, [&](int epoch, float loss, const std::vector<float>& w) {
        if (flags.quiet && epoch + 1 != options.epochs) return;
        double val = digits::Accuracy(w, options.hidden, split.validation.x.data(),
                                      split.validation.y.data(), split.validation.NumRows());
        std::printf("  epoch %2d: loss %.4f, validation accuracy %.4f\n", epoch + 1, loss, val);
        std::fflush(stdout);
      });
  double train_s = Seconds(t_train);
  double test = digits::Accuracy(weights, options.hidden, split.test.x.data(), split.test.y.data(),
                                 split.test.NumRows());
  std::printf("test accuracy: %.4f (%d rows)\n", test, split.test.NumRows());
  std::printf("wall time: %.2f s (training %.2f s)\n", Seconds(t0), train_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  raio::Init(argc, argv);  // workers re-run this binary and never get past this line
  CLI::App app{"raio example: distributed MLP training and hyperparameter search on UCI digits"};
  Flags flags;
  app.add_option("--data", flags.data, "digits CSV, gzip-compressed if it ends in .gz");
  app.add_option("--mode", flags.mode, "parameter-server scheme")
      ->check(CLI::IsMember({"sync", "async"}));
  app.add_option("--workers", flags.workers, "gradient workers (and training shards)")
      ->check(CLI::Range(1, 64));
  app.add_option("--epochs", flags.epochs, "epochs, for each trial and the final run")
      ->check(CLI::Range(1, 1000));
  app.add_option("--trials", flags.trials, "hyperparameter trials (0: use --lr and --hidden)")
      ->check(CLI::Range(0, 24));
  app.add_option("--seed", flags.seed, "seed of the split, initialization and shuffles");
  app.add_option("--subset", flags.subset, "use only the first N rows (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", flags.batch_size, "rows per worker per step")
      ->check(CLI::Range(1, 4096));
  app.add_option("--lr", flags.lr, "learning rate when --trials 0")->check(CLI::PositiveNumber);
  app.add_option("--hidden", flags.hidden, "hidden units when --trials 0")
      ->check(CLI::Range(1, 4096));
  app.add_flag("--check-equivalence", flags.check_equivalence,
               "train synchronously on the cluster and in this process; exit 1 unless the "
               "weights agree within 1e-4");
  app.add_flag("--quiet", flags.quiet, "print only the last epoch");
  int rc = 0;
  try {
    app.parse(argc, argv);
    rc = Run(flags);
  } catch (const CLI::ParseError& e) {
    rc = app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "digits: error: " << e.what() << "\n";
    rc = 1;
  }
  raio::Shutdown();
  return rc;
}
