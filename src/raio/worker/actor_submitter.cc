#include "raio/worker/actor_submitter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/listener.h"

namespace raio::worker {

ActorSubmitter::ActorSubmitter(raio::Mutex& mu, Outbox& outbox, rpc::ConnectionPool& pool,
                               EventLoop& loop, std::shared_ptr<rpc::Connection> node,
                               TaskSubmitter& tasks, ObjectTable& objects,
                               DependencyResolver& resolver)
    : mu_(mu),
      outbox_(outbox),
      pool_(pool),
      loop_(loop),
      node_(std::move(node)),
      tasks_(tasks),
      objects_(objects),
      resolver_(resolver) {
  // When an actor's process goes, stop sending there at once and wait for its next
  // incarnation (calls submitted meanwhile queue instead of failing).
  pool_.OnClose([this](const std::shared_ptr<rpc::Connection>& conn, const absl::Status&) {
    OnConnectionClosed(conn);
  });
}

void ActorSubmitter::OnConnectionClosed(const std::shared_ptr<rpc::Connection>& conn) {
  OutboxLock lock(&mu_, &outbox_);
  if (shut_down_) return;
  for (auto& [id, a] : actors_) {
    if (a.conn != conn) continue;
    a.state = Actor::State::kResolving;
    a.conn.reset();
    if (!a.waiting) WaitForActor(a, a.incarnation + 1);
  }
}

void ActorSubmitter::Submit(const ActorId& id, proto::PushActorTaskRequest request,
                            ObjectId return_id, int num_returns, std::vector<ObjectId> held,
                            std::vector<RefArg> ref_args) {
  auto call = std::make_shared<Call>();
  call->request = std::move(request);
  call->return_id = return_id;
  call->num_returns = num_returns;
  call->held = std::move(held);
  auto [it, inserted] = actors_.try_emplace(id);
  Actor& actor = it->second;
  if (inserted) actor.id = id;
  if (actor.state == Actor::State::kDead) {
    Fail(call, actor.death_cause);
    return;
  }
  actor.queue.push_back(call);
  if (!ref_args.empty()) {
    call->resolving = true;
    std::string method = call->request.method_name();
    resolver_.Resolve(TaskIdOf(return_id), std::move(method), std::move(ref_args),
                      [this, id, call](ResolvedArgs resolved) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                        OnResolved(id, call, std::move(resolved));
                      });
  }
  if (actor.state == Actor::State::kAlive) {
    Flush(actor);
  } else if (!actor.waiting) {
    WaitForActor(actor, actor.incarnation);
  }
}

void ActorSubmitter::WaitForActor(Actor& actor, uint32_t min_incarnation) {
  actor.waiting = true;
  auto req = std::make_shared<proto::WaitActorRequest>();
  req->set_actor_id(actor.id.Binary());
  req->set_min_incarnation(min_incarnation);
  ActorId id = actor.id;
  outbox_.Call<proto::WAIT_ACTOR>(
      node_, std::move(req),
      [this, id](absl::StatusOr<proto::ActorInfo> info) { OnActorInfo(id, std::move(info)); });
}

