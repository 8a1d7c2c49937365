#include "raio/worker/task_submitter.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"
#include "raio/common/placement_resources.h"
#include "raio/internal/returns.h"
#include "raio/node.pb.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/listener.h"

namespace raio::worker {

std::shared_ptr<const proto::ErrorInfo> MakeError(proto::ErrorType type, std::string message,
                                                  std::string function_name, std::string node_id) {
  auto e = std::make_shared<proto::ErrorInfo>();
  e->set_type(type);
  e->set_message(std::move(message));
  e->set_function_name(std::move(function_name));
  e->set_node_id(std::move(node_id));
  return e;
}

std::shared_ptr<const proto::ErrorInfo> InlineArgumentsTooLarge(const std::string& what,
                                                                const std::string& fn,
                                                                std::size_t bytes) {
  return MakeError(proto::INVALID_USAGE,
                   absl::StrCat("the arguments of ", what, " take ", bytes,
                                " bytes inline (objects under ", config::max_inline_object_bytes(),
                                " bytes are copied into the request), above the limit of ",
                                config::max_request_bytes(),
                                " bytes for one request; pass fewer or larger objects"),
                   fn);
}

TaskSubmitter::TaskSubmitter(raio::Mutex& mu, Outbox& outbox, rpc::ConnectionPool& pool,
                             raio::CondVar& ready_cv, std::atomic<uint64_t>& completions,
                             ObjectTable& objects, DependencyResolver& resolver, EventLoop& loop,
                             std::shared_ptr<rpc::Connection> node, std::string node_id_hex,
                             WorkerId self)
    : mu_(mu),
      outbox_(outbox),
      pool_(pool),
      ready_cv_(ready_cv),
      completions_(completions),
      objects_(objects),
      resolver_(resolver),
      loop_(loop),
      node_(std::move(node)),
      node_id_hex_(std::move(node_id_hex)),
      node_id_(absl::HexStringToBytes(node_id_hex_)),
      self_(self) {}

TaskSubmitter::~TaskSubmitter() = default;

void TaskSubmitter::SetCallerAddress(const proto::Address& address) {
  proto::Address routable = address;
  routable.clear_unix_socket();
  proto::PushTaskRequest task;
  *task.mutable_spec()->mutable_caller_address() = address;
  task_suffix_ = task.SerializeAsString();
  *task.mutable_spec()->mutable_caller_address() = routable;
  remote_task_suffix_ = task.SerializeAsString();
  proto::PushActorTaskRequest actor;
  *actor.mutable_spec()->mutable_caller_address() = address;
  actor_suffix_ = actor.SerializeAsString();
  *actor.mutable_spec()->mutable_caller_address() = routable;
  remote_actor_suffix_ = actor.SerializeAsString();
  // Leaves room for the attempt and sequence fields.
  RAIO_CHECK(std::max(task_suffix_.size(), actor_suffix_.size()) + 30 <=
             rpc::FieldSuffix::kCapacity);
}

TaskEntry* TaskSubmitter::FindTask(const TaskId& id) {
  auto it = tasks_.find(id);
  return it == tasks_.end() ? nullptr : it->second.get();
}

void TaskSubmitter::Submit(std::shared_ptr<TaskEntry> task, const ResourceSet& demand,
                           std::vector<RefArg> ref_args) {
  // A scheduling class is a resource shape and a function (as Ray's): the pipeline depth
  // follows the measured time of that function only, so a quick function's history never
  // queues a slow one behind another.
  const proto::TaskSpec& spec = task->request.spec();
  std::string key = absl::StrCat(demand.Key(), "|", spec.function_name());
  if (spec.has_scheduling_strategy() || !spec.label_selector().empty()) {
    // Where tasks may run is part of the class: a lease for one strategy never serves
    // another's tasks.
    std::map<std::string, std::string> selector(spec.label_selector().begin(),
                                                spec.label_selector().end());
    absl::StrAppend(&key, "|", spec.scheduling_strategy().SerializeAsString());
    for (const auto& [k, v] : selector) absl::StrAppend(&key, "|", k, "=", v);
  }
  auto& cls = classes_[key];
  if (!cls) {
    cls = std::make_unique<SchedulingClass>();
    cls->demand = demand;
    cls->strategy = spec.scheduling_strategy();
    cls->label_selector.insert(spec.label_selector().begin(), spec.label_selector().end());
  }
  TaskEntry* t = task.get();
  t->cls = cls.get();
  const TaskId id = t->task_id;
  tasks_[id] = std::move(task);
  ResolveOrEnqueue(t, std::move(ref_args));
}

void TaskSubmitter::ResolveOrEnqueue(TaskEntry* t, std::vector<RefArg> ref_args) {
  if (ref_args.empty()) {
    Enqueue(t);
    return;
  }
  t->resolving = true;
  const TaskId id = t->task_id;
  resolver_.Resolve(id, t->request.spec().function_name(), std::move(ref_args),
                    [this, id](ResolvedArgs resolved)
                        ABSL_NO_THREAD_SAFETY_ANALYSIS { OnResolved(id, std::move(resolved)); });
}

void TaskSubmitter::OnResolved(const TaskId& id, ResolvedArgs resolved) {
  TaskEntry* t = FindTask(id);
  if (t == nullptr) {  // cannot happen: Cancel and FailAll cancel the resolution first
    for (const auto& ref : resolved.kept) objects_.RemoveTaskArgRef(ref);
    return;
  }
  t->resolving = false;
  t->arg_refs = std::move(resolved.kept);
  if (resolved.error) {
    Fail(t, std::move(resolved.error));
    return;
  }
  auto* args = t->request.mutable_spec()->mutable_args();
  bool has_list = false;
  for (auto& [index, arg] : resolved.args) {
    has_list = has_list || arg.has_list();
    (*args)[index] = std::move(arg);
  }
  // Small objects of ObjectRef arguments were copied in; the request must fit one frame.
  // Only lists of refs can add up to that (each object is under max_inline_object_bytes),
  // so other tasks skip the size computation.
  if (std::size_t bytes = has_list ? t->request.ByteSizeLong() : 0;
      bytes > config::max_request_bytes()) {
    const std::string& fn = t->request.spec().function_name();
    Fail(t, InlineArgumentsTooLarge(fn, fn, bytes));
    return;
  }
  Enqueue(t);
}

void TaskSubmitter::Enqueue(TaskEntry* t) {
  if (shut_down_) return;
  t->cls->queue.push_back(t->task_id);
  Dispatch(t->cls);
}

void TaskSubmitter::Dispatch(SchedulingClass* cls) {
  // One task per worker while the node has room for more workers of this shape; a queue
  // of tiny tasks is pipelined onto busy workers only once every leasable CPU is taken,
  // so a task never waits behind another while a CPU that could run it is free.
  int depth = 1;
  if (cls->saturated && cls->mean_exec_us >= 0) {
    double d = static_cast<double>(config::pipeline_target_us().count()) /
               std::max(cls->mean_exec_us, 1.0);
    depth = static_cast<int>(std::clamp(d, 1.0, static_cast<double>(config::max_pipeline_depth())));
  }
  // Fill the least-loaded leases first so that work spreads over workers. An idle worker
  // always takes a task; a busy one only takes tasks beyond those that the lease requests
  // this class keeps open (up to max_pending_lease_requests_per_class) will serve: a task
  // queued behind a running one could wait for it, and when tasks wait for each other,
  // that is a deadlock.
  const auto max_requests =
      static_cast<std::size_t>(config::max_pending_lease_requests_per_class());
  while (!cls->queue.empty()) {
    std::shared_ptr<LeaseState> best;
    for (auto& [id, lease] : cls->leases) {
      if (lease->dead || lease->in_flight >= depth) continue;
      if (!best || lease->in_flight < best->in_flight) best = lease;
    }
    if (!best) break;
    if (best->in_flight > 0 && cls->queue.size() <= max_requests) break;
    auto it = tasks_.find(cls->queue.front());
    cls->queue.pop_front();
    if (it != tasks_.end()) PushTask(best, it->second);
  }
  if (!cls->queue.empty()) {
    std::size_t wanted =
        std::min<std::size_t>(cls->queue.size(), config::max_pending_lease_requests_per_class());
    std::size_t open = cls->pending_requests.size() - cls->cancelling.size();
    for (std::size_t i = open; i < wanted; ++i) RequestLease(cls);
  } else {
    // Nothing left to run: stop asking for workers, and let idle leases go after a while.
    for (const auto& [id, request] : cls->pending_requests) {
      if (cls->cancelling.insert(id).second) {
        auto req = std::make_shared<proto::LeaseIdRequest>();
        req->set_lease_id(id.Binary());
        outbox_.Call<proto::CANCEL_WORKER_LEASE>(request.node, std::move(req), [](const auto&) {});
      }
    }
    if (loop_.InLoopThread()) {
      for (auto& [id, lease] : cls->leases) {
        if (lease->in_flight == 0 && !lease->dead) ArmIdleTimer(cls, lease);
      }
    }
  }
}

void TaskSubmitter::PushTask(const std::shared_ptr<LeaseState>& lease,
                             const std::shared_ptr<TaskEntry>& entry) {
  TaskEntry* t = entry.get();
  ++lease->in_flight;
  t->pushed_to = lease;
  t->push_seq = lease->next_push_seq++;
  // Sent after the mutex is released; the entry stays alive until then even if the task
  // is failed meanwhile. The request itself never changes: the caller's address and the
  // attempt go in a suffix.
  rpc::FieldSuffix suffix;
  suffix.AddEncoded(lease->remote ? remote_task_suffix_ : task_suffix_);
  if (t->attempt > 0) suffix.Add(proto::PushTaskRequest::kAttemptFieldNumber, t->attempt);
  outbox_.Call<proto::PUSH_TASK>(
      lease->conn, std::shared_ptr<const proto::PushTaskRequest>(entry, &entry->request),
      [this, id = t->task_id, lease](absl::StatusOr<proto::PushTaskReply> reply) {
        OnPushReply(id, lease, std::move(reply));
      },
      rpc::DefaultDeadline(rpc::MethodTraits<proto::PUSH_TASK>::kInfo), suffix);
}

void TaskSubmitter::OnPushReply(const TaskId& id, const std::shared_ptr<LeaseState>& lease,
                                absl::StatusOr<proto::PushTaskReply> reply) {
  OutboxLock lock(&mu_, &outbox_);
  if (shut_down_) return;
  TaskEntry* t = FindTask(id);
  if (t == nullptr) return;
  --lease->in_flight;
  SchedulingClass* cls = t->cls;
  if (!reply.ok()) {
    // References the attempt registered on our behalf will never be delivered.
    objects_.SettleOnBehalf(t->return_id, self_, /*delivered=*/false);
  }
  if (!reply.ok() && rpc::IsPeerError(reply.status())) {
    // The worker is alive and answered: this request is what failed (malformed, refused),
    // and sending it again would fail the same way.
    t->pushed_to.reset();
    const std::string& fn = t->request.spec().function_name();
    Fail(t, MakeError(proto::SERIALIZATION,
                      absl::StrCat("the worker could not run ", fn, ": ", reply.status().message()),
                      fn, node_id_hex_));
    Dispatch(cls);
    return;
  }
  if (!reply.ok() && !lease->dead) {
    // The worker is gone (crash, kill, exit), and its resources with it.
    cls->saturated = false;
    lease->dead = true;
    cls->leases.erase(lease->id);
  }
  if (t->cancelled) {
    t->pushed_to.reset();
    Fail(t, MakeError(proto::TASK_CANCELLED,
                      absl::StrCat(t->request.spec().function_name(), " was cancelled"),
                      t->request.spec().function_name(), node_id_hex_));
    Dispatch(cls);
    return;
  }
  if (!reply.ok()) {
    // Retry or fail once the node has said why the worker died (the task stays pushed_to
    // the dead lease meanwhile, so that Cancel still finds it).
    if (lease->failure_cause) {
      // All calls fail together when the connection closes, so this is rare.
      bool was_running = WasRunning(*lease, *lease->failure_cause, *t, /*oldest=*/true);
      lease->crash_charged = true;
      RetryOrFail(t, *lease->failure_cause, std::string(reply.status().message()), was_running);
      Dispatch(cls);
      return;
    }
    lease->awaiting_cause.emplace_back(t->task_id, std::string(reply.status().message()));
    if (!lease->cause_requested) {
      lease->cause_requested = true;
      auto req = std::make_shared<proto::GetWorkerFailureCauseRequest>();
      req->set_worker_id(lease->worker.Binary());
      outbox_.Call<proto::GET_WORKER_FAILURE_CAUSE>(
          lease->node, std::move(req),
          [this, lease](absl::StatusOr<proto::WorkerFailureCause> r) {
            OnFailureCause(lease, std::move(r));
          },
          config::worker_failure_cause_timeout_ms());
    }
    Dispatch(cls);  // the class's queued tasks go on meanwhile (the dead lease is gone)
    return;
  }
  t->pushed_to.reset();
  double us = static_cast<double>(reply->exec_duration_us());
  cls->mean_exec_us = cls->mean_exec_us < 0 ? us : 0.8 * cls->mean_exec_us + 0.2 * us;
  if (reply->has_error() && reply->error().argument_lost() && RecoverArguments(t)) {
    Dispatch(cls);  // it runs again once its lost argument is made again
    return;
  }
  ObjectId return_id = t->return_id;
  int num_returns = t->num_returns;
  std::shared_ptr<Lineage> lineage = MakeLineage(*t, *reply);  // before its args go
  ReleaseTask(t);
  FinishFromReply(return_id, *reply, num_returns);
  if (lineage) AttachLineage(lineage);
  Dispatch(cls);
}

void TaskSubmitter::ReleaseTask(TaskEntry* t) {
  for (const auto& ref : t->arg_refs) objects_.RemoveTaskArgRef(ref);
  for (const auto& ref : t->held_refs) objects_.RemoveTaskArgRef(ref);
  tasks_.erase(t->task_id);  // frees t
}

void TaskSubmitter::FinishFromReply(const ObjectId& id, proto::PushTaskReply& r, int num_returns) {
  // ObjectRefs inside the result: the worker registered us as their borrower (with our own
  // owner service for objects we own; those references now belong to the result).
  bool any_contained = r.contained_size() > 0;
  for (const auto& ret : r.returns()) any_contained = any_contained || ret.contained_size() > 0;
  if (!r.has_error() && num_returns > 1 && r.returns_size() != num_returns) {
    // Only a worker built from other sources than its caller can send this.
    if (any_contained) objects_.SettleOnBehalf(id, self_, /*delivered=*/false);
    FailReturns(
        id, num_returns,
        MakeError(proto::SERIALIZATION, absl::StrCat("the worker returned ", r.returns_size(),
                                                     " values; the caller expects ", num_returns)));
    return;
  }
  if (any_contained) objects_.SettleOnBehalf(id, self_, /*delivered=*/true);
  auto take_contained =
      [&](const google::protobuf::RepeatedPtrField<proto::ObjectRefInfo>& refs)
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            std::vector<ObjectId> contained;
            for (const auto& info : refs) {
              ObjectId cid = ObjectId::FromBinary(info.object_id());
              WorkerId owner = WorkerId::FromBinary(info.owner_worker_id());
              if (owner != self_) {
                objects_.AddBorrowed(cid, owner, info.owner_address().SerializeAsString());
                if (ObjectEntry* e = objects_.Find(cid)) ++e->owner_registrations;
              }  // else our owner service already counted the reference
              contained.push_back(cid);
            }
            return contained;
          };
  if (r.has_error()) {
    auto error = std::make_shared<proto::ErrorInfo>(std::move(*r.mutable_error()));
    FailReturns(id, num_returns, std::move(error));
    return;
  }
  // Finishes one return object from its reply fields.
  auto finish = [&](const ObjectId& oid, bool in_store, uint32_t format, uint32_t dtype,
                    std::string* value,
                    std::vector<ObjectId> contained) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (in_store) {
      // Where the worker stored it, before readers waiting for it look.
      if (ObjectEntry* e = objects_.Find(oid); e != nullptr && r.has_stored_at()) {
        AddLocation(*e, r.stored_at());
      }
      FinishObject(oid, {}, true, nullptr);
    } else {
      auto bytes = std::make_shared<const std::string>(std::move(*value));
      FinishObject(oid,
                   internal::ValueView{static_cast<internal::ValueFormat>(format),
                                       static_cast<internal::DType>(dtype), *bytes, bytes},
                   false, nullptr);
    }
    if (!contained.empty()) objects_.SetContained(oid, std::move(contained));
  };
  if (num_returns <= 1) {
    finish(id, r.in_store(), r.format(), r.dtype(), r.mutable_return_value(),
           take_contained(r.contained()));
    return;
  }
  for (int i = 0; i < num_returns; ++i) {
    proto::ReturnObject* ret = r.mutable_returns(i);
    finish(internal::NthReturnId(id, static_cast<uint32_t>(i)), ret->in_store(), ret->format(),
           ret->dtype(), ret->mutable_value(), take_contained(ret->contained()));
  }
}

