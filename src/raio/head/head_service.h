// HeadService: the cluster control store. Keeps the node table (nodes register over TCP;
// the head health-checks each every health_check_period_ms and declares it dead after
// health_check_failure_threshold failed checks in a row or when its connection closes,
// keeping the dead ones with cause and time for `raio list nodes`; each reports its available
// resources, REPORT_RESOURCES) and relays it to every node as versioned, incremental updates
// (UPDATE_CLUSTER_VIEW: the entries that changed, at most every
// resource_report_interval_ms); keeps the job table (a driver's job lasts as long as its
// connection; nodes that run its workers for an owner elsewhere read its configuration,
// GET_JOB_INFO, and hear of its end, JOB_FINISHED); holds the cluster's configuration
// (handed to every node at registration and to every driver that joins), keeps the
// cluster's actor directory (ActorDirectory: names, placement, state; nodes forward their
// clients' CREATE/WAIT/GET_NAMED/KILL_ACTOR here), and answers cluster status by asking
// every node.
// It is off the per-task path: tasks go owner -> leased worker, actor calls caller ->
// actor's worker.
// Threading: all state lives on the head's EventLoop; Start/Stop from other threads.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "raio/common/event_loop.h"
#include "raio/common/timer.h"
#include "raio/head.pb.h"
#include "raio/head/actor_directory.h"
#include "raio/head/package_store.h"
#include "raio/head/placement_group_manager.h"
#include "raio/rpc/listener.h"
#include "raio/rpc/service.h"

namespace raio::head {

class HeadService {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // listen address; not 0.0.0.0 unless asked
    int port = 0;                    // 0 picks a free port
    // Called (on the head loop) when a client asks the cluster to shut down with
    // `shutdown_token`; without a token every such request is refused.
    std::function<void()> on_shutdown_request;
    std::string shutdown_token;
    // The cluster's configuration (config::CurrentValues() of the process that starts the
    // cluster): sent to every node that registers and every driver that joins.
    std::map<std::string, std::string> system_config;
    // No node can ever join (an embedded cluster): an actor no node can hold fails at
    // creation instead of waiting for a node that can (ActorDirectory).
    bool fail_infeasible = false;
    // Where the job package store keeps its files (PackageStore); "" = no store: uploads
    // and fetches fail with FAILED_PRECONDITION.
    std::string package_dir;
    // Health-check the nodes (health_check_* config entries); off for an embedded
    // cluster, whose only node runs in the head's process.
    bool health_checks = true;
  };

  static absl::StatusOr<std::unique_ptr<HeadService>> Create(Options options);
  ~HeadService();
  // Stops accepting and closes every connection. Idempotent.
  void Stop();
  // The whole cluster is stopping (its nodes are being stopped on purpose): a node whose
  // connection closes from now on is logged at info level, not warned about as a death.
  // Any thread.
  void BeginClusterStop() { cluster_stopping_.store(true); }
  // "host:port" clients connect to.
  std::string address() const;
  int port() const;

 private:
  explicit HeadService(Options options);
  void OnAccept(std::shared_ptr<rpc::Connection> conn);
  void OnClose(const std::shared_ptr<rpc::Connection>& conn);
  // Fills the method table (constructor).
  void RegisterHandlers();
  void HandleRegisterNode(const rpc::Responder<proto::REGISTER_NODE>& r,
                          proto::RegisterNodeRequest& req);
  void HandleRegisterJob(const rpc::Responder<proto::REGISTER_JOB>& r,
                         const proto::RegisterJobRequest& req);
  void HandleGetClusterStatus(const rpc::Responder<proto::GET_CLUSTER_STATUS>& r);
  void HandleReport(const rpc::Connection& conn, const proto::ResourceReport& report);
  // Sends the changed node entries and removals to every node (a timer; at most every
  // resource_report_interval_ms).
  void ScheduleBroadcast();
  void Broadcast();
  // The node the driver of `req` attaches to: the one it names, else one on its host.
  const proto::NodeInfo* ChooseDriverNode(const proto::RegisterJobRequest& req) const;
  // Asks every node (method Ask) for a List and answers `reply` with the entries of
  // `field(list)` of all of them.
  template <proto::Method Ask, proto::Method Answer, typename List, typename Field>
  void GatherFromNodes(const rpc::Responder<Answer>& reply, Field field);
  // The actor methods (RegisterHandlers); nodes forward their clients' calls.
  void RegisterActorHandlers();
  // The placement group methods (head_placement_groups.cc).
  void RegisterPlacementGroupHandlers();
  // Removes the group (its nodes end what runs in it), fails its actors waiting at the
  // head, and tells the nodes (the next view update), then runs `done`.
  void RemovePlacementGroup(const PlacementGroupId& id, const std::string& cause,
                            std::function<void(absl::Status)> done);
  // STAT_PACKAGE, UPLOAD_PACKAGE_CHUNK, FETCH_PACKAGE_CHUNK on packages_.
  void RegisterPackageHandlers();
  // The hex id of the node registered on `conn`, or "" (not a node's connection).
  std::string NodeOf(const rpc::Connection& conn) const;
  // Health checks: every node without a check in flight gets one (a timer, every
  // health_check_period_ms); a node whose checks failed health_check_failure_threshold
  // times in a row is declared dead.
  void ArmHealthTimer();
  void CheckHealth();
  void OnHealthReply(const std::string& node_id, const rpc::Connection* conn, bool ok);
  // Takes node `id` out of the table: it joins the dead nodes with `cause`, its connection
  // is closed (a node that comes back must register under a new id), its actors die, and
  // every node hears of it with the cause (and tells its owners, NODE_REMOVED).
  void DeclareDead(const std::string& id, const std::string& cause);

