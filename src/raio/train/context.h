// TrainContext: what a training function sees inside a worker (Ray Train's
// train.get_context(), train.report(), train.get_checkpoint()).
//
// The worker builds one context per run of the function and passes it by reference; it
// lives until the function returns. The process group is a c10d::ProcessGroup (Gloo),
// declared here only: include raio/train/data_parallel.h (libtorch) to use it.
// Thread-safety: the getters may be called from any thread; Report from one thread at a
// time (the training loop's).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "nlohmann/json.hpp"
#include "raio/errors.h"
#include "raio/train/trainer.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace raio::train {

class TrainContext {
 public:
  // Everything a worker knows about its place in the group (filled by the worker).
  struct Info {
    int world_rank = 0;
    int world_size = 1;
    int local_rank = 0;        // rank among the group's workers on this node
    int local_world_size = 1;  // the group's workers on this node
    int node_rank = 0;         // this node's index among the group's nodes, by lowest rank
    int attempt = 0;           // 0, then +1 per restart of the group (failure or resize)
    std::string experiment_name;
    std::string run_path;  // <storage_path>/<name>
    nlohmann::json config;
    std::optional<Checkpoint> checkpoint;
    Datasets dataset_shards;  // this rank's shard of each of the Trainer's datasets
  };
  // Persists a report (rank 0's checkpoint directory is copied to storage) or throws.
  using Reporter =
      std::function<void(const Metrics& metrics, const std::optional<std::string>& checkpoint)>;

  TrainContext(Info info, std::shared_ptr<c10d::ProcessGroup> process_group, Reporter reporter)
      : info_(std::move(info)),
        process_group_(std::move(process_group)),
        reporter_(std::move(reporter)) {}

  int GetWorldRank() const { return info_.world_rank; }
  int GetWorldSize() const { return info_.world_size; }
  int GetLocalRank() const { return info_.local_rank; }
  int GetLocalWorldSize() const { return info_.local_world_size; }
  int GetNodeRank() const { return info_.node_rank; }
  // 0 on the first start of the group, then +1 per restart (after a failure, or an elastic
  // resize: see ScalingConfig::min_workers).
  int GetAttempt() const { return info_.attempt; }
  const std::string& GetExperimentName() const { return info_.experiment_name; }
  // <storage_path>/<name>: the run's directory on shared storage.
  const std::string& GetRunPath() const { return info_.run_path; }
  // The Trainer's train_loop_config.
  const nlohmann::json& GetConfig() const { return info_.config; }

  // The group's c10d process group (Gloo, ranks as GetWorldRank, size GetWorldSize),
  // connected before the function started. Collectives on it block until every rank joins
  // them; one whose peer died throws (c10::Error), which ends the function and makes the
  // trainer restart the group.
  c10d::ProcessGroup& GetProcessGroup() const { return *process_group_; }

  // The checkpoint to resume from: the latest persisted one of this run (or of an earlier
  // run with the same name) when the worker started; nullopt on a fresh start. Read it
  // before reporting new checkpoints: retention may delete it once newer ones are kept.
  const std::optional<Checkpoint>& GetCheckpoint() const { return info_.checkpoint; }

  // This rank's shard of the Trainer's dataset `name` (see raio::train::Dataset: rows
  // rank, rank + world size, ... of the dataset padded to a multiple of the world size;
  // every rank gets as many rows, in dataset order). The context owns it; valid while the
  // context lives. Throws raio::InvalidUsageError when the Trainer has no dataset of that
  // name (the message lists the names it has).
  const Dataset& GetDatasetShard(const std::string& name) const {
    auto it = info_.dataset_shards.find(name);
    if (it != info_.dataset_shards.end()) return it->second;
    std::string names;
    for (const auto& [have, rows] : info_.dataset_shards) {
      names += (names.empty() ? "" : ", ") + ("\"" + have + "\"");
    }
    throw raio::InvalidUsageError("TrainContext::GetDatasetShard: the Trainer has no dataset \"" +
                                  name + "\" (it has: " + (names.empty() ? "none" : names) + ")");
  }

  // Reports metrics for this step or epoch, with a checkpoint directory or not (Ray's
  // train.report). Every worker should call it the same number of times; rank 0's metrics
  // are the ones recorded and rank 0's checkpoint the one persisted (others' are ignored).
  // On rank 0 with a checkpoint, blocks while `checkpoint_dir` (a directory of any files,
  // the caller's to delete afterwards) is copied to <run path>/checkpoint_<index> through a
  // temporary directory and a rename, with .metadata.json holding the index, the metrics'
  // "epoch" and "step" if present, the metrics and the world size. Throws
  // raio::InvalidUsageError when checkpoint_dir is not a directory, raio::RaioException when
  // the copy fails (the message names the paths).
  void Report(const Metrics& metrics,
              const std::optional<std::string>& checkpoint_dir = std::nullopt) {
    reporter_(metrics, checkpoint_dir);
  }

 private:
  Info info_;
  std::shared_ptr<c10d::ProcessGroup> process_group_;
  Reporter reporter_;
};

}  // namespace raio::train
