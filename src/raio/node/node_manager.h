// NodeManager: the node daemon. Serves local drivers and workers on a Unix socket:
// worker leases (grant, queue, infeasible), worker registration, blocked-worker CPU
// lending, and node stats; registers the node with the head over TCP.
//
// Cluster: the node also listens on TCP at node_ip:port, for owners and nodes on other
// hosts (spilled lease requests, their workers' failure causes). It reports its available
// resources to the head (REPORT_RESOURCES, at most every resource_report_interval_ms)
// and keeps the head's view of the other nodes (UPDATE_CLUSTER_VIEW; ClusterView). A
// lease request goes where ClusterScheduler decides: granted or queued here, spilled back
// to another node (the owner asks that one), or, when no node can meet it, refused
// (fail_infeasible: an embedded cluster) or queued as infeasible until a node that can
// joins (LEASE_INFEASIBLE tells the owner). A lease of a job whose driver is on another
// node makes the node fetch the job's configuration from the head (GET_JOB_INFO); such
// jobs end when the head says so (JOB_FINISHED).
//
// Leasing (Ray's design): an owner asks for a worker for one resource shape; the node
// holds those resources for the lease, binds an idle worker of the owner's job started for
// the lease's GPUs (starting one if needed; see WorkerKey) and replies with the worker's
// socket. The owner then pushes tasks
// straight to the worker and returns the lease when its queue is drained.
//
// Configuration: the head's reply to the registration carries the cluster's config table,
// which the node applies to this process (config::ApplyOverrides) before it starts any
// worker; every worker gets the values in its environment (WorkerPool).
//
// Placement groups (node_manager_placement.cc): the head reserves bundles here in two
// phases (PREPARE_BUNDLES, COMMIT_BUNDLES; PlacementGroupResourceManager) and gives them
// back (CANCEL_BUNDLES), ending the leased workers and actors that hold their resources.
// A committed bundle's renamed resources join the node's totals, which the next resource
// report carries. A lease of a group waits (as infeasible) while no node holds the
// group's resources, even in an embedded cluster, and fails once the head says the group
// was removed (ClusterViewUpdate.removed_placement_groups).
//
// Memory monitor: every memory_monitor.interval the node measures its memory use
// and, above the threshold, ends the leased worker with the largest resident set (one at
// a time: the next only after the previous one was reaped), remembering why so that the
// worker's owner can ask (GET_WORKER_FAILURE_CAUSE). See memory_monitor.h.
//
// Threading: all state lives on the node's EventLoop; Create/Stop from other threads.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "raio/common/clock.h"
#include "raio/common/event_loop.h"
#include "raio/common/ids.h"
#include "raio/common/resources.h"
#include "raio/common/timer.h"
#include "raio/node.pb.h"
#include "raio/node/actor_manager.h"
#include "raio/node/memory_monitor.h"
#include "raio/node/object_manager/object_manager.h"
#include "raio/node/object_store_service.h"
#include "raio/node/package_cache.h"
#include "raio/node/scheduler/cluster_scheduler.h"
#include "raio/node/scheduler/local_resource_manager.h"
#include "raio/node/scheduler/placement_group_resource_manager.h"
#include "raio/node/worker_pool/worker_pool.h"
#include "raio/placement_group.pb.h"
#include "raio/rpc/listener.h"
#include "raio/rpc/service.h"

