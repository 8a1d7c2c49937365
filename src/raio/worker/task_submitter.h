// TaskSubmitter: the owner side of normal tasks (Ray's NormalTaskSubmitter). Resolves
// ObjectRef arguments, queues ready tasks per scheduling class (resource shape), leases
// workers for each class from the node daemon, pushes tasks straight to leased workers
// with a pipeline sized to the measured task time, retries tasks whose worker died,
// and returns idle leases after config::lease_idle_timeout_ms().
// When a worker's connection breaks, the submitter first asks the node why
// (GET_WORKER_FAILURE_CAUSE, without holding the mutex while it waits): a worker ended
// by the node's memory monitor fails its tasks with OUT_OF_MEMORY once their retries
// run out, any other death with WORKER_CRASHED.
// Threading: every method except the constructor must be called with the CoreWorker's
// mutex held (`mu`). Replies arrive on the CoreWorker's loop thread, which takes it.
// Sends go through the CoreWorker's Outbox, after the mutex is released.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>

#include "absl/container/flat_hash_map.h"
#include "raio/common/event_loop.h"
#include "raio/common/ids.h"
#include "raio/common/mutex.h"
#include "raio/common/resources.h"
#include "raio/common/timer.h"
#include "raio/node.pb.h"
#include "raio/rpc/connection.h"
#include "raio/rpc/connection_pool.h"
#include "raio/task.pb.h"
#include "raio/worker/dependency_resolver.h"
#include "raio/worker/object_table.h"
#include "raio/worker/outbox.h"

namespace raio::worker {

struct LeaseState;
struct SchedulingClass;

// The lineage of a finished task whose results went to the object store: what it takes
// to run it again when every copy of a result was lost with its node (lineage
// reconstruction, as in Ray: Wang et al., NSDI 2021, section 4.3). Its return objects'
// entries hold it (ObjectEntry::lineage), and so does the lineage of every task that took
// one of them as an argument, so that a freed argument can be made again too. The owner
// keeps at most config::max_lineage_bytes of specs: the oldest are evicted (`evicted`,
// spec dropped), and their objects then fail with ObjectLostError saying so.
struct Lineage {
  proto::PushTaskRequest request;  // the resolved spec; in-store arguments by id
  ResourceSet demand;
  ObjectId return_id;  // the first of its returns
  int num_returns = 1;
  int runs_left = 0;     // re-runs allowed: its retries left (negative: unlimited)
  uint32_t attempt = 0;  // the attempt number of its latest run
  // Its in-store ObjectRef arguments (index into the spec's args, object id), and the
  // lineage of each that this process owns (null for a Put, a borrowed object, ...).
  std::vector<std::pair<int, ObjectId>> store_args;
  std::vector<std::shared_ptr<Lineage>> arg_lineage;
  std::size_t bytes = 0;  // counted in *total while not evicted
  bool evicted = false;
  bool rebuilding = false;             // a re-run is queued or in flight
  std::shared_ptr<std::size_t> total;  // the owner's lineage bytes
  ~Lineage() {
    if (total && !evicted) *total -= bytes;
  }
};

struct TaskEntry {
  TaskId task_id;
  // The spec does not change once the task is queued (its ObjectRef arguments are filled
  // in before); the attempt number goes with each push (a FieldSuffix).
  proto::PushTaskRequest request;
  // 0 on the first try, +1 on each retry after a worker died.
  uint32_t attempt = 0;
  ObjectId return_id;  // the first of its num_returns return objects
  int num_returns = 1;
  // Its scheduling class; classes live as long as the submitter.
  SchedulingClass* cls = nullptr;
  int retries_left = 0;
  bool resolving = false;                 // its ObjectRef arguments are not all ready
  std::vector<ObjectId> arg_refs;         // in-store arguments, referenced until done
  std::vector<ObjectId> held_refs;        // refs inside by-value args, held until done
  bool cancelled = false;                 // raio::Cancel while pushed: the result is dropped
  std::shared_ptr<LeaseState> pushed_to;  // the lease it is in flight on
  uint64_t push_seq = 0;                  // order of its push on that lease
  int crashes = 0;                        // times its worker died while running it
  // Times it ran again because an in-store argument could not be read (its copies were
  // lost with a node, and the argument was rebuilt meanwhile); at most kMaxArgRecoveries.
  int arg_recoveries = 0;
  std::unique_ptr<Timer> recovery_timer;  // waits for the node's death to be declared
  bool awaiting_recovery = false;
  // A re-run of a finished task (lineage reconstruction): the lineage it re-runs.
  std::shared_ptr<Lineage> rebuilds;
};

struct LeaseState {
  LeaseId id;
  WorkerId worker;
  std::shared_ptr<rpc::Connection> conn;
  // The node that granted it (this process's own, or another one after a spillback): the
  // lease is returned there, and asked there why its worker died.
  std::shared_ptr<rpc::Connection> node;
  bool remote = false;      // granted by another node than this process's
  std::string node_id_hex;  // the node its worker runs on (errors name it)
  int in_flight = 0;
  bool dead = false;
  bool timer_armed = false;
  Clock::time_point idle_since;
  uint64_t idle_push_seq = UINT64_MAX;  // next_push_seq when idle_since was set
  std::unique_ptr<Timer> idle_timer;
  // After the connection broke: whether the node was asked why, its answer (UNKNOWN when
  // it did not answer in time), and the tasks (id, connection error) waiting for it.
  bool cause_requested = false;
  std::optional<proto::WorkerFailureCause> failure_cause;
  std::vector<std::pair<TaskId, std::string>> awaiting_cause;
  uint64_t next_push_seq = 0;
  // Whether the task that was running when the worker died has been found (and charged a
  // retry), or the owner ended the worker itself (Cancel with force). The others in flight
  // never started, or finished with their replies lost: they are re-queued without using
  // a retry.
  bool crash_charged = false;
};

struct SchedulingClass {
  ResourceSet demand;
  std::deque<TaskId> queue;  // ready to run, in submission order
  std::map<LeaseId, std::shared_ptr<LeaseState>> leases;
  // Open lease requests: the node each is at now, and how often it was spilled.
  struct Request {
    std::shared_ptr<rpc::Connection> node;
    uint32_t spillbacks = 0;
  };
  std::map<LeaseId, Request> pending_requests;
  std::set<LeaseId> cancelling;
  // Where its tasks may run (the spec's strategy and label selector; part of the class).
  proto::SchedulingStrategy strategy;
  std::map<std::string, std::string> label_selector;
  // The node said no node can meet the demand now (LEASE_INFEASIBLE): warned once.
  bool warned_infeasible = false;
  double mean_exec_us = -1;  // exponential moving average; -1 until measured
  // The node said at its latest grant that it has no room for another lease of this shape:
  // only then are several tasks pipelined onto one worker (see Dispatch).
  bool saturated = false;
};

class TaskSubmitter {
 public:
  // `outbox` takes the sends decided under `mu`; `pool` gives connections to leased
  // workers (never used with `mu` held).
  TaskSubmitter(raio::Mutex& mu, Outbox& outbox, rpc::ConnectionPool& pool, raio::CondVar& ready_cv,
                std::atomic<uint64_t>& completions, ObjectTable& objects,
                DependencyResolver& resolver, EventLoop& loop,
                std::shared_ptr<rpc::Connection> node, std::string node_id_hex, WorkerId self);
  ~TaskSubmitter();