void ActorSubmitter::OnActorInfo(const ActorId& id, absl::StatusOr<proto::ActorInfo> reply) {
  const bool parsed = reply.ok();
  proto::ActorInfo info = parsed ? std::move(*reply) : proto::ActorInfo();
  // Connect to a live actor's worker before taking the mutex (a connect may block).
  absl::StatusOr<std::shared_ptr<rpc::Connection>> conn =
      absl::FailedPreconditionError("not alive");
  if (parsed && info.state() != proto::ACTOR_DEAD) conn = pool_.Get(info.address());
  OutboxLock lock(&mu_, &outbox_);
  if (shut_down_) return;
  auto it = actors_.find(id);
  if (it == actors_.end()) return;
  Actor& actor = it->second;
  actor.waiting = false;
  if (!reply.ok() && reply.status().code() == absl::StatusCode::kUnavailable) {
    // The node daemon is gone (cluster stopped): not the actor's fault.
    std::string why = absl::StrCat("the node daemon is gone: ", reply.status().message());
    std::deque<std::shared_ptr<Call>> queue;
    queue.swap(actor.queue);
    for (auto& call : actor.lost) queue.push_back(call);
    actor.lost.clear();
    for (auto& call : queue) Fail(call, why, proto::CLUSTER_UNAVAILABLE);
    return;
  }
  if (!parsed) {
    actor.state = Actor::State::kDead;
    actor.death_cause = absl::StrCat(
        "actor ", id.Hex(), " is unknown or unreachable: ", std::string(reply.status().message()));
  } else if (info.state() == proto::ACTOR_DEAD) {
    actor.state = Actor::State::kDead;
    actor.death_cause =
        absl::StrCat("actor ", id.Hex(), info.name().empty() ? "" : " ('" + info.name() + "')",
                     " is dead: ", info.death_cause());
  } else {
    if (!conn.ok() || (*conn)->closed()) {
      // It died between the reply and now: wait for the next incarnation.
      WaitForActor(actor, info.incarnation() + 1);
      return;
    }
    actor.conn = *conn;
    actor.node_id = info.node_id();
    actor.incarnation = info.incarnation();
    actor.max_task_retries = info.max_task_retries();
    actor.state = Actor::State::kAlive;
    for (auto& call : actor.lost) {
      Fail(call, LostInRestart(id, *call, info.restart_cause()));
    }
    actor.lost.clear();
    Flush(actor);
    return;
  }
  for (auto& call : actor.lost) Fail(call, actor.death_cause);
  actor.lost.clear();
  std::deque<std::shared_ptr<Call>> queue;
  queue.swap(actor.queue);
  for (auto& call : queue) Fail(call, actor.death_cause);
}

void ActorSubmitter::Flush(Actor& actor) {
  if (!actor.conn || actor.conn->closed()) {
    // The process went away since we connected: nothing sent there could run.
    actor.state = Actor::State::kResolving;
    actor.conn.reset();
    if (!actor.waiting) WaitForActor(actor, actor.incarnation + 1);
    return;
  }
  // In order: a call still waiting for its arguments holds back the ones behind it.
  while (!actor.queue.empty() && !actor.queue.front()->resolving) {
    std::shared_ptr<Call> call = std::move(actor.queue.front());
    actor.queue.pop_front();
    uint64_t seq = actor.next_sequence++;
    actor.in_flight[seq] = call;
    call->incarnation = actor.incarnation;
    ActorId id = actor.id;
    uint32_t incarnation = actor.incarnation;
    // The request is not changed per push: sequence and attempt follow it as a suffix.
    rpc::FieldSuffix suffix;
    suffix.AddEncoded(tasks_.actor_suffix());
    suffix.Add(proto::PushActorTaskRequest::kSequenceFieldNumber, seq);
    if (call->attempt > 0)
      suffix.Add(proto::PushActorTaskRequest::kAttemptFieldNumber, call->attempt);
    outbox_.Call<proto::PUSH_ACTOR_TASK>(
        actor.conn, std::shared_ptr<const proto::PushActorTaskRequest>(call, &call->request),
        [this, id, incarnation, seq](absl::StatusOr<proto::PushTaskReply> r) {
          OnReply(id, incarnation, seq, std::move(r));
        },
        rpc::DefaultDeadline(rpc::MethodTraits<proto::PUSH_ACTOR_TASK>::kInfo), suffix);
  }
}