namespace raio::node {

class NodeManager {
 public:
  struct Options {
    // Directory for sockets; must exist and be private to the user.
    std::string session_dir;
    // "host:port" of the head to register with.
    std::string head_address;
    // What this node offers (CPU, GPU, memory, custom).
    ResourceSet total;
    // Size of the node's shared-memory object store in bytes.
    uint64_t object_store_bytes = 0;
    // When and how hard to end workers under memory pressure; must pass Validate().
    // nullopt: MemoryMonitorOptions::FromConfig() once the cluster's configuration came.
    std::optional<MemoryMonitorOptions> memory_monitor;
    // The IP this node serves other hosts on (and its workers listen on); `port` 0 picks
    // a free one. Must be routable from the other nodes.
    std::string node_ip = "127.0.0.1";
    int port = 0;
    // Hex NodeId to register as (empty: a random one). The head refuses an id that a live
    // node already has.
    std::string node_id;
    std::map<std::string, std::string> labels;
    // No node can ever join (an embedded cluster): a demand no node meets fails at once
    // instead of waiting as infeasible.
    bool fail_infeasible = false;
    // Called once, on the node's loop, when this node has lost the cluster: its head
    // connection closed (the head declared it dead, stopped or crashed) or no health check
    // came for health_check_failure_threshold periods (cut off). The node has already
    // ended its workers and drivers' connections (no split brain: a node declared dead
    // serves nothing); the owner of the NodeManager stops it and may register a new one
    // under a new id (`raio start --address` does, every node_rejoin_backoff_ms).
    std::function<void(const std::string& why)> on_cluster_lost;
    // The head runs in this process (`raio start --head`, the embedded cluster): it cannot
    // be cut off, so no silence from it is taken for a lost cluster (a paused process
    // resumes whole).
    bool head_in_process = false;
  };

  static absl::StatusOr<std::unique_ptr<NodeManager>> Create(Options options);
  ~NodeManager();
  // Ends all workers, closes all connections, stops the loop. Idempotent.
  void Stop();

  const NodeId& id() const { return id_; }
  const std::string& socket_path() const { return socket_path_; }
  // Where the node is reached: its TCP endpoint (node_ip:port) and, for processes on
  // this host, its Unix socket.
  proto::Address address() const;
  // The TCP endpoint alone, as processes on other hosts are told (object locations).
  proto::Address remote_address() const;
  int port() const;

 private:
  struct Lease {
    LeaseId id;
    JobId job = 0;
    std::shared_ptr<rpc::Connection> owner;
    rpc::FrameHeader request;  // to reply when granted
    proto::RequestWorkerLeaseRequest spec;
    ResourceSet demand;
    std::optional<Allocation> allocation;
    WorkerId worker;  // nil until granted
    bool granted = false;
    // Queued because no node can meet it now (standalone clusters: one may join).
    bool infeasible = false;
  };
  struct Peer {
    enum class Kind { kUnknown, kDriver, kWorker } kind = Kind::kUnknown;
    JobId job = 0;
    WorkerId worker;      // the worker's id, or the driver's core worker id
    ClientId client = 0;  // object store client id of this connection
  };

  explicit NodeManager(Options options);
  absl::Status Start();
  void OnAccept(std::shared_ptr<rpc::Connection> conn);
  // Fills service_'s table: the node's own methods, the store's and the actors' (Start).
  void RegisterHandlers();
  void OnRequest(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                 std::string_view body);
  void OnClose(const std::shared_ptr<rpc::Connection>& conn);

