#include "raio/head/placement_group_manager.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "raio/common/logging.h"
#include "raio/common/placement_resources.h"
#include "raio/rpc.pb.h"

namespace raio::head {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr std::chrono::milliseconds kMaxBackoff{1000};

const char* StrategyName(proto::PlacementStrategy s) {
  switch (s) {
    case proto::PACK:
      return "PACK";
    case proto::SPREAD:
      return "SPREAD";
    case proto::STRICT_PACK:
      return "STRICT_PACK";
    case proto::STRICT_SPREAD:
      return "STRICT_SPREAD";
    default:
      return "?";
  }
}

// The largest share of any resource `demand` names that `node` has in use once `room` is
// what is left of `total` (best fit prefers high, spreading low).
double Utilisation(const ResourceSet& total, const ResourceSet& room_after,
                   const ResourceSet& demand) {
  double worst = 0;
  for (const auto& [name, amount] : demand.fixed()) {
    int64_t t = total.GetFixed(name);
    if (t <= 0) continue;
    worst = std::max(worst, 1.0 - static_cast<double>(room_after.GetFixed(name)) / t);
  }
  return worst;
}

// Larger bundles first (GPU, then CPU, then everything), so that the scarce ones pick
// their nodes before the small ones fragment them.
bool Larger(const ResourceSet& a, const ResourceSet& b) {
  if (a.GetFixed("GPU") != b.GetFixed("GPU")) return a.GetFixed("GPU") > b.GetFixed("GPU");
  if (a.GetFixed("CPU") != b.GetFixed("CPU")) return a.GetFixed("CPU") > b.GetFixed("CPU");
  int64_t sa = 0, sb = 0;
  for (const auto& [n, v] : a.fixed()) sa += v;
  for (const auto& [n, v] : b.fixed()) sb += v;
  return sa > sb;
}

std::string BundlesText(const std::vector<ResourceSet>& bundles) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < bundles.size(); ++i) {
    parts.push_back(absl::StrCat("#", i, " ", bundles[i].ToString()));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

PlacementGroupManager::PlacementGroupManager(Nodes& nodes) : nodes_(nodes) {}

proto::BundlesRequest PlacementGroupManager::BundlesFor(const PlacementGroupId& id, const Group& g,
                                                        const std::vector<uint32_t>& indexes) {
  proto::BundlesRequest req;
  req.set_placement_group_id(id.Binary());
  for (uint32_t i : indexes) {
    proto::Bundle* b = req.add_bundles();
    b->set_index(i);
    g.bundles[i].ToProto(b->mutable_resources());
  }
  return req;
}

std::string PlacementGroupManager::ClusterDescription() const {
  std::vector<std::string> parts;
  for (const auto& [id, n] : node_state_) {
    parts.push_back(absl::StrCat("node ", id, " ", n.total.ToString()));
  }
  return parts.empty() ? std::string("no nodes") : absl::StrJoin(parts, "; ");
}

void PlacementGroupManager::OnNodeUpdated(const proto::NodeInfo& node) {
  auto total = ResourceSet::FromProto(node.total());
  auto available = ResourceSet::FromProto(node.available());
  if (!total.ok() || !available.ok()) return;
  NodeState& n = node_state_[node.node_id()];
  const bool joined = n.total.empty();
  n.total = RawResources(*total);
  n.available = RawResources(*available);
  n.held_since_report = ResourceSet();
  if (joined) {
    // A node that could hold an infeasible group may have joined.
    for (const PlacementGroupId& id : queue_) groups_[id].info.set_infeasible(false);
  }
  Schedule();
}

void PlacementGroupManager::OnNodeRemoved(const std::string& node_id) {
  // An attempt with bundles there fails when its answers come back as errors (the head's
  // connection to the node closed).
  node_state_.erase(node_id);
  for (auto& [id, g] : groups_) {
    if (g.info.state() == proto::PG_REMOVED) continue;
    bool lost = false;
    for (auto& b : *g.info.mutable_bundles()) {
      if (b.node_id() == node_id) {
        b.clear_node_id();
        lost = true;
      }
    }
    if (!lost || g.info.state() != proto::PG_CREATED) continue;
    g.info.set_state(proto::PG_RESCHEDULING);
    g.info.set_message(absl::StrCat("node ", node_id, " holding bundles died; placing them again"));
    RAIO_LOG_WARN("placement group {}: {}", id.Hex(), g.info.message());
    queue_.push_front(id);
  }
  Schedule();
}

void PlacementGroupManager::OnJobFinished(uint32_t job_id) {
  finished_jobs_.insert(job_id);
  std::vector<PlacementGroupId> ending;
  for (const auto& [id, g] : groups_) {
    if (g.info.job_id() == job_id && !g.info.detached() && g.info.state() != proto::PG_REMOVED) {
      ending.push_back(id);
    }
  }
  for (const PlacementGroupId& id : ending) {
    Remove(id, absl::StrCat("its job ", job_id, " ended"), [](absl::Status) {});
  }
}

absl::StatusOr<proto::PlacementGroupInfo> PlacementGroupManager::Create(
    const proto::PlacementGroupSpec& spec) {
  if (stopped_) return absl::UnavailableError("the head is stopping");
  if (spec.placement_group_id().size() != PlacementGroupId::kSize) {
    return absl::InvalidArgumentError("placement group id must be 8 bytes");
  }
  PlacementGroupId id = PlacementGroupId::FromBinary(spec.placement_group_id());
  if (groups_.count(id) > 0) {
    return absl::InvalidArgumentError(absl::StrCat("placement group ", id.Hex(), " exists"));
  }
  if (!proto::PlacementStrategy_IsValid(spec.strategy())) {
    return absl::InvalidArgumentError(absl::StrCat("unknown placement strategy ", spec.strategy()));
  }
  if (spec.bundles().empty()) {
    return absl::InvalidArgumentError("a placement group needs at least one bundle");
  }
  if (spec.bundles_size() > kMaxBundles) {
    return absl::InvalidArgumentError(absl::StrCat("a placement group of ", spec.bundles_size(),
                                                   " bundles: at most ", kMaxBundles));
  }
  Group g;
  for (int i = 0; i < spec.bundles_size(); ++i) {
    for (const auto& [name, amount] : spec.bundles(i).amounts()) {
      if (!std::isfinite(amount) || amount <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("bundle ", i, ": ", name, ": ", amount,
                                                       " (amounts must be finite and above 0)"));
      }
      if (ParseBundleResource(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("bundle ", i, ": ", name, " is a placement group's resource"));
      }
    }
    if (auto gpu = spec.bundles(i).amounts().find("GPU"); gpu != spec.bundles(i).amounts().end() &&
                                                          gpu->second > 1 &&
                                                          gpu->second != std::floor(gpu->second)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bundle ", i, ": GPU: ", gpu->second,
                       " (a GPU amount above 1 must be a whole number of devices)"));
    }
    auto bundle = ResourceSet::FromProto(spec.bundles(i));
    if (!bundle.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bundle ", i, ": ", bundle.status().message()));
    }
    if (bundle->empty()) {
      return absl::InvalidArgumentError(absl::StrCat("bundle ", i, " has no resources"));
    }
    g.bundles.push_back(*bundle);
  }
  if (finished_jobs_.count(spec.job_id()) > 0) {
    return absl::FailedPreconditionError(absl::StrCat("job ", spec.job_id(), " has ended"));
  }
  if (!spec.name().empty()) {
    auto it = names_.find({spec.namespace_(), spec.name()});
    if (it != names_.end()) {
      return absl::AlreadyExistsError(absl::StrCat("a placement group named '", spec.name(),
                                                   "' exists in namespace '", spec.namespace_(),
                                                   "' (", it->second.Hex(), ")"));
    }
    names_[{spec.namespace_(), spec.name()}] = id;
  }
  proto::PlacementGroupInfo& info = g.info;
  info.set_placement_group_id(id.Binary());
  info.set_name(spec.name());
  info.set_namespace_(spec.namespace_());
  info.set_strategy(spec.strategy());
  info.set_state(proto::PG_PENDING);
  info.set_job_id(spec.job_id());
  info.set_detached(spec.detached());
  info.set_create_time_ms(nodes_.NowMs());
  for (std::size_t i = 0; i < g.bundles.size(); ++i) {
    proto::Bundle* b = info.add_bundles();
    b->set_index(static_cast<uint32_t>(i));
    g.bundles[i].ToProto(b->mutable_resources());
  }
  proto::PlacementGroupInfo reply = info;
  groups_.emplace(id, std::move(g));
  order_.push_back(id);
  queue_.push_back(id);
  Schedule();
  return reply;
}

