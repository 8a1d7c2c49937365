// raio::train: data-parallel training on a raio cluster, in Ray Train's words.
//
//   void TrainLoop(raio::train::TrainContext& ctx) { ... ctx.Report({{"loss", l}}, dir); }
//   RAIO_TRAIN_FUNCTION(TrainLoop);
//
//   int main(int argc, char** argv) {
//     raio::Init(argc, argv);  // workers re-run this binary
//     raio::train::Trainer trainer(TrainLoop, {.num_workers = 2},
//                                  {.name = "mlp", .storage_path = "/shared/runs"});
//     raio::train::Result result = trainer.Fit();
//     if (!result.error.ok()) ...;
//   }
//
// A Trainer gang-starts `num_workers` worker actors in one placement group (one bundle per
// worker), connects them with a c10d Gloo process group whose rendezvous goes through raio
// (no addresses or ports to set), and runs the training function in each. Checkpoints that
// rank 0 reports are persisted atomically under <storage_path>/<name>/checkpoint_<index>;
// a worker that dies makes the trainer restart the whole group from the latest checkpoint,
// up to FailureConfig::max_failures times; a run started again with the same name resumes
// from its latest checkpoint. See docs/design/train.md.
//
// The training function runs in worker processes, which are the user's own executable
// re-run by raio: it is found there by name, so it must be registered at static
// initialization with RAIO_TRAIN_FUNCTION (or RegisterTrainFunction), as RAIO_REMOTE does
// for remote functions.
//
// This header does not include libtorch; raio/train/context.h and raio/train/data_parallel.h
// hold what the training function uses. Thread-safety: the configs and Result are plain
// values; a Trainer may be used from one thread at a time; RegisterTrainFunction is meant
// for static initialization (it is not synchronised against concurrent Fit calls).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "raio/placement_group.h"

