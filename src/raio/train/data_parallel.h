// Data parallelism on a c10d process group, for libtorch 1.13's C++ frontend, which has no
// DistributedDataParallel: PrepareModel broadcasts rank 0's parameters and buffers;
// GradientAllReducer averages gradients over the ranks after backward, in buckets (PyTorch
// DDP's scheme, Li et al., VLDB'20, without the overlap with backward); DistributedSampler
// shards sample indices by rank and reshuffles them per epoch (PyTorch's
// torch.utils.data.DistributedSampler, same padding and drop_last rules).
//
//   raio::train::GradientAllReducer reducer = raio::train::PrepareModel(ctx, *model);
//   raio::train::DistributedSampler sampler(n, ctx.GetWorldSize(), ctx.GetWorldRank());
//   for (epoch...) { sampler.SetEpoch(epoch); for (batch of sampler.Indices()) {
//     optimizer.zero_grad(); loss.backward(); reducer.AllReduce(); optimizer.step(); } }
//
// This header includes libtorch. Thread-safety: DistributedSampler is a plain value; a
// GradientAllReducer is used by one thread at a time, and every rank must call its
// collectives in the same order (they block until all ranks join).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "raio/train/context.h"

namespace raio::train {

// PyTorch DDP's default bucket_cap_mb (25 MiB).
inline constexpr int64_t kDefaultBucketCapBytes = int64_t{25} << 20;

// Copies rank `root`'s values of `tensors` (dense, contiguous or not) into every rank's,
// flattened into buckets of at most `bucket_cap_bytes` per dtype (a larger tensor goes
// alone). Blocks until done; throws c10::Error when a peer fails. Every rank passes tensors
// of the same shapes and dtypes in the same order. With one rank it does nothing.
void BroadcastTensors(c10d::ProcessGroup& group, const std::vector<torch::Tensor>& tensors,
                      int root = 0, int64_t bucket_cap_bytes = kDefaultBucketCapBytes);

// Averages gradients over the ranks of a process group.
class GradientAllReducer {
 public:
  // `parameters`: those whose .grad() to average (the ones with requires_grad; others are
  // skipped), in the same order on every rank. Buckets hold up to `bucket_cap_bytes` of one
  // dtype each, in parameter order; their flat buffers are allocated once, here.
  GradientAllReducer(c10d::ProcessGroup& group, std::vector<torch::Tensor> parameters,
                     int64_t bucket_cap_bytes = kDefaultBucketCapBytes);

  // After backward: every parameter's gradient becomes the mean over the ranks of the
  // ranks' gradients (an undefined gradient counts as zeros and becomes defined). All
  // buckets' all-reduces (SUM, on Gloo's ring or halving-doubling) are started at once,
  // then awaited. Blocks; throws c10::Error when a peer fails. Nothing to do with one rank.
  void AllReduce();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Bytes all-reduced per call (sum of the buckets' sizes).
  int64_t bytes_per_call() const;

 private:
  struct Bucket {
    std::vector<torch::Tensor> parameters;
    torch::Tensor flat;  // [sum of numel], the bucket's dtype
  };
  c10d::ProcessGroup& group_;
  int world_size_;
  std::vector<Bucket> buckets_;
};

// Ray's prepare_model: broadcasts rank 0's parameters and buffers of `module` to every rank
// (so that all start equal), then returns a reducer for its trainable parameters.
GradientAllReducer PrepareModel(TrainContext& ctx, torch::nn::Module& module,
                                int64_t bucket_cap_bytes = kDefaultBucketCapBytes);

// Which sample indices this rank reads in an epoch.
class DistributedSampler {
 public:
  // `dataset_size` samples (>= 0), split over `num_replicas` (>= 1) ranks; this is `rank`
  // (in [0, num_replicas)). Throws std::invalid_argument otherwise.
  // shuffle: a permutation of the dataset seeded with seed + epoch (torch::randperm on a
  // CPU generator), else 0..n-1. drop_last: the tail that does not divide evenly is dropped;
  // else the list is padded by repeating its head, so that every rank gets as many samples.
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  // The epoch, so that each epoch gets another order (call before Indices each epoch).
  void SetEpoch(int64_t epoch) { epoch_ = epoch; }

  // This rank's indices for the epoch: positions rank, rank + num_replicas, ... of the
  // epoch's (padded or cut) order; size() of them. Deterministic for (seed, epoch).
  std::vector<int64_t> Indices() const;

  // Samples per rank per epoch.
  int64_t size() const { return num_samples_; }

 private:
  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

}  // namespace raio::train
