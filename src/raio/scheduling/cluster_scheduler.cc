#include "raio/scheduling/cluster_scheduler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace raio::scheduling {

namespace {

NodeView FromProto(const proto::NodeInfo& info) {
  NodeView v;
  v.node_id = info.node_id();
  v.address = info.address();
  v.labels.insert(info.labels().begin(), info.labels().end());
  if (auto total = ResourceSet::FromProto(info.total()); total.ok()) v.total = std::move(*total);
  if (auto avail = ResourceSet::FromProto(info.available()); avail.ok()) {
    v.available = std::move(*avail);
  }
  v.version = info.resource_version();
  return v;
}

std::string DescribeStrategy(const proto::SchedulingStrategy& s) {
  switch (s.kind()) {
    case proto::SchedulingStrategy::SPREAD:
      return "SPREAD";
    case proto::SchedulingStrategy::NODE_AFFINITY:
      return absl::StrCat(s.soft() ? "soft" : "hard", " node affinity to ",
                          absl::BytesToHexString(s.node_id()));
    default:
      return "DEFAULT";
  }
}

}  // namespace

void ClusterView::Apply(const proto::ClusterViewUpdate& update) {
  head_version_ = std::max(head_version_, update.version());
  for (const auto& id : update.removed_node_ids()) {
    if (id != local_) nodes_.erase(id);
  }
  for (const auto& info : update.nodes()) {
    if (info.node_id() == local_ || info.node_id().empty()) continue;
    auto it = nodes_.find(info.node_id());
    if (it != nodes_.end() && it->second.version > info.resource_version()) continue;
    nodes_[info.node_id()] = FromProto(info);
  }
}

void ClusterView::SetLocal(NodeView local) {
  local_ = local.node_id;
  nodes_[local_] = std::move(local);
}

void ClusterView::SetLocalAvailable(const ResourceSet& available) {
  auto it = nodes_.find(local_);
  if (it != nodes_.end()) it->second.available = available;
}

void ClusterView::SubtractAvailable(const std::string& node_id, const ResourceSet& demand) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || node_id == local_) return;
  ResourceSet& available = it->second.available;
  for (const auto& [name, amount] : demand.fixed()) {
    available.SetFixed(name, std::max<int64_t>(0, available.GetFixed(name) - amount));
  }
}

