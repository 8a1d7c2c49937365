// NodeManager's part in the cluster: where a lease request goes (granted or queued here,
// spilled back, infeasible), the view of the other nodes, resource reports, and the
// configuration of jobs whose driver is on another node. See node_manager.h and
// docs/design/cluster.md.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "raio/common/config.h"
#include "raio/common/labels.h"
#include "raio/common/logging.h"
#include "raio/common/process.h"
#include "raio/head.pb.h"
#include "raio/node/node_manager.h"

namespace raio::node {

using ConnPtr = std::shared_ptr<rpc::Connection>;

ClusterScheduler::Decision NodeManager::DecideFor(const Lease& lease, bool local_has_room) {
  std::map<std::string, std::string> selector(lease.spec.label_selector().begin(),
                                              lease.spec.label_selector().end());
  return scheduler_.Decide(lease.demand, lease.spec.strategy(), selector, local_has_room);
}

bool NodeManager::ExcludesThisNode(const proto::RequestWorkerLeaseRequest& req,
                                   const std::map<std::string, std::string>& selector) const {
  if (req.strategy().kind() == proto::SchedulingStrategy::NODE_AFFINITY && !req.strategy().soft() &&
      req.strategy().node_id() != id_.Binary()) {
    return true;
  }
  if (selector.empty()) return false;
  absl::StatusOr<bool> match = MatchLabels(options_.labels, selector);
  return !match.ok() || !*match;
}

void NodeManager::HandleRequestLease(const ConnPtr& conn, const rpc::FrameHeader& h,
                                     const proto::RequestWorkerLeaseRequest& req) {
  const Peer& peer = peers_[conn.get()].second;
  // A local driver or worker leases for its own job; an owner on another node (a spilled
  // request, over TCP) names its job.
  JobId job = peer.kind == Peer::Kind::kUnknown ? req.job_id() : peer.job;
  if (job == 0) {
    conn->ReplyError(h, absl::FailedPreconditionError(
                            "register as a driver or worker first, or name the lease's job"));
    return;
  }
  auto demand = ResourceSet::FromProto(req.demand());
  if (!demand.ok()) {
    conn->ReplyError(h, demand.status());
    return;
  }
  std::map<std::string, std::string> selector(req.label_selector().begin(),
                                              req.label_selector().end());
  if (absl::Status s = ValidateLabelSelector(selector); !s.ok()) {
    conn->ReplyError(h, s);
    return;
  }
  LeaseId id = LeaseId::FromBinary(req.lease_id());
  if (leases_.count(id)) return;  // a retried request: the first one will be answered
  // A lease in a placement group waits while the group's bundles are not placed (the
  // group is pending or being placed again) instead of failing as infeasible.
  std::optional<PlacementGroupId> group;
  if (!req.placement_group_id().empty()) {
    if (req.placement_group_id().size() != PlacementGroupId::kSize) {
      conn->ReplyError(
          h, absl::InvalidArgumentError(absl::StrCat("the lease's placement group id has ",
                                                     req.placement_group_id().size(),
                                                     " bytes, not ", PlacementGroupId::kSize)));
      return;
    }
    group = PlacementGroupId::FromBinary(req.placement_group_id());
    if (IsRemovedGroup(*group)) {
      proto::RequestWorkerLeaseReply reply;
      reply.set_result(proto::RequestWorkerLeaseReply::INFEASIBLE);
      reply.set_message(RemovedGroupMessage(*group));
      conn->Reply(h, reply);
      return;
    }
  }
  const bool local_has_room = resources_.available().Contains(*demand);
  view_.SetLocalAvailable(resources_.available());
  bool infeasible = false;
  if (req.grant_or_reject()) {
    // Spilled here because the view said this node had room: grant now, or the owner asks
    // its own node again with a fresher view.
    if (!local_has_room) {
      proto::RequestWorkerLeaseReply reply;
      reply.set_result(proto::RequestWorkerLeaseReply::REJECTED);
      reply.set_message(
          absl::StrCat("node ", id_.Hex(), " has no room for ", demand->ToString(), " now"));
      conn->Reply(h, reply);
      return;
    }
  } else if (const bool hops_left =
                 req.spillback_count() < static_cast<uint32_t>(config::max_spillback_hops());
             !hops_left && ExcludesThisNode(req, selector)) {
    // Its hard constraints rule this node out and its owner could not reach a node they
    // allow, time after time: running it here would break them.
    proto::RequestWorkerLeaseReply reply;
    reply.set_result(proto::RequestWorkerLeaseReply::INFEASIBLE);
    reply.set_message(absl::StrCat(
        req.function_name(), " cannot run on node ", id_.Hex(),
        " (its node affinity or label selector rules it out) and its owner could not reach a "
        "node it may run on after ",
        req.spillback_count(), " tries; cluster resources: ", ClusterDescription()));
    conn->Reply(h, reply);
    return;
  } else if (hops_left || !resources_.CheckFeasible(*demand).ok()) {
    // Locality: the node holding the task's arguments, when it has room now.
    proto::SchedulingStrategy locality;
    const bool prefer = req.strategy().kind() == proto::SchedulingStrategy::DEFAULT &&
                        req.preferred_node_id().size() == NodeId::kSize &&
                        req.preferred_node_id() != id_.Binary() && req.spillback_count() == 0;
    if (prefer) {
      locality.set_kind(proto::SchedulingStrategy::NODE_AFFINITY);
      locality.set_node_id(req.preferred_node_id());
      locality.set_soft(true);
    }
    ClusterScheduler::Decision d =
        scheduler_.Decide(*demand, prefer ? locality : req.strategy(), selector, local_has_room);
    if (d.kind == ClusterScheduler::Decision::Kind::kLocal) {
      // The view's test is a sum of amounts; this node's own knows device rules (a GPU
      // demand above 1 must be whole).
      if (absl::Status f = resources_.CheckFeasible(*demand); !f.ok()) {
        d.kind = ClusterScheduler::Decision::Kind::kInfeasible;
        // Missing group resources may come with a bundle; a broken device rule never does.
        d.permanent = !group || f.code() != absl::StatusCode::kResourceExhausted;
        d.message = absl::StrCat(demand->ToString(), " (", f.message(), ")");
      }
    }
    if (d.kind == ClusterScheduler::Decision::Kind::kSpill) {
      view_.SubtractAvailable(d.node_id, *demand);
      ReplySpillback(conn, h, d.node_id, d.grant_or_reject);
      return;
    }
    if (d.kind == ClusterScheduler::Decision::Kind::kInfeasible) {
      if ((options_.fail_infeasible && !group) || d.permanent) {
        proto::RequestWorkerLeaseReply reply;
        reply.set_result(proto::RequestWorkerLeaseReply::INFEASIBLE);
        reply.set_message(absl::StrCat("no node can ever run ", req.function_name(),
                                       ", a task demanding ", d.message,
                                       "; cluster resources: ", ClusterDescription()));
        conn->Reply(h, reply);
        return;
      }
      infeasible = true;
      proto::LeaseInfeasibleNotice notice;
      notice.set_lease_id(req.lease_id());
      if (group) {
        // Expected, and short: a group just created is in this node's view once its nodes'
        // next reports are relayed; pending groups say why in Wait and `raio list
        // placement-groups`. No notice (the owner would warn of every new group).
        RAIO_LOG_DEBUG("{} waits for placement group {}: no node holds {} now", req.function_name(),
                       group->Hex(), d.message);
      } else {
        RAIO_LOG_WARN("{} waits: no node can meet {} now; cluster resources: {}",
                      req.function_name(), d.message, ClusterDescription());
        notice.set_message(absl::StrCat(
            req.function_name(), " cannot be scheduled: no node of the cluster can meet ",
            d.message, "; it waits until a node that can joins (cluster resources: ",
            ClusterDescription(), ")"));
        rpc::Notify<proto::LEASE_INFEASIBLE>(*conn, notice);
      }
    }
  }
  Lease& lease = leases_[id];
  lease.id = id;
  lease.job = job;
  lease.owner = conn;
  lease.request = h;
  lease.spec = req;
  lease.demand = std::move(*demand);
  lease.infeasible = infeasible;
  if (!pool_.HasJob(job)) FetchJob(job);
  if (infeasible) {
    infeasible_.push_back(id);
    return;
  }
  pending_.push_back(id);
  ScheduleLeases();
}

void NodeManager::ReplySpillback(const ConnPtr& conn, const rpc::FrameHeader& h,
                                 const std::string& node_id, bool grant_or_reject) {
  const NodeView* target = view_.Find(node_id);
  proto::RequestWorkerLeaseReply reply;
  reply.set_result(proto::RequestWorkerLeaseReply::SPILLBACK);
  if (target != nullptr) {
    *reply.mutable_retry_at() = target->address;
    reply.mutable_retry_at()->clear_unix_socket();
  }
  reply.set_grant_or_reject(grant_or_reject);
  conn->Reply(h, reply);
}

void NodeManager::RescheduleQueued() {
  view_.SetLocalAvailable(resources_.available());
  // Infeasible leases: a node that can meet them may have joined.
  for (auto it = infeasible_.begin(); it != infeasible_.end();) {
    auto lit = leases_.find(*it);
    if (lit == leases_.end()) {
      it = infeasible_.erase(it);
      continue;
    }
    Lease& lease = lit->second;
    ClusterScheduler::Decision d = DecideFor(lease, resources_.available().Contains(lease.demand));
    if (d.kind == ClusterScheduler::Decision::Kind::kInfeasible) {
      ++it;
      continue;
    }
    it = infeasible_.erase(it);
    lease.infeasible = false;
    if (d.kind == ClusterScheduler::Decision::Kind::kSpill) {
      view_.SubtractAvailable(d.node_id, lease.demand);
      ReplySpillback(lease.owner, lease.request, d.node_id, d.grant_or_reject);
      ReleaseLease(lit);
      continue;
    }
    RAIO_LOG_INFO("{} demanding {} can be scheduled now", lease.spec.function_name(),
                  lease.demand.ToString());
    pending_.push_back(lease.id);
  }
  // Queued leases that this node cannot grant now go to a node that has room (the view
  // says), unless they were spilled here on purpose or have used up their hops.
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto lit = leases_.find(*it);
    // A lease of a group whose bundle left this node: where the group's resources are now,
    // or waiting as infeasible until they are somewhere.
    if (lit != leases_.end() && !lit->second.allocation &&
        !lit->second.spec.placement_group_id().empty() &&
        !resources_.CheckFeasible(lit->second.demand).ok()) {
      Lease& lease = lit->second;
      ClusterScheduler::Decision d = DecideFor(lease, /*local_has_room=*/false);
      if (d.kind == ClusterScheduler::Decision::Kind::kSpill) {
        view_.SubtractAvailable(d.node_id, lease.demand);
        ReplySpillback(lease.owner, lease.request, d.node_id, d.grant_or_reject);
        ReleaseLease(lit);
        it = pending_.erase(it);
        continue;
      }
      if (d.kind == ClusterScheduler::Decision::Kind::kInfeasible) {
        lease.infeasible = true;
        infeasible_.push_back(lease.id);
        it = pending_.erase(it);
        continue;
      }
    }
    if (lit == leases_.end() || lit->second.allocation ||
        lit->second.spec.spillback_count() >= static_cast<uint32_t>(config::max_spillback_hops()) ||
        lit->second.spec.strategy().kind() == proto::SchedulingStrategy::NODE_AFFINITY ||
        resources_.available().Contains(lit->second.demand)) {
      ++it;
      continue;
    }
    Lease& lease = lit->second;
    ClusterScheduler::Decision d = DecideFor(lease, /*local_has_room=*/false);
    if (d.kind != ClusterScheduler::Decision::Kind::kSpill || !d.grant_or_reject) {
      ++it;
      continue;
    }
    view_.SubtractAvailable(d.node_id, lease.demand);
    ReplySpillback(lease.owner, lease.request, d.node_id, /*grant_or_reject=*/true);
    ReleaseLease(lit);
    it = pending_.erase(it);
  }
  ScheduleLeases();
}