void ActorSubmitter::OnReply(const ActorId& id, uint32_t incarnation, uint64_t sequence,
                             absl::StatusOr<proto::PushTaskReply> reply) {
  OutboxLock lock(&mu_, &outbox_);
  if (shut_down_) return;
  auto it = actors_.find(id);
  if (it == actors_.end()) return;
  Actor& actor = it->second;
  auto cit = actor.in_flight.find(sequence);
  if (cit == actor.in_flight.end()) return;
  if (reply.ok()) {
    std::shared_ptr<Call> call = cit->second;
    actor.in_flight.erase(cit);
    for (const auto& ref : call->held) objects_.RemoveTaskArgRef(ref);
    tasks_.AssertHeld();
    tasks_.FinishFromReply(call->return_id, *reply, call->num_returns);
    return;
  }
  if (rpc::IsPeerError(reply.status())) {
    // The actor's process answered: it refused or botched this call (sending it again
    // would fail the same way); the actor and its other calls are fine.
    std::shared_ptr<Call> call = cit->second;
    actor.in_flight.erase(cit);
    objects_.SettleOnBehalf(call->return_id, tasks_.self(), /*delivered=*/false);
    Fail(call,
         absl::StrCat("the actor could not run ", call->request.method_name(), ": ",
                      reply.status().message()),
         proto::SERIALIZATION);
    return;
  }
  // The actor's process is gone, and with it every call in flight on this connection
  // (their callbacks come in no particular order): handle them all now, in sequence
  // order. Retryable ones are re-sent first after the restart, keeping submission order.
  std::vector<std::shared_ptr<Call>> retry;
  for (auto cit2 = actor.in_flight.begin(); cit2 != actor.in_flight.end();) {
    std::shared_ptr<Call> call = cit2->second;
    // Calls already sent to a later incarnation are not this process's.
    if (call->incarnation != incarnation) {
      ++cit2;
      continue;
    }
    cit2 = actor.in_flight.erase(cit2);
    // References the dead attempt registered on our behalf will never be delivered.
    objects_.SettleOnBehalf(call->return_id, tasks_.self(), /*delivered=*/false);
    if (actor.max_task_retries < 0 || call->retries_used < actor.max_task_retries) {
      ++call->retries_used;
      ++call->attempt;
      retry.push_back(call);
    } else {
      actor.lost.push_back(call);
    }
  }
  actor.queue.insert(actor.queue.begin(), retry.begin(), retry.end());
  if (actor.state == Actor::State::kAlive && actor.incarnation == incarnation) {
    actor.state = Actor::State::kResolving;
    actor.conn.reset();
  }
  if (actor.state == Actor::State::kResolving && !actor.waiting) {
    WaitForActor(actor, incarnation + 1);
  } else if (actor.state == Actor::State::kAlive && actor.incarnation > incarnation) {
    // The next incarnation is up already (the node answered before this process's calls
    // failed, e.g. after Kill): fail the lost calls now and send the retried ones.
    for (auto& call : actor.lost) {
      Fail(call, LostInRestart(id, *call, ""));
    }
    actor.lost.clear();
    Flush(actor);
  } else if (actor.state == Actor::State::kDead) {
    // The node said it is dead before this process's calls failed (e.g. after Kill).
    for (auto& call : actor.lost) Fail(call, actor.death_cause);
    actor.lost.clear();
    std::deque<std::shared_ptr<Call>> queue;
    queue.swap(actor.queue);
    for (auto& call : queue) Fail(call, actor.death_cause);
  }
}

std::optional<uint32_t> ActorSubmitter::AliveIncarnation(const ActorId& id) const {
  auto it = actors_.find(id);
  if (it == actors_.end() || it->second.state != Actor::State::kAlive) return std::nullopt;
  return it->second.incarnation;
}

void ActorSubmitter::OnKilled(const ActorId& id, std::optional<uint32_t> killed) {
  auto it = actors_.find(id);
  if (it == actors_.end() || !killed) return;
  Actor& actor = it->second;
  if (actor.state != Actor::State::kAlive || actor.incarnation != *killed) return;
  // Its connection is left to close by itself (its callbacks take mu_); the calls in
  // flight on it fail then.
  actor.state = Actor::State::kResolving;
  actor.conn.reset();
  if (!actor.waiting) WaitForActor(actor, actor.incarnation + 1);
}

void ActorSubmitter::OnNodeRemoved(const std::string& node_id_hex) {
  for (auto& [id, actor] : actors_) {
    if (actor.state != Actor::State::kAlive || actor.node_id != node_id_hex || !actor.conn)
      continue;
    // The close fails its calls in flight (asynchronously: the callbacks take mu_), and
    // the actor then waits for its next incarnation, as after a crash of its process.
    actor.conn->Close(absl::UnavailableError(absl::StrCat("node ", node_id_hex, " died")));
  }
}

std::string ActorSubmitter::LostInRestart(const ActorId& id, const Call& call,
                                          const std::string& cause) {
  std::string retried = call.retries_used == 0
                            ? std::string("the call was not retried (see SetMaxTaskRetries)")
                            : absl::StrCat("the call was lost again after ", call.retries_used,
                                           call.retries_used == 1 ? " retry" : " retries",
                                           " (SetMaxTaskRetries allows ", call.retries_used, ")");
  return absl::StrCat("actor ", id.Hex(), " died while running ", call.request.method_name(),
                      cause.empty() ? "" : " (", cause, cause.empty() ? "" : ")",
                      " and was restarted; ", retried);
}

