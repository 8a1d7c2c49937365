// LocalResourceManager: a node's resource accounting. Knows the node's totals, what is
// free, and which GPU instances (ids 0..n-1) each allocation holds. A GPU demand below 1
// takes a share of one device (best fit); a demand of 1 or more takes whole devices and
// must be a whole number.
//
// Resources can be added and removed at run time (AddResources / RemoveResources): a
// committed placement group bundle offers its resources again under renamed names
// (common/placement_resources.h). Renamed GPU resources (`GPU_group_<i>_<pg>`, the
// wildcard `GPU_group_<pg>`) carry the GPU instances of the bundle's own allocation, so
// that work in a GPU bundle sees exactly the bundle's devices. A demand that names a
// bundle's indexed GPU resource and its group's wildcard takes the same instances from
// both; a wildcard-only demand takes any of the group's instances on the node (and may
// then keep an indexed demand of the same bundle waiting until it is released, as in Ray).
//
// Threading: not thread-safe; lives on the node daemon's loop.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "raio/common/resources.h"

namespace raio::node {

// (gpu id, fixed-point share of that GPU), in ascending id order.
using GpuShares = std::vector<std::pair<int, int64_t>>;

struct Allocation {
  ResourceSet resources;
  // Plain "GPU": (gpu id, fixed-point share of that GPU).
  GpuShares gpu_shares;
  // Renamed GPU resources of placement group bundles: the instances taken under each name.
  std::map<std::string, GpuShares> bundle_gpu_shares;
  // CPUs lent back to the node while the worker is blocked in Get.
  bool cpu_lent = false;
  // Every GPU id the allocation holds a share of, ascending, without duplicates.
  std::vector<int> GpuIds() const;
};

// Whether `name` is counted in GPU instances: "GPU" and its renamed forms.
bool IsGpuResource(const std::string& name);

class LocalResourceManager {
 public:
  explicit LocalResourceManager(ResourceSet total);

  // OK when the node could ever run `demand` (ignoring current use); otherwise
  // ResourceExhausted/InvalidArgument naming what is missing.
  absl::Status CheckFeasible(const ResourceSet& demand) const;
  // Takes `demand` if it is free now.
  std::optional<Allocation> TryAllocate(const ResourceSet& demand);
  // Gives an allocation back. One made before its resources were removed gives back to
  // amounts that are gone: the books still balance (available returns to zero there).
  void Release(const Allocation& allocation);
  // Lends the allocation's CPUs (plain and renamed) back (the worker blocked) / takes them
  // back (it resumed; may over-commit until other tasks finish, as in Ray).
  void LendCpu(Allocation& allocation);
  void ReclaimCpu(Allocation& allocation);

  // Adds `resources` to the totals and to what is free. `gpu_instances` gives, for every
  // GPU resource of `resources` (IsGpuResource), the instances behind it; their shares
  // must sum to its amount. InvalidArgument otherwise, and nothing changes.
  absl::Status AddResources(const ResourceSet& resources,
                            const std::map<std::string, GpuShares>& gpu_instances);
  // Takes what AddResources added away again, from the totals and from what is free (the
  // holders should have been released first; see Release).
  void RemoveResources(const ResourceSet& resources,
                       const std::map<std::string, GpuShares>& gpu_instances);

  const ResourceSet& total() const { return total_; }
  const ResourceSet& available() const { return available_; }
  // The node's physical GPUs.
  int num_gpus() const { return num_gpus_; }

 private:
  // The instances taken for each GPU resource of `demand`, or nullopt when no fit is free.
  std::optional<std::map<std::string, GpuShares>> PickGpuInstances(const ResourceSet& demand) const;
  // Adds (`sign` 1) or subtracts (-1) `shares` to the free instances of `name`, and with
  // `total` to its total ones; forgets instances that are back to zero in both.
  void AdjustInstances(const std::string& name, const GpuShares& shares, int64_t sign, bool total);

  ResourceSet total_;
  ResourceSet available_;
  int num_gpus_ = 0;
  // Per GPU resource name: fixed-point share free, and in total, per GPU instance id.
  std::map<std::string, std::map<int, int64_t>> gpu_free_;
  std::map<std::string, std::map<int, int64_t>> gpu_total_;
};

}  // namespace raio::node
