// ActorManager: the node daemon's part in actors. The head keeps the cluster's actor
// directory and picks each actor's node (head/actor_directory.h); this node's clients'
// CREATE_ACTOR, WAIT_ACTOR, GET_NAMED_ACTOR and KILL_ACTOR are forwarded to the head (the
// node adds the creator's job) and its answers relayed. For the actors the head places
// here (PLACE_ACTOR) it holds their resources for their lifetime (at once, or refusing
// with REJECTED, when the head asks for grant-or-reject; else as they free up), binds each
// to a dedicated worker process of its job and runs its factory there
// (CREATE_ACTOR_INSTANCE), restarts it when the process dies (up to max_restarts), kills it
// on the head's request (KILL_LOCAL_ACTOR) or when its job ends (unless detached), and
// reports each change of state to the head (REPORT_ACTOR_STATE: resources held, ALIVE
// with its worker's address, RESTARTING, DEAD with the cause). LIST_ACTORS lists the
// actors placed here.
//
// Placement groups: an actor placed in a group demands the group's renamed resources
// (common/placement_resources.h). While the node does not hold them (the bundle is not
// committed here yet, or was given back) it is accepted and waits for them rather than
// refused; a removed group's actors are refused, and die when the group goes
// (FailPlacementGroup), as do actors holding a bundle that is given back (EndHolding).
// Threading: not thread-safe; lives on the node daemon's loop.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "raio/actor.pb.h"
#include "raio/common/ids.h"
#include "raio/head.pb.h"
#include "raio/node/scheduler/local_resource_manager.h"
#include "raio/node/worker_pool/worker_pool.h"
#include "raio/rpc/connection.h"
#include "raio/rpc/service.h"

namespace raio::node {

class ActorManager {
 public:
  ActorManager(LocalResourceManager& resources, WorkerPool& pool, std::string node_id);

  // What the actor methods need from the node.
  struct Links {
    // The job of the driver or worker on a connection (0 when it has not registered).
    std::function<JobId(const rpc::Connection&)> job_of;
    // The node's connection to the head (null before it is made).
    std::function<std::shared_ptr<rpc::Connection>()> head;
    // A placement of an actor of a job this node has no configuration for (its driver is
    // on another node): take the job's configuration, or say why it cannot run here.
    std::function<absl::Status(JobId, const proto::JobConfigInfo&)> adopt_job;
    // Whether the node is still fetching the job's package (its actors wait meanwhile).
    std::function<bool(JobId)> job_preparing;
    // Whether the head removed this placement group.
    std::function<bool(const PlacementGroupId&)> placement_group_removed;
  };
  // Adds the actor methods (CREATE/WAIT/GET_NAMED/KILL/LIST_ACTORS from clients,
  // PLACE_ACTOR and KILL_LOCAL_ACTOR from the head) to `service`; the handlers reply on
  // the caller's connection. `this` must outlive it.
  void RegisterHandlers(rpc::Service& service, Links links);
  // Places pending actors on idle workers started for their job and GPUs; adds the
  // workers still to start to `workers_needed`.
  void Schedule(std::map<WorkerKey, int>* workers_needed);
  // A worker process is gone; restarts or buries its actor. Returns whether it hosted one.
  // `reason` says why when the node ended it (e.g. the memory monitor, with its figures);
  // empty for a crash or an exit. It becomes the death cause when the actor is buried.
  bool OnWorkerGone(const WorkerId& worker, const std::string& reason = "");
  // The job's worker processes keep dying while starting: its actors waiting for a
  // process (to start or restart) die with `why`.
  void FailPendingStarts(JobId job, const std::string& why);
  // The job ended: its actors die, except detached ones. Returns the workers to keep;
  // `keep_job` says whether the job's executable is still needed (for restarts).
  std::set<WorkerId> OnJobEnded(JobId job, bool* keep_job);
  // Actors whose resources `holds` (a bundle given back): they die with `cause`, not
  // restarted, their workers killed and their resources released. Returns how many.
  int EndHolding(const std::function<bool(const Allocation&)>& holds, const std::string& cause);
  // The placement group was removed: its actors here that are not dead die with `cause`.
  void FailPlacementGroup(const PlacementGroupId& pg, const std::string& cause);
  proto::ActorList List() const;

 private:
  struct Record {
    proto::ActorSpec spec;
    JobId job = 0;
    proto::ActorState state = proto::ACTOR_PENDING;
    std::optional<Allocation> allocation;
    WorkerId worker;  // nil when none bound
    bool creating = false;
    proto::Address address;  // its worker's executor (ALIVE)
    int32_t pid = 0;
    uint32_t incarnation = 0;
    uint32_t num_restarts = 0;
    std::string death_cause;
    std::string restart_cause;  // why the process died before the latest restart
  };

  proto::ActorInfo Info(const Record& r) const;
  // Tells the head the record's state (REPORT_ACTOR_STATE).
  void Report(const Record& r);
  // Forwards a client's call of method M to the head and relays the answer.
  template <proto::Method M>
  void ForwardToHead(const rpc::Responder<M>& responder,
                     const typename rpc::MethodTraits<M>::Request& request);
  void HandlePlace(const rpc::Responder<proto::PLACE_ACTOR>& responder,
                   const proto::PlaceActorRequest& req);
  void HandleKill(const proto::KillActorRequest& req);
  void Bind(Record& r, WorkerProcess& worker);
  void Bury(Record& r, const std::string& cause, bool kill_worker);
  void Release(Record& r);

  LocalResourceManager& resources_;
  WorkerPool& pool_;
  std::string node_id_;
  Links links_;
  std::map<ActorId, Record> actors_;
};

}  // namespace raio::node
