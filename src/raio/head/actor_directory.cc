#include "raio/head/actor_directory.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "raio/common/labels.h"
#include "raio/common/logging.h"
#include "raio/scheduling/device_rules.h"

namespace raio::head {

namespace {

bool CanRestart(const proto::ActorSpec& spec, uint32_t num_restarts) {
  int max = spec.max_restarts();
  return max < 0 || static_cast<int>(num_restarts) < max;
}

std::string KillCause(bool no_restart) {
  return no_restart ? "it was killed with Kill()"
                    : "it was killed with Kill(false) and had no restarts left";
}

std::map<std::string, std::string> SelectorOf(const proto::ActorSpec& spec) {
  return {spec.label_selector().begin(), spec.label_selector().end()};
}

}  // namespace

ActorDirectory::ActorDirectory(Nodes& nodes, Options options)
    : nodes_(nodes),
      options_(options),
      scheduler_(view_, options.spread_threshold, options.top_k_fraction, options.seed) {}

proto::ActorInfo ActorDirectory::Info(const ActorId& id, const Record& r) const {
  // What the node last said (address, incarnation, pid, restarts), then what the head owns.
  proto::ActorInfo info = r.reported;
  info.set_actor_id(id.Binary());
  info.set_state(r.state);
  if (r.state != proto::ACTOR_ALIVE) info.clear_address();
  info.set_name(r.spec.name());
  info.set_namespace_(r.spec.namespace_());
  info.set_class_name(r.spec.class_name());
  info.set_death_cause(r.state == proto::ACTOR_DEAD ? r.death_cause : "");
  *info.mutable_resources() = r.spec.resources();
  info.set_node_id(r.node_id);
  info.set_job_id(r.job.job_id());
  info.set_detached(r.spec.detached());
  info.set_max_task_retries(r.spec.max_task_retries());
  info.set_max_restarts(r.spec.max_restarts());
  if (r.state == proto::ACTOR_PENDING && (r.node_id.empty() || r.placing)) {
    info.set_waiting_for_resources(true);
  } else if (r.state == proto::ACTOR_ALIVE || r.state == proto::ACTOR_DEAD) {
    info.set_waiting_for_resources(false);
  }
  info.set_infeasible(r.infeasible);
  info.set_pending_reason(r.pending_reason);
  return info;
}

std::string ActorDirectory::ClusterDescription() const {
  std::vector<std::string> nodes;
  for (const auto& [id, node] : view_.nodes()) {
    nodes.push_back(absl::StrCat("node ", id, " ", node.total.ToString()));
  }
  return nodes.empty() ? std::string("no nodes") : absl::StrJoin(nodes, "; ");
}

bool ActorDirectory::JobEnded(const Record& r) const {
  return finished_jobs_.count(r.job.job_id()) > 0;
}

void ActorDirectory::OnNodeUpdated(const proto::NodeInfo& node) {
  const scheduling::NodeView* before = view_.Find(node.node_id());
  const bool joined = before == nullptr;
  auto total = ResourceSet::FromProto(node.total());
  // Its totals change when placement group bundles are committed or given back there.
  const bool grew = !joined && total.ok() && !(before->total == *total);
  proto::ClusterViewUpdate update;
  *update.add_nodes() = node;
  view_.Apply(update);
  if ((!joined && !grew) || infeasible_.empty()) return;
  // A node that can hold some of the actors waiting for one may have joined, or a bundle
  // they wait for may be there now.
  std::set<ActorId> waiting = infeasible_;
  for (const auto& id : waiting) {
    auto it = actors_.find(id);
    if (it != actors_.end()) (void)Schedule(id, it->second, /*at_creation=*/false);
  }
}

void ActorDirectory::OnNodeRemoved(const std::string& node_id, const std::string& cause) {
  proto::ClusterViewUpdate update;
  update.add_removed_node_ids(node_id);
  view_.Apply(update);
  for (auto& [id, r] : actors_) {
    if (r.node_id != node_id || r.state == proto::ACTOR_DEAD) continue;
    if (!r.placing && r.state != proto::ACTOR_PENDING) {
      // It ran there: restarted on another node (its constructor runs again) while it has
      // restarts left, as after a crash of its process.
      std::string why = absl::StrCat("its node ", node_id, " left the cluster (", cause, ")");
      const uint32_t restarts = r.reported.num_restarts();
      if (JobEnded(r) && !r.spec.detached()) {
        Bury(id, r, "its job ended");
      } else if (const auto& st = r.spec.scheduling_strategy();
                 st.kind() == proto::SchedulingStrategy::NODE_AFFINITY && !st.soft() &&
                 absl::BytesToHexString(st.node_id()) == node_id) {
        Bury(id, r,
             absl::StrCat(why,
                          "; its hard node affinity pins it to that node, so it is not "
                          "restarted elsewhere"));
      } else if (!CanRestart(r.spec, restarts)) {
        Bury(id, r,
             r.spec.max_restarts() == 0
                 ? why
                 : absl::StrCat(why, " and it had no restarts left (", restarts, " of ",
                                r.spec.max_restarts(), " used)"));
      } else {
        RAIO_LOG_INFO("actor {} ({}) restarts elsewhere: {}", id.Hex(), r.spec.class_name(), why);
        r.reported.set_num_restarts(restarts + 1);
        r.reported.set_incarnation(r.reported.incarnation() + 1);
        r.reported.set_restart_cause(why);
        r.reported.clear_address();
        r.state = proto::ACTOR_RESTARTING;
        r.node_id.clear();
        r.rejections = 0;
        (void)Schedule(id, r, /*at_creation=*/false);
      }
      continue;
    }
    if (!r.placing) {
      // Accepted there but never started (it waited for resources): placed elsewhere.
      r.node_id.clear();
      (void)Schedule(id, r, /*at_creation=*/false);
      continue;
    }
    // Its placement was never answered: it never ran, so it may go elsewhere.
    r.placing = false;
    ++r.placements;  // a late answer is not taken
    r.node_id.clear();
    std::optional<bool> kill = std::exchange(r.kill_while_placing, std::nullopt);
    if (kill && (*kill || !CanRestart(r.spec, r.reported.num_restarts()))) {
      Bury(id, r, KillCause(*kill));
    } else if (JobEnded(r) && !r.spec.detached()) {
      Bury(id, r, "its job ended");
    } else {
      (void)Schedule(id, r, /*at_creation=*/false);
    }
  }
}

void ActorDirectory::OnPlacementGroupRemoved(const std::string& pg_id, const std::string& cause) {
  // Those on a node die there (the node's CANCEL_BUNDLES ends them and reports it).
  std::vector<ActorId> waiting;
  for (const ActorId& id : infeasible_) {
    auto it = actors_.find(id);
    if (it != actors_.end() && it->second.spec.placement_group_id() == pg_id) waiting.push_back(id);
  }
  for (const ActorId& id : waiting) {
    infeasible_.erase(id);
    Bury(id, actors_[id], cause);
  }
}

void ActorDirectory::OnJobFinished(uint32_t job_id) {
  finished_jobs_.insert(job_id);
  // Their nodes end the processes (each hears of the job's end itself); callers learn it
  // here at once.
  for (auto& [id, r] : actors_) {
    if (r.job.job_id() != job_id || r.spec.detached() || r.state == proto::ACTOR_DEAD) continue;
    Bury(id, r, "its job ended");
  }
}

absl::StatusOr<proto::ActorInfo> ActorDirectory::Create(const proto::ActorSpec& spec,
                                                        const proto::JobConfigInfo& job,
                                                        const std::string& creator_node) {
  ActorId id = ActorId::FromBinary(spec.actor_id());
  if (id.IsNil() || actors_.count(id)) {
    return absl::InvalidArgumentError("bad or reused actor id");
  }
  auto demand = ResourceSet::FromProto(spec.resources());
  if (!demand.ok()) return demand.status();
  if (absl::Status s = scheduling::CheckDeviceRules(*demand); !s.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat("no node can ever hold actor ",
                                                     spec.class_name(), ", which demands ",
                                                     demand->ToString(), " (", s.message(), ")"));
  }
  if (absl::Status s = ValidateLabelSelector(SelectorOf(spec)); !s.ok()) return s;
  if (job.job_id() == 0 || (!job.running() && !spec.detached())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.job_id(), " has ended: it creates no more actors"));
  }
  std::pair<std::string, std::string> key{spec.namespace_(), spec.name()};
  if (!spec.name().empty()) {
    if (auto it = names_.find(key); it != names_.end()) {
      const Record& other = actors_.at(it->second);
      return absl::AlreadyExistsError(absl::StrCat(
          "an actor named '", spec.name(), "' already exists in namespace '", spec.namespace_(),
          "' (actor ", it->second.Hex(), ", ", other.spec.class_name(),
          other.node_id.empty() ? std::string(", not placed yet")
                                : absl::StrCat(", on node ", other.node_id),
          "); names are unique among the cluster's live actors of a namespace"));
    }
  }
  Record& r = actors_[id];
  r.spec = spec;
  r.job = job;
  r.demand = std::move(*demand);
  r.creator_node = creator_node;
  if (absl::Status s = Schedule(id, r, /*at_creation=*/true); !s.ok()) {
    actors_.erase(id);
    return s;
  }
  if (!spec.name().empty()) names_[key] = id;
  return Info(id, r);
}

