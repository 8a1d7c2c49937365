// ClusterView and ClusterScheduler: a picture of the cluster's nodes and the policy that
// decides where a lease request or an actor goes (Ray's ClusterResourceScheduler with its
// hybrid policy, spread, node affinity and label selectors). Shared by the node daemons
// (leases: NodeManager, which reaches these names as node::ClusterScheduler) and the head
// (actors: head::ActorDirectory), as Ray's GCS actor scheduler uses the raylet's
// scheduler; it depends on common/ only.
//
// The view holds, per node, its address, labels, total and available resources as the
// head last relayed them (versioned: an update older than what the view has is ignored);
// the local node's own entry is kept current by the node itself (the head's view has no
// local node).
//
// Policy (Decide), for one demand and strategy:
//  - DEFAULT (Ray's hybrid policy): nodes that can grant the demand now are scored by
//    their utilisation after the grant (the largest share used of any resource the demand
//    names); scores under config::scheduler_spread_threshold count as 0 (pack), the
//    local node wins ties, and otherwise one of the top-k best (k = max(1, 20% of the
//    nodes)) is taken at random. When no node can grant now: the local node queues it if
//    it could ever meet it; else the least loaded node that could is chosen (the request
//    waits there). When no node could ever meet it: kInfeasible.
//  - SPREAD: the node with room now that was least recently chosen (round robin), else as
//    DEFAULT.
//  - NODE_AFFINITY: that node (queued there until it has room); `soft`: when it is not in
//    the view, cannot ever meet the demand or has no room now, as DEFAULT.
//  - Label selector (any strategy): only nodes whose labels match every entry are
//    candidates. An entry is "value" (equal), "!value" (not equal, or absent),
//    "in(a,b,...)" or "!in(a,b,...)".
//
// Thread-safety: none; lives on the node's loop.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "raio/common.pb.h"
#include "raio/common/labels.h"
#include "raio/common/resources.h"
#include "raio/head.pb.h"

namespace raio::scheduling {

struct NodeView {
  std::string node_id;  // hex
  proto::Address address;
  std::map<std::string, std::string> labels;
  ResourceSet total;
  ResourceSet available;
  uint64_t version = 0;
};

class ClusterView {
 public:
  explicit ClusterView(std::string local_node_id) : local_(std::move(local_node_id)) {}

  // Applies an update from the head: entries not older than what the view has replace
  // it; removed nodes go. The local node's entry is never taken from the head.
  void Apply(const proto::ClusterViewUpdate& update);
  // The local node's entry (its available resources change with every grant).
  void SetLocal(NodeView local);
  void SetLocalAvailable(const ResourceSet& available);
  // A lease for `demand` was sent to `node_id`: count it as taken there until the head's
  // next update for that node says otherwise (Ray does the same), so that a burst of
  // requests does not all go to the one node the view last saw free.
  void SubtractAvailable(const std::string& node_id, const ResourceSet& demand);

  const std::map<std::string, NodeView>& nodes() const { return nodes_; }
  const NodeView* Find(const std::string& node_id) const;
  const std::string& local_id() const { return local_; }
  uint64_t head_version() const { return head_version_; }

 private:
  std::string local_;
  std::map<std::string, NodeView> nodes_;
  uint64_t head_version_ = 0;
};

class ClusterScheduler {
 public:
  struct Decision {
    enum class Kind {
      kLocal,       // grant (or queue) here
      kSpill,       // send to `node_id`
      kInfeasible,  // no node in the view can ever meet it (or a hard affinity fails)
    } kind = Kind::kLocal;
    std::string node_id;
    // kSpill: the target had room now in the view (ask it to grant or reject).
    bool grant_or_reject = false;
    // kInfeasible: why (names the demand, strategy, selector).
    std::string message;
    // kInfeasible for a hard affinity to a node that is not in the view: never feasible
    // later either (a node id is not reused).
    bool permanent = false;
  };

  // `spread_threshold`: utilisation under which nodes count as empty (Ray's 0.5);
  // `top_k_fraction`: share of the nodes among which the best is drawn (Ray's 0.2).
  ClusterScheduler(const ClusterView& view, double spread_threshold, double top_k_fraction,
                   uint64_t seed);
  void SetPolicy(double spread_threshold, double top_k_fraction) {
    spread_threshold_ = spread_threshold;
    top_k_fraction_ = top_k_fraction;
  }

  // Where a lease for `demand` should go. `local_has_room`: the local node could allocate
  // it now (its exact state, fresher than the view).
  Decision Decide(const ResourceSet& demand, const proto::SchedulingStrategy& strategy,
                  const std::map<std::string, std::string>& label_selector, bool local_has_room) {
    return DecideFor(view_.local_id(), demand, strategy, label_selector, local_has_room);
  }
  // The same, as if `local` (a node of the view, or "" for none) were the local node: the
  // head, which has no node of its own, decides for an actor's creator's node. kLocal then
  // means `local`; `local_has_room` is about it.
  Decision DecideFor(const std::string& local, const ResourceSet& demand,
                     const proto::SchedulingStrategy& strategy,
                     const std::map<std::string, std::string>& label_selector, bool local_has_room);

  // The utilisation of `node` after granting `demand`: the largest (total - available +
  // demand) / total over the demand's resources (0 for an empty demand).
  static double Utilisation(const NodeView& node, const ResourceSet& demand);

 private:
  Decision Hybrid(const std::string& local, const ResourceSet& demand,
                  const std::vector<const NodeView*>& candidates, bool local_has_room);
  static bool HasRoom(const std::string& local, const NodeView& node, const ResourceSet& demand,
                      bool local_has_room);

  const ClusterView& view_;
  double spread_threshold_;
  double top_k_fraction_;
  std::mt19937_64 rng_;
  // SPREAD's round robin: how many times each node was chosen.
  std::map<std::string, uint64_t> spread_counts_;
};

}  // namespace raio::scheduling
