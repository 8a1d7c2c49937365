// Placement groups: gang reservation of resource bundles across nodes (Ray's placement
// groups, with Ray's C++ API names).
//
//   raio::PlacementGroupCreationOptions options{
//       "trainers", {{{"CPU", 1}, {"GPU", 1}}, {{"CPU", 1}, {"GPU", 1}}},
//       raio::PlacementStrategy::STRICT_SPREAD};
//   raio::PlacementGroup pg = raio::CreatePlacementGroup(options);
//   if (!pg.Wait(30)) { ... }                      // or pg.Ready().Get()
//   raio::Task(Train).SetPlacementGroup(pg, 0).Remote(cfg);     // in bundle 0
//   raio::Actor(Worker::Create).SetPlacementGroup(pg, 1).Remote();
//   raio::RemovePlacementGroup(pg.GetID());
//
// A group is created whole or not at all: the head reserves every bundle on the nodes
// with a two-phase prepare/commit and never holds part of a group. One that cannot fit
// now stays PENDING and is created as soon as resources free up, in creation order; one
// that no set of the cluster's nodes could ever hold fails Wait with UnschedulableError
// (naming the bundles and the cluster's resources) and stays listed (`raio list
// placement-groups`) in case such nodes join. Work placed in a group uses the bundle's
// resources, never the node's others: a task demanding {CPU: 1} in a bundle of {CPU: 2}
// takes one of those two. Strategies: PACK (as few nodes as possible), SPREAD (distinct
// nodes where possible), STRICT_PACK (one node), STRICT_SPREAD (one node per bundle).
// Removing a group ends the tasks and actors in it and frees its resources; a group ends
// with its job unless `detached`. When a node holding bundles dies, those bundles are
// placed again (RESCHEDULING) and the group's actors with restarts left restart in them.
// See docs/design/placement_groups.md.
//
// Thread-safety: the functions are thread-safe; a PlacementGroup is a plain value.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "raio/export.h"
#include "raio/object_ref.h"

namespace raio {

enum class PlacementStrategy { PACK = 0, SPREAD = 1, STRICT_PACK = 2, STRICT_SPREAD = 3 };
enum class PlacementGroupState { PENDING = 0, CREATED = 1, REMOVED = 2, RESCHEDULING = 3 };

struct PlacementGroupCreationOptions {
  // Unique among the live groups of the job's namespace; "" = unnamed.
  std::string name;
  // One resource map per bundle, e.g. {{"CPU", 1}, {"GPU", 1}}; amounts > 0 (GPU: whole
  // devices, or a share below 1), CPU and GPU in devices, memory in bytes.
  std::vector<std::map<std::string, double>> bundles;
  PlacementStrategy strategy = PlacementStrategy::PACK;
  // Outlives its job until RemovePlacementGroup.
  bool detached = false;
};

class RAIO_EXPORT PlacementGroup {
 public:
  PlacementGroup() = default;
  // 16 hex digits; "" for a default-constructed (empty) group.
  const std::string& GetID() const { return id_; }
  const std::string& GetName() const { return name_; }
  const std::vector<std::map<std::string, double>>& GetBundles() const { return bundles_; }
  PlacementStrategy GetStrategy() const { return strategy_; }
  bool Empty() const { return id_.empty(); }
  // The group's state now (one RPC to the head through the local node; blocks).
  PlacementGroupState GetState() const;
  // The hex id of the node holding each bundle ("" while unplaced); blocks for one RPC.
  std::vector<std::string> GetBundleNodes() const;
  // Blocks until the group is CREATED (true) or `timeout_seconds` pass (false; the group
  // stays PENDING or RESCHEDULING); 0 or less asks once without waiting. Throws
  // UnschedulableError when no set of the cluster's nodes can ever hold a PENDING group
  // (the message names the bundles and the cluster's resources; a RESCHEDULING group that
  // no node can hold now waits for one to join instead), InvalidUsageError when it was
  // removed (the message says why) or is empty, ClusterUnavailableError without a cluster.
  bool Wait(int timeout_seconds) const;
  // An object that becomes ready (true) once the group is CREATED: a zero-CPU task placed
  // in any bundle of the group, as Ray's pg.ready(). It says the group was created, not
  // that every bundle is placed now (after a node's death it can be ready while the lost
  // bundles reschedule: Wait or GetState tell). Its Get throws UnschedulableError if the
  // group is removed first; it does not fail for an infeasible group (Wait does).
  ObjectRef<bool> Ready() const;

  // For the runtime (not for user code): builds a group's handle.
  PlacementGroup(std::string id, std::string name,
                 std::vector<std::map<std::string, double>> bundles, PlacementStrategy strategy)
      : id_(std::move(id)),
        name_(std::move(name)),
        bundles_(std::move(bundles)),
        strategy_(strategy) {}

 private:
  std::string id_;
  std::string name_;
  std::vector<std::map<std::string, double>> bundles_;
  PlacementStrategy strategy_ = PlacementStrategy::PACK;
};

// Registers the group with the head and returns at once (PENDING; use Wait or Ready).
// Throws InvalidUsageError for no bundles or more than 10,000, a bundle without resources,
// an amount that is not finite or not above 0, a name another live group of the namespace has, or
// raio not initialized; ClusterUnavailableError when the head cannot be reached. Blocks for one
// RPC.
RAIO_EXPORT PlacementGroup CreatePlacementGroup(const PlacementGroupCreationOptions& options);
// Removes the group: ends its tasks and actors and frees its bundles on every node before
// it returns. Removing a removed group does nothing while the head remembers it (the
// last 1,000 removed). Throws InvalidUsageError for an id that is not 16 hex digits or
// that no group has (or that was forgotten).
RAIO_EXPORT void RemovePlacementGroup(const std::string& placement_group_id);
// The live group named `name` in the job's namespace; InvalidUsageError if there is none.
RAIO_EXPORT PlacementGroup GetPlacementGroup(const std::string& name);
// The group with that id (removed ones too, while the head keeps them); InvalidUsageError
// if unknown.
RAIO_EXPORT PlacementGroup GetPlacementGroupById(const std::string& placement_group_id);
// Every group the head knows, removed ones included, oldest first.
RAIO_EXPORT std::vector<PlacementGroup> GetAllPlacementGroups();

namespace internal {
// Throws InvalidUsageError unless `pg` is a group and `index` is -1 or one of its bundles.
RAIO_EXPORT void CheckBundleIndex(const PlacementGroup& pg, int index);
}  // namespace internal

}  // namespace raio
