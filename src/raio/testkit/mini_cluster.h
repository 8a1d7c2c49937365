// MiniCluster: one head and any number of node daemons in this process, for tests of
// several nodes (spillback, placement, node failure) without starting processes for the
// daemons. Every node is a real node::NodeManager with its own session directory (its
// Unix socket, spill directory) under one private temp directory, its own resources and
// a small object store, and registers with the head over 127.0.0.1 TCP as a remote node
// would; the head listens on port 0. Workers, when a driver asks for them, are real child
// processes as in production.
//
// Nodes share the process, hence the hostname: the head cannot tell them apart by host
// (a driver's REGISTER_JOB attaches to the last one listed with this host), and their
// memory monitors would measure the same machine, so they run without one.
//
// Thread-safety: Create, AddNode, StopNode, Stop and the accessors from one thread (the
// test's); each daemon runs on its own loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "raio/common/event_loop.h"
#include "raio/head.pb.h"
#include "raio/head/head_service.h"
#include "raio/node/node_manager.h"
#include "raio/rpc/connection.h"

namespace raio::testkit {

class MiniCluster {
 public:
  // Object store of each node unless AddNode says otherwise: small, to keep many nodes
  // cheap (the store pre-faults its memory at start).
  static constexpr uint64_t kDefaultObjectStoreBytes = 8ull << 20;

  // Makes the temp directory and starts the head. Errors: Internal (no temp directory),
  // or the head's (it cannot listen).
  static absl::StatusOr<std::unique_ptr<MiniCluster>> Create();
  // Stop().
  ~MiniCluster();
  MiniCluster(const MiniCluster&) = delete;
  MiniCluster& operator=(const MiniCluster&) = delete;

  // Starts node daemon number num_nodes() offering `resources` (CPU, GPU, memory and
  // custom names; GPU only as many as CUDA_VISIBLE_DEVICES lists, if set) and returns its
  // index once the head has registered it. Errors: InvalidArgument (bad resources), or
  // the node's start-up error. Blocks.
  // `labels`: the node's labels (label selectors match them).
  absl::StatusOr<int> AddNode(const std::map<std::string, double>& resources,
                              uint64_t object_store_bytes = kDefaultObjectStoreBytes,
                              const std::map<std::string, std::string>& labels = {});
  // Node `i` (0 <= i < num_nodes(), not stopped).
  node::NodeManager& node(int i);
  // Node `i`'s session directory.
  const std::string& node_dir(int i) const;
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  // Stops node `i` (its workers end, its connection to the head closes, its directory is
  // removed); its index stays taken. Blocks.
  void StopNode(int i);

  head::HeadService& head() { return *head_; }
  // "127.0.0.1:<port>" of the head.
  std::string head_address() const { return head_->address(); }
  const std::string& dir() const { return dir_; }

  // The head's GET_CLUSTER_STATUS: one NodeStats per registered node that answered, and
  // the jobs. Blocks (never call it on a daemon's loop); its connect and call deadlines
  // are the config's, times TimeScale() (testkit/time_scale.h).
  absl::StatusOr<proto::ClusterStatus> ClusterStatus();

  // Stops every node, then the head, and removes the directory. Idempotent.
  void Stop();

 private:
  struct Node {
    std::string dir;
    std::unique_ptr<node::NodeManager> daemon;
  };
  MiniCluster() = default;

  std::string dir_;
  std::unique_ptr<head::HeadService> head_;
  std::vector<Node> nodes_;
  // The test's own connection to the head (ClusterStatus), made on first use.
  EventLoop client_loop_{"mini-client"};
  std::shared_ptr<rpc::Connection> head_conn_;
};

}  // namespace raio::testkit
