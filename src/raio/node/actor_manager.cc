#include "raio/node/actor_manager.h"

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"
#include "raio/node.pb.h"
#include "raio/node/scheduler/placement_group_resource_manager.h"
#include "raio/rpc.pb.h"

namespace raio::node {

ActorManager::ActorManager(LocalResourceManager& resources, WorkerPool& pool, std::string node_id)
    : resources_(resources), pool_(pool), node_id_(std::move(node_id)) {}

proto::ActorInfo ActorManager::Info(const Record& r) const {
  proto::ActorInfo info;
  info.set_actor_id(r.spec.actor_id());
  info.set_state(r.state);
  if (r.state == proto::ACTOR_ALIVE) *info.mutable_address() = r.address;
  info.set_incarnation(r.incarnation);
  info.set_name(r.spec.name());
  info.set_namespace_(r.spec.namespace_());
  info.set_class_name(r.spec.class_name());
  info.set_num_restarts(r.num_restarts);
  info.set_death_cause(r.death_cause);
  info.set_restart_cause(r.restart_cause);
  *info.mutable_resources() = r.spec.resources();
  info.set_waiting_for_resources(
      (r.state == proto::ACTOR_PENDING || r.state == proto::ACTOR_RESTARTING) && !r.allocation);
  info.set_node_id(node_id_);
  info.set_job_id(r.job);
  info.set_pid(r.pid);
  info.set_detached(r.spec.detached());
  info.set_max_task_retries(r.spec.max_task_retries());
  info.set_max_restarts(r.spec.max_restarts());
  return info;
}

template <proto::Method M>
void ActorManager::ForwardToHead(const rpc::Responder<M>& responder,
                                 const typename rpc::MethodTraits<M>::Request& request) {
  std::shared_ptr<rpc::Connection> head = links_.head ? links_.head() : nullptr;
  if (head == nullptr || head->closed()) {
    responder.Error(absl::UnavailableError(
        absl::StrCat("node ", node_id_, " has no connection to the head (actors live there)")));
    return;
  }
  using Reply = typename rpc::MethodTraits<M>::Reply;
  rpc::Call<M>(*head, request, [responder](absl::StatusOr<Reply> reply) {
    if (reply.ok()) {
      responder.Ok(*reply);
    } else {
      responder.Error(reply.status());
    }
  });
}

void ActorManager::RegisterHandlers(rpc::Service& service, Links links) {
  links_ = std::move(links);
  // A local client's calls: the head keeps the directory.
  service.Handle<proto::CREATE_ACTOR>(
      [this](const rpc::Responder<proto::CREATE_ACTOR>& r, proto::CreateActorRequest& req) {
        JobId job = links_.job_of(*r.conn());
        if (job == 0) {
          r.Error(absl::FailedPreconditionError("register as a driver or worker first"));
          return;
        }
        req.set_job_id(job);
        ForwardToHead<proto::CREATE_ACTOR>(r, req);
      });
  service.Handle<proto::WAIT_ACTOR>(
      [this](const rpc::Responder<proto::WAIT_ACTOR>& r, const proto::WaitActorRequest& req) {
        ForwardToHead<proto::WAIT_ACTOR>(r, req);
      });
  service.Handle<proto::GET_NAMED_ACTOR>([this](const rpc::Responder<proto::GET_NAMED_ACTOR>& r,
                                                const proto::GetNamedActorRequest& req) {
    ForwardToHead<proto::GET_NAMED_ACTOR>(r, req);
  });
  service.Handle<proto::KILL_ACTOR>(
      [this](const rpc::Responder<proto::KILL_ACTOR>& r, const proto::KillActorRequest& req) {
        ForwardToHead<proto::KILL_ACTOR>(r, req);
      });
  // Placement groups: the head keeps them too (the creator's job is filled in here).
  service.Handle<proto::CREATE_PLACEMENT_GROUP>(
      [this](const rpc::Responder<proto::CREATE_PLACEMENT_GROUP>& r,
             proto::PlacementGroupSpec& spec) {
        JobId job = links_.job_of(*r.conn());
        if (job == 0) {
          r.Error(absl::FailedPreconditionError("register as a driver or worker first"));
          return;
        }
        spec.set_job_id(job);
        ForwardToHead<proto::CREATE_PLACEMENT_GROUP>(r, spec);
      });
  service.Handle<proto::WAIT_PLACEMENT_GROUP>(
      [this](const rpc::Responder<proto::WAIT_PLACEMENT_GROUP>& r,
             const proto::WaitPlacementGroupRequest& req) {
        ForwardToHead<proto::WAIT_PLACEMENT_GROUP>(r, req);
      });
  service.Handle<proto::REMOVE_PLACEMENT_GROUP>(
      [this](const rpc::Responder<proto::REMOVE_PLACEMENT_GROUP>& r,
             const proto::PlacementGroupRequest& req) {
        ForwardToHead<proto::REMOVE_PLACEMENT_GROUP>(r, req);
      });
  service.Handle<proto::GET_PLACEMENT_GROUP>(
      [this](const rpc::Responder<proto::GET_PLACEMENT_GROUP>& r,
             const proto::PlacementGroupRequest& req) {
        ForwardToHead<proto::GET_PLACEMENT_GROUP>(r, req);
      });
  service.Handle<proto::LIST_PLACEMENT_GROUPS>(
      [this](const rpc::Responder<proto::LIST_PLACEMENT_GROUPS>& r, const proto::Empty& req) {
        ForwardToHead<proto::LIST_PLACEMENT_GROUPS>(r, req);
      });
  service.Handle<proto::LIST_ACTORS>(
      [this](const rpc::Responder<proto::LIST_ACTORS>& r, const proto::Empty&) { r.Ok(List()); });
  // The head's requests, on its connection only.
  service.Handle<proto::PLACE_ACTOR>(
      [this](const rpc::Responder<proto::PLACE_ACTOR>& r, const proto::PlaceActorRequest& req) {
        if (!links_.head || r.conn() != links_.head()) {
          r.Error(absl::PermissionDeniedError("only the head places actors"));
          return;
        }
        HandlePlace(r, req);
      });
  service.Handle<proto::KILL_LOCAL_ACTOR>(
      [this](const rpc::Responder<proto::KILL_LOCAL_ACTOR>& r, const proto::KillActorRequest& req) {
        if (!links_.head || r.conn() != links_.head()) {
          r.Error(absl::PermissionDeniedError("only the head kills actors here"));
          return;
        }
        HandleKill(req);
        r.Ok(proto::Empty());
      });
}

void ActorManager::HandlePlace(const rpc::Responder<proto::PLACE_ACTOR>& responder,
                               const proto::PlaceActorRequest& req) {
  proto::PlaceActorReply reply;
  auto fail = [&](std::string message) {
    reply.set_result(proto::PlaceActorReply::FAILED);
    reply.set_message(std::move(message));
    responder.Ok(reply);
  };
  const proto::ActorSpec& spec = req.spec();
  ActorId id = ActorId::FromBinary(spec.actor_id());
  if (id.IsNil() || actors_.count(id)) return fail("bad or reused actor id");
  auto demand = ResourceSet::FromProto(spec.resources());
  if (!demand.ok()) return fail(std::string(demand.status().message()));
  const bool in_group = !spec.placement_group_id().empty();
  if (in_group) {
    if (spec.placement_group_id().size() != PlacementGroupId::kSize) {
      return fail("bad placement group id");
    }
    const PlacementGroupId pg = PlacementGroupId::FromBinary(spec.placement_group_id());
    if (links_.placement_group_removed && links_.placement_group_removed(pg)) {
      return fail(RemovedGroupMessage(pg));
    }
  }
  // A group's resources missing here may come with its bundle: the actor waits for them.
  if (absl::Status f = resources_.CheckFeasible(*demand);
      !f.ok() && !(in_group && f.code() == absl::StatusCode::kResourceExhausted)) {
    return fail(absl::StrCat("node ", node_id_, " can never hold ", demand->ToString(), " (",
                             f.message(), ")"));
  }
  JobId job = req.job_id();
  if (job == 0) return fail("no job named");
  if (!pool_.HasJob(job) && links_.adopt_job) {
    if (absl::Status s = links_.adopt_job(job, req.job()); !s.ok()) {
      return fail(std::string(s.message()));
    }
  }
  std::optional<Allocation> allocation;
  if (req.grant_or_reject()) {
    allocation = resources_.TryAllocate(*demand);
    if (!allocation) {
      reply.set_result(proto::PlaceActorReply::REJECTED);
      reply.set_message(
          absl::StrCat("node ", node_id_, " has no room for ", demand->ToString(), " now"));
      responder.Ok(reply);
      return;
    }
  }
  Record& r = actors_[id];
  r.spec = spec;
  r.job = job;
  r.allocation = std::move(allocation);
  // Restarted here because its node died: it goes on from that incarnation.
  r.incarnation = req.incarnation();
  r.num_restarts = req.num_restarts();
  if (!req.restart_reason().empty()) {
    r.state = proto::ACTOR_RESTARTING;
    r.restart_cause = req.restart_reason();
  }
  reply.set_result(proto::PlaceActorReply::ACCEPTED);
  reply.set_waiting_for_resources(!r.allocation);
  responder.Ok(reply);
  // The node's loop schedules it next (NodeManager::OnRequest).
}

void ActorManager::HandleKill(const proto::KillActorRequest& req) {
  auto it = actors_.find(ActorId::FromBinary(req.actor_id()));
  if (it == actors_.end() || it->second.state == proto::ACTOR_DEAD) return;
  Record& r = it->second;
  int max = r.spec.max_restarts();
  bool can_restart = max < 0 || static_cast<int>(r.num_restarts) < max;
  if (req.no_restart() || !can_restart) {
    Bury(r,
         req.no_restart() ? "it was killed with Kill()"
                          : "it was killed with Kill(false) and had no restarts left",
         /*kill_worker=*/true);
  } else if (!r.worker.IsNil()) {
    WorkerId w = r.worker;
    pool_.Kill(w);  // the restart happens in OnWorkerGone
    OnWorkerGone(w);
  }
}

void ActorManager::Report(const Record& r) {
  std::shared_ptr<rpc::Connection> head = links_.head ? links_.head() : nullptr;
  if (head == nullptr || head->closed()) return;
  rpc::Notify<proto::REPORT_ACTOR_STATE>(*head, Info(r));
}

void ActorManager::Schedule(std::map<WorkerKey, int>* workers_needed) {
  for (auto& [id, r] : actors_) {
    if (r.state == proto::ACTOR_DEAD || r.state == proto::ACTOR_ALIVE || !r.worker.IsNil()) {
      continue;
    }
    if (!r.allocation) {
      auto demand = ResourceSet::FromProto(r.spec.resources());
      if (!demand.ok()) continue;
      r.allocation = resources_.TryAllocate(*demand);
      if (!r.allocation) continue;
      Report(r);  // it holds its resources now
    }
    if (!pool_.HasJob(r.job) && links_.job_preparing && links_.job_preparing(r.job)) continue;
    if (!pool_.HasJob(r.job)) {
      Bury(r, "its job's executable is no longer known to the node", false);
      continue;
    }
    // A fresh worker only: one that ran tasks may own objects, which its Kill would lose.
    // It was started for the actor's GPUs, so it sees exactly them.
    WorkerKey key{r.job, r.allocation->GpuIds()};
    WorkerProcess* worker = pool_.PopIdle(key, /*for_actor=*/true);
    if (worker == nullptr) {
      ++(*workers_needed)[std::move(key)];
      continue;
    }
    Bind(r, *worker);
  }
}

void ActorManager::Bind(Record& r, WorkerProcess& worker) {
  worker.hosts_actor = true;
  r.worker = worker.id;
  r.creating = true;
  r.pid = worker.pid;
  proto::CreateActorInstanceRequest req;
  *req.mutable_spec() = r.spec;
  req.set_incarnation(r.incarnation);
  ActorId id = ActorId::FromBinary(r.spec.actor_id());
  uint32_t incarnation = r.incarnation;
  proto::Address address = worker.address;
  worker.conn->Call(
      proto::CREATE_ACTOR_INSTANCE, req,
      [this, id, incarnation, address](const absl::StatusOr<std::string_view>& reply) {
        auto it = actors_.find(id);
        if (it == actors_.end()) return;
        Record& r = it->second;
        if (r.incarnation != incarnation || r.state == proto::ACTOR_DEAD) return;
        r.creating = false;
        if (!reply.ok()) return;  // the worker died: OnWorkerGone handles it
        proto::CreateActorInstanceReply cr;
        if (!cr.ParseFromArray(reply->data(), static_cast<int>(reply->size())) || cr.has_error()) {
          Bury(r,
               cr.has_error() ? absl::StrCat("its factory raised ", cr.error().exception_type(),
                                             ": ", cr.error().message())
                              : "malformed reply from its worker",
               /*kill_worker=*/true);
          return;
        }
        r.state = proto::ACTOR_ALIVE;
        r.address = address;
        Report(r);
      });
}

void ActorManager::Release(Record& r) {
  if (r.allocation) resources_.Release(*r.allocation);
  r.allocation.reset();
}

void ActorManager::Bury(Record& r, const std::string& cause, bool kill_worker) {
  RAIO_LOG_INFO("actor {} is dead: {}", ActorId::FromBinary(r.spec.actor_id()).Hex(), cause);
  r.state = proto::ACTOR_DEAD;
  r.death_cause = cause;
  r.creating = false;
  r.address.Clear();
  if (kill_worker && !r.worker.IsNil()) pool_.Kill(r.worker);
  r.worker = WorkerId();
  Release(r);
  Report(r);
}

bool ActorManager::OnWorkerGone(const WorkerId& worker, const std::string& reason) {
  for (auto& [id, r] : actors_) {
    if (r.worker != worker || r.state == proto::ACTOR_DEAD) continue;
    r.worker = WorkerId();
    r.address.Clear();
    r.creating = false;
    Release(r);
    int max = r.spec.max_restarts();
    if (max < 0 || static_cast<int>(r.num_restarts) < max) {
      ++r.num_restarts;
      ++r.incarnation;
      r.state = proto::ACTOR_RESTARTING;
      r.restart_cause = reason;
      RAIO_LOG_INFO("actor {} restarting ({} of {}){}{}", id.Hex(), r.num_restarts, max,
                    reason.empty() ? "" : ": ", reason);
      Report(r);
    } else {
      Bury(r,
           absl::StrCat("its process died", reason.empty() ? "" : " (", reason,
                        reason.empty() ? "" : ")", r.num_restarts > 0 ? " after " : "",
                        r.num_restarts > 0 ? absl::StrCat(r.num_restarts, " restarts") : "",
                        " and it may not restart again"),
           false);
    }
    return true;
  }
  return false;
}

void ActorManager::FailPendingStarts(JobId job, const std::string& why) {
  for (auto& [id, r] : actors_) {
    if (r.job != job || r.state == proto::ACTOR_DEAD || r.state == proto::ACTOR_ALIVE ||
        !r.worker.IsNil() || !r.allocation) {
      continue;
    }
    Bury(r, absl::StrCat("no worker process could be started for it: ", why), false);
  }
}

std::set<WorkerId> ActorManager::OnJobEnded(JobId job, bool* keep_job) {
  std::set<WorkerId> keep;
  *keep_job = false;
  for (auto& [id, r] : actors_) {
    if (r.job != job || r.state == proto::ACTOR_DEAD) continue;
    if (r.spec.detached()) {
      if (!r.worker.IsNil()) keep.insert(r.worker);
      *keep_job = true;
      continue;
    }
    Bury(r, "its job ended", /*kill_worker=*/true);
  }
  return keep;
}

int ActorManager::EndHolding(const std::function<bool(const Allocation&)>& holds,
                             const std::string& cause) {
  int ended = 0;
  for (auto& [id, r] : actors_) {
    if (r.state == proto::ACTOR_DEAD || !r.allocation || !holds(*r.allocation)) continue;
    Bury(r, cause, /*kill_worker=*/true);
    ++ended;
  }
  return ended;
}

void ActorManager::FailPlacementGroup(const PlacementGroupId& pg, const std::string& cause) {
  for (auto& [id, r] : actors_) {
    if (r.state == proto::ACTOR_DEAD || r.spec.placement_group_id() != pg.Binary()) continue;
    Bury(r, cause, /*kill_worker=*/true);
  }
}

proto::ActorList ActorManager::List() const {
  proto::ActorList list;
  for (const auto& [id, r] : actors_) *list.add_actors() = Info(r);
  return list;
}

}  // namespace raio::node