const NodeView* ClusterView::Find(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

ClusterScheduler::ClusterScheduler(const ClusterView& view, double spread_threshold,
                                   double top_k_fraction, uint64_t seed)
    : view_(view),
      spread_threshold_(spread_threshold),
      top_k_fraction_(top_k_fraction),
      rng_(seed) {}

double ClusterScheduler::Utilisation(const NodeView& node, const ResourceSet& demand) {
  double worst = 0;
  for (const auto& [name, amount] : demand.fixed()) {
    int64_t total = node.total.GetFixed(name);
    if (total <= 0) continue;
    int64_t used = total - node.available.GetFixed(name) + amount;
    worst = std::max(worst, static_cast<double>(used) / static_cast<double>(total));
  }
  return worst;
}

bool ClusterScheduler::HasRoom(const std::string& local, const NodeView& node,
                               const ResourceSet& demand, bool local_has_room) {
  if (node.node_id == local) return local_has_room;
  return node.available.Contains(demand);
}

ClusterScheduler::Decision ClusterScheduler::DecideFor(
    const std::string& local, const ResourceSet& demand, const proto::SchedulingStrategy& strategy,
    const std::map<std::string, std::string>& label_selector, bool local_has_room) {
  // Candidates: nodes whose labels match and that could ever meet the demand.
  std::vector<const NodeView*> feasible;
  for (const auto& [id, node] : view_.nodes()) {
    if (!label_selector.empty()) {
      auto match = MatchLabels(node.labels, label_selector);
      if (!match.ok() || !*match) continue;
    }
    if (node.total.Contains(demand)) feasible.push_back(&node);
  }
  auto infeasible = [&](std::string why, bool permanent = false) {
    Decision d;
    d.kind = Decision::Kind::kInfeasible;
    d.permanent = permanent;
    std::string selector;
    if (!label_selector.empty()) {
      std::vector<std::string> parts;
      for (const auto& [k, v] : label_selector) parts.push_back(absl::StrCat(k, "=", v));
      selector = absl::StrCat(" with label selector {", absl::StrJoin(parts, ", "), "}");
    }
    d.message =
        absl::StrCat(demand.ToString(), " (", DescribeStrategy(strategy), ")", selector, ": ", why);
    return d;
  };
  if (strategy.kind() == proto::SchedulingStrategy::NODE_AFFINITY) {
    std::string target = absl::BytesToHexString(strategy.node_id());
    const NodeView* node = view_.Find(target);
    bool ok =
        node != nullptr && std::find(feasible.begin(), feasible.end(), node) != feasible.end();
    if (ok && (!strategy.soft() || HasRoom(local, *node, demand, local_has_room))) {
      Decision d;
      d.kind = target == local ? Decision::Kind::kLocal : Decision::Kind::kSpill;
      d.node_id = target;
      // Soft: sent because it has room in the view; when the view was stale the target
      // refuses and the owner's node decides again.
      d.grant_or_reject = strategy.soft() && d.kind == Decision::Kind::kSpill;
      return d;
    }
    if (!strategy.soft()) {
      if (node == nullptr) {
        return infeasible(absl::StrCat("node ", target, " is not in the cluster"),
                          /*permanent=*/true);
      }
      return infeasible(absl::StrCat("node ", target, " can never meet it (it has ",
                                     node->total.ToString(), ")"));
    }
  }
  if (feasible.empty()) return infeasible("no node of the cluster can ever meet it");
  if (strategy.kind() == proto::SchedulingStrategy::SPREAD) {
    const NodeView* best = nullptr;
    for (const NodeView* n : feasible) {
      if (!HasRoom(local, *n, demand, local_has_room)) continue;
      if (best == nullptr || spread_counts_[n->node_id] < spread_counts_[best->node_id]) best = n;
    }
    if (best != nullptr) {
      ++spread_counts_[best->node_id];
      Decision d;
      d.kind = best->node_id == local ? Decision::Kind::kLocal : Decision::Kind::kSpill;
      d.node_id = best->node_id;
      d.grant_or_reject = d.kind == Decision::Kind::kSpill;
      return d;
    }
  }
  return Hybrid(local, demand, feasible, local_has_room);
}

ClusterScheduler::Decision ClusterScheduler::Hybrid(const std::string& local,
                                                    const ResourceSet& demand,
                                                    const std::vector<const NodeView*>& candidates,
                                                    bool local_has_room) {
  // The local node under the threshold takes it without looking further (packing).
  const NodeView* local_node = view_.Find(local);
  bool local_feasible = local_node != nullptr && std::find(candidates.begin(), candidates.end(),
                                                           local_node) != candidates.end();
  if (local_feasible && local_has_room && Utilisation(*local_node, demand) < spread_threshold_) {
    return Decision{};
  }
  std::vector<std::pair<double, const NodeView*>> scored;
  for (const NodeView* n : candidates) {
    if (!HasRoom(local, *n, demand, local_has_room)) continue;
    double score = Utilisation(*n, demand);
    if (score < spread_threshold_) score = 0;
    scored.emplace_back(score, n);
  }
  if (!scored.empty()) {
    std::sort(scored.begin(), scored.end(), [&](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first < b.first;
      bool al = a.second->node_id == local, bl = b.second->node_id == local;
      if (al != bl) return al;
      return a.second->node_id < b.second->node_id;
    });
    // The local node among the best wins; else one of the top k at random.
    double best = scored.front().first;
    for (const auto& [score, n] : scored) {
      if (score == best && n->node_id == local) return Decision{};
    }
    std::size_t k = std::max<std::size_t>(
        1, static_cast<std::size_t>(
               std::floor(top_k_fraction_ * static_cast<double>(view_.nodes().size()))));
    k = std::min(k, scored.size());
    std::size_t pick = std::uniform_int_distribution<std::size_t>(0, k - 1)(rng_);
    Decision d;
    d.node_id = scored[pick].second->node_id;
    d.kind = d.node_id == local ? Decision::Kind::kLocal : Decision::Kind::kSpill;
    d.grant_or_reject = d.kind == Decision::Kind::kSpill;
    return d;
  }
  // No room anywhere now: wait here when this node can ever run it, else on the least
  // loaded node that can.
  if (local_feasible) return Decision{};
  const NodeView* least = nullptr;
  double least_score = 0;
  for (const NodeView* n : candidates) {
    double score = Utilisation(*n, demand);
    if (least == nullptr || score < least_score) {
      least = n;
      least_score = score;
    }
  }
  Decision d;
  d.kind = Decision::Kind::kSpill;
  d.node_id = least->node_id;
  return d;
}

}  // namespace raio::scheduling
