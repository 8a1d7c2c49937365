// ActorManager: the node daemon's actor table and actor scheduler. Registers actors
// (names unique per namespace among live actors), holds their resources for their
// lifetime, binds each to a dedicated worker process of its job and runs its factory
// there (CREATE_ACTOR_INSTANCE), restarts it when the process dies (up to max_restarts),
// kills it on request or when its job ends (unless detached), and answers WAIT_ACTOR so
// callers learn where an actor lives, or why it died.
// Single node for now: the name directory moves to the head with multi-node clusters.
// Threading: not thread-safe; lives on the node daemon's loop.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "raio/actor.pb.h"
#include "raio/common/ids.h"
#include "raio/node/scheduler/local_resource_manager.h"
#include "raio/node/worker_pool/worker_pool.h"
#include "raio/rpc/connection.h"
#include "raio/rpc/service.h"

namespace raio::node {

class ActorManager {
 public:
  ActorManager(LocalResourceManager& resources, WorkerPool& pool, std::string node_id,
               std::function<std::string()> cluster_description);

  // The job of the driver or worker on a connection (0 when it has not registered).
  using JobOf = std::function<JobId(const rpc::Connection&)>;
  // Adds the actor methods (CREATE/WAIT/GET_NAMED/KILL/LIST_ACTORS) to `service`; the
  // handlers reply on the caller's connection. `this` must outlive it.
  void RegisterHandlers(rpc::Service& service, JobOf job_of);
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
    std::vector<std::pair<std::shared_ptr<rpc::Connection>, rpc::FrameHeader>> waiters;
    std::vector<uint32_t> waiter_min_incarnation;
  };

  proto::ActorInfo Info(const Record& r) const;
  void NotifyWaiters(Record& r);
  void Bind(Record& r, WorkerProcess& worker);
  void Bury(Record& r, const std::string& cause, bool kill_worker);
  void Release(Record& r);

  LocalResourceManager& resources_;
  WorkerPool& pool_;
  std::string node_id_;
  std::function<std::string()> cluster_description_;
  std::map<ActorId, Record> actors_;
  std::map<std::pair<std::string, std::string>, ActorId> names_;  // (namespace, name)
};

}  // namespace raio::node