bool PlacementGroupManager::Settled(const Group& g) const {
  // A RESCHEDULING group that no node can hold now is not settled: it was created once,
  // and its lost bundles are placed again as soon as a node that can hold them joins.
  return g.info.state() == proto::PG_CREATED || g.info.state() == proto::PG_REMOVED ||
         (g.info.infeasible() && g.info.state() == proto::PG_PENDING);
}

void PlacementGroupManager::Wait(const PlacementGroupId& id, std::chrono::milliseconds timeout,
                                 InfoCallback done) {
  auto it = groups_.find(id);
  if (it == groups_.end()) {
    done(absl::NotFoundError(absl::StrCat("no placement group ", id.Hex())));
    return;
  }
  if (Settled(it->second) || timeout.count() <= 0) {
    done(it->second.info);
    return;
  }
  uint64_t waiter = ++waiter_seq_;
  it->second.waiters.push_back({waiter, std::move(done)});
  nodes_.RunAfter(timeout, [this, id, waiter] {
    auto g = groups_.find(id);
    if (g == groups_.end()) return;
    auto& ws = g->second.waiters;
    for (auto w = ws.begin(); w != ws.end(); ++w) {
      if (w->id != waiter) continue;
      InfoCallback cb = std::move(w->done);
      ws.erase(w);
      cb(g->second.info);
      return;
    }
  });
}