  // Takes ownership of a task whose return object already exists in the table; its
  // `ref_args` are resolved first (their TaskArg slots are filled then).
  void Submit(std::shared_ptr<TaskEntry> task, const ResourceSet& demand,
              std::vector<RefArg> ref_args) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job whose tasks these are (named in lease requests to other nodes).
  void SetJob(JobId job) { job_ = job; }
  // What the task returning `id` is waiting for, for a Get that timed out ("" when `id`
  // is not a task of this submitter's).
  std::string DescribePending(const ObjectId& id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes the `num_returns` return objects starting at `id` from a worker's reply
  // (values, store or error, and the refs they contain). Also used for actor calls.
  void FinishFromReply(const ObjectId& id, proto::PushTaskReply& reply, int num_returns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the `num_returns` return objects starting at `first` with `error`.
  void FailReturns(const ObjectId& first, int num_returns,
                   std::shared_ptr<const proto::ErrorInfo> error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes object `id`: stores the result, wakes waiters, resolves dependent tasks.
  void FinishObject(const ObjectId& id, internal::ValueView value, bool in_store,
                    std::shared_ptr<const proto::ErrorInfo> error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // raio::Cancel of the task returning `id`; no-op if it is done or unknown.
  void Cancel(const ObjectId& id, bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails every queued task (the node is gone or we are shutting down).
  void FailAll(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes worker connections and forgets every lease (node returns them on our close).
  void Shutdown() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::size_t num_pending_tasks() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return tasks_.size(); }

  // This process's worker id.
  const WorkerId& self() const { return self_; }
  // Where this process is reached (its owner service), set once before the first submit:
  // every push carries it as the spec's caller_address. It is not copied into each stored
  // spec; it follows each push pre-encoded (task_suffix(), actor_suffix()), which saves
  // an Address copy, its serialization and its strings per task.
  void SetCallerAddress(const proto::Address& address);
  // `spec { caller_address }` encoded as fields of PushTaskRequest / PushActorTaskRequest.
  // `remote`: for a worker on another node (the caller's address without its socket path).
  const std::string& task_suffix(bool remote = false) const {
    return remote ? remote_task_suffix_ : task_suffix_;
  }
  const std::string& actor_suffix(bool remote = false) const {
    return remote ? remote_actor_suffix_ : actor_suffix_;
  }
  // The node told us no node can meet a lease's demand now (it keeps the request): the
  // first such notice per class is logged as a warning for the user.
  void OnLeaseInfeasible(const proto::LeaseInfeasibleNotice& notice)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A node left the cluster (NODE_REMOVED from this process's node): the leases whose
  // worker runs there are dead (their connections are closed, so that their tasks are
  // retried elsewhere within max_retries), and a task that runs out of retries there fails
  // with NODE_DIED naming the node and `notice.cause()`.
  void OnNodeRemoved(const proto::NodeRemovedNotice& notice) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // This process's own node lost the cluster (its NODE_REMOVED naming itself, `cause`):
  // it ends its workers and closes next, and a task whose worker it ended fails with
  // CLUSTER_UNAVAILABLE saying so, not as a worker crash.
  // Whether object `id`, owned here, can be made again if lost (it has lineage), and if
  // not, why not (for errors and tests).
  std::string DescribeLineage(const ObjectId& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bytes of lineage (task specs) this owner keeps now.
  std::size_t lineage_bytes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return *lineage_bytes_; }
  void OnOwnNodeLost(const std::string& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    own_node_lost_ = cause;
  }
  // Tells the thread-safety analysis that the caller holds the CoreWorker's mutex, which
  // this class knows by reference as `mu_` (the analysis cannot see the alias).
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK(mu_) { mu_.AssertHeld(); }

 private:
  // The resolver filled (or failed) the ObjectRef arguments of task `id`.
  void OnResolved(const TaskId& id, ResolvedArgs resolved) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TaskEntry* FindTask(const TaskId& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Enqueue(TaskEntry* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Dispatch(SchedulingClass* cls) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushTask(const std::shared_ptr<LeaseState>& lease, const std::shared_ptr<TaskEntry>& task)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Locality: the node (8-byte id) whose store holds the primary copies of most of
  // `spec`'s in-store arguments; empty when it has none.
  static std::string NodeHoldingMostArgs(const proto::TaskSpec& spec);
  void RequestLease(SchedulingClass* cls) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends lease request `id` of `cls` to `node` (this process's node, or the one a
  // spillback named).
  void SendLeaseRequest(SchedulingClass* cls, const LeaseId& id,
                        const std::shared_ptr<rpc::Connection>& node, uint32_t spillbacks,
                        bool grant_or_reject) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnLeaseReply(SchedulingClass* cls, const LeaseId& id,
                    const std::shared_ptr<rpc::Connection>& node,
                    absl::StatusOr<proto::RequestWorkerLeaseReply> reply);
  // A push's outcome. A transport failure means the worker is gone (retry or fail once
  // the node says why); the worker's own error answer (rpc::IsPeerError: it refused the
  // request, or its reply does not parse) fails just this task and keeps the lease.
  void OnPushReply(const TaskId& id, const std::shared_ptr<LeaseState>& lease,
                   absl::StatusOr<proto::PushTaskReply> reply);
  // The node's answer to GET_WORKER_FAILURE_CAUSE for a lease's dead worker.
  void OnFailureCause(const std::shared_ptr<LeaseState>& lease,
                      absl::StatusOr<proto::WorkerFailureCause> reply);
  // A task whose worker died, once the cause is known. The one that was running
  // (`was_running`) is retried if it has retries left, else failed with OUT_OF_MEMORY or
  // WORKER_CRASHED; one that was only queued on the worker is re-queued without using a
  // retry. `why` is the connection's error.
  void RetryOrFail(TaskEntry* task, const proto::WorkerFailureCause& cause, const std::string& why,
                   bool was_running) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `task`, in flight on `lease` when its worker died, was the one running.
  // `oldest`: it is the oldest of those tasks (the guess when the node does not know).
  static bool WasRunning(const LeaseState& lease, const proto::WorkerFailureCause& cause,
                         const TaskEntry& task, bool oldest);
  void ReturnLease(SchedulingClass* cls, const std::shared_ptr<LeaseState>& lease)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns the idle leases of every class but `wanting` whose queue is empty.
  void ReturnIdleLeases(SchedulingClass* wanting) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ArmIdleTimer(SchedulingClass* cls, const std::shared_ptr<LeaseState>& lease)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the task's argument references and frees the entry.
  void ReleaseTask(TaskEntry* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails every return object of the task with `error`, wakes waiters, resolves
  // dependents, frees the entry.
  void Fail(TaskEntry* task, std::shared_ptr<const proto::ErrorInfo> error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailQueued(SchedulingClass* cls, proto::ErrorType type, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Lineage (task_submitter_lineage.cc). After task `t` succeeded with `reply`: keeps its
  // lineage in its in-store returns' entries (or records why not). Called before its
  // argument references are dropped.
  std::shared_ptr<Lineage> MakeLineage(const TaskEntry& t, const proto::PushTaskReply& reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AttachLineage(const std::shared_ptr<Lineage>& lineage) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Node `node_id_hex` died (`why`): its copies are dropped from every entry; an owned
  // object left without a copy is made again from its lineage, or fails with OBJECT_LOST
  // saying why it cannot be; a borrowed one is asked of its owner again.
  void RecoverObjectsOn(const std::string& node_id_hex, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes owned object `id` (lost: no copy left) again by re-running its task, and its
  // lost or freed arguments first, recursively. Fails it with OBJECT_LOST when it cannot.
  void Reconstruct(const ObjectId& id, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a re-run of `lineage`'s task. False (nothing queued) when it cannot run again;
  // `why_not` says why.
  bool Rerun(const std::shared_ptr<Lineage>& lineage, const std::string& why, std::string* why_not)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker could not read an in-store argument of `t` (its reply's OBJECT_LOST with
  // argument_lost): resolves its arguments again, once they are rebuilt, and runs it again.
  // False when it has used its kMaxArgRecoveries (it then fails with the reply's error).
  bool RecoverArguments(TaskEntry* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ResolveAgain(TaskEntry* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resolves `ref_args` for `t` (then OnResolved), or queues it at once when it has none.
  void ResolveOrEnqueue(TaskEntry* t, std::vector<RefArg> ref_args)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts the oldest lineage while more than config::max_lineage_bytes is kept.
  void EvictLineage() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  raio::Mutex& mu_;
  Outbox& outbox_;
  rpc::ConnectionPool& pool_;
  raio::CondVar& ready_cv_;
  std::atomic<uint64_t>& completions_;  // bumped on every completion; Get spins on it
  ObjectTable& objects_;
  DependencyResolver& resolver_;
  EventLoop& loop_;
  std::shared_ptr<rpc::Connection> node_;
  const std::string node_id_hex_;
  const std::string node_id_;  // binary
  const WorkerId self_;
  JobId job_ = 0;
  std::string task_suffix_;   // set once, before any push
  std::string actor_suffix_;  // set once, before any push
  std::string remote_task_suffix_;
  std::string remote_actor_suffix_;
  std::map<std::string, std::unique_ptr<SchedulingClass>> classes_ ABSL_GUARDED_BY(mu_);
  // Nodes known to have died (hex id -> cause): from NODE_REMOVED, or a lease's node that
  // could not be reached when asked why its worker died. The newest kMaxDeadNodes.
  std::map<std::string, std::string> dead_nodes_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> dead_node_order_ ABSL_GUARDED_BY(mu_);
  std::string own_node_lost_ ABSL_GUARDED_BY(mu_);  // OnOwnNodeLost's cause
  // Kept lineage, oldest first (for eviction), and its size in bytes.
  std::deque<std::weak_ptr<Lineage>> lineage_order_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<std::size_t> lineage_bytes_ = std::make_shared<std::size_t>(0);
  std::size_t lineage_compact_at_ = 4096;
  void RememberDeadNode(const std::string& node_id_hex, const std::string& cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every task not yet completed, by id (queues, leases and the resolver refer to tasks
  // by id; an id missing here is a task that completed). Shared with the outbox until
  // a push is sent. Open addressing: at 10,000s of tasks in flight its lookups (four per
  // task) are cache misses, fewer than a node-based map's.
  absl::flat_hash_map<TaskId, std::shared_ptr<TaskEntry>, TaskId::Hasher> tasks_
      ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

// INVALID_USAGE for a call whose arguments, with the small objects of its ObjectRef
// arguments copied in, take `bytes` (above config::max_request_bytes()); `what` names the
// call ("F", "actor call M"), `fn` is the function's registered name.
std::shared_ptr<const proto::ErrorInfo> InlineArgumentsTooLarge(const std::string& what,
                                                                const std::string& fn,
                                                                std::size_t bytes);

// How long the head takes at most to declare an unanswering node dead (health checks of
// max(period, timeout), failure_threshold of them, and one period of slack): how long an
// owner waits for a node's death before it takes a copy there for reachable again.
std::chrono::milliseconds NodeDeathBound();

// Builds an ErrorInfo.
std::shared_ptr<const proto::ErrorInfo> MakeError(proto::ErrorType type, std::string message,
                                                  std::string function_name = "",
                                                  std::string node_id = "");

}  // namespace raio::worker
