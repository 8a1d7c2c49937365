// CoreWorker: the library inside every driver and worker process. It owns the objects
// this process created (ObjectTable), submits tasks through the TaskSubmitter, and
// serves Get/Wait/Put and ObjectRef reference counting for the user API.
//
// Threading: one mutex guards the object table and the submitter; user threads call in
// directly, and replies are handled on the CoreWorker's own EventLoop. Get/Wait block the
// calling thread on a condition variable. A task's thread that blocks in Get tells the
// node (NOTIFY_BLOCKED), which lends its CPUs to other tasks until it resumes, so nested
// tasks cannot deadlock a full node.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "raio/actor.h"
#include "raio/common/event_loop.h"
#include "raio/common/ids.h"
#include "raio/common/mutex.h"
#include "raio/internal/runtime.h"
#include "raio/node.pb.h"
#include "raio/rpc/connection.h"
#include "raio/rpc/connection_pool.h"
#include "raio/rpc/listener.h"
#include "raio/rpc/service.h"
#include "raio/worker/actor_submitter.h"
#include "raio/worker/dependency_resolver.h"
#include "raio/worker/object_table.h"
#include "raio/worker/outbox.h"
#include "raio/worker/store_client.h"
#include "raio/worker/task_submitter.h"

namespace raio::worker {

class CoreWorker {
 public:
  struct Options {
    WorkerId worker_id;
    bool is_driver = true;
    std::string node_id_hex;
    // Directory in which this process creates its owner-service socket
    // (o-<worker id>.sock), as its node says.
    std::string socket_dir;
    // Namespace of named actors when none is given ("job-<id>" unless Init sets one).
    std::string default_namespace;
    JobId job_id = 0;
    // How peers are connected to; null: Unix sockets on this node, TCP elsewhere.
    std::shared_ptr<rpc::ConnectionFactory> connection_factory;
    // The node's IP: the owner service also listens on TCP there (port chosen by the
    // system), for borrowers and workers on other hosts.
    std::string node_ip = "127.0.0.1";
    // The node's TCP endpoint (its registration reply's node_address): where this
    // process's objects in the store are listed as being, for readers on other nodes.
    proto::Address node_address;
  };

  // `loop` must outlive the CoreWorker; `node` is a started connection on that loop;
  // `store` maps the node's object store.
  CoreWorker(Options options, EventLoop& loop, std::shared_ptr<rpc::Connection> node,
             std::unique_ptr<StoreClient> store);
  ~CoreWorker();

  // See include/raio/internal/runtime.h for contracts; errors are thrown as raio::
  // exceptions.
  ObjectId SubmitTask(const std::string& function_name, std::vector<internal::TaskArg> args,
                      const internal::TaskOptions& options);
  ObjectId Put(internal::ValueFormat format, internal::DType dtype, const void* data,
               std::size_t size, std::vector<ObjectId> contained = {});

  // Actors (see include/raio/actor.h for the contracts). CreateActor, KillActor and
  // GetNamedActor block (argument resolution, one node RPC; never on the loop thread);
  // SubmitActorTask does not: its ObjectRef arguments are resolved asynchronously and the
  // call is sent when they are ready, after every earlier call of this process's to the
  // same actor.
  ActorId CreateActor(const std::string& factory_name, const std::string& class_name,
                      std::vector<internal::TaskArg> args, const internal::ActorOptions& options);
  ObjectId SubmitActorTask(const ActorId& actor, const std::string& method_name,
                           std::vector<internal::TaskArg> args, int num_returns = 1);
  void KillActor(const ActorId& actor, bool no_restart);
  std::optional<ActorId> GetNamedActor(const std::string& name, const std::string& ns,
                                       const std::string& class_name);

  // Starts the owner service (borrowers reach this process there). Call once.
  absl::Status StartOwnerService();
  // ObjectRef (de)serialization; see internal::OnObjectRefSerialized/Deserialized.
  internal::OwnerInfo SerializeRef(const ObjectId& id);
  void DeserializeRef(const ObjectId& id, const internal::OwnerInfo& owner);
  // For a task result holding `id`: registers `borrower` (the task's owner) with the
  // object's owner so the object outlives this worker's references; `spec` and `attempt`
  // are the task's (its id and attempt let the owner discard registrations of attempts
  // that died). Blocking RPC unless this process owns it. Returns the ref's owner info.
  absl::StatusOr<internal::OwnerInfo> RegisterBorrowerFor(const ObjectId& id,
                                                          const WorkerId& borrower,
                                                          const proto::TaskSpec& spec,
                                                          uint32_t attempt);
  // Where this process's owner service is (valid after StartOwnerService).
  const proto::Address& owner_address() const { return caller_address_; }
  // Blocks until `id` is ready (or `timeout`). An in-store copy that cannot be fetched
  // from any node listed for it is waited for again, up to kMaxGetRecoveries times: its
  // node is being declared dead and the object made again from its lineage (an owned
  // object), or its owner asked again (a borrowed one).
  internal::ValueView Get(const ObjectId& id, std::optional<std::chrono::microseconds> timeout) {
    return GetWithRecovery(id, timeout, 0);
  }
  std::vector<bool> Wait(const std::vector<ObjectId>& ids, int num_objects,
                         std::optional<std::chrono::microseconds> timeout);
  void AddLocalReference(const ObjectId& id);
  void RemoveLocalReference(const ObjectId& id);

