// TrainWorker: the actor that runs the training function in one worker process of a
// Trainer's group. The trainer (driver) calls, in order: Create (the rank and run),
// Setup (pid, node, address; rank 0 also opens the rendezvous store, a c10d TCPStore on
// port 0), Run (joins the Gloo process group through that store and runs the function; it
// holds one of the actor's two threads until the function returns) and, meanwhile, Poll on
// the other thread (rank 0's reports, waiting up to wait_ms for one).
// Not for user code. This header does not include libtorch.
// Thread-safety: Run and Poll run concurrently (max_concurrency 2); the report queue is
// guarded by a mutex; Setup runs before Run.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "raio/raio.h"
#include "raio/train/trainer.h"

namespace raio::train::internal {

// Everything a worker is created with.
struct WorkerInit {
  std::string function_name;
  std::string config_json;  // train_loop_config, dumped
  int world_rank = 0;
  int world_size = 1;
  int attempt = 0;
  int num_threads = 1;  // libtorch intra-op threads (the bundle's CPUs)
  std::string experiment_name;
  std::string run_path;
  std::string checkpoint_path;        // "" when starting fresh
  int64_t next_checkpoint_index = 0;  // rank 0 numbers its checkpoints from here
  int64_t collective_timeout_ms = 30 * 60 * 1000;
  RAIO_SERIALIZE(function_name, config_json, world_rank, world_size, attempt, num_threads,
                 experiment_name, run_path, checkpoint_path, next_checkpoint_index,
                 collective_timeout_ms);
};

struct WorkerInfo {
  int pid = 0;
  std::string node_id;
  std::string ip;       // the node's address (RAIO_NODE_IP), where Gloo listens
  int store_port = -1;  // rank 0: the rendezvous store's port
  std::string error;    // rank 0: why the store did not open ("" if it did)
  RAIO_SERIALIZE(pid, node_id, ip, store_port, error);
};

struct RunArgs {
  std::string store_host;
  int store_port = 0;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  Datasets dataset_shards;  // this rank's shard of each dataset
  RAIO_SERIALIZE(store_host, store_port, local_rank, local_world_size, node_rank, dataset_shards);
};

// How Run ended. An exception of the training function, or of the rendezvous, is a value
// here (not a TaskError), with its time, so that the trainer can tell the first failure of
// a group from the collective errors it caused on the other ranks.
struct RunOutcome {
  bool ok = true;
  std::string error_type;  // demangled exception type
  std::string error_message;
  int64_t failed_at_us = 0;  // system clock, microseconds since the epoch
  RAIO_SERIALIZE(ok, error_type, error_message, failed_at_us);
};

// One report of rank 0, as Poll hands it to the trainer.
struct ReportRecord {
  Metrics metrics;
  std::string checkpoint_path;  // "" without a checkpoint
  int64_t checkpoint_index = -1;
  RAIO_SERIALIZE(metrics, checkpoint_path, checkpoint_index);
};

class TrainWorker {
 public:
  static TrainWorker* Create(WorkerInit init);
  ~TrainWorker();

  WorkerInfo Setup();
  RunOutcome Run(RunArgs args);
  // Reports made since the last Poll, oldest first; waits up to `wait_ms` for one.
  std::vector<ReportRecord> Poll(int wait_ms);

 private:
  struct Rendezvous;  // the TCPStore server (rank 0), libtorch types
  explicit TrainWorker(WorkerInit init);
  void Report(const Metrics& metrics, const std::optional<std::string>& checkpoint_dir);

  const WorkerInit init_;
  std::unique_ptr<Rendezvous> rendezvous_;
  int64_t next_checkpoint_index_;  // Run's thread only
  absl::Mutex mu_;
  std::deque<ReportRecord> reports_ ABSL_GUARDED_BY(mu_);
};

}  // namespace raio::train::internal