namespace raio::train {

class TrainContext;

// Reported metrics: name -> value (loss, accuracy, epoch, step, ...).
using Metrics = std::map<std::string, double>;

// A dataset handed to the workers: its rows, each an opaque string (a JSON line, a file
// path, a record), and the Trainer's datasets by name (Ray's `datasets={"train": ds}`).
// Each worker gets its shard (TrainContext::GetDatasetShard): the rows at positions rank,
// rank + world size, ... of the dataset padded by repeating its first rows to a multiple
// of the world size, so that every rank gets ceil(rows / world size) rows (PyTorch's
// DistributedSampler without shuffling, drop_last false). Shards are cut again whenever the
// world size changes (elastic training). Rows travel to each worker through the object
// store with its shard: keep them small (paths, not file contents, for large data).
using Dataset = std::vector<std::string>;
using Datasets = std::map<std::string, Dataset>;

// The per-worker training function. It may throw: the exception fails Fit() with the
// worker's rank, the exception's type and message (not retried).
using TrainFunction = void (*)(TrainContext&);

// How many workers and what each holds (Ray's ScalingConfig).
struct ScalingConfig {
  // Workers started together, world size of the process group; >= 1. With min_workers,
  // the most workers the group grows to.
  int num_workers = 1;
  // Elastic training (Ray Train's num_workers=(min, max)): the fewest workers the group runs
  // with, in [1, num_workers] [nullopt: always exactly num_workers]. Fit() starts with as
  // many workers as the cluster can hold now, trying num_workers, then one fewer each time a
  // group of that size is not created within 2 s, down to min_workers (which it waits for as
  // a fixed-size group would, see placement_timeout). After a worker is lost, the group
  // restarts (a failure, FailureConfig) with as many workers as fit then, so it continues
  // with fewer when the lost one cannot be replaced. While below num_workers, the trainer
  // keeps a one-bundle probe group pending at the head; once the cluster creates it (a
  // worker's resources are free), the trainer restarts the group at the next checkpoint
  // with as many workers as then fit (not a failure). Every start resumes from the latest
  // checkpoint; the world size and the data shards change with the size.
  std::optional<int> min_workers{};
  // What each worker's bundle reserves and its actor holds, e.g. {{"CPU", 2}}
  // [empty: {{"CPU", 1}}]. CPU in cores (the worker runs libtorch with that many threads,
  // at least 1), memory in bytes.
  std::map<std::string, double> resources_per_worker{};
  // Adds {"GPU": 1} to each worker's resources unless resources_per_worker names GPU.
  // (Debian's libtorch is CPU-only: the process group is Gloo either way.)
  bool use_gpu = false;
  // How the bundles are placed over nodes (raio/placement_group.h) [PACK].
  PlacementStrategy placement_strategy = PlacementStrategy::PACK;
  // How long Fit() waits for a feasible group to be created before it fails
  // (DeadlineExceeded) [nullopt: as long as it takes]. A group no cluster node set can
  // ever hold fails at once, whatever this is.
  std::optional<std::chrono::seconds> placement_timeout{};
};

// Which checkpoints are kept (Ray's CheckpointConfig).
struct CheckpointConfig {
  // Checkpoints kept on storage [nullopt: all]; >= 1. The latest one is always kept as
  // well, so that a run can resume from it.
  std::optional<int> num_to_keep{};
  // The reported metric that ranks checkpoints ["": the newest are the best].
  // Checkpoints whose metrics lack it rank last.
  std::string checkpoint_score_attribute{};
  // "max" (higher is better) or "min" ["max"].
  std::string checkpoint_score_order = "max";
};

// What to do when workers fail (Ray's FailureConfig).
struct FailureConfig {
  // Restarts of the worker group after a worker died (process killed, node lost), each
  // from the latest checkpoint; -1: no limit [0: the first failure fails Fit()]. Attempts
  // that keep failing within 10 s wait 1, 2, 4 ... 30 s before the next restart. The
  // driver's own loss of the cluster (its node or the head gone) is not retried.
  int max_failures = 0;
};

// Where and under which name a run stores its checkpoints (Ray's RunConfig).
struct RunConfig {
  // The run's name and directory under storage_path; a run started with the name of an
  // earlier one resumes from its latest checkpoint [""; "train_<UTC time>_<6 random hex>"].
  // Letters, digits, '-', '_' and '.' only (not "." or ".."). One live Fit per run: a
  // second one (any process) fails FailedPrecondition naming the first one's pid.
  std::string name{};
  // A directory every node can reach (on a cluster, a shared volume); created if missing;
  // must be writable [""; $HOME/raio_results, else /tmp/raio_results].
  std::string storage_path{};
  CheckpointConfig checkpoint_config{};
  FailureConfig failure_config{};
  // Called in the driver, on Fit()'s thread, with each report of rank 0 as the trainer
  // receives it (within ~0.1 s), e.g. to print progress [none]. Must not block for long:
  // the trainer watches its workers between calls. An exception it throws is caught and
  // printed to stderr; training goes on.
  std::function<void(const Metrics&)> on_report{};
};

// A persisted checkpoint: a directory on storage.
struct Checkpoint {
  // <storage_path>/<name>/checkpoint_<index, 6 digits>: the files rank 0 reported, plus
  // .metadata.json (index, epoch, step, metrics, world size, time).
  std::string path;
  // 0, 1, 2, ... in the order reported, continued across restarts and resumed runs.
  int64_t index = -1;
  // The metrics reported with it (rank 0's).
  Metrics metrics;
};

// What Fit() returns (Ray's Result).
struct Result {
  // The last metrics reported (rank 0's), empty if none.
  Metrics metrics;
  // Every report of rank 0 during this Fit(), in order (across restarts: reports made after
  // the last checkpoint of a failed attempt are here too, and their epochs run again).
  std::vector<Metrics> metrics_history;
  // The latest persisted checkpoint (of this run or, if none, of the run it resumed).
  std::optional<Checkpoint> checkpoint;
  // The best kept checkpoint by checkpoint_score_attribute (the latest without one).
  std::optional<Checkpoint> best_checkpoint;
  // The checkpoints on storage after retention, best first.
  std::vector<Checkpoint> best_checkpoints;
  // <storage_path>/<name>.
  std::string path;
  // Worker-group restarts after failures.
  int num_failures = 0;
  // The number of workers of each start of the group, in order (one entry without failures
  // or elastic resizing).
  std::vector<int> world_sizes;
  // OK when training finished on every worker. Otherwise: InvalidArgument (bad config),
  // FailedPrecondition (no cluster can meet the scaling config: the message names the
  // demand, with min_workers the minimum's; storage not writable: the message names the
  // path; the run in use by another live Fit; raio not initialized, or the function not
  // registered), DeadlineExceeded (placement_timeout), Unknown (the training function
  // threw: "worker rank R raised TYPE: MESSAGE"), Unavailable (workers died more than
  // max_failures times: the message names the last cause and the rank; or "the driver
  // lost the cluster").
  absl::Status error;
};

class Trainer {
 public:
  // `train_fn` must be registered (RAIO_TRAIN_FUNCTION); `train_loop_config` reaches every
  // worker as TrainContext::GetConfig(); `datasets` reach them sharded by rank
  // (TrainContext::GetDatasetShard). Nothing is checked or started until Fit().
  Trainer(TrainFunction train_fn, ScalingConfig scaling_config, RunConfig run_config,
          nlohmann::json train_loop_config = nlohmann::json::object(), Datasets datasets = {});

  // Runs the training: checks the configs and the storage (before any worker starts),
  // reserves the placement group, starts the workers, waits for them, and restarts the
  // group on worker deaths as FailureConfig says. Blocks until training ends or fails; never
  // throws for training errors (see Result::error). raio must be initialized.
  Result Fit();

 private:
  TrainFunction train_fn_;
  ScalingConfig scaling_;
  RunConfig run_;
  nlohmann::json train_loop_config_;
  Datasets datasets_;
};

// Registers `fn` under `name` so that worker processes find it. Returns true (for use in a
// static initializer). Registering two functions under one name, or one function under
// two names, makes every Fit() with them fail with FailedPrecondition naming both `site`s.
bool RegisterTrainFunction(const std::string& name, TrainFunction fn, const std::string& site);

}  // namespace raio::train

// Registers a training function by its name (the macro text); at namespace scope in a .cc.
#define RAIO_TRAIN_FUNCTION(fn)                                                       \
  static const bool RAIO_TRAIN_INTERNAL_CONCAT(raio_train_registered_, __COUNTER__) = \
      ::raio::train::RegisterTrainFunction(#fn, fn,                                   \
                                           std::string(__FILE__) + ":" + std::to_string(__LINE__))
#define RAIO_TRAIN_INTERNAL_CONCAT2(a, b) a##b
#define RAIO_TRAIN_INTERNAL_CONCAT(a, b) RAIO_TRAIN_INTERNAL_CONCAT2(a, b)
