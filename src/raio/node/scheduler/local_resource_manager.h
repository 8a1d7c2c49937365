// LocalResourceManager: a node's resource accounting. Knows the node's totals, what is
// free, and which GPU instances (ids 0..n-1) each allocation holds. A GPU demand below 1
// takes a share of one device (best fit); a demand of 1 or more takes whole devices and
// must be a whole number.
// Threading: not thread-safe; lives on the node daemon's loop.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "raio/common/resources.h"

namespace raio::node {

struct Allocation {
  ResourceSet resources;
  // (gpu id, fixed-point share of that GPU).
  std::vector<std::pair<int, int64_t>> gpu_shares;
  // CPUs lent back to the node while the worker is blocked in Get.
  bool cpu_lent = false;
  std::vector<int> GpuIds() const;
};

class LocalResourceManager {
 public:
  explicit LocalResourceManager(ResourceSet total);

  // OK when the node could ever run `demand` (ignoring current use); otherwise
  // ResourceExhausted/InvalidArgument naming what is missing.
  absl::Status CheckFeasible(const ResourceSet& demand) const;
  // Takes `demand` if it is free now.
  std::optional<Allocation> TryAllocate(const ResourceSet& demand);
  void Release(const Allocation& allocation);
  // Lends the allocation's CPUs back (the worker blocked) / takes them back (it resumed;
  // may over-commit until other tasks finish, as in Ray).
  void LendCpu(Allocation& allocation);
  void ReclaimCpu(Allocation& allocation);

  const ResourceSet& total() const { return total_; }
  const ResourceSet& available() const { return available_; }
  int num_gpus() const { return static_cast<int>(gpu_free_.size()); }

 private:
  ResourceSet total_;
  ResourceSet available_;
  std::vector<int64_t> gpu_free_;  // fixed-point share free per GPU instance
};

}  // namespace raio::node