void TaskSubmitter::Fail(TaskEntry* t, std::shared_ptr<const proto::ErrorInfo> error) {
  ObjectId id = t->return_id;
  int n = t->num_returns;
  if (t->rebuilds && error && error->type() != proto::OBJECT_LOST &&
      error->type() != proto::CLUSTER_UNAVAILABLE) {
    // A re-run to make a lost result failed (its pinned node died, its retries ran out, it
    // threw): the result stays lost, and says why.
    auto lost = std::make_shared<proto::ErrorInfo>(*error);
    lost->set_type(proto::OBJECT_LOST);
    lost->set_message(
        absl::StrCat("object ", id.Hex(), " was lost and could not be made again: ", "running ",
                     t->request.spec().function_name(), " again failed: ", error->message()));
    error = std::move(lost);
  }
  ReleaseTask(t);
  FailReturns(id, n, std::move(error));
}

void TaskSubmitter::FailReturns(const ObjectId& first, int num_returns,
                                std::shared_ptr<const proto::ErrorInfo> error) {
  for (int i = 0; i < num_returns; ++i) {
    FinishObject(internal::NthReturnId(first, static_cast<uint32_t>(i)), {}, false, error);
  }
}

void TaskSubmitter::FinishObject(const ObjectId& id, internal::ValueView value, bool in_store,
                                 std::shared_ptr<const proto::ErrorInfo> error) {
  std::vector<TaskId> dependents = error      ? objects_.SetError(id, std::move(error))
                                   : in_store ? objects_.SetInStore(id)
                                              : objects_.SetValue(id, std::move(value));
  completions_.fetch_add(1, std::memory_order_release);
  ready_cv_.SignalAll();
  if (!dependents.empty()) resolver_.OnObjectsReady(dependents);
}