  void HandleRegisterDriver(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                            const proto::RegisterDriverRequest& req);
  void HandleRegisterWorker(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                            const proto::RegisterWorkerRequest& req);
  void HandleRequestLease(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                          const proto::RequestWorkerLeaseRequest& req);
  // Whether `req`'s hard node affinity or label `selector` rules this node out.
  bool ExcludesThisNode(const proto::RequestWorkerLeaseRequest& req,
                        const std::map<std::string, std::string>& selector) const;
  // Replies SPILLBACK: the owner asks node `node_id` (in the view) instead.
  void ReplySpillback(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                      const std::string& node_id, bool grant_or_reject);
  // The cluster view changed: infeasible leases may have become feasible, queued ones may
  // go to a node that has room now.
  void RescheduleQueued();
  // The scheduler's decision for a queued lease (its demand, strategy and selector).
  ClusterScheduler::Decision DecideFor(const Lease& lease, bool local_has_room);
  void HandleClusterView(const proto::ClusterViewUpdate& update);
  // A lease of a job this node has no configuration for: fetch it from the head once.
  void FetchJob(JobId job);
  void OnJobInfo(JobId job, absl::StatusOr<proto::JobConfigInfo> info);
  // Takes the configuration of job `job`, whose driver is on another node (a lease or an
  // actor placed here). A job with a package (its driver uploaded its executable and
  // files) is prepared first: its files are fetched into the package cache and placed in
  // the job's directory (PrepareJob), after which its workers can start; OK means under
  // way. A job without one needs its executable at the driver's path here, else
  // FailedPrecondition naming the node and the path.
  absl::Status AdoptJob(JobId job, const proto::JobConfigInfo& info);
  // Fetches the files of `info`'s package still missing (PackageCache), then lays out the
  // job directory and adds the job to the pool; on failure fails its waiting leases and
  // actors naming this node and the cause (FailWorkerStarts).
  void PrepareJob(JobId job, const proto::JobConfigInfo& info);
  void OnJobPackageReady(JobId job);
  void ArmReportTimer();
  void ReportResources();
  void HandleReturnLease(const LeaseId& id, bool cancel);
  // PULL_OBJECTS: pulls the objects this node lacks (ObjectManager), replies when all are
  // here or with the first failure.
  void HandlePullObjects(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                         proto::PullObjectsRequest& req);
  void HandleBlocked(const std::shared_ptr<rpc::Connection>& conn, bool blocked);
  proto::NodeStats BuildStats() const;

  // Grants what can be granted, starts workers that waiting leases need.
  void ScheduleLeases();
  void Grant(Lease& lease, WorkerProcess& worker);
  void ReleaseLease(std::map<LeaseId, Lease>::iterator it);
  // Ends worker `id` (if still known) and frees what it held. `reason` (empty: a crash,
  // an exit or a kill by its owner) becomes an actor's death cause.
  void OnWorkerGone(const WorkerId& id, const std::string& reason = "");
  // OnWorkerGone without scheduling what its resources free; whether it was known.
  bool EndWorker(const WorkerId& id, const std::string& reason);
  // A worker's connection closed: once its exit is reaped (waiting up to `tries_left`
  // polls), it is gone with how it ended as the reason.
  void OnWorkerDisconnected(const WorkerId& id, int tries_left);
  void OnJobEnded(JobId job);
  // The job's workers keep dying while starting (`why` says how): its waiting leases fail
  // with WORKER_START_FAILED and its actors waiting for a process die with `why`.
  void FailWorkerStarts(JobId job, const std::string& why);
  void ArmReapTimer();
  // Reaps exited workers: ends their leases and actors, and records how each exited.
  void ReapWorkers();
  // Replies to GET_WORKER_FAILURE_CAUSE; while the worker's exit is not reaped yet, looks
  // again every worker_exit_poll_interval_ms, `tries_left` more times.
  void AnswerFailureCause(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                          const WorkerId& worker, int tries_left);
  void ArmMemoryTimer();
  // One memory monitor round: measure, and end a worker if over the threshold.
  void CheckMemory();
  void RememberFailureCause(const WorkerId& id, proto::WorkerFailureCause cause);
  // Health: the head's checks are answered (HEALTH_CHECK) and timed; a timer notices
  // when they stop coming. LoseCluster ends the node's work and calls on_cluster_lost.
  void ArmHealthWatchdog();
  void LoseCluster(const std::string& why);
  // The view lost nodes: tell every local driver and worker (NODE_REMOVED), so that
  // owners drop their leases there and name the cause.
  void NotifyRemovals(const proto::ClusterViewUpdate& update);
  std::string ClusterDescription() const;
  // The local node's entry of the view, from its current resources.
  NodeView LocalView() const;

