// Placement group resource names (Ray's scheme). A committed bundle `i` of group `pg`
// offers, on its node, each of its resources R twice: as `R_group_<i>_<pg>` (that
// bundle) and as `R_group_<pg>` (the group's wildcard, summed over the node's bundles of
// the group), plus `bundle_group_<i>_<pg>` and `bundle_group_<pg>` of
// kBundleMarkerCapacity each. A task or actor in bundle `i` demands its resources under
// both names and kBundleMarkerDemand of both markers; in any bundle (index -1), the
// wildcard names and marker only. So the ordinary lease and actor scheduling places work
// of the group on the nodes that hold its bundles, and a demand of no resources (CPU 0)
// still lands there. `<pg>` is the group's id in hex (16 digits).
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "raio/common/ids.h"
#include "raio/common/resources.h"

namespace raio {

// The id from its 16 hex digits (either case); nullopt for anything else.
std::optional<PlacementGroupId> PlacementGroupIdFromHex(std::string_view hex);

inline constexpr double kBundleMarkerCapacity = 1000;
inline constexpr double kBundleMarkerDemand = 0.001;

// `R_group_<index>_<pg>`, or `R_group_<pg>` without an index.
std::string BundleResourceName(const std::string& resource, const PlacementGroupId& pg,
                               std::optional<int> index);
// What a node offers once bundle `index` (resources `bundle`) of `pg` is committed there.
ResourceSet CommittedBundleResources(const ResourceSet& bundle, const PlacementGroupId& pg,
                                     int index);
// A demand placed into bundle `index` of `pg` (-1: any bundle), renamed.
ResourceSet PlacementDemand(const ResourceSet& demand, const PlacementGroupId& pg, int index);
// Whether `name` is a renamed (placement group) resource; its original name and group.
struct ParsedBundleResource {
  std::string base;  // "CPU", "GPU", "bundle", or a custom resource's name
  PlacementGroupId pg;
  std::optional<int> index;  // none: the wildcard
};
std::optional<ParsedBundleResource> ParseBundleResource(const std::string& name);
// Empty when one of `bundles` (index `first_index` + position) holds every amount of
// `demand`; otherwise why not, naming the demand and the bundles (for an InvalidUsageError
// at submission: work in a group takes its resources from its bundle only).
std::string DemandFitsBundles(const ResourceSet& demand,
                              const std::vector<std::map<std::string, double>>& bundles,
                              int first_index, const std::string& pg_hex);
// `resources` without the renamed entries (what the nodes physically have).
ResourceSet RawResources(const ResourceSet& resources);

}  // namespace raio