void NodeManager::HandleClusterView(const proto::ClusterViewUpdate& update) {
  view_.Apply(update);
  NotifyRemovals(update);
  OnPlacementGroupsRemoved(update);
  RescheduleQueued();
}

void NodeManager::NotifyRemovals(const proto::ClusterViewUpdate& update) {
  for (const proto::NodeRemovedNotice& removal : update.removals()) {
    RAIO_LOG_INFO("node {} left the cluster: {}", removal.node_id(), removal.cause());
    for (auto& [raw, entry] : peers_) {
      if (entry.second.kind == Peer::Kind::kUnknown || entry.first->closed()) continue;
      rpc::Notify<proto::NODE_REMOVED>(*entry.first, removal);
    }
  }
}

void NodeManager::ArmHealthWatchdog() {
  if (stopped_ || cluster_lost_ || options_.head_in_process) return;
  if (!health_timer_) health_timer_ = std::make_unique<Timer>(loop_.io());
  const auto period = config::health_check_period_ms();
  health_timer_->expires_after(period);
  health_timer_->async_wait([this, period](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    // The head declares this node dead after `threshold` failed checks, each taking up to
    // max(period, timeout); one more period of slack before taking itself for cut off.
    // In double milliseconds: a year-long timeout times a huge threshold overflows int64.
    const double spacing_ms =
        static_cast<double>(std::max(period, config::health_check_timeout_ms()).count());
    const double limit_ms =
        spacing_ms * config::health_check_failure_threshold() + static_cast<double>(period.count());
    const int64_t silent_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_health_check_)
            .count();
    if (static_cast<double>(silent_ms) > limit_ms) {
      LoseCluster(absl::StrCat("no health check from the head for ", silent_ms,
                               " ms (cut off from the head, or the head is stuck)"));
      return;
    }
    ArmHealthWatchdog();
  });
}

