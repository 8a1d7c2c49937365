// Checkpoints on storage: a run's directory <storage_path>/<name> holds
// checkpoint_<index> directories, each with the files rank 0 reported and .metadata.json.
// PersistCheckpoint (a worker) writes one atomically: a temporary directory in the run's
// directory, then one rename(2), so a reader sees a whole checkpoint or none, also when the
// writer dies midway. CheckpointManager (the trainer) finds them, keeps the newest or best
// K (and always the latest) and deletes the rest.
// Thread-safety: the free functions are thread-safe; a CheckpointManager is used from one
// thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/train/trainer.h"

namespace raio::train::internal {

inline constexpr char kMetadataFileName[] = ".metadata.json";
inline constexpr char kTempPrefix[] = ".tmp_checkpoint_";

// "checkpoint_000042" for 42.
std::string CheckpointDirName(int64_t index);

// Creates `run_path` (and its parents) if missing and checks that a file can be created and
// removed in it. FailedPrecondition naming the path and the system's reason otherwise.
// Blocks on the filesystem.
absl::Status PrepareRunDirectory(const std::string& run_path);

// Copies the directory `source_dir` to <run_path>/checkpoint_<index> atomically (see the file
// comment) with metadata {index, epoch, step (from metrics, if there), metrics, world_size,
// time_unix_s}. InvalidArgument when source_dir is not a directory; AlreadyExists when that
// index is taken; Internal naming the paths when a copy, write or rename fails (the
// temporary directory is removed). Blocks on the filesystem.
absl::StatusOr<Checkpoint> PersistCheckpoint(const std::string& run_path, int64_t index,
                                             const std::string& source_dir, const Metrics& metrics,
                                             int world_size);

// Reads <dir>/.metadata.json. NotFound / DataLoss (unparsable) otherwise.
absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& dir);

// Checks a CheckpointConfig: num_to_keep >= 1 when set, order "max" or "min".
absl::Status ValidateCheckpointConfig(const CheckpointConfig& config);

class CheckpointManager {
 public:
  // Prepares the run directory (PrepareRunDirectory), locks it for this manager's life
  // (flock(2) on <run>/.run.lock, which holds the locker's pid: one live Fit per run),
  // removes temporary directories left by writers that died, and scans (Rescan). Errors of
  // those; FailedPrecondition naming the holder's pid when another manager (another Fit,
  // in this or another process) holds the run; InvalidArgument for a bad config.
  static absl::StatusOr<CheckpointManager> Create(std::string run_path, CheckpointConfig config);

  // Reads every checkpoint_<index> directory with valid metadata (others are left alone,
  // but their indexes are never given out again),
  // then deletes those retention drops: all but the best num_to_keep by the score
  // attribute (the newest without one) and the latest. Returns the checkpoints it had not
  // seen before, oldest first. Internal when the directory cannot be listed; a failed
  // delete is logged and retried at the next scan.
  absl::StatusOr<std::vector<Checkpoint>> Rescan();

  const std::string& run_path() const { return run_path_; }
  // The newest checkpoint (highest index), if any.
  std::optional<Checkpoint> latest() const;
  // The best kept checkpoint, if any.
  std::optional<Checkpoint> best() const;
  // The kept checkpoints, best first.
  const std::vector<Checkpoint>& kept() const { return kept_; }
  // The index the next checkpoint gets: one above the highest ever seen.
  int64_t next_index() const { return next_index_; }

 private:
  CheckpointManager(std::string run_path, CheckpointConfig config)
      : run_path_(std::move(run_path)), config_(std::move(config)) {}
  // Whether `a` ranks above `b`.
  bool Better(const Checkpoint& a, const Checkpoint& b) const;

  std::string run_path_;
  CheckpointConfig config_;
  std::shared_ptr<int> lock_fd_;  // the run's lock, released when the last copy goes
  std::vector<Checkpoint> kept_;  // best first
  int64_t next_index_ = 0;
};

}  // namespace raio::train::internal
