// NodeManager's part in placement groups (see node_manager.h and
// docs/design/placement_groups.md): the head's two-phase reservation of bundles
// (PREPARE_BUNDLES, COMMIT_BUNDLES; the books are PlacementGroupResourceManager's), their
// return (CANCEL_BUNDLES), which ends the workers and actors holding them, and removed
// groups, whose queued leases and waiting actors fail.
#include <csignal>

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"
#include "raio/node/node_manager.h"

namespace raio::node {

namespace {
// Removed groups remembered, to refuse their late leases at once.
constexpr std::size_t kMaxRemovedGroups = 10000;
}  // namespace

void NodeManager::RegisterPlacementHandlers() {
  // The head's requests, on its connection only.
  auto from_head = [this](const char* what, auto handler) {
    return [this, what, handler](const auto& r, const proto::BundlesRequest& req) {
      if (r.conn() != head_) {
        r.Error(absl::PermissionDeniedError(absl::StrCat("only the head ", what, " on a node")));
        return;
      }
      (this->*handler)(r, req);
    };
  };
  service_.Handle<proto::PREPARE_BUNDLES>(
      from_head("reserves bundles", &NodeManager::HandlePrepareBundles));
  service_.Handle<proto::COMMIT_BUNDLES>(
      from_head("commits bundles", &NodeManager::HandleCommitBundles));
  service_.Handle<proto::CANCEL_BUNDLES>(
      from_head("gives bundles back", &NodeManager::HandleCancelBundles));
}

void NodeManager::HandlePrepareBundles(const rpc::Responder<proto::PREPARE_BUNDLES>& r,
                                       const proto::BundlesRequest& req) {
  absl::StatusOr<PlacementGroupResourceManager::Request> parsed =
      PlacementGroupResourceManager::Parse(req, /*need_resources=*/true);
  if (!parsed.ok()) {
    r.Error(parsed.status());
    return;
  }
  if (IsRemovedGroup(parsed->pg)) {
    r.Error(absl::FailedPreconditionError(RemovedGroupMessage(parsed->pg)));
    return;
  }
  if (absl::Status s = bundles_.Prepare(*parsed); !s.ok()) {
    RAIO_LOG_INFO("{}", s.message());
    r.Error(s);
    return;
  }
  // What the bundles hold is no longer free: the head's view hears it before the reply.
  ReportResources();
  r.Ok(proto::Empty());
}

void NodeManager::HandleCommitBundles(const rpc::Responder<proto::COMMIT_BUNDLES>& r,
                                      const proto::BundlesRequest& req) {
  absl::StatusOr<PlacementGroupResourceManager::Request> parsed =
      PlacementGroupResourceManager::Parse(req, /*need_resources=*/false);
  if (!parsed.ok()) {
    r.Error(parsed.status());
    return;
  }
  absl::StatusOr<bool> changed = bundles_.Commit(*parsed);
  if (!changed.ok()) {
    r.Error(changed.status());
    return;
  }
  // The head learns the new totals (REPORT_RESOURCES) before the reply.
  if (*changed) OnTotalsChanged();
  r.Ok(proto::Empty());
}

void NodeManager::HandleCancelBundles(const rpc::Responder<proto::CANCEL_BUNDLES>& r,
                                      const proto::BundlesRequest& req) {
  absl::StatusOr<PlacementGroupResourceManager::Request> parsed =
      PlacementGroupResourceManager::Parse(req, /*need_resources=*/false);
  if (!parsed.ok()) {
    r.Error(parsed.status());
    return;
  }
  std::vector<int> indices;
  for (const auto& [index, unused] : parsed->bundles) indices.push_back(index);
  CancelBundles(parsed->pg, indices, req.cause());
  r.Ok(proto::Empty());
}

void NodeManager::CancelBundles(const PlacementGroupId& pg, const std::vector<int>& indices,
                                const std::string& cause) {
  const std::vector<int> going = bundles_.Held(pg, indices);
  if (going.empty()) return;  // given back before (the head may ask again)
  const std::string why = cause.empty() ? absl::StrCat("the bundles of placement group ", pg.Hex(),
                                                       " on node ", id_.Hex(), " were given back")
                                        : cause;
  RAIO_LOG_INFO("giving back {} bundle(s) of placement group {}: {}", going.size(), pg.Hex(), why);
  // Holders end first, so that nothing holds the renamed resources when they go.
  std::vector<WorkerId> workers;
  for (auto& [id, lease] : leases_) {
    if (!lease.allocation || !bundles_.MustEndWith(*lease.allocation, pg, going)) continue;
    if (lease.granted) {
      workers.push_back(lease.worker);
    } else {
      // Not running yet: it waits again (it fails if the group was removed).
      resources_.Release(*lease.allocation);
      lease.allocation.reset();
    }
  }
  for (const WorkerId& worker : workers) {
    const WorkerProcess* w = pool_.Find(worker);
    if (w == nullptr) continue;
    // As the memory monitor does: the owner asks why its worker died as soon as its
    // connection breaks.
    proto::WorkerFailureCause failure;
    failure.set_kind(proto::WorkerFailureCause::CRASHED);
    failure.set_signal(SIGKILL);
    failure.set_pid(w->pid);
    failure.set_message(
        absl::StrCat(why, ": node ", id_.Hex(), " ended the worker holding its resources"));
    if (auto running = pool_.RunningTask(worker)) {
      failure.set_running_task_known(true);
      failure.set_running_task_id(*running);
    }
    RememberFailureCause(worker, std::move(failure));
    EndWorker(worker, why);
  }
  actors_.EndHolding([&](const Allocation& a) { return bundles_.MustEndWith(a, pg, going); }, why);
  bool changed = false;
  for (int index : going) changed = bundles_.Return(pg, index) || changed;
  if (changed) {
    OnTotalsChanged();
  } else {
    ReportResources();
    ScheduleLeases();
  }
}

void NodeManager::OnTotalsChanged() {
  view_.SetLocal(LocalView());
  ReportResources();
  RescheduleQueued();
}

void NodeManager::OnPlacementGroupsRemoved(const proto::ClusterViewUpdate& update) {
  for (const std::string& bytes : update.removed_placement_groups()) {
    if (bytes.size() != PlacementGroupId::kSize) continue;
    const PlacementGroupId pg = PlacementGroupId::FromBinary(bytes);
    if (removed_groups_.insert(pg).second) removed_order_.push_back(pg);
    while (removed_order_.size() > kMaxRemovedGroups) {
      removed_groups_.erase(removed_order_.front());
      removed_order_.pop_front();
    }
    const std::string why = RemovedGroupMessage(pg);
    proto::RequestWorkerLeaseReply reply;
    reply.set_result(proto::RequestWorkerLeaseReply::INFEASIBLE);
    reply.set_message(why);
    int failed = 0;
    for (auto it = leases_.begin(); it != leases_.end();) {
      auto next = std::next(it);
      if (!it->second.granted && it->second.spec.placement_group_id() == bytes) {
        it->second.owner->Reply(it->second.request, reply);
        ReleaseLease(it);  // its entry in pending_ or infeasible_ is dropped when next seen
        ++failed;
      }
      it = next;
    }
    if (failed > 0) RAIO_LOG_INFO("{}: {} queued lease(s) failed", why, failed);
    actors_.FailPlacementGroup(pg, why);
    // The head gives its bundles back first; should that have been missed, they go now.
    if (bundles_.HoldsGroup(pg)) CancelBundles(pg, {}, why);
  }
}

}  // namespace raio::node