absl::Status ActorDirectory::Schedule(const ActorId& id, Record& r, bool at_creation) {
  if (r.state == proto::ACTOR_DEAD || r.placing || stopped_) return absl::OkStatus();
  const scheduling::NodeView* creator = view_.Find(r.creator_node);
  const bool creator_has_room = creator != nullptr && creator->available.Contains(r.demand);
  scheduling::ClusterScheduler::Decision d = scheduler_.DecideFor(
      r.creator_node, r.demand, r.spec.scheduling_strategy(), SelectorOf(r.spec), creator_has_room);
  if (d.kind == scheduling::ClusterScheduler::Decision::Kind::kInfeasible) {
    std::string why =
        absl::StrCat("no node can ever hold actor ", r.spec.class_name(), ", which demands ",
                     d.message, "; cluster resources: ", ClusterDescription());
    // An actor of a placement group waits for its bundle (the group may be pending or
    // rescheduling); it dies if the group is removed (OnPlacementGroupRemoved).
    const bool in_group = !r.spec.placement_group_id().empty();
    if ((options_.fail_infeasible && !in_group) || d.permanent) {
      if (at_creation) return absl::ResourceExhaustedError(why);
      Bury(id, r, why);
      return absl::OkStatus();
    }
    if (!r.infeasible && !in_group) {
      RAIO_LOG_WARN("actor {} ({}) waits: {}", id.Hex(), r.spec.class_name(), why);
    }
    r.infeasible = true;
    r.pending_reason =
        in_group ? absl::StrCat("actor ", r.spec.class_name(),
                                " waits for its placement group's bundle to be reserved")
                 : absl::StrCat("actor ", r.spec.class_name(),
                                " cannot be scheduled: no node of the cluster can meet ", d.message,
                                "; it waits until a node that can joins (cluster "
                                "resources: ",
                                ClusterDescription(), ")");
    r.node_id.clear();
    infeasible_.insert(id);
    return absl::OkStatus();
  }
  const std::string target =
      d.kind == scheduling::ClusterScheduler::Decision::Kind::kLocal ? r.creator_node : d.node_id;
  if (r.infeasible) RAIO_LOG_INFO("actor {} can be scheduled now", id.Hex());
  infeasible_.erase(id);
  r.infeasible = false;
  r.pending_reason.clear();
  const scheduling::NodeView* node = view_.Find(target);
  proto::PlaceActorRequest req;
  *req.mutable_spec() = r.spec;
  req.set_job_id(r.job.job_id());
  *req.mutable_job() = r.job;
  req.mutable_job()->set_running(!JobEnded(r));
  req.set_grant_or_reject(node != nullptr && node->available.Contains(r.demand) &&
                          r.rejections < options_.max_rejections);
  if (r.state == proto::ACTOR_RESTARTING) {
    req.set_incarnation(r.reported.incarnation());
    req.set_num_restarts(r.reported.num_restarts());
    req.set_restart_reason(r.reported.restart_cause());
  }
  // Counted as taken there until the node's next report, so that a burst of creations
  // does not all go to the one node the view last saw free.
  view_.SubtractAvailable(target, r.demand);
  r.node_id = target;
  r.placing = true;
  uint64_t placement = ++r.placements;
  nodes_.Place(target, req,
               [this, id, placement, target](absl::StatusOr<proto::PlaceActorReply> reply) {
                 OnPlaced(id, placement, target, std::move(reply));
               });
  return absl::OkStatus();
}