void NodeManager::LoseCluster(const std::string& why) {
  if (stopped_ || cluster_lost_) return;
  cluster_lost_ = true;
  RAIO_LOG_WARN("node {} lost the cluster: {}; ending its workers and drivers' connections",
                id_.Hex(), why);
  // Its drivers and workers hear why first, before their workers end and their connection
  // closes (they would take the workers' deaths for crashes otherwise).
  proto::NodeRemovedNotice self;
  self.set_node_id(id_.Hex());
  self.set_cause(absl::StrCat("this node (", id_.Hex(), ") lost the cluster: ", why,
                              "; it ends its work and registers again under a new id"));
  self.set_died(true);
  for (auto& [raw, entry] : peers_) {
    if (entry.second.kind != Peer::Kind::kUnknown && !entry.first->closed()) {
      rpc::Notify<proto::NODE_REMOVED>(*entry.first, self, /*flush_now=*/true);
    }
  }
  // The head takes (or has taken) this node for dead and its work is being redone
  // elsewhere: nothing here may go on (its workers' results, its objects).
  pool_.KillAll();
  for (auto& [raw, entry] : peers_) {
    entry.first->Close(
        absl::UnavailableError(absl::StrCat("node ", id_.Hex(), " lost the cluster: ", why)));
  }
  if (head_ && !head_->closed()) head_->Close(absl::UnavailableError("node lost the cluster"));
  if (options_.on_cluster_lost) options_.on_cluster_lost(why);
}