  // Placement groups (node_manager_placement.cc).
  void RegisterPlacementHandlers();
  void HandlePrepareBundles(const rpc::Responder<proto::PREPARE_BUNDLES>& r,
                            const proto::BundlesRequest& req);
  void HandleCommitBundles(const rpc::Responder<proto::COMMIT_BUNDLES>& r,
                           const proto::BundlesRequest& req);
  void HandleCancelBundles(const rpc::Responder<proto::CANCEL_BUNDLES>& r,
                           const proto::BundlesRequest& req);
  // Gives back bundles `indices` of `pg` held here (all when empty): first ends the
  // leased workers and actors holding their resources (MustEndWith), `cause` saying why,
  // and drops the allocations queued leases took from them; then returns the bundles.
  void CancelBundles(const PlacementGroupId& pg, const std::vector<int>& indices,
                     const std::string& cause);
  // The node's totals changed: the view's local entry and the head hear it at once, and
  // queued leases may fit now (or no longer).
  void OnTotalsChanged();
  // The head removed these groups: their queued leases fail, their actors here die, and
  // bundles still held here are given back.
  void OnPlacementGroupsRemoved(const proto::ClusterViewUpdate& update);
  bool IsRemovedGroup(const PlacementGroupId& pg) const { return removed_groups_.count(pg) > 0; }

  Options options_;
  NodeId id_;
  std::string socket_path_;
  EventLoop loop_{"raio-node"};
  std::unique_ptr<rpc::Listener> listener_;
  std::unique_ptr<rpc::Listener> tcp_listener_;
  std::shared_ptr<rpc::Connection> head_;
  std::unique_ptr<Timer> report_timer_;
  std::unique_ptr<Timer> reap_timer_;
  std::unique_ptr<Timer> memory_timer_;
  std::unique_ptr<Timer> health_timer_;
  // When the head's last health check (or the registration) came; whether LoseCluster ran.
  Clock::time_point last_health_check_;
  bool cluster_lost_ = false;
  // Set in Start(), after registration, before the loop reads it.
  MemoryMonitorOptions memory_monitor_;

  // Loop thread only.
  std::unique_ptr<ObjectStoreService> store_;
  // Copies objects from other nodes into store_ and serves this node's to them.
  std::unique_ptr<ObjectManager> object_manager_;
  // The node's methods, the store's and the actors' (loop thread).
  rpc::Service service_{"node"};
  ClientId next_client_id_ = 1;
  LocalResourceManager resources_;
  PlacementGroupResourceManager bundles_;
  // Groups the head removed (the newest kMaxRemovedGroups; oldest first in the deque).
  std::set<PlacementGroupId> removed_groups_;
  std::deque<PlacementGroupId> removed_order_;
  WorkerPool pool_;
  ActorManager actors_;
  std::map<LeaseId, Lease> leases_;
  std::deque<LeaseId> pending_;
  // Leases queued as infeasible, in arrival order.
  std::deque<LeaseId> infeasible_;
  ClusterView view_;
  ClusterScheduler scheduler_;
  // What the last REPORT_RESOURCES said, and its version.
  ResourceSet reported_available_;
  ResourceSet reported_total_;
  uint32_t reported_infeasible_ = 0;
  uint64_t report_version_ = 0;
  // Jobs whose driver is elsewhere: configuration being fetched, and known ones.
  std::set<JobId> fetching_jobs_;
  std::set<JobId> remote_jobs_;
  // Jobs whose package files are being fetched: the configuration and the files still
  // awaited (PrepareJob).
  struct PreparingJob {
    proto::JobConfigInfo info;
    int files_left = 0;
    std::string executable;  // its path in the cache, once there
    std::string failure;     // the first fetch failure
  };
  std::map<JobId, PreparingJob> preparing_jobs_;
  PackageCache packages_;
  std::map<rpc::Connection*, std::pair<std::shared_ptr<rpc::Connection>, Peer>> peers_;
  // Memory monitor: the pid of the last worker it ended until that process is reaped
  // (-1: none pending), whether the current episode was already logged, and the causes
  // of recent deaths the node caused (oldest first in failure_order_).
  pid_t oom_victim_pid_ = -1;
  bool warned_no_victim_ = false;
  bool warned_unreadable_ = false;
  std::map<WorkerId, proto::WorkerFailureCause> failure_causes_;
  std::deque<WorkerId> failure_order_;
  bool stopped_ = false;
  std::atomic<bool> stop_called_{false};
};

}  // namespace raio::node