std::string TaskSubmitter::NodeHoldingMostArgs(const proto::TaskSpec& spec) {
  // Few arguments: a small vector beats a map.
  std::vector<std::pair<std::string_view, int>> counts;
  auto count = [&](const proto::TaskArg& a) {
    if (!a.in_store() || a.locations_size() == 0) return;
    std::string_view node = a.locations(0).node_id();  // the primary copy's node
    for (auto& [n, c] : counts) {
      if (n == node) {
        ++c;
        return;
      }
    }
    counts.emplace_back(node, 1);
  };
  for (const auto& arg : spec.args()) {
    if (arg.kind_case() == proto::TaskArg::kList) {
      for (const auto& e : arg.list().elements()) count(e);
    } else {
      count(arg);
    }
  }
  const std::pair<std::string_view, int>* best = nullptr;
  for (const auto& c : counts) {
    if (best == nullptr || c.second > best->second) best = &c;
  }
  return best == nullptr ? std::string() : std::string(best->first);
}

void TaskSubmitter::RequestLease(SchedulingClass* cls) {
  LeaseId id = RandomId<LeaseId>();
  SendLeaseRequest(cls, id, node_, 0, false);
}

void TaskSubmitter::SendLeaseRequest(SchedulingClass* cls, const LeaseId& id,
                                     const std::shared_ptr<rpc::Connection>& node,
                                     uint32_t spillbacks, bool grant_or_reject) {
  cls->pending_requests[id] = SchedulingClass::Request{node, spillbacks};
  auto req = std::make_shared<proto::RequestWorkerLeaseRequest>();
  req->set_lease_id(id.Binary());
  cls->demand.ToProto(req->mutable_demand());
  req->set_backlog(static_cast<uint32_t>(cls->queue.size()));
  if (!cls->queue.empty()) {
    if (const TaskEntry* front = FindTask(cls->queue.front())) {
      req->set_function_name(front->request.spec().function_name());
      if (cls->strategy.kind() == proto::SchedulingStrategy::DEFAULT && spillbacks == 0) {
        std::string preferred = NodeHoldingMostArgs(front->request.spec());
        if (!preferred.empty() && preferred != node_id_) req->set_preferred_node_id(preferred);
      }
    }
  }
  req->set_job_id(job_);
  if (cls->strategy.kind() != proto::SchedulingStrategy::DEFAULT) {
    *req->mutable_strategy() = cls->strategy;
  }
  req->mutable_label_selector()->insert(cls->label_selector.begin(), cls->label_selector.end());
  for (const auto& [name, amount] : cls->demand.fixed()) {
    // A demand renamed into a placement group's bundle (common/placement_resources.h).
    if (name.find("_group_") == std::string::npos) continue;
    if (auto parsed = ParseBundleResource(name)) {
      req->set_placement_group_id(parsed->pg.Binary());
      break;
    }
  }
  req->set_spillback_count(spillbacks);
  req->set_grant_or_reject(grant_or_reject);
  outbox_.Call<proto::REQUEST_WORKER_LEASE>(
      node, std::move(req),
      [this, cls, id, node](absl::StatusOr<proto::RequestWorkerLeaseReply> reply) {
        OnLeaseReply(cls, id, node, std::move(reply));
      });
}