void NodeManager::FetchJob(JobId job) {
  if (!head_ || preparing_jobs_.count(job) || !fetching_jobs_.insert(job).second) return;
  proto::GetJobInfoRequest req;
  req.set_job_id(job);
  rpc::Call<proto::GET_JOB_INFO>(
      *head_, req,
      [this, job](absl::StatusOr<proto::JobConfigInfo> info) { OnJobInfo(job, std::move(info)); });
}

void NodeManager::OnJobInfo(JobId job, absl::StatusOr<proto::JobConfigInfo> info) {
  fetching_jobs_.erase(job);
  if (stopped_ || pool_.HasJob(job) || preparing_jobs_.count(job)) return;
  std::string why;
  if (!info.ok()) {
    why = absl::StrCat("node ", id_.Hex(), " cannot learn job ", job,
                       "'s configuration from the head: ", info.status().message());
  } else if (!info->running()) {
    why = absl::StrCat("job ", job, " has finished");
  } else if (absl::Status s = AdoptJob(job, *info); !s.ok()) {
    why = std::string(s.message());
  }
  if (!why.empty()) {
    FailWorkerStarts(job, why);
    return;
  }
  ScheduleLeases();
}

absl::Status NodeManager::AdoptJob(JobId job, const proto::JobConfigInfo& info) {
  if (pool_.HasJob(job) || preparing_jobs_.count(job)) return absl::OkStatus();
  if (info.has_executable_package()) {
    PrepareJob(job, info);
    return absl::OkStatus();
  }
  if (::access(info.executable().c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", id_.Hex(), " (", Hostname(), ") cannot run job ", job,
                     "'s executable '", info.executable(), "': ", std::strerror(errno)));
  }
  remote_jobs_.insert(job);
  pool_.AddJob(job, JobConfig{info.executable(),
                              info.working_dir(),
                              info.ld_library_path(),
                              info.namespace_(),
                              {info.env_vars().begin(), info.env_vars().end()}});
  return absl::OkStatus();
}