void ActorDirectory::OnPlaced(const ActorId& id, uint64_t placement, const std::string& node_id,
                              absl::StatusOr<proto::PlaceActorReply> reply) {
  if (stopped_) return;
  auto it = actors_.find(id);
  if (it == actors_.end()) return;
  Record& r = it->second;
  if (!r.placing || r.placements != placement) return;  // a placement given up on
  r.placing = false;
  std::optional<bool> kill = std::exchange(r.kill_while_placing, std::nullopt);
  if (r.state == proto::ACTOR_DEAD) return;
  if (!reply.ok()) {
    // Not a node that left (OnNodeRemoved placed it again): one that did not answer. It
    // may hold the actor, so it is asked to end it.
    Bury(id, r,
         absl::StrCat("its placement on node ", node_id, " failed: ", reply.status().message()));
    proto::KillActorRequest kill_req;
    kill_req.set_actor_id(id.Binary());
    kill_req.set_no_restart(true);
    nodes_.Kill(node_id, kill_req, [](absl::Status) {});
    return;
  }
  switch (reply->result()) {
    case proto::PlaceActorReply::ACCEPTED:
      r.rejections = 0;
      if (r.state == proto::ACTOR_PENDING) {
        r.reported.set_waiting_for_resources(reply->waiting_for_resources());
      }
      return;
    case proto::PlaceActorReply::REJECTED:
      ++r.rejections;
      view_.SubtractAvailable(node_id, r.demand);
      r.node_id.clear();
      if (kill && (*kill || !CanRestart(r.spec, r.reported.num_restarts()))) {
        Bury(id, r, KillCause(*kill));
      } else if (JobEnded(r) && !r.spec.detached()) {
        Bury(id, r, "its job ended");
      } else {
        (void)Schedule(id, r, /*at_creation=*/false);
      }
      return;
    default:
      Bury(id, r, absl::StrCat("node ", node_id, " cannot host it: ", reply->message()));
      return;
  }
}

