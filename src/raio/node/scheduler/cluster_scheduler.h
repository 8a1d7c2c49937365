// The node's names for the cluster scheduling policy, which the head shares
// (src/raio/scheduling/cluster_scheduler.h): ClusterView, NodeView, ClusterScheduler.
// Thread-safety: as there.
#pragma once

#include "raio/scheduling/cluster_scheduler.h"

namespace raio::node {

using scheduling::ClusterScheduler;
using scheduling::ClusterView;
using scheduling::NodeView;

}  // namespace raio::node