void NodeManager::PrepareJob(JobId job, const proto::JobConfigInfo& info) {
  PreparingJob& p = preparing_jobs_[job];
  p.info = info;
  p.files_left = 1 + info.files_size();
  auto fetch = [this, job](const proto::PackageFile& file, bool is_executable) {
    packages_.Get(head_, file, [this, job, is_executable, file](absl::StatusOr<std::string> path) {
      auto it = preparing_jobs_.find(job);
      if (it == preparing_jobs_.end()) return;
      PreparingJob& p = it->second;
      if (!path.ok() && p.failure.empty()) {
        p.failure =
            absl::StrCat("cannot fetch ", is_executable ? "the executable " : "the file ",
                         file.path(), " (", file.sha256(), ", ", file.size_bytes(),
                         " bytes) of job ", job, " from the head: ", path.status().message());
      }
      if (path.ok() && is_executable) p.executable = *path;
      if (--p.files_left == 0) OnJobPackageReady(job);
    });
  };
  fetch(info.executable_package(), /*is_executable=*/true);
  // (Copies: a callback that runs at once may not outlive `p` otherwise.)
  const auto files = info.files();
  for (const proto::PackageFile& f : files) fetch(f, /*is_executable=*/false);
}

void NodeManager::OnJobPackageReady(JobId job) {
  auto it = preparing_jobs_.find(job);
  if (it == preparing_jobs_.end()) return;
  PreparingJob p = std::move(it->second);
  preparing_jobs_.erase(it);
  if (stopped_) return;
  std::string failure = p.failure;
  // The job directory: the declared files at their relative paths (links into the cache:
  // read-only by convention), the workers' working directory when the job declared files
  // or the driver's directory does not exist here.
  std::string working_dir = p.info.working_dir();
  std::error_code ec;
  if (failure.empty() && (p.info.files_size() > 0 || working_dir.empty() ||
                          !std::filesystem::is_directory(working_dir))) {
    working_dir = absl::StrCat(options_.session_dir, "/jobs/", job);
    std::filesystem::create_directories(working_dir, ec);
    for (const proto::PackageFile& f : p.info.files()) {
      std::filesystem::path rel(f.path());
      bool climbs = false;
      for (const auto& part : rel) climbs = climbs || part == "..";
      if (rel.empty() || rel.is_absolute() || climbs) {
        failure = absl::StrCat("job ", job, " declares the file '", f.path(),
                               "', which is not a relative path without '..'");
        break;
      }
      std::filesystem::path dest = std::filesystem::path(working_dir) / rel;
      std::filesystem::create_directories(dest.parent_path(), ec);
      std::filesystem::remove(dest, ec);
      const std::string cached = absl::StrCat(options_.session_dir, "/packages/", f.sha256());
      std::filesystem::create_hard_link(cached, dest, ec);
      if (ec) std::filesystem::copy_file(cached, dest, ec);
      if (ec) {
        failure = absl::StrCat("cannot place job ", job, "'s file ", f.path(), " at ",
                               dest.string(), ": ", ec.message());
        break;
      }
    }
  }
  if (!failure.empty()) {
    FailWorkerStarts(job, failure);
    return;
  }
  RAIO_LOG_INFO("job {}: runs {} (the package of {}) in {}", job, p.executable, p.info.executable(),
                working_dir);
  remote_jobs_.insert(job);
  pool_.AddJob(job, JobConfig{p.executable,
                              working_dir,
                              p.info.ld_library_path(),
                              p.info.namespace_(),
                              {p.info.env_vars().begin(), p.info.env_vars().end()}});
  ScheduleLeases();
}

