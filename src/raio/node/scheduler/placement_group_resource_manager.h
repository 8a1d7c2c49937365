// PlacementGroupResourceManager: the bundles of placement groups that the head reserved on
// this node (Ray's PlacementGroupResourceManager), in two phases. Prepare holds a bundle's
// raw resources (all bundles of a request, or none); Commit adds them again under the
// group's renamed names (CommittedBundleResources, common/placement_resources.h), which the
// group's tasks and actors then demand; a renamed GPU resource carries the GPU instances
// the raw allocation holds. Return gives a prepared or committed bundle back. It keeps the
// books only: ending the workers that hold a bundle's resources is the caller's
// (MustEndWith says which).
//
// Threading: not thread-safe; lives on the node daemon's loop.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "raio/common/ids.h"
#include "raio/common/resources.h"
#include "raio/node/scheduler/local_resource_manager.h"
#include "raio/placement_group.pb.h"

namespace raio::node {

// "placement group <16 hex digits> was removed": why its leases and actors fail (the
// lease reply's message, an actor's death cause).
std::string RemovedGroupMessage(const PlacementGroupId& pg);

class PlacementGroupResourceManager {
 public:
  // A PREPARE/COMMIT/CANCEL_BUNDLES request, checked.
  struct Request {
    PlacementGroupId pg;
    // Bundle index and its raw resources (empty for COMMIT and CANCEL, which name bundles
    // only), in request order; no index twice.
    std::vector<std::pair<int, ResourceSet>> bundles;
  };
  // InvalidArgument for an id that is not 8 bytes (or nil), an index given twice and,
  // with `need_resources` (PREPARE), a bundle demanding nothing, an amount that is not a
  // finite number >= 0 at the 0.0001 resolution, a renamed resource name, or a GPU amount
  // above 1 that is not whole. The message names the bundle.
  static absl::StatusOr<Request> Parse(const proto::BundlesRequest& request, bool need_resources);

  // `resources` must outlive this; `node_id` (hex) names the node in messages.
  PlacementGroupResourceManager(LocalResourceManager& resources, std::string node_id);

  // Holds the raw resources of every bundle of `request` not held yet, or of none:
  // ResourceExhausted naming the first bundle that does not fit, its demand and what the
  // node has free (and in total). Bundles already prepared or committed are left as they
  // are (a repeated prepare is OK).
  absl::Status Prepare(const Request& request);
  // Commits the prepared bundles named (committed ones stay): their renamed resources join
  // the node's totals and availability. FailedPrecondition, and nothing changes, when one
  // is not held here. Returns whether the totals changed.
  absl::StatusOr<bool> Commit(const Request& request);
  // The indices of `pg`'s bundles held here (prepared or committed) among `indices` (all of
  // them when empty), ascending.
  std::vector<int> Held(const PlacementGroupId& pg, const std::vector<int>& indices) const;
  // Whether `allocation` must end before bundles `going` (held ones) of `pg` are returned:
  // it holds a renamed resource of one of them; or it holds only the group's wildcard
  // resources and either the group leaves the node with them or it holds a share of a GPU
  // that one of them reserved.
  bool MustEndWith(const Allocation& allocation, const PlacementGroupId& pg,
                   const std::vector<int>& going) const;
  // Gives bundle `index` of `pg` back: its renamed resources leave the totals (when it
  // was committed) and its raw ones are released. Returns whether the totals changed; an
  // unknown bundle changes nothing.
  bool Return(const PlacementGroupId& pg, int index);
  // Whether any bundle of `pg` is held here.
  bool HoldsGroup(const PlacementGroupId& pg) const;

 private:
  struct Bundle {
    ResourceSet raw;
    Allocation allocation;  // of `raw`
    bool committed = false;
    ResourceSet renamed;                         // once committed
    std::map<std::string, GpuShares> instances;  // its renamed GPU resources' instances
  };
  using Key = std::pair<PlacementGroupId, int>;

  LocalResourceManager& resources_;
  std::string node_id_;
  std::map<Key, Bundle> bundles_;
};

}  // namespace raio::node