void TaskSubmitter::OnLeaseReply(SchedulingClass* cls, const LeaseId& id,
                                 const std::shared_ptr<rpc::Connection>& node,
                                 absl::StatusOr<proto::RequestWorkerLeaseReply> reply) {
  // Connect to a granted worker, or to the node a spillback names, before taking the
  // mutex (a connect may block).
  absl::StatusOr<std::shared_ptr<rpc::Connection>> conn =
      absl::FailedPreconditionError("not granted");
  const bool spilled = reply.ok() && reply->result() == proto::RequestWorkerLeaseReply::SPILLBACK;
  if (reply.ok() && reply->result() == proto::RequestWorkerLeaseReply::GRANTED) {
    conn = pool_.Get(reply->worker_address());
  } else if (spilled) {
    conn = pool_.Get(reply->retry_at());
  }
  OutboxLock lock(&mu_, &outbox_);
  if (shut_down_) return;
  uint32_t spillbacks = 0;
  if (auto it = cls->pending_requests.find(id); it != cls->pending_requests.end()) {
    spillbacks = it->second.spillbacks;
    cls->pending_requests.erase(it);
  }
  const bool cancelled = cls->cancelling.erase(id) > 0;
  const bool remote = node != node_;
  if (!reply.ok()) {
    if (remote) {
      // Another node went away with our request: ask our own node again.
      RAIO_LOG_WARN("lease request to another node failed ({}); asking this node again",
                    reply.status().message());
      if (!cancelled && !cls->queue.empty())
        SendLeaseRequest(cls, id, node_, spillbacks + 1, false);
      return;
    }
    FailQueued(
        cls, proto::CLUSTER_UNAVAILABLE,
        absl::StrCat("cannot lease a worker from the node daemon: ", reply.status().message()));
    return;
  }
  const proto::RequestWorkerLeaseReply& r = *reply;
  switch (r.result()) {
    case proto::RequestWorkerLeaseReply::INFEASIBLE: {
      // Pinned to a node that died: say so rather than that no node fits.
      const proto::SchedulingStrategy& st = cls->strategy;
      if (st.kind() == proto::SchedulingStrategy::NODE_AFFINITY && !st.soft()) {
        auto dead = dead_nodes_.find(absl::BytesToHexString(st.node_id()));
        if (dead != dead_nodes_.end()) {
          FailQueued(cls, proto::NODE_DIED,
                     absl::StrCat("node ", dead->first,
                                  ", where its hard node affinity pins it, "
                                  "died (",
                                  dead->second, ")"));
          return;
        }
      }
      FailQueued(cls, proto::UNSCHEDULABLE, r.message());
      return;
    }
    case proto::RequestWorkerLeaseReply::WORKER_START_FAILED:
      FailQueued(cls, proto::WORKER_CRASHED, r.message());
      return;
    case proto::RequestWorkerLeaseReply::CANCELLED:
      if (!cls->queue.empty()) Dispatch(cls);
      return;
    case proto::RequestWorkerLeaseReply::SPILLBACK:
    case proto::RequestWorkerLeaseReply::REJECTED:
      if (cancelled || cls->queue.empty()) {
        if (!cls->queue.empty()) Dispatch(cls);
        return;
      }
      if (spilled && conn.ok()) {
        SendLeaseRequest(cls, id, *conn, spillbacks + 1, r.grant_or_reject());
      } else {
        if (spilled) {
          RAIO_LOG_WARN("cannot reach {} for a spilled lease: {}",
                        rpc::DescribeAddress(r.retry_at()), conn.status().message());
        }
        SendLeaseRequest(cls, id, node_, spillbacks + 1, false);
      }
      return;
    default:
      break;
  }
  cls->saturated = r.saturated();
  if (cls->saturated) ReturnIdleLeases(cls);
  WorkerId worker = WorkerId::FromBinary(r.worker_id());
  auto lease = std::make_shared<LeaseState>();
  lease->id = id;
  lease->worker = worker;
  lease->node = node;
  lease->remote = remote;
  lease->node_id_hex = r.worker_address().node_id().empty()
                           ? node_id_hex_
                           : NodeId::FromBinary(r.worker_address().node_id()).Hex();
  if (!conn.ok()) {
    RAIO_LOG_WARN("cannot reach leased worker: {}", conn.status().message());
    auto ret = std::make_shared<proto::LeaseIdRequest>();
    ret->set_lease_id(id.Binary());
    outbox_.Call<proto::RETURN_WORKER_LEASE>(node, std::move(ret), [](const auto&) {});
    Dispatch(cls);
    return;
  }
  lease->conn = *conn;
  cls->leases[id] = lease;
  Dispatch(cls);
  if (lease->in_flight == 0) ArmIdleTimer(cls, lease);
}

