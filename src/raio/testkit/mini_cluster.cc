#include "raio/testkit/mini_cluster.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "raio/common/config.h"
#include "raio/common/process.h"
#include "raio/common/resources.h"
#include "raio/rpc/listener.h"
#include "raio/rpc/service.h"
#include "raio/testkit/time_scale.h"

namespace raio::testkit {

absl::StatusOr<std::unique_ptr<MiniCluster>> MiniCluster::Create() {
  auto cluster = std::unique_ptr<MiniCluster>(new MiniCluster());
  // A session directory, so that a later CleanStaleSessions removes it if this test is
  // killed before its teardown.
  cluster->dir_ = MakeTempDir("session");
  if (cluster->dir_.empty()) return absl::InternalError("cannot create a temporary directory");
  WriteSessionOwner(cluster->dir_);
  head::HeadService::Options options;  // 127.0.0.1, port 0
  auto head = head::HeadService::Create(std::move(options));
  if (!head.ok()) {
    cluster->Stop();
    return head.status();
  }
  cluster->head_ = std::move(*head);
  return cluster;
}

MiniCluster::~MiniCluster() { Stop(); }

absl::StatusOr<int> MiniCluster::AddNode(const std::map<std::string, double>& resources,
                                         uint64_t object_store_bytes,
                                         const std::map<std::string, std::string>& labels) {
  auto total = ResourceSet::FromMap(resources);
  if (!total.ok()) return total.status();
  const int index = num_nodes();
  std::string dir = absl::StrCat(dir_, "/node-", index);
  if (::mkdir(dir.c_str(), 0700) != 0) {
    return absl::InternalError(absl::StrCat("cannot create ", dir));
  }
  node::NodeManager::Options options;
  options.session_dir = dir;
  options.head_address = head_address();
  options.total = *total;
  options.object_store_bytes = object_store_bytes;
  options.labels = labels;
  node::MemoryMonitorOptions no_monitor = node::MemoryMonitorOptions::FromConfig();
  no_monitor.interval = std::chrono::milliseconds(0);  // off
  options.memory_monitor = no_monitor;
  auto daemon = node::NodeManager::Create(std::move(options));
  if (!daemon.ok()) {
    RemoveTree(dir);
    return daemon.status();
  }
  nodes_.push_back(Node{std::move(dir), std::move(*daemon)});
  return index;
}

node::NodeManager& MiniCluster::node(int i) {
  return *nodes_.at(static_cast<std::size_t>(i)).daemon;
}

const std::string& MiniCluster::node_dir(int i) const {
  return nodes_.at(static_cast<std::size_t>(i)).dir;
}

void MiniCluster::StopNode(int i) {
  Node& n = nodes_.at(static_cast<std::size_t>(i));
  if (!n.daemon) return;
  n.daemon->Stop();
  n.daemon.reset();
  RemoveTree(n.dir);
}

absl::StatusOr<proto::ClusterStatus> MiniCluster::ClusterStatus() {
  if (!head_conn_ || head_conn_->closed()) {
    if (!client_loop_.started()) client_loop_.Start();
    // The test's own deadlines: scaled (time_scale.h), as the daemons it waits on run
    // slower under sanitizers.
    auto conn =
        rpc::ConnectTcp(client_loop_.io(), head_address(), Scaled(config::connect_timeout_ms()));
    if (!conn.ok()) return conn.status();
    head_conn_ = std::move(*conn);
    head_conn_->Start(nullptr, nullptr);
  }
  return rpc::CallSync<proto::GET_CLUSTER_STATUS>(*head_conn_, proto::Empty(),
                                                  Scaled(config::control_rpc_timeout_ms()));
}

void MiniCluster::Stop() {
  if (head_conn_) head_conn_->Close(absl::CancelledError("mini cluster stopping"));
  client_loop_.Stop();
  head_conn_.reset();
  for (int i = 0; i < num_nodes(); ++i) StopNode(i);
  nodes_.clear();
  if (head_) head_->Stop();
  head_.reset();
  if (!dir_.empty()) RemoveTree(dir_);
  dir_.clear();
}

}  // namespace raio::testkit
