#include "raio/node/scheduler/placement_group_resource_manager.h"

#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "raio/common/placement_resources.h"
#include "raio/scheduling/device_rules.h"

namespace raio::node {

std::string RemovedGroupMessage(const PlacementGroupId& pg) {
  return absl::StrCat("placement group ", pg.Hex(), " was removed");
}

absl::StatusOr<PlacementGroupResourceManager::Request> PlacementGroupResourceManager::Parse(
    const proto::BundlesRequest& request, bool need_resources) {
  Request out;
  if (request.placement_group_id().size() != PlacementGroupId::kSize) {
    return absl::InvalidArgumentError(absl::StrCat("the placement group id has ",
                                                   request.placement_group_id().size(),
                                                   " bytes, not ", PlacementGroupId::kSize));
  }
  out.pg = PlacementGroupId::FromBinary(request.placement_group_id());
  if (out.pg.IsNil()) return absl::InvalidArgumentError("the placement group id is nil");
  std::set<int> seen;
  for (const proto::Bundle& b : request.bundles()) {
    if (b.index() > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
      return absl::InvalidArgumentError(absl::StrCat("bundle index ", b.index(), " is too large"));
    }
    const int index = static_cast<int>(b.index());
    const std::string which = absl::StrCat("bundle ", index, " of placement group ", out.pg.Hex());
    if (!seen.insert(index).second) {
      return absl::InvalidArgumentError(absl::StrCat(which, " is named twice"));
    }
    ResourceSet resources;
    if (need_resources) {
      absl::StatusOr<ResourceSet> r = ResourceSet::FromProto(b.resources());
      if (!r.ok())
        return absl::InvalidArgumentError(absl::StrCat(which, ": ", r.status().message()));
      if (r->empty()) return absl::InvalidArgumentError(absl::StrCat(which, " demands nothing"));
      for (const auto& [name, amount] : r->fixed()) {
        if (ParseBundleResource(name)) {
          return absl::InvalidArgumentError(
              absl::StrCat(which, " demands ", name, ", a placement group's resource"));
        }
      }
      if (absl::Status s = scheduling::CheckDeviceRules(*r); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(which, ": ", s.message()));
      }
      resources = std::move(*r);
    }
    out.bundles.emplace_back(index, std::move(resources));
  }
  return out;
}

PlacementGroupResourceManager::PlacementGroupResourceManager(LocalResourceManager& resources,
                                                             std::string node_id)
    : resources_(resources), node_id_(std::move(node_id)) {}

absl::Status PlacementGroupResourceManager::Prepare(const Request& request) {
  std::vector<Key> taken;
  for (const auto& [index, raw] : request.bundles) {
    Key key{request.pg, index};
    if (bundles_.count(key)) continue;  // prepared before: the head asks again
    std::optional<Allocation> allocation = resources_.TryAllocate(raw);
    if (!allocation) {
      // All or none: what this request took goes back before the node says what is free.
      for (const Key& k : taken) {
        resources_.Release(bundles_[k].allocation);
        bundles_.erase(k);
      }
      return absl::ResourceExhaustedError(absl::StrCat(
          "node ", node_id_, " cannot hold bundle ", index, " of placement group ",
          request.pg.Hex(), ": it demands ", raw.ToString(), " and the node has ",
          resources_.available().ToString(), " free of ", resources_.total().ToString()));
    }
    Bundle& b = bundles_[key];
    b.raw = raw;
    b.allocation = std::move(*allocation);
    taken.push_back(key);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> PlacementGroupResourceManager::Commit(const Request& request) {
  for (const auto& [index, unused] : request.bundles) {
    if (!bundles_.count({request.pg, index})) {
      return absl::FailedPreconditionError(absl::StrCat("bundle ", index, " of placement group ",
                                                        request.pg.Hex(),
                                                        " is not prepared on node ", node_id_));
    }
  }
  bool changed = false;
  for (const auto& [index, unused] : request.bundles) {
    Bundle& b = bundles_[{request.pg, index}];
    if (b.committed) continue;
    b.renamed = CommittedBundleResources(b.raw, request.pg, index);
    b.instances.clear();
    if (!b.allocation.gpu_shares.empty()) {
      b.instances[BundleResourceName("GPU", request.pg, index)] = b.allocation.gpu_shares;
      b.instances[BundleResourceName("GPU", request.pg, std::nullopt)] = b.allocation.gpu_shares;
    }
    // The raw allocation's GPU shares sum to its GPU amount (TryAllocate), so this holds.
    if (absl::Status s = resources_.AddResources(b.renamed, b.instances); !s.ok()) {
      return absl::InternalError(absl::StrCat("bundle ", index, " of placement group ",
                                              request.pg.Hex(), ": ", s.message()));
    }
    b.committed = true;
    changed = true;
  }
  return changed;
}

std::vector<int> PlacementGroupResourceManager::Held(const PlacementGroupId& pg,
                                                     const std::vector<int>& indices) const {
  std::vector<int> out;
  if (indices.empty()) {
    for (auto it = bundles_.lower_bound({pg, std::numeric_limits<int>::min()});
         it != bundles_.end() && it->first.first == pg; ++it) {
      out.push_back(it->first.second);
    }
    return out;
  }
  std::set<int> wanted(indices.begin(), indices.end());
  for (int index : wanted) {
    if (bundles_.count({pg, index})) out.push_back(index);
  }
  return out;
}

bool PlacementGroupResourceManager::MustEndWith(const Allocation& allocation,
                                                const PlacementGroupId& pg,
                                                const std::vector<int>& going) const {
  const std::set<int> gone(going.begin(), going.end());
  bool wildcard = false;
  bool indexed = false;
  for (const auto& [name, amount] : allocation.resources.fixed()) {
    std::optional<ParsedBundleResource> parsed = ParseBundleResource(name);
    if (!parsed || parsed->pg != pg) continue;
    if (!parsed->index) {
      wildcard = true;
      continue;
    }
    if (gone.count(*parsed->index)) return true;
    indexed = true;
  }
  // In another bundle of the group, which stays (its wildcard share is that bundle's).
  if (!wildcard || indexed) return false;
  if (Held(pg, {}).size() <= gone.size()) return true;  // the group leaves the node
  // A wildcard holder on a GPU that a leaving bundle reserved would keep the device.
  std::set<int> gpus;
  for (int index : going) {
    auto it = bundles_.find({pg, index});
    if (it == bundles_.end()) continue;
    for (const auto& [id, share] : it->second.allocation.gpu_shares) gpus.insert(id);
  }
  for (const auto& [name, shares] : allocation.bundle_gpu_shares) {
    std::optional<ParsedBundleResource> parsed = ParseBundleResource(name);
    if (!parsed || parsed->pg != pg) continue;
    for (const auto& [id, share] : shares) {
      if (gpus.count(id)) return true;
    }
  }
  return false;
}

bool PlacementGroupResourceManager::Return(const PlacementGroupId& pg, int index) {
  auto it = bundles_.find({pg, index});
  if (it == bundles_.end()) return false;
  Bundle& b = it->second;
  if (b.committed) resources_.RemoveResources(b.renamed, b.instances);
  resources_.Release(b.allocation);
  const bool changed = b.committed;
  bundles_.erase(it);
  return changed;
}

bool PlacementGroupResourceManager::HoldsGroup(const PlacementGroupId& pg) const {
  return !Held(pg, {}).empty();
}

}  // namespace raio::node