void PlacementGroupManager::NotifyWaiters(Group& g) {
  if (!Settled(g)) return;
  std::vector<Waiter> ws = std::move(g.waiters);
  g.waiters.clear();
  proto::PlacementGroupInfo info = g.info;
  for (auto& w : ws) w.done(info);
}

void PlacementGroupManager::Remove(const PlacementGroupId& id, const std::string& cause,
                                   std::function<void(absl::Status)> done) {
  auto it = groups_.find(id);
  if (it == groups_.end()) {
    done(absl::NotFoundError(absl::StrCat("no placement group ", id.Hex())));
    return;
  }
  Group& g = it->second;
  if (g.info.state() == proto::PG_REMOVED) {
    done(absl::OkStatus());
    return;
  }
  g.remove_waiters.push_back(std::move(done));
  if (g.removing) return;
  g.removing = true;
  queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
  if (attempt_ && attempt_->id == id) {
    // The attempt's answers come first; AbortAttempt / FinishAttempt end the removal.
    g.info.set_message(cause);
    return;
  }
  std::map<std::string, std::vector<uint32_t>> nodes;  // empty lists: all of the group's
  for (const auto& b : g.info.bundles()) {
    if (!b.node_id().empty()) nodes[b.node_id()];
  }
  MarkRemoved(id, g, cause);
  CancelOn(id, nodes, absl::StrCat("placement group ", id.Hex(), " was removed: ", cause),
           [this, id] {
             auto g = groups_.find(id);
             if (g == groups_.end()) return;
             auto ws = std::move(g->second.remove_waiters);
             g->second.remove_waiters.clear();
             for (auto& w : ws) w(absl::OkStatus());
             Schedule();  // their resources are free again
           });
}

void PlacementGroupManager::MarkRemoved(const PlacementGroupId& id, Group& g,
                                        const std::string& cause) {
  g.info.set_state(proto::PG_REMOVED);
  g.info.set_message(absl::StrCat("removed: ", cause));
  g.info.set_infeasible(false);
  for (auto& b : *g.info.mutable_bundles()) b.clear_node_id();
  if (!g.info.name().empty()) {
    auto n = names_.find({g.info.namespace_(), g.info.name()});
    if (n != names_.end() && n->second == id) names_.erase(n);
  }
  newly_removed_.push_back(id.Binary());
  removed_.push_back(id);
  while (removed_.size() > kMaxRemoved) {
    PlacementGroupId old = removed_.front();
    removed_.pop_front();
    groups_.erase(old);
    order_.erase(std::remove(order_.begin(), order_.end(), old), order_.end());
  }
  NotifyWaiters(g);
}

void PlacementGroupManager::CancelOn(const PlacementGroupId& id,
                                     const std::map<std::string, std::vector<uint32_t>>& nodes,
                                     const std::string& cause, std::function<void()> done) {
  if (nodes.empty()) {
    nodes_.RunAfter(std::chrono::milliseconds(0), std::move(done));
    return;
  }
  auto left = std::make_shared<std::size_t>(nodes.size());
  auto finish = std::make_shared<std::function<void()>>(std::move(done));
  for (const auto& [node, indexes] : nodes) {
    proto::BundlesRequest req;
    req.set_placement_group_id(id.Binary());
    req.set_cause(cause);
    for (uint32_t i : indexes) req.add_bundles()->set_index(i);
    nodes_.Send(proto::CANCEL_BUNDLES, node, req, [left, finish](absl::Status) {
      if (--*left == 0) (*finish)();
    });
  }
}