void TaskSubmitter::OnLeaseInfeasible(const proto::LeaseInfeasibleNotice& notice) {
  LeaseId id = LeaseId::FromBinary(notice.lease_id());
  for (auto& [key, cls] : classes_) {
    if (!cls->pending_requests.count(id) || cls->warned_infeasible) continue;
    cls->warned_infeasible = true;
    RAIO_LOG_WARN("{}", notice.message());
  }
}

void TaskSubmitter::ArmIdleTimer(SchedulingClass* cls, const std::shared_ptr<LeaseState>& lease) {
  // The idle period starts when the lease last finished work. Dispatch calls this for
  // every idle lease of the class, so one that has not run anything since keeps its start:
  // otherwise a sibling lease finishing a task every few ms kept it forever.
  if (lease->idle_push_seq != lease->next_push_seq) {
    lease->idle_since = Clock::now();
    lease->idle_push_seq = lease->next_push_seq;
  }
  if (lease->timer_armed) return;
  lease->timer_armed = true;
  if (!lease->idle_timer) lease->idle_timer = std::make_unique<Timer>(loop_.io());
  lease->idle_timer->expires_at(lease->idle_since + config::lease_idle_timeout_ms());
  lease->idle_timer->async_wait([this, cls, lease](const boost::system::error_code& ec) {
    if (ec) return;
    OutboxLock lock(&mu_, &outbox_);
    if (shut_down_) return;
    lease->timer_armed = false;
    if (lease->dead || lease->in_flight > 0 || !cls->queue.empty()) return;
    auto idle_for = Clock::now() - lease->idle_since;
    if (idle_for < config::lease_idle_timeout_ms()) {
      ArmIdleTimer(cls, lease);  // used again meanwhile: wait a full period from its last use
      return;
    }
    ReturnLease(cls, lease);
  });
}

