#include "raio/node/scheduler/local_resource_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "raio/common/placement_resources.h"
#include "raio/scheduling/device_rules.h"

namespace raio::node {

namespace {
constexpr int64_t kOne = ResourceSet::kScale;

bool HasBase(const std::string& name, std::string_view base) {
  if (name == base) return true;
  std::optional<ParsedBundleResource> parsed = ParseBundleResource(name);
  return parsed && parsed->base == base;
}

bool IsCpuResource(const std::string& name) { return HasBase(name, "CPU"); }

// The CPUs (plain and renamed) of `resources`.
ResourceSet CpuPart(const ResourceSet& resources) {
  ResourceSet out;
  for (const auto& [name, amount] : resources.fixed()) {
    if (IsCpuResource(name)) out.SetFixed(name, amount);
  }
  return out;
}

// Instances for `amount` from `free`: whole devices (ascending ids) for 1 or more, else the
// one with the least room that still fits (best fit; the lowest id among equals).
std::optional<GpuShares> Pick(const std::map<int, int64_t>* free, int64_t amount) {
  if (free == nullptr) return std::nullopt;
  GpuShares out;
  if (amount >= kOne) {
    int64_t need = amount / kOne;
    for (const auto& [id, room] : *free) {
      if (need == 0) break;
      if (room >= kOne) {
        out.emplace_back(id, kOne);
        --need;
      }
    }
    if (need > 0) return std::nullopt;  // enough in sum but fragmented
    return out;
  }
  const std::pair<const int, int64_t>* best = nullptr;
  for (const auto& entry : *free) {
    if (entry.second >= amount && (best == nullptr || entry.second < best->second)) best = &entry;
  }
  if (best == nullptr) return std::nullopt;
  out.emplace_back(best->first, amount);
  return out;
}
}  // namespace

bool IsGpuResource(const std::string& name) { return HasBase(name, "GPU"); }

std::vector<int> Allocation::GpuIds() const {
  std::vector<int> ids;
  for (const auto& [id, share] : gpu_shares) ids.push_back(id);
  for (const auto& [name, shares] : bundle_gpu_shares) {
    for (const auto& [id, share] : shares) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

LocalResourceManager::LocalResourceManager(ResourceSet total)
    : total_(std::move(total)), available_(total_) {
  num_gpus_ = static_cast<int>(total_.GetFixed("GPU") / kOne);
  for (int i = 0; i < num_gpus_; ++i) {
    gpu_free_["GPU"][i] = kOne;
    gpu_total_["GPU"][i] = kOne;
  }
}

absl::Status LocalResourceManager::CheckFeasible(const ResourceSet& demand) const {
  if (absl::Status s = scheduling::CheckDeviceRules(demand); !s.ok()) return s;
  // The same rule for a bundle's GPUs: their instances are devices too.
  for (const auto& [name, amount] : demand.fixed()) {
    if (name != "GPU" && IsGpuResource(name) && amount > kOne && amount % kOne != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a GPU demand above 1 must be a whole number, got ", demand.Get(name), " ", name));
    }
  }
  if (!total_.Contains(demand)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "demand ", demand.ToString(), " exceeds the node's total ", total_.ToString()));
  }
  return absl::OkStatus();
}

std::optional<std::map<std::string, GpuShares>> LocalResourceManager::PickGpuInstances(
    const ResourceSet& demand) const {
  auto free_of = [this](const std::string& name) -> const std::map<int, int64_t>* {
    auto it = gpu_free_.find(name);
    return it == gpu_free_.end() ? nullptr : &it->second;
  };
  std::map<std::string, GpuShares> out;
  // Plain and indexed names first: a wildcard follows the bundle named beside it.
  std::vector<std::pair<std::string, ParsedBundleResource>> wildcards;
  for (const auto& [name, amount] : demand.fixed()) {
    if (amount <= 0 || !IsGpuResource(name)) continue;
    std::optional<ParsedBundleResource> parsed = ParseBundleResource(name);
    if (parsed && !parsed->index) {
      wildcards.emplace_back(name, std::move(*parsed));
      continue;
    }
    std::optional<GpuShares> shares = Pick(free_of(name), amount);
    if (!shares) return std::nullopt;
    out[name] = std::move(*shares);
  }
  for (const auto& [name, parsed] : wildcards) {
    const int64_t amount = demand.GetFixed(name);
    // The instances the demand takes from bundles of the same group.
    std::map<int, int64_t> mirror;
    int64_t mirrored = 0;
    for (const auto& [other, shares] : out) {
      std::optional<ParsedBundleResource> p = ParseBundleResource(other);
      if (!p || p->pg != parsed.pg || !p->index) continue;
      for (const auto& [id, share] : shares) {
        mirror[id] += share;
        mirrored += share;
      }
    }
    if (mirrored != amount) {
      // No bundle named (or amounts that differ): any of the group's instances.
      std::optional<GpuShares> shares = Pick(free_of(name), amount);
      if (!shares) return std::nullopt;
      out[name] = std::move(*shares);
      continue;
    }
    const std::map<int, int64_t>* free = free_of(name);
    if (free == nullptr) return std::nullopt;
    GpuShares shares;
    for (const auto& [id, share] : mirror) {
      auto it = free->find(id);
      if (it == free->end() || it->second < share) return std::nullopt;
      shares.emplace_back(id, share);
    }
    out[name] = std::move(shares);
  }
  return out;
}

std::optional<Allocation> LocalResourceManager::TryAllocate(const ResourceSet& demand) {
  if (!available_.Contains(demand)) return std::nullopt;
  std::optional<std::map<std::string, GpuShares>> picked = PickGpuInstances(demand);
  if (!picked) return std::nullopt;
  Allocation a;
  for (auto& [name, shares] : *picked) {
    AdjustInstances(name, shares, -1, /*total=*/false);
    if (name == "GPU") {
      a.gpu_shares = std::move(shares);
    } else {
      a.bundle_gpu_shares[name] = std::move(shares);
    }
  }
  a.resources = demand;
  available_.Subtract(demand);
  return a;
}

void LocalResourceManager::Release(const Allocation& a) {
  ResourceSet back = a.resources;
  if (a.cpu_lent) back.Subtract(CpuPart(a.resources));
  available_.Add(back);
  AdjustInstances("GPU", a.gpu_shares, 1, /*total=*/false);
  for (const auto& [name, shares] : a.bundle_gpu_shares) {
    AdjustInstances(name, shares, 1, /*total=*/false);
  }
}

void LocalResourceManager::LendCpu(Allocation& a) {
  if (a.cpu_lent) return;
  a.cpu_lent = true;
  available_.Add(CpuPart(a.resources));
}

void LocalResourceManager::ReclaimCpu(Allocation& a) {
  if (!a.cpu_lent) return;
  a.cpu_lent = false;
  available_.Subtract(CpuPart(a.resources));
}

absl::Status LocalResourceManager::AddResources(
    const ResourceSet& resources, const std::map<std::string, GpuShares>& gpu_instances) {
  for (const auto& [name, amount] : resources.fixed()) {
    if (!IsGpuResource(name)) continue;
    auto it = gpu_instances.find(name);
    if (it == gpu_instances.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU resource ", name, " is added without its GPU instances"));
    }
    int64_t sum = 0;
    for (const auto& [id, share] : it->second) {
      if (id < 0 || share <= 0 || share > kOne) {
        return absl::InvalidArgumentError(
            absl::StrCat("GPU resource ", name, ": bad instance ", id, " with share ", share));
      }
      sum += share;
    }
    if (sum != amount) {
      return absl::InvalidArgumentError(absl::StrCat("GPU resource ", name, " amounts to ",
                                                     resources.Get(name), " but its instances to ",
                                                     static_cast<double>(sum) / kOne));
    }
  }
  for (const auto& [name, shares] : gpu_instances) {
    if (resources.GetFixed(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU instances are given for ", name, ", which is not added"));
    }
  }
  total_.Add(resources);
  available_.Add(resources);
  for (const auto& [name, shares] : gpu_instances) AdjustInstances(name, shares, 1, true);
  return absl::OkStatus();
}

void LocalResourceManager::RemoveResources(const ResourceSet& resources,
                                           const std::map<std::string, GpuShares>& gpu_instances) {
  total_.Subtract(resources);
  available_.Subtract(resources);
  for (const auto& [name, shares] : gpu_instances) AdjustInstances(name, shares, -1, true);
}

void LocalResourceManager::AdjustInstances(const std::string& name, const GpuShares& shares,
                                           int64_t sign, bool total) {
  if (shares.empty()) return;
  std::map<int, int64_t>& free = gpu_free_[name];
  std::map<int, int64_t>& all = gpu_total_[name];
  for (const auto& [id, share] : shares) {
    free[id] += sign * share;
    if (total) all[id] += sign * share;
    if (free[id] == 0 && all[id] == 0) {
      free.erase(id);
      all.erase(id);
    }
  }
  if (free.empty() && all.empty()) {
    gpu_free_.erase(name);
    gpu_total_.erase(name);
  }
}

}  // namespace raio::node
