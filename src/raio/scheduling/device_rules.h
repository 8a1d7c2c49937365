// The rules every node's devices follow, whatever its totals: checked by a node for each
// demand it is asked to hold (LocalResourceManager::CheckFeasible) and by the head for each
// actor before it picks a node (head::ActorDirectory).
// Thread-safety: a pure function.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "raio/common/resources.h"

namespace raio::scheduling {

// InvalidArgument for a GPU demand above 1 that is not a whole number (a share of one
// device, or whole devices; never 1.5).
inline absl::Status CheckDeviceRules(const ResourceSet& demand) {
  int64_t gpu = demand.GetFixed("GPU");
  if (gpu > ResourceSet::kScale && gpu % ResourceSet::kScale != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a GPU demand above 1 must be a whole number, got ", demand.Get("GPU")));
  }
  return absl::OkStatus();
}

}  // namespace raio::scheduling
