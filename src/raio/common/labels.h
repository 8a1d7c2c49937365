// Label selectors on node labels (Ray's label_selector): key -> "v" (the node's label
// equals v), "!v" (differs, or the node has no such label), "in(a,b,...)" or
// "!in(a,b,...)". Used by owners (checking a task's selector at Remote()) and nodes
// (matching). Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace raio {

// Whether `labels` satisfy every entry of `selector`. InvalidArgument for a malformed
// entry (an empty key, "in(" without ")").
absl::StatusOr<bool> MatchLabels(const std::map<std::string, std::string>& labels,
                                 const std::map<std::string, std::string>& selector);
// Checks a selector's syntax without matching.
absl::Status ValidateLabelSelector(const std::map<std::string, std::string>& selector);

}  // namespace raio