absl::StatusOr<proto::PlacementGroupInfo> PlacementGroupManager::Get(
    const PlacementGroupId& id) const {
  auto it = groups_.find(id);
  if (it == groups_.end())
    return absl::NotFoundError(absl::StrCat("no placement group ", id.Hex()));
  return it->second.info;
}

absl::StatusOr<proto::PlacementGroupInfo> PlacementGroupManager::GetNamed(
    const std::string& ns, const std::string& name) const {
  auto it = names_.find({ns, name});
  if (it == names_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no placement group named '", name, "' in namespace '", ns, "'"));
  }
  return Get(it->second);
}

proto::PlacementGroupList PlacementGroupManager::List() const {
  proto::PlacementGroupList list;
  for (const PlacementGroupId& id : order_) {
    auto it = groups_.find(id);
    if (it != groups_.end()) *list.add_groups() = it->second.info;
  }
  return list;
}

std::vector<std::string> PlacementGroupManager::TakeRemoved() {
  std::vector<std::string> out = std::move(newly_removed_);
  newly_removed_.clear();
  return out;
}

void PlacementGroupManager::Stop() {
  stopped_ = true;
  for (auto& [id, g] : groups_) {
    auto ws = std::move(g.waiters);
    g.waiters.clear();
    for (auto& w : ws) w.done(absl::UnavailableError("the head is stopping"));
  }
}

std::string PlacementGroupManager::Choose(const Group& g, std::map<std::string, ResourceSet> room,
                                          std::map<uint32_t, std::string>* out, bool totals) const {
  const char* free = totals ? " in all" : " free";
  const proto::PlacementStrategy strategy = g.info.strategy();
  std::map<std::string, int> on_node;  // bundles of this group per node
  std::vector<uint32_t> todo;
  for (const auto& b : g.info.bundles()) {
    const std::string& node = out->count(b.index()) ? (*out)[b.index()] : b.node_id();
    if (node.empty()) {
      todo.push_back(b.index());
    } else {
      ++on_node[node];
    }
  }
  std::stable_sort(todo.begin(), todo.end(),
                   [&](uint32_t a, uint32_t b) { return Larger(g.bundles[a], g.bundles[b]); });
  auto total_of = [&](const std::string& node) -> const ResourceSet& {
    static const ResourceSet kNone;
    auto it = node_state_.find(node);
    return it == node_state_.end() ? kNone : it->second.total;
  };
  auto score = [&](const std::string& node, const ResourceSet& demand) {
    ResourceSet after = room[node];
    after.Subtract(demand);
    return Utilisation(total_of(node), after, demand);
  };

  if (strategy == proto::STRICT_PACK || strategy == proto::PACK) {
    // All remaining bundles on one node: the one already holding some, else the best fit.
    ResourceSet sum;
    for (uint32_t i : todo) sum.Add(g.bundles[i]);
    std::string best;
    double best_score = -1;
    for (const auto& [node, r] : room) {
      if (!on_node.empty() && on_node.count(node) == 0) continue;
      if (!r.Contains(sum)) continue;
      double s = score(node, sum);
      if (s > best_score) best = node, best_score = s;
    }
    if (!best.empty()) {
      for (uint32_t i : todo) (*out)[i] = best;
      return "";
    }
    if (strategy == proto::STRICT_PACK) {
      return on_node.empty()
                 ? absl::StrCat("no node has ", sum.ToString(), free, " for all bundles")
                 : absl::StrCat("node ", on_node.begin()->first, " (holding the other bundles)",
                                " does not have ", sum.ToString(), free);
    }
  }
  for (uint32_t i : todo) {
    const ResourceSet& demand = g.bundles[i];
    std::string best;
    double best_key = 0;
    for (const auto& [node, r] : room) {
      if (!r.Contains(demand)) continue;
      const bool used = on_node.count(node) > 0;
      double key;
      if (strategy == proto::PACK) {
        key = (used ? 1000.0 * on_node[node] : 0) + score(node, demand);  // pack: high
      } else {
        if (strategy == proto::STRICT_SPREAD && used) continue;
        // spread: an unused node first, then the fewest bundles, then the least used
        key = -(1000.0 * (used ? on_node[node] : 0) + score(node, demand));
      }
      if (best.empty() || key > best_key) best = node, best_key = key;
    }
    if (best.empty()) {
      return absl::StrCat("no node",
                          strategy == proto::STRICT_SPREAD ? " without another bundle" : "",
                          " has ", demand.ToString(), free, " for bundle ", i);
    }
    (*out)[i] = best;
    room[best].Subtract(demand);
    ++on_node[best];
  }
  return "";
}

