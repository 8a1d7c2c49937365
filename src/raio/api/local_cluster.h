// LocalCluster: a head service plus one node daemon in this process, each on its own
// event loop. Used by raio::Init() for the embedded cluster and by `raio start --head`.
// The one place where client code (api/runtime.cc) reaches daemon code: this header
// names the head and node types without including their headers, so that client code
// compiles without them (library raio_local_cluster; docs/design/libraries.md).
// Threading: Create/Stop from any one thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "raio/common/process.h"
#include "raio/common/resources.h"

namespace raio {
namespace head {
class HeadService;
}
namespace node {
class NodeManager;
struct MemoryMonitorOptions;
}  // namespace node
}  // namespace raio

namespace raio::api {

struct LocalClusterOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::optional<double> num_cpus;
  std::optional<double> num_gpus;
  std::optional<double> memory_bytes;
  std::optional<uint64_t> object_store_bytes;
  std::map<std::string, double> resources;
  // Overrides of config entries (name -> value in text form), applied to this process
  // before the cluster starts; the head hands the result to its node (and so to workers).
  std::map<std::string, std::string> system_config;
  // The memory monitor's thresholds: the config entries memory_usage_threshold and
  // memory_usage_threshold_bytes; when set they win over system_config.
  std::optional<double> memory_usage_threshold;
  std::optional<uint64_t> memory_usage_threshold_bytes;
  std::function<void()> on_shutdown_request;
  // The node's IP for other hosts ("" = `host`, or 127.0.0.1 when that is 0.0.0.0), its
  // labels, and whether a demand no node can meet fails at once (true: an embedded cluster,
  // which no node can join; false: `raio start --head`, where it waits for a node).
  std::string node_ip;
  std::map<std::string, std::string> labels;
  bool fail_infeasible = true;
  // Non-empty ("host:port" of a head): start no head; the node joins that cluster
  // (`raio start --address`), on `node_port` (0 = any free), as `node_id` (hex; "" =
  // random). `host`, `port` and system_config are then unused (the head's config wins).
  std::string join_address;
  int node_port = 0;
  std::string node_id;
  // A joined node lost the cluster (NodeManager::Options::on_cluster_lost; called on the
  // node's loop: hand the restart to another thread).
  std::function<void(const std::string& why)> on_cluster_lost;
};

class LocalCluster {
 public:
  // Applies the configuration overrides (ApplyClusterConfig) and validates the resources
  // (both InvalidArgument), removes what dead raio processes left behind
  // (ReclaimDeadProcessFiles), makes a private session directory, starts the head (which
  // holds this process's config values as the cluster's) and the node.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Create(const LocalClusterOptions& options);
  ~LocalCluster();
  void Stop();
  std::string head_address() const;
  const std::string& session_dir() const { return session_dir_; }
  // The node's hex id and its TCP endpoint "ip:port".
  std::string node_id() const;
  std::string node_address() const;
  // The secret a SHUTDOWN_CLUSTER request must carry (random hex, per cluster).
  const std::string& shutdown_token() const { return shutdown_token_; }

 private:
  LocalCluster() = default;
  std::string shutdown_token_;
  std::string session_dir_;
  std::unique_ptr<head::HeadService> head_;
  std::unique_ptr<node::NodeManager> node_;
  std::string join_address_;
};

// Removes the leftovers of SIGKILLed raio daemons and drivers of this user: their session
// directories under TempBase() (CleanStaleSessions; spill files, sockets). Returns how
// many and their size. Never touches files of live processes or of other users; logs
// each removal at info level. Runs at every LocalCluster::Create and in `raio stop`.
// (A killed node's object store memory needs no sweep: it has no file name.)
Reclaimed ReclaimDeadProcessFiles();

// Applies options.system_config, then the memory monitor thresholds given as options, to
// this process's config (config::ApplyOverrides, on top of the values it has).
// InvalidArgument naming each unknown entry or bad value; nothing of that map is applied
// then.
[[nodiscard]] absl::Status ApplyClusterConfig(const LocalClusterOptions& options);
// The object store size: the option, else config's object_store_memory_fraction of RAM.
uint64_t ObjectStoreBytes(const LocalClusterOptions& options);
// The resources a node offers: detected CPUs and memory (config's memory_resource_fraction
// of RAM) unless overridden, GPUs as given.
absl::StatusOr<ResourceSet> NodeResources(const LocalClusterOptions& options);

}  // namespace raio::api
