// NodeManager: the node daemon. Serves local drivers and workers on a Unix socket:
// worker leases (grant, queue, infeasible), worker registration, blocked-worker CPU
// lending, and node stats; registers the node with the head over TCP.
//
// Leasing (Ray's design): an owner asks for a worker for one resource shape; the node
// holds those resources for the lease, binds an idle worker of the owner's job (starting
// one if needed) and replies with the worker's socket. The owner then pushes tasks
// straight to the worker and returns the lease when its queue is drained.
//
// Threading: all state lives on the node's EventLoop; Create/Stop from other threads.
#pragma once

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "raio/common/event_loop.h"
#include "raio/common/ids.h"
#include "raio/common/resources.h"
#include "raio/node.pb.h"
#include "raio/node/actor_manager.h"
#include "raio/node/object_store_service.h"
#include "raio/node/scheduler/local_resource_manager.h"
#include "raio/node/worker_pool/worker_pool.h"
#include "raio/rpc/listener.h"

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
  };

  static absl::StatusOr<std::unique_ptr<NodeManager>> Create(Options options);
  ~NodeManager();
  // Ends all workers, closes all connections, stops the loop. Idempotent.
  void Stop();

  const NodeId& id() const { return id_; }
  const std::string& socket_path() const { return socket_path_; }
  const std::string& object_store_path() const { return store_->shm_path(); }

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
  void OnRequest(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                 std::string_view body);
  void OnClose(const std::shared_ptr<rpc::Connection>& conn);

  void HandleRegisterDriver(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                            const proto::RegisterDriverRequest& req);
  void HandleRegisterWorker(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                            const proto::RegisterWorkerRequest& req);
  void HandleRequestLease(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                          const proto::RequestWorkerLeaseRequest& req);
  void HandleReturnLease(const LeaseId& id, bool cancel);
  void HandleBlocked(const std::shared_ptr<rpc::Connection>& conn, bool blocked);
  proto::NodeStats BuildStats() const;

  // Grants what can be granted, starts workers that waiting leases need.
  void ScheduleLeases();
  void Grant(Lease& lease, WorkerProcess& worker);
  void ReleaseLease(std::map<LeaseId, Lease>::iterator it);
  void OnWorkerGone(const WorkerId& id);
  void OnJobEnded(JobId job);
  void ArmReapTimer();
  std::string ClusterDescription() const;

  Options options_;
  NodeId id_;
  std::string socket_path_;
  EventLoop loop_{"raio-node"};
  std::unique_ptr<rpc::Listener> listener_;
  std::shared_ptr<rpc::Connection> head_;
  std::unique_ptr<boost::asio::steady_timer> reap_timer_;
  bool has_gpus_ = false;

  // Loop thread only.
  std::unique_ptr<ObjectStoreService> store_;
  ClientId next_client_id_ = 1;
  LocalResourceManager resources_;
  WorkerPool pool_;
  ActorManager actors_;
  std::map<LeaseId, Lease> leases_;
  std::deque<LeaseId> pending_;
  std::map<rpc::Connection*, std::pair<std::shared_ptr<rpc::Connection>, Peer>> peers_;
  bool stopped_ = false;
  std::atomic<bool> stop_called_{false};
};

}  // namespace raio::node