std::string PlacementGroupManager::InfeasibleReason(const Group& g) const {
  std::map<std::string, ResourceSet> totals;
  for (const auto& [id, n] : node_state_) totals[id] = n.total;
  Group fresh;
  fresh.info = g.info;
  fresh.bundles = g.bundles;
  for (auto& b : *fresh.info.mutable_bundles()) b.clear_node_id();
  std::map<uint32_t, std::string> placement;
  std::string why = Choose(fresh, totals, &placement, /*totals=*/true);
  if (why.empty()) return "";
  return absl::StrCat("no set of the cluster's nodes can ever hold placement group ",
                      PlacementGroupId::FromBinary(g.info.placement_group_id()).Hex(), " (",
                      StrategyName(g.info.strategy()), ", bundles ", BundlesText(g.bundles),
                      "): ", why, "; cluster resources: ", ClusterDescription());
}

void PlacementGroupManager::Schedule() {
  if (stopped_ || attempt_) return;
  // Creation order without head-of-line blocking on unrelated resources: a group that
  // cannot fit now holds back the later groups that want any of the resources it waits
  // for (so a large group is not starved by a stream of small ones), not those that want
  // none of them (Kueue's BestEffortFIFO with that guard).
  std::set<std::string> held_back;  // resource names earlier waiting groups want
  std::string blocker;              // the first of them, for the message
  std::map<std::string, ResourceSet> room;
  for (const auto& [id, n] : node_state_) {
    ResourceSet r = n.available;
    r.Subtract(n.held_since_report);
    room[id] = r;
  }
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    Group& g = groups_[*it];
    if (g.info.infeasible()) continue;
    std::string infeasible = InfeasibleReason(g);
    if (!infeasible.empty()) {
      if (g.info.state() == proto::PG_RESCHEDULING) {
        infeasible = absl::StrCat(
            "bundles lost with a node wait for a node that can hold them; with the nodes of "
            "now: ",
            infeasible);
      }
      g.info.set_infeasible(true);
      g.info.set_message(infeasible);
      RAIO_LOG_INFO("{}", infeasible);  // Wait tells its creator
      NotifyWaiters(g);
      continue;
    }
    std::set<std::string> wants;
    for (const ResourceSet& b : g.bundles) {
      for (const auto& [name, amount] : b.fixed()) wants.insert(name);
    }
    bool behind = false;
    for (const std::string& name : wants) behind |= held_back.count(name) > 0;
    if (behind) {
      g.info.set_message(absl::StrCat("waiting behind placement group ", blocker,
                                      ", created earlier and waiting for the same resources"));
      continue;
    }
    std::map<uint32_t, std::string> placement;
    std::string why = Choose(g, room, &placement);
    if (!why.empty()) {
      g.info.set_message(absl::StrCat("waiting for resources: ", why));
      held_back.insert(wants.begin(), wants.end());
      if (blocker.empty())
        blocker = PlacementGroupId::FromBinary(g.info.placement_group_id()).Hex();
      continue;
    }
    Attempt a;
    a.seq = ++attempt_seq_;
    a.id = *it;
    for (const auto& [index, node] : placement) a.by_node[node].push_back(index);
    a.replies_left = static_cast<int>(a.by_node.size());
    queue_.erase(it);
    attempt_ = std::move(a);
    for (const auto& [node, indexes] : attempt_->by_node) {
      proto::BundlesRequest req = BundlesFor(attempt_->id, g, indexes);
      uint64_t seq = attempt_->seq;
      nodes_.Send(proto::PREPARE_BUNDLES, node, req, [this, seq, node = node](absl::Status s) {
        OnPrepared(seq, node, std::move(s));
      });
    }
    return;
  }
}