void ActorDirectory::Wait(const ActorId& id, uint32_t min_incarnation, InfoCallback done) {
  auto it = actors_.find(id);
  if (it == actors_.end()) {
    done(absl::NotFoundError(absl::StrCat("no actor ", id.Hex(), " in the cluster")));
    return;
  }
  Record& r = it->second;
  if (r.state == proto::ACTOR_DEAD ||
      (r.state == proto::ACTOR_ALIVE && r.reported.incarnation() >= min_incarnation)) {
    done(Info(id, r));
    return;
  }
  r.waiters.push_back(Waiter{min_incarnation, std::move(done)});
}

absl::StatusOr<proto::ActorInfo> ActorDirectory::GetNamed(const std::string& ns,
                                                          const std::string& name) const {
  auto it = names_.find({ns, name});
  if (it == names_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no live actor named '", name, "' in namespace '", ns, "'"));
  }
  return Info(it->second, actors_.at(it->second));
}

void ActorDirectory::Kill(const ActorId& id, bool no_restart, DoneCallback done) {
  auto it = actors_.find(id);
  if (it == actors_.end() || it->second.state == proto::ACTOR_DEAD) {
    done(absl::OkStatus());
    return;
  }
  Record& r = it->second;
  if (r.node_id.empty()) {
    // Waiting at the head: no process to end.
    if (no_restart || !CanRestart(r.spec, r.reported.num_restarts())) {
      Bury(id, r, KillCause(no_restart));
    }
    done(absl::OkStatus());
    return;
  }
  if (r.placing) {
    // The kill follows the placement on the node's connection; if the node turns the
    // placement down, OnPlaced applies it.
    r.kill_while_placing = r.kill_while_placing.value_or(false) || no_restart;
  }
  proto::KillActorRequest req;
  req.set_actor_id(id.Binary());
  req.set_no_restart(no_restart);
  std::string node_id = r.node_id;
  nodes_.Kill(node_id, req, [this, id, node_id, done = std::move(done)](absl::Status s) {
    auto it = actors_.find(id);
    if (!s.ok() && !stopped_ && it != actors_.end() && it->second.state != proto::ACTOR_DEAD &&
        it->second.node_id == node_id) {
      done(absl::UnavailableError(absl::StrCat("cannot reach node ", node_id, " to kill actor ",
                                               id.Hex(), ": ", s.message())));
      return;
    }
    done(absl::OkStatus());
  });
}

