#include "raio/node/actor_manager.h"

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"
#include "raio/node.pb.h"
#include "raio/rpc.pb.h"

namespace raio::node {

ActorManager::ActorManager(LocalResourceManager& resources, WorkerPool& pool, std::string node_id,
                           std::function<std::string()> cluster_description)
    : resources_(resources),
      pool_(pool),
      node_id_(std::move(node_id)),
      cluster_description_(std::move(cluster_description)) {}

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

void ActorManager::RegisterHandlers(rpc::Service& service, JobOf job_of) {
  service.Handle<proto::CREATE_ACTOR>([this, job_of](
                                          const rpc::Responder<proto::CREATE_ACTOR>& responder,
                                          proto::CreateActorRequest& req) {
    const auto& conn = responder.conn();
    const auto& h = responder.header();
    JobId job = job_of(*conn);

    const proto::ActorSpec& spec = req.spec();
    ActorId id = ActorId::FromBinary(spec.actor_id());
    if (id.IsNil() || actors_.count(id)) {
      conn->ReplyError(h, absl::InvalidArgumentError("bad or reused actor id"));
      return;
    }
    auto demand = ResourceSet::FromProto(spec.resources());
    if (!demand.ok()) return conn->ReplyError(h, demand.status());
    if (absl::Status f = resources_.CheckFeasible(*demand); !f.ok()) {
      conn->ReplyError(h, absl::ResourceExhaustedError(absl::StrCat(
                              "no node can ever hold actor ", spec.class_name(), ", which demands ",
                              demand->ToString(), " (", f.message(),
                              "); cluster resources: ", cluster_description_())));
      return;
    }
    if (!spec.name().empty()) {
      auto key = std::make_pair(spec.namespace_(), spec.name());
      if (names_.count(key)) {
        conn->ReplyError(h, absl::AlreadyExistsError(absl::StrCat("an actor named '", spec.name(),
                                                                  "' already exists in namespace '",
                                                                  spec.namespace_(), "'")));
        return;
      }
      names_[key] = id;
    }
    Record& r = actors_[id];
    r.spec = spec;
    r.job = job;
    conn->Reply(h, Info(r));
  });
  service.Handle<proto::WAIT_ACTOR>(
      [this](const rpc::Responder<proto::WAIT_ACTOR>& responder, proto::WaitActorRequest& req) {
        const auto& conn = responder.conn();
        const auto& h = responder.header();
        auto it = actors_.find(ActorId::FromBinary(req.actor_id()));
        if (it == actors_.end()) {
          conn->ReplyError(h, absl::NotFoundError("no such actor on this node"));
          return;
        }
        Record& r = it->second;
        if (r.state == proto::ACTOR_DEAD ||
            (r.state == proto::ACTOR_ALIVE && r.incarnation >= req.min_incarnation())) {
          conn->Reply(h, Info(r));
        } else {
          r.waiters.emplace_back(conn, h);
          r.waiter_min_incarnation.push_back(req.min_incarnation());
        }
      });
  service.Handle<proto::GET_NAMED_ACTOR>(
      [this](const rpc::Responder<proto::GET_NAMED_ACTOR>& responder,
             proto::GetNamedActorRequest& req) {
        const auto& conn = responder.conn();
        const auto& h = responder.header();

        auto it = names_.find({req.namespace_(), req.name()});
        if (it == names_.end()) {
          conn->ReplyError(h, absl::NotFoundError("no live actor with that name"));
        } else {
          conn->Reply(h, Info(actors_.at(it->second)));
        }
      });
  service.Handle<proto::KILL_ACTOR>(
      [this](const rpc::Responder<proto::KILL_ACTOR>& responder, proto::KillActorRequest& req) {
        const auto& conn = responder.conn();
        const auto& h = responder.header();

        auto it = actors_.find(ActorId::FromBinary(req.actor_id()));
        if (it != actors_.end() && it->second.state != proto::ACTOR_DEAD) {
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
        if (h.kind == rpc::FrameKind::kRequest) conn->Reply(h, proto::Empty());
      });
  service.Handle<proto::LIST_ACTORS>(
      [this](const rpc::Responder<proto::LIST_ACTORS>& responder, const proto::Empty&) {
        const auto& conn = responder.conn();
        const auto& h = responder.header();
        conn->Reply(h, List());
      });
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
    }
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
        NotifyWaiters(r);
      });
}

void ActorManager::NotifyWaiters(Record& r) {
  std::vector<std::pair<std::shared_ptr<rpc::Connection>, rpc::FrameHeader>> keep;
  std::vector<uint32_t> keep_min;
  proto::ActorInfo info = Info(r);
  for (std::size_t i = 0; i < r.waiters.size(); ++i) {
    if (r.state == proto::ACTOR_DEAD ||
        (r.state == proto::ACTOR_ALIVE && r.incarnation >= r.waiter_min_incarnation[i])) {
      r.waiters[i].first->Reply(r.waiters[i].second, info);
    } else {
      keep.push_back(r.waiters[i]);
      keep_min.push_back(r.waiter_min_incarnation[i]);
    }
  }
  r.waiters = std::move(keep);
  r.waiter_min_incarnation = std::move(keep_min);
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
  if (!r.spec.name().empty()) names_.erase({r.spec.namespace_(), r.spec.name()});
  if (kill_worker && !r.worker.IsNil()) pool_.Kill(r.worker);
  r.worker = WorkerId();
  Release(r);
  NotifyWaiters(r);
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

proto::ActorList ActorManager::List() const {
  proto::ActorList list;
  for (const auto& [id, r] : actors_) *list.add_actors() = Info(r);
  return list;
}

}  // namespace raio::node
