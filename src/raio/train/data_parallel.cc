#include "raio/train/data_parallel.h"

#include <ATen/CPUGeneratorImpl.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace raio::train {
namespace {

// Groups tensors into buckets of one dtype and at most `cap` bytes each, in order.
std::vector<std::vector<torch::Tensor>> MakeBuckets(const std::vector<torch::Tensor>& tensors,
                                                    int64_t cap) {
  std::vector<std::vector<torch::Tensor>> buckets;
  std::vector<int64_t> bytes;
  std::vector<int> open_by_dtype(static_cast<int>(c10::ScalarType::NumOptions), -1);
  for (const torch::Tensor& t : tensors) {
    const int dtype = static_cast<int>(t.scalar_type());
    const int64_t size = t.numel() * static_cast<int64_t>(t.element_size());
    int& open = open_by_dtype[dtype];
    if (open < 0 || bytes[open] + size > cap) {
      buckets.emplace_back();
      bytes.push_back(0);
      open = static_cast<int>(buckets.size()) - 1;
    }
    buckets[open].push_back(t);
    bytes[open] += size;
  }
  return buckets;
}

torch::Tensor Flatten(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> views;
  views.reserve(tensors.size());
  for (const torch::Tensor& t : tensors) views.push_back(t.reshape({-1}));
  return torch::cat(views);
}

// Copies the consecutive slices of `flat` back into `tensors`.
void Unflatten(const torch::Tensor& flat, const std::vector<torch::Tensor>& tensors) {
  int64_t offset = 0;
  for (const torch::Tensor& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

void BroadcastTensors(c10d::ProcessGroup& group, const std::vector<torch::Tensor>& tensors,
                      int root, int64_t bucket_cap_bytes) {
  if (group.getSize() == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<std::vector<torch::Tensor>> buckets = MakeBuckets(tensors, bucket_cap_bytes);
  std::vector<torch::Tensor> flats;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  c10d::BroadcastOptions options;
  options.rootRank = root;
  for (const auto& bucket : buckets) {
    flats.push_back(Flatten(bucket));
    std::vector<torch::Tensor> one{flats.back()};
    works.push_back(group.broadcast(one, options));
  }
  for (size_t i = 0; i < buckets.size(); ++i) {
    works[i]->wait();
    Unflatten(flats[i], buckets[i]);
  }
}

GradientAllReducer::GradientAllReducer(c10d::ProcessGroup& group,
                                       std::vector<torch::Tensor> parameters,
                                       int64_t bucket_cap_bytes)
    : group_(group), world_size_(group.getSize()) {
  std::vector<torch::Tensor> trainable;
  for (torch::Tensor& p : parameters) {
    if (p.requires_grad()) trainable.push_back(std::move(p));
  }
  for (auto& members : MakeBuckets(trainable, bucket_cap_bytes)) {
    int64_t numel = 0;
    for (const torch::Tensor& p : members) numel += p.numel();
    Bucket bucket;
    bucket.flat = torch::empty({numel}, members.front().options().requires_grad(false));
    bucket.parameters = std::move(members);
    buckets_.push_back(std::move(bucket));
  }
}

int64_t GradientAllReducer::bytes_per_call() const {
  int64_t bytes = 0;
  for (const Bucket& b : buckets_) bytes += b.flat.numel() * b.flat.element_size();
  return bytes;
}

void GradientAllReducer::AllReduce() {
  if (world_size_ == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.reserve(buckets_.size());
  for (Bucket& bucket : buckets_) {
    int64_t offset = 0;
    for (torch::Tensor& p : bucket.parameters) {
      torch::Tensor slice = bucket.flat.narrow(0, offset, p.numel());
      if (p.grad().defined()) {
        slice.copy_(p.grad().reshape({-1}));
      } else {
        slice.zero_();
      }
      offset += p.numel();
    }
    std::vector<torch::Tensor> one{bucket.flat};
    works.push_back(group_.allreduce(one));  // SUM
  }
  const double scale = 1.0 / world_size_;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    works[i]->wait();
    Bucket& bucket = buckets_[i];
    bucket.flat.mul_(scale);
    int64_t offset = 0;
    for (torch::Tensor& p : bucket.parameters) {
      torch::Tensor slice = bucket.flat.narrow(0, offset, p.numel()).view(p.sizes());
      if (p.grad().defined()) {
        p.mutable_grad().copy_(slice);
      } else {
        p.mutable_grad() = slice.clone();
      }
      offset += p.numel();
    }
  }
}

GradientAllReducer PrepareModel(TrainContext& ctx, torch::nn::Module& module,
                                int64_t bucket_cap_bytes) {
  std::vector<torch::Tensor> state = module.parameters();
  for (const torch::Tensor& b : module.buffers()) state.push_back(b);
  BroadcastTensors(ctx.GetProcessGroup(), state, /*root=*/0, bucket_cap_bytes);
  return GradientAllReducer(ctx.GetProcessGroup(), module.parameters(), bucket_cap_bytes);
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (dataset_size < 0 || num_replicas < 1 || rank < 0 || rank >= num_replicas) {
    throw std::invalid_argument(
        "DistributedSampler: need dataset_size >= 0, num_replicas >= 1 "
        "and 0 <= rank < num_replicas; got dataset_size " +
        std::to_string(dataset_size) + ", num_replicas " + std::to_string(num_replicas) +
        ", rank " + std::to_string(rank));
  }
  // PyTorch's rule: drop_last keeps floor(n / r) per rank, else ceil(n / r).
  num_samples_ = drop_last_ ? dataset_size_ / num_replicas_
                            : (dataset_size_ + num_replicas_ - 1) / num_replicas_;
}

std::vector<int64_t> DistributedSampler::Indices() const {
  std::vector<int64_t> order(static_cast<size_t>(dataset_size_));
  if (shuffle_ && dataset_size_ > 0) {
    at::Generator generator = at::detail::createCPUGenerator(seed_ + epoch_);
    torch::Tensor perm = torch::randperm(dataset_size_, generator, torch::kLong);
    const int64_t* data = perm.data_ptr<int64_t>();
    order.assign(data, data + dataset_size_);
  } else {
    for (int64_t i = 0; i < dataset_size_; ++i) order[i] = i;
  }
  const int64_t total = num_samples_ * num_replicas_;
  if (static_cast<int64_t>(order.size()) > total) {
    order.resize(total);
  } else {
    for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) {
      order.push_back(order[i % dataset_size_]);
    }
  }
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (int64_t i = rank_; i < total; i += num_replicas_) mine.push_back(order[i]);
  return mine;
}

}  // namespace raio::train