void ActorDirectory::OnReport(const std::string& node_id, const proto::ActorInfo& report) {
  ActorId id = ActorId::FromBinary(report.actor_id());
  auto it = actors_.find(id);
  if (it == actors_.end()) return;
  Record& r = it->second;
  if (r.state == proto::ACTOR_DEAD || r.node_id != node_id) return;
  r.reported = report;
  r.reported.clear_death_cause();
  if (report.state() == proto::ACTOR_DEAD) {
    Bury(id, r, report.death_cause().empty() ? "its node ended it" : report.death_cause());
    return;
  }
  r.state = report.state();
  NotifyWaiters(id, r);
}

void ActorDirectory::Bury(const ActorId& id, Record& r, const std::string& cause) {
  RAIO_LOG_INFO("actor {} is dead: {}", id.Hex(), cause);
  r.state = proto::ACTOR_DEAD;
  r.death_cause = cause;
  r.infeasible = false;
  r.pending_reason.clear();
  infeasible_.erase(id);
  if (!r.spec.name().empty()) {
    auto it = names_.find({r.spec.namespace_(), r.spec.name()});
    if (it != names_.end() && it->second == id) names_.erase(it);
  }
  NotifyWaiters(id, r);
}

void ActorDirectory::NotifyWaiters(const ActorId& id, Record& r) {
  if (r.waiters.empty()) return;
  std::vector<Waiter> keep;
  std::vector<Waiter> ready;
  for (auto& w : r.waiters) {
    if (r.state == proto::ACTOR_DEAD ||
        (r.state == proto::ACTOR_ALIVE && r.reported.incarnation() >= w.min_incarnation)) {
      ready.push_back(std::move(w));
    } else {
      keep.push_back(std::move(w));
    }
  }
  r.waiters = std::move(keep);
  if (ready.empty()) return;
  proto::ActorInfo info = Info(id, r);
  for (auto& w : ready) w.done(info);
}

proto::ActorList ActorDirectory::List() const {
  proto::ActorList list;
  for (const auto& [id, r] : actors_) *list.add_actors() = Info(id, r);
  return list;
}

void ActorDirectory::Stop() {
  stopped_ = true;
  for (auto& [id, r] : actors_) {
    std::vector<Waiter> waiters = std::move(r.waiters);
    r.waiters.clear();
    for (auto& w : waiters) w.done(absl::UnavailableError("the head is stopping"));
  }
}

}  // namespace raio::head