void PlacementGroupManager::OnPrepared(uint64_t seq, const std::string& node_id,
                                       absl::Status status) {
  if (!attempt_ || attempt_->seq != seq) return;
  Attempt& a = *attempt_;
  a.prepared[node_id] = status.ok();
  if (status.ok()) {
    auto n = node_state_.find(node_id);
    if (n != node_state_.end()) {
      for (uint32_t i : a.by_node[node_id])
        n->second.held_since_report.Add(groups_[a.id].bundles[i]);
    }
  } else if (a.failure.empty()) {
    a.failure = absl::StrCat("node ", node_id, ": ", status.message());
  }
  if (--a.replies_left > 0) return;
  Group& g = groups_[a.id];
  if (!a.failure.empty() || g.removing) {
    AbortAttempt(g.removing ? g.info.message() : a.failure);
    return;
  }
  a.committing = true;
  a.replies_left = static_cast<int>(a.by_node.size());
  for (const auto& [node, indexes] : a.by_node) {
    proto::BundlesRequest req = BundlesFor(a.id, g, indexes);
    nodes_.Send(proto::COMMIT_BUNDLES, node, req,
                [this, seq, node = node](absl::Status s) { OnCommitted(seq, node, std::move(s)); });
  }
}

void PlacementGroupManager::OnCommitted(uint64_t seq, const std::string& node_id,
                                        absl::Status status) {
  if (!attempt_ || attempt_->seq != seq) return;
  Attempt& a = *attempt_;
  if (!status.ok() && a.failure.empty()) {
    a.failure = absl::StrCat("node ", node_id, ": ", status.message());
  }
  if (--a.replies_left > 0) return;
  Group& g = groups_[a.id];
  if (!a.failure.empty() || g.removing) {
    AbortAttempt(g.removing ? g.info.message() : a.failure);
    return;
  }
  for (const auto& [node, indexes] : a.by_node) {
    for (uint32_t i : indexes) g.info.mutable_bundles(static_cast<int>(i))->set_node_id(node);
  }
  g.info.set_state(proto::PG_CREATED);
  g.info.set_message("");
  g.info.set_created_time_ms(nodes_.NowMs());
  FinishAttempt();
  NotifyWaiters(g);
  Schedule();
}

void PlacementGroupManager::AbortAttempt(std::string why) {
  Attempt a = std::move(*attempt_);
  Group& g = groups_[a.id];
  // Give back what this attempt prepared (or committed), bundle by bundle: a rescheduling
  // group's other bundles on the same node stay. (held_since_report stays too, until the
  // node's next report: the room is underestimated meanwhile, never overestimated.)
  std::map<std::string, std::vector<uint32_t>> held;
  for (const auto& [node, ok] : a.prepared) {
    if (ok) held[node] = a.by_node[node];
  }
  const PlacementGroupId id = a.id;
  const bool removing = g.removing;
  if (removing) {
    // Bundles placed by an earlier attempt (a rescheduling group) go too: all of them.
    for (auto& [node, indexes] : held) indexes.clear();
    for (const auto& b : g.info.bundles()) {
      if (!b.node_id().empty()) held[b.node_id()].clear();
    }
    MarkRemoved(id, g, why);
  } else {
    g.info.set_message(absl::StrCat("waiting for resources: ", why));
  }
  // The attempt stays in place (no other group starts) until the cancels are answered.
  CancelOn(id, held,
           removing ? absl::StrCat("placement group ", id.Hex(), " was removed: ", why)
                    : std::string("placement attempt rolled back"),
           [this, id, removing] {
             attempt_.reset();
             auto g = groups_.find(id);
             if (g != groups_.end() && removing) {
               auto ws = std::move(g->second.remove_waiters);
               g->second.remove_waiters.clear();
               for (auto& w : ws) w(absl::OkStatus());
             } else if (g != groups_.end()) {
               queue_.push_front(id);
               Retry();
               return;
             }
             Schedule();
           });
}

void PlacementGroupManager::FinishAttempt() {
  attempt_.reset();
  backoff_ = std::chrono::milliseconds(0);
}

void PlacementGroupManager::Retry() {
  backoff_ = backoff_.count() == 0
                 ? kFirstBackoff
                 : std::min(kMaxBackoff, std::chrono::milliseconds(backoff_.count() * 3 / 2));
  if (retry_armed_) return;
  retry_armed_ = true;
  nodes_.RunAfter(backoff_, [this] {
    retry_armed_ = false;
    Schedule();
  });
}

}  // namespace raio::head