  // The directory's way to the nodes: their connections.
  class NodeLinks : public ActorDirectory::Nodes {
   public:
    explicit NodeLinks(HeadService& head) : head_(head) {}
    void Place(const std::string& node_id, const proto::PlaceActorRequest& request,
               std::function<void(absl::StatusOr<proto::PlaceActorReply>)> done) override;
    void Kill(const std::string& node_id, const proto::KillActorRequest& request,
              std::function<void(absl::Status)> done) override;

   private:
    HeadService& head_;
  };

  // The placement group manager's way to the nodes.
  class PlacementGroupLinks : public PlacementGroupManager::Nodes {
   public:
    explicit PlacementGroupLinks(HeadService& head) : head_(head) {}
    void Send(proto::Method method, const std::string& node_id,
              const proto::BundlesRequest& request,
              std::function<void(absl::Status)> done) override;
    void RunAfter(std::chrono::milliseconds delay, std::function<void()> fn) override;
    int64_t NowMs() override;

   private:
    HeadService& head_;
  };

  struct NodeEntry {
    proto::NodeInfo info;
    std::shared_ptr<rpc::Connection> conn;
    bool dirty = false;     // changed since the last broadcast
    int failed_checks = 0;  // health checks failed in a row
    bool check_in_flight = false;
  };
  struct JobEntry {
    proto::JobInfo info;
    proto::JobConfigInfo config;
    std::shared_ptr<rpc::Connection> conn;
  };

  Options options_;
  rpc::Service service_{"head"};
  EventLoop loop_{"raio-head"};
  std::unique_ptr<rpc::Listener> listener_;
  // Loop thread only.
  std::map<std::string, NodeEntry> nodes_;
  std::map<uint32_t, JobEntry> jobs_;
  std::map<rpc::Connection*, std::shared_ptr<rpc::Connection>> conns_;
  uint32_t next_job_id_ = 1;
  // The view relayed to nodes: its update counter, nodes removed since the last
  // broadcast, and whether a broadcast is scheduled.
  uint64_t view_version_ = 0;
  std::vector<std::string> removed_nodes_;
  std::vector<proto::NodeRemovedNotice> removals_;
  // Nodes declared dead (state "dead", death_cause, death_time_ms), oldest first; the
  // newest kMaxDeadNodes are kept. Their ids are never taken again.
  std::deque<proto::NodeInfo> dead_nodes_;
  std::unique_ptr<Timer> health_timer_;
  std::unique_ptr<Timer> broadcast_timer_;
  bool broadcast_scheduled_ = false;
  NodeLinks node_links_{*this};
  std::unique_ptr<ActorDirectory> actors_;
  PlacementGroupLinks placement_group_links_{*this};
  std::unique_ptr<PlacementGroupManager> placement_groups_;
  std::unique_ptr<PackageStore> packages_;  // null without Options::package_dir
  std::atomic<bool> stopped_{false};
  std::atomic<bool> cluster_stopping_{false};
};

}  // namespace raio::head
