#include "raio/node/scheduler/local_resource_manager.h"

#include "absl/strings/str_cat.h"
#include "raio/scheduling/device_rules.h"

namespace raio::node {

namespace {
constexpr int64_t kOne = ResourceSet::kScale;
}

std::vector<int> Allocation::GpuIds() const {
  std::vector<int> ids;
  for (const auto& [id, share] : gpu_shares) ids.push_back(id);
  return ids;
}

LocalResourceManager::LocalResourceManager(ResourceSet total)
    : total_(std::move(total)), available_(total_) {
  gpu_free_.assign(static_cast<std::size_t>(total_.GetFixed("GPU") / kOne), kOne);
}

absl::Status LocalResourceManager::CheckFeasible(const ResourceSet& demand) const {
  if (absl::Status s = scheduling::CheckDeviceRules(demand); !s.ok()) return s;
  if (!total_.Contains(demand)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "demand ", demand.ToString(), " exceeds the node's total ", total_.ToString()));
  }
  return absl::OkStatus();
}

std::optional<Allocation> LocalResourceManager::TryAllocate(const ResourceSet& demand) {
  if (!available_.Contains(demand)) return std::nullopt;
  Allocation a;
  int64_t gpu = demand.GetFixed("GPU");
  if (gpu > 0) {
    if (gpu >= kOne) {
      int64_t need = gpu / kOne;
      for (std::size_t i = 0; i < gpu_free_.size() && need > 0; ++i) {
        if (gpu_free_[i] == kOne) {
          a.gpu_shares.emplace_back(static_cast<int>(i), kOne);
          --need;
        }
      }
      if (need > 0) return std::nullopt;  // enough in sum but fragmented
    } else {
      int best = -1;
      for (std::size_t i = 0; i < gpu_free_.size(); ++i) {
        if (gpu_free_[i] >= gpu && (best < 0 || gpu_free_[i] < gpu_free_[best])) {
          best = static_cast<int>(i);
        }
      }
      if (best < 0) return std::nullopt;
      a.gpu_shares.emplace_back(best, gpu);
    }
    for (const auto& [id, share] : a.gpu_shares) gpu_free_[id] -= share;
  }
  a.resources = demand;
  available_.Subtract(demand);
  return a;
}

void LocalResourceManager::Release(const Allocation& a) {
  ResourceSet back = a.resources;
  if (a.cpu_lent) back.SetFixed("CPU", 0);
  available_.Add(back);
  for (const auto& [id, share] : a.gpu_shares) gpu_free_[id] += share;
}

void LocalResourceManager::LendCpu(Allocation& a) {
  if (a.cpu_lent) return;
  a.cpu_lent = true;
  available_.SetFixed("CPU", available_.GetFixed("CPU") + a.resources.GetFixed("CPU"));
}

void LocalResourceManager::ReclaimCpu(Allocation& a) {
  if (!a.cpu_lent) return;
  a.cpu_lent = false;
  available_.SetFixed("CPU", available_.GetFixed("CPU") - a.resources.GetFixed("CPU"));
}

}  // namespace raio::node