  // --- Objects on other nodes ---
  // Whether a reader on this node must pull an in-store object listed at `locations`
  // first: none of them is this node (an empty list: the object was put here).
  bool NeedsPull(const google::protobuf::RepeatedPtrField<proto::Address>& locations) const;
  // Pulls `request`'s objects into this node's store (blocking; StoreClient::Pull), then
  // tells each object's owner (`owners[i]`, ObjectRef encoding, for the i-th object) that
  // this node holds a copy. Errors: StoreClient::Pull's.
  absl::Status PullAndReport(const proto::PullObjectsRequest& request,
                             const std::vector<std::string>& owners);

  internal::ValueView GetWithRecovery(const ObjectId& id,
                                      std::optional<std::chrono::microseconds> timeout,
                                      int recoveries);
  // A Get could not fetch `id` from `locations`: waits until its entry changes (made
  // pending again, failed, new copies) or NodeDeathBound() passes (then a borrowed entry
  // is asked of its owner again). False when the Get's deadline passed first.
  bool AwaitRecovery(const ObjectId& id,
                     const google::protobuf::RepeatedPtrField<proto::Address>& locations,
                     absl::Time deadline);
  static constexpr int kMaxGetRecoveries = 3;

  // The node connection closed: fail everything pending; later calls throw.
  void OnNodeLost(const std::string& why);
  // Puts `strategy` (when not DEFAULT) and `label_selector` into `spec` (a TaskSpec or an
  // ActorSpec). Throws InvalidUsageError naming `function_name` for a malformed node id
  // or selector.
  template <typename Spec>
  static void SetStrategy(const std::string& function_name, const SchedulingStrategy& strategy,
                          const std::map<std::string, std::string>& label_selector, Spec* spec);
  // Puts `spec` (a TaskSpec or an ActorSpec) in the placement group `options` name (task or
  // actor options), else, when they ask for no other placement, in the group the task
  // running on this thread captures its children into (as Ray); `demand` becomes the
  // bundle's renamed resources. Throws InvalidUsageError naming `function_name` for a
  // malformed group id, a demand no bundle of it can meet, or a group named together with
  // SPREAD, a node affinity or a label selector (the bundle decides the node: such work
  // would wait forever). Returns whether the spec went into a group.
  template <typename CallOptions, typename Spec>
  static bool SetPlacementGroup(const std::string& function_name, const CallOptions& options,
                                ResourceSet* demand, Spec* spec);
  // The node keeps a lease request of ours that no node can meet now (LEASE_INFEASIBLE).
  void OnLeaseInfeasible(const proto::LeaseInfeasibleNotice& notice);
  // A node left the cluster (NODE_REMOVED): leases there are dropped, tasks retried.
  void OnNodeRemoved(const proto::NodeRemovedNotice& notice);
  // Requests the node sends on a driver's node connection (its notices); for the
  // connection's request handler.
  void OnNodeRequest(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                     std::string_view body);
  const std::string& node_id_hex() const { return options_.node_id_hex; }
  JobId job_id() const { return options_.job_id; }
  const std::string& default_namespace() const { return options_.default_namespace; }
  // One request to the local node, blocking for its reply body (placement groups; never on
  // the loop thread). `timeout` nullopt: as long as the connection lives.
  absl::StatusOr<std::string> CallNode(proto::Method method,
                                       const google::protobuf::MessageLite& request,
                                       std::optional<std::chrono::milliseconds> timeout);
  // The placement group (hex id, bundle -1) that tasks submitted on this thread go into
  // when they name none: set while a task whose spec captures its children runs here.
  static void SetCapturingPlacementGroup(std::string pg_hex);
  static const std::string& CapturingPlacementGroup();
  // Stops submitting, closes worker connections. Idempotent.
  void Shutdown();

  // Marks the calling thread as running a task (worker executor), so a blocking Get
  // lends the task's CPUs back to the node.
  static void SetExecutingTask(bool executing);

  // See raio::Cancel.
  void Cancel(const ObjectId& id, bool force);
  std::size_t NumOwnedObjects();
  // The local node's stats (blocking RPC; not on the loop thread). Throws
  // ClusterUnavailableError when the node does not answer.
  proto::NodeStats GetNodeStats();
  StoreClient& store() { return *store_; }
  const Options& options() const { return options_; }