void NodeManager::ArmReportTimer() {
  if (!report_timer_) report_timer_ = std::make_unique<Timer>(loop_.io());
  report_timer_->expires_after(config::resource_report_interval_ms());
  report_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    ReportResources();
    ArmReportTimer();
  });
}

void NodeManager::ReportResources() {
  const ResourceSet& available = resources_.available();
  uint32_t infeasible = 0;
  for (const auto& id : infeasible_) infeasible += leases_.count(id) > 0 ? 1 : 0;
  // Totals change with placement group bundles committed or given back here.
  const bool total_changed = !(resources_.total() == reported_total_);
  if (available == reported_available_ && infeasible == reported_infeasible_ && !total_changed) {
    return;
  }
  reported_available_ = available;
  reported_infeasible_ = infeasible;
  view_.SetLocalAvailable(available);
  proto::ResourceReport report;
  report.set_node_id(id_.Hex());
  report.set_version(++report_version_);
  available.ToProto(report.mutable_available());
  report.set_infeasible_leases(infeasible);
  if (total_changed) {
    reported_total_ = resources_.total();
    reported_total_.ToProto(report.mutable_total());
    report.set_total_changed(true);
  }
  if (head_ && !head_->closed()) rpc::Notify<proto::REPORT_RESOURCES>(*head_, report);
}

void NodeManager::HandlePullObjects(const ConnPtr& conn, const rpc::FrameHeader& h,
                                    proto::PullObjectsRequest& req) {
  struct State {
    int left = 0;
    absl::Status first;
  };
  auto state = std::make_shared<State>();
  state->left = req.objects_size();
  if (state->left == 0) return conn->Reply(h, proto::Empty());
  auto finish = [conn, h, state](const absl::Status& s) {
    if (!s.ok() && state->first.ok()) state->first = s;
    if (--state->left > 0) return;
    state->first.ok() ? conn->Reply(h, proto::Empty()) : conn->ReplyError(h, state->first);
  };
  for (proto::PullObject& o : *req.mutable_objects()) {
    if (o.object_id().size() != ObjectId::kSize) {
      finish(absl::InvalidArgumentError(absl::StrCat("PULL_OBJECTS: an object id has ",
                                                     o.object_id().size(), " bytes, not ",
                                                     ObjectId::kSize)));
      continue;
    }
    ObjectId id = ObjectId::FromBinary(o.object_id());
    if (store_->HasSealed(id)) {
      finish(absl::OkStatus());
      continue;
    }
    std::vector<proto::Address> sources;
    for (proto::Address& a : *o.mutable_sources()) {
      if (a.node_id() == id_.Binary() || a.ip().empty() || a.port() <= 0) continue;
      a.clear_unix_socket();
      sources.push_back(std::move(a));
    }
    if (sources.empty()) {
      finish(absl::NotFoundError(absl::StrCat("object ", id.Hex(), " is not on node ", id_.Hex(),
                                              " and no other node is known to hold a copy")));
      continue;
    }
    object_manager_->Pull(id, std::move(sources), finish);
  }
}

}  // namespace raio::node