void ActorSubmitter::Fail(const std::shared_ptr<Call>& call, const std::string& message,
                          proto::ErrorType type) {
  FailWith(call, MakeError(type, message, call->request.method_name()));
}

void ActorSubmitter::FailWith(const std::shared_ptr<Call>& call,
                              std::shared_ptr<const proto::ErrorInfo> error) {
  if (call->resolving) {
    call->resolving = false;
    resolver_.Cancel(TaskIdOf(call->return_id));
  }
  for (const auto& ref : call->held) objects_.RemoveTaskArgRef(ref);
  call->held.clear();
  tasks_.AssertHeld();
  tasks_.FailReturns(call->return_id, call->num_returns, std::move(error));
}

void ActorSubmitter::OnResolved(const ActorId& id, const std::shared_ptr<Call>& call,
                                ResolvedArgs resolved) {
  call->resolving = false;
  call->held.insert(call->held.end(), resolved.kept.begin(), resolved.kept.end());
  auto it = actors_.find(id);
  Actor* actor = it == actors_.end() ? nullptr : &it->second;
  auto* args = call->request.mutable_spec()->mutable_args();
  bool has_list = false;
  for (auto& [index, arg] : resolved.args) {
    has_list = has_list || arg.has_list();
    (*args)[index] = std::move(arg);
  }
  const std::string& method = call->request.method_name();
  if (!resolved.error && has_list) {
    if (std::size_t bytes = call->request.ByteSizeLong(); bytes > config::max_request_bytes()) {
      resolved.error = InlineArgumentsTooLarge("actor call " + method, method, bytes);
    }
  }
  if (resolved.error) {
    // Out of the queue, failed with its argument's error; the calls behind it go on.
    if (actor != nullptr) {
      auto& q = actor->queue;
      q.erase(std::remove(q.begin(), q.end(), call), q.end());
    }
    FailWith(call, std::move(resolved.error));
  }
  if (actor != nullptr && actor->state == Actor::State::kAlive) Flush(*actor);
}

void ActorSubmitter::NoteCreated(const ActorId& actor, std::string demand) {
  demands_[actor] = std::move(demand);
}

std::string ActorSubmitter::DescribePending(const ObjectId& id) const {
  for (const auto& [actor_id, actor] : actors_) {
    const Call* found = nullptr;
    bool sent = false;
    bool resolving = false;
    for (const auto& call : actor.queue) {
      if (TaskIdOf(call->return_id) == TaskIdOf(id))
        found = call.get(), resolving = call->resolving;
    }
    for (const auto& [seq, call] : actor.in_flight) {
      if (TaskIdOf(call->return_id) == TaskIdOf(id)) found = call.get(), sent = true;
    }
    for (const auto& call : actor.lost) {
      if (TaskIdOf(call->return_id) == TaskIdOf(id)) found = call.get();
    }
    if (found == nullptr) continue;
    const std::string& method = found->request.method_name();
    if (sent) return absl::StrCat("actor call ", method, " is running and keeps running");
    if (resolving) {
      return absl::StrCat("actor call ", method, " is waiting for ",
                          resolver_.NumUnresolved(TaskIdOf(id)),
                          " of its ObjectRef arguments to be ready; it keeps waiting");
    }
    if (actor.state == Actor::State::kAlive) {
      return absl::StrCat("actor call ", method, " is about to be sent to its actor");
    }
    auto demand = demands_.find(actor_id);
    return absl::StrCat(
        "actor call ", method, " waits for actor ", actor_id.Hex(),
        ", which is not alive: it is pending creation or a restart, waiting for resources",
        demand == demands_.end() ? "" : absl::StrCat(" (it demands ", demand->second, ")"),
        " or for its worker process to start; `raio status` shows pending actors");
  }
  return "";
}

void ActorSubmitter::Shutdown() {
  shut_down_ = true;
  // The CoreWorker closes the pooled connections after releasing the mutex.
}

}  // namespace raio::worker