void TaskSubmitter::ReturnIdleLeases(SchedulingClass* wanting) {
  // The node is full: the workers that this owner keeps idle for other classes (waiting
  // for lease_idle_timeout_ms in case more of their tasks come) hold resources that `wanting`
  // could use now. Give them back at once.
  for (auto& [key, cls] : classes_) {
    if (cls.get() == wanting || !cls->queue.empty()) continue;
    std::vector<std::shared_ptr<LeaseState>> idle;
    for (auto& [id, lease] : cls->leases) {
      if (!lease->dead && lease->in_flight == 0) idle.push_back(lease);
    }
    for (auto& lease : idle) ReturnLease(cls.get(), lease);
    if (!idle.empty()) wanting->saturated = false;  // their resources are free now
  }
}

void TaskSubmitter::ReturnLease(SchedulingClass* cls, const std::shared_ptr<LeaseState>& lease) {
  cls->saturated = false;  // its resources are free again
  lease->dead = true;
  cls->leases.erase(lease->id);
  auto req = std::make_shared<proto::LeaseIdRequest>();
  req->set_lease_id(lease->id.Binary());
  outbox_.Call<proto::RETURN_WORKER_LEASE>(lease->node, std::move(req), [](const auto&) {});
}

void TaskSubmitter::FailQueued(SchedulingClass* cls, proto::ErrorType type,
                               const std::string& message) {
  std::deque<TaskId> queue;
  queue.swap(cls->queue);
  for (const TaskId& id : queue) {
    TaskEntry* t = FindTask(id);
    if (t == nullptr) continue;
    std::string fn = t->request.spec().function_name();
    Fail(t, MakeError(type, message, fn, node_id_hex_));
  }
}