 private:
  void NotifyBlocked(bool blocked);
  // Waits for ObjectRef arguments and fills `out` with their values, copied inline (an
  // actor's factory arguments are kept for its restarts); refs inside by-value arguments
  // are held in `held` until the call completes.
  void ResolveArgsBlocking(std::vector<internal::TaskArg>& args,
                           google::protobuf::RepeatedPtrField<proto::TaskArg>* out,
                           std::vector<ObjectId>* held);
  // Appends one TaskArg per argument to `out`: by-value ones filled, ObjectRef ones empty
  // and returned for the DependencyResolver.
  static std::vector<RefArg> SplitArgs(std::vector<internal::TaskArg>& args,
                                       google::protobuf::RepeatedPtrField<proto::TaskArg>* out);
  // Asks the owners of borrowed, not yet ready argument objects for their values.
  void FetchBorrowedArgsLocked(const std::vector<RefArg>& ref_args)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnObjectFreed(const ObjectId& id, ObjectEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnObjectReady(const ObjectId& id, ObjectEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks a borrowed object's owner for its value (once); the reply completes the entry.
  void FetchBorrowedLocked(const ObjectId& id, ObjectEntry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "worker W on node N at ..." for an owner address as ObjectEntry keeps it.
  static std::string DescribeOwner(const std::string& encoded_address);
  // ADD_OBJECT_LOCATION: node `node` holds a copy of owned object `id`; a copy of an
  // object freed already is deleted there.
  void AddObjectLocationLocked(const ObjectId& id, const proto::Address& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills owner_service_'s table (constructor).
  void RegisterOwnerServiceHandlers();
  // ADD_BORROWER: `req.borrower_worker_id` now holds references to an object owned here.
  absl::Status AddBorrowerLocked(rpc::Connection& conn, const proto::BorrowerRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registers `borrower` for owned object `id` on its behalf (see
  // ObjectTable::AddBorrowerOnBehalf), watching the borrower's process first. Returns false
  // when `id` is not an owned object here.
  bool AddBorrowerOnBehalfLocked(const ObjectId& id, const WorkerId& borrower,
                                 const proto::Address& borrower_address, const std::string& task_id,
                                 uint32_t attempt, int count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps a connection to `borrower`'s owner service (made after the mutex is released),
  // whose closing means the borrower died: then its references are dropped everywhere,
  // as they are at once when it cannot be reached.
  void WatchBorrowerLocked(const WorkerId& borrower, const proto::Address& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pooled connection closed: borrowers watched through it are gone.
  void OnPooledConnectionClosed(const std::shared_ptr<rpc::Connection>& conn);
  // Waits (mu_ held) for any completion: first by spinning until `spin_until` with mu_
  // released, then on the condition variable until `deadline`. Returns true on timeout.
  bool WaitForCompletionLocked(std::chrono::steady_clock::time_point spin_until,
                               absl::Time deadline, bool* blocked)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[noreturn]] void ThrowError(const proto::ErrorInfo& error, const ObjectId& id);

  Options options_;
  EventLoop& loop_;
  std::shared_ptr<rpc::Connection> node_;
  std::unique_ptr<StoreClient> store_;
  raio::Mutex mu_;
  // Sends decided under mu_, made after it is released (OutboxLock).
  Outbox outbox_{mu_};
  // Connections to other processes' owner services and executors.
  rpc::ConnectionPool pool_;
  raio::CondVar ready_cv_;
  std::atomic<uint64_t> completions_{0};
  ObjectTable objects_ ABSL_GUARDED_BY(mu_);
  DependencyResolver resolver_ ABSL_GUARDED_BY(mu_);
  TaskSubmitter submitter_;
  ActorSubmitter actor_submitter_;
  uint64_t next_task_seq_ ABSL_GUARDED_BY(mu_) = 1;
  rpc::Service owner_service_{"owner"};
  // What the node sends on a driver's node connection (LEASE_INFEASIBLE).
  rpc::Service node_notices_{"node-notices"};
  // Where this process's owner service is (copied into every task spec it submits), and
  // serialized (as ObjectRefs carry it).
  proto::Address caller_address_;
  std::string owner_address_;
  std::unique_ptr<rpc::Listener> owner_listener_;
  std::unique_ptr<rpc::Listener> owner_tcp_listener_;
  // Owner service: borrowers that registered themselves, by their connection.
  std::map<rpc::Connection*, std::set<WorkerId>> borrower_conns_ ABSL_GUARDED_BY(mu_);
  // Owner service: borrowers registered on their behalf, watched through a connection to
  // their own owner service.
  std::map<WorkerId, std::shared_ptr<rpc::Connection>> borrower_watches_ ABSL_GUARDED_BY(mu_);
  std::string node_lost_ ABSL_GUARDED_BY(mu_);
  // Why this process's node lost the cluster, when it said so (NODE_REMOVED naming itself).
  std::string node_lost_cause_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace raio::worker