void TaskSubmitter::Cancel(const ObjectId& id, bool force) {
  TaskEntry* t = FindTask(TaskIdOf(id));
  if (t == nullptr) return;  // finished, a Put, or not a task of ours
  const std::string fn = t->request.spec().function_name();
  auto error =
      MakeError(proto::TASK_CANCELLED, absl::StrCat(fn, " was cancelled"), fn, node_id_hex_);
  if (!t->pushed_to) {
    // Queued or waiting for its arguments: drop it now (the resolver forgets it, and
    // the objects it waited for find no task under its id when they become ready).
    if (t->resolving) resolver_.Cancel(t->task_id);
    SchedulingClass* cls = t->cls;
    cls->queue.erase(std::remove(cls->queue.begin(), cls->queue.end(), t->task_id),
                     cls->queue.end());
    Fail(t, error);
    // Nothing left to run: its lease requests must not hold the node's next free worker.
    if (cls->queue.empty()) Dispatch(cls);
    return;
  }
  t->cancelled = true;  // its reply (or its worker's death) completes it as cancelled
  if (force) {
    // The worker dies by our hand: no other task in flight on it is charged a retry.
    t->pushed_to->crash_charged = true;
    auto req = std::make_shared<proto::LeaseIdRequest>();
    req->set_lease_id(t->pushed_to->id.Binary());
    outbox_.Call<proto::KILL_LEASED_WORKER>(t->pushed_to->node, std::move(req), [](const auto&) {});
  }
}

std::string TaskSubmitter::DescribePending(const ObjectId& id) const {
  auto it = tasks_.find(TaskIdOf(id));
  if (it == tasks_.end()) return "";
  const TaskEntry& t = *it->second;
  const std::string& fn = t.request.spec().function_name();
  if (t.pushed_to) {
    return absl::StrCat(fn, " was sent to a worker (which runs ", t.pushed_to->in_flight,
                        t.pushed_to->in_flight == 1 ? " task" : " tasks",
                        " in order): it runs, waits its turn there, or waits for its "
                        "arguments to fit in the object store; it keeps going");
  }
  if (int unresolved = t.resolving ? resolver_.NumUnresolved(t.task_id) : 0; unresolved > 0) {
    return absl::StrCat(fn, " is waiting for ", unresolved,
                        unresolved == 1 ? " ObjectRef argument" : " ObjectRef arguments",
                        " to be ready; it keeps waiting");
  }
  return absl::StrCat(fn, " has not started: it is waiting for resources (it demands ",
                      t.cls->demand.ToString(),
                      " and no worker with them is free yet; `raio status` shows the demand); "
                      "it keeps waiting");
}

void TaskSubmitter::Shutdown() {
  shut_down_ = true;
  // The CoreWorker closes the pooled worker connections after releasing the mutex.
  // Idle timers are dropped with the owner's loop; their handlers check shut_down_.
}

}  // namespace raio::worker
