#include "raio/api/local_cluster.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "raio/common/config.h"
#include "raio/common/ids.h"
#include "raio/common/process.h"
#include "raio/head/head_service.h"
#include "raio/node/memory_monitor.h"
#include "raio/node/node_manager.h"
#include "raio/rpc/listener.h"

namespace raio::api {

struct ShutdownTokenTag {};

absl::StatusOr<ResourceSet> NodeResources(const LocalClusterOptions& options) {
  std::map<std::string, double> m = options.resources;
  for (const char* reserved : {"CPU", "GPU", "memory"}) {
    if (m.count(reserved)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", reserved,
          "' is not a custom resource; set it with --num-cpus/--num-gpus/--memory (CLI) or "
          "InitOptions::num_cpus/num_gpus/memory_bytes"));
    }
  }
  if (options.object_store_bytes && *options.object_store_bytes < (1u << 20)) {
    return absl::InvalidArgumentError("the object store needs at least 1 MiB");
  }
  m["CPU"] = options.num_cpus.value_or(DetectCpuCount());
  m["GPU"] = options.num_gpus.value_or(0);
  if (m["GPU"] != std::floor(m["GPU"])) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_gpus must be a whole number, got ", m["GPU"]));
  }
  m["memory"] = options.memory_bytes.value_or(
      std::floor(static_cast<double>(DetectMemoryBytes()) * config::memory_resource_fraction()));
  return ResourceSet::FromMap(m);
}

absl::Status ApplyClusterConfig(const LocalClusterOptions& options) {
  if (absl::Status s = config::ApplyOverrides(options.system_config, "system_config"); !s.ok()) {
    return s;
  }
  // The memory monitor's options are entries of the table too; given, they win.
  std::map<std::string, std::string> monitor;
  if (options.memory_usage_threshold) {
    char text[64];
    auto [end, ec] = std::to_chars(text, text + sizeof(text), *options.memory_usage_threshold);
    monitor["memory_usage_threshold"] = ec == std::errc() ? std::string(text, end) : "?";
  }
  if (options.memory_usage_threshold_bytes) {
    if (*options.memory_usage_threshold_bytes == 0) {
      return absl::InvalidArgumentError("memory_usage_threshold_bytes must be positive, got 0");
    }
    monitor["memory_usage_threshold_bytes"] = absl::StrCat(*options.memory_usage_threshold_bytes);
  }
  return config::ApplyOverrides(monitor, "options");
}

uint64_t ObjectStoreBytes(const LocalClusterOptions& options) {
  if (options.object_store_bytes) return *options.object_store_bytes;
  return static_cast<uint64_t>(static_cast<double>(DetectMemoryBytes()) *
                               config::object_store_memory_fraction());
}

Reclaimed ReclaimDeadProcessFiles() { return CleanStaleSessions(); }

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Create(
    const LocalClusterOptions& options) {
  if (absl::Status s = ApplyClusterConfig(options); !s.ok()) return s;
  auto total = NodeResources(options);
  if (!total.ok()) return total.status();
  ReclaimDeadProcessFiles();
  auto cluster = std::unique_ptr<LocalCluster>(new LocalCluster());
  cluster->session_dir_ = MakeTempDir("session");
  if (cluster->session_dir_.empty()) {
    return absl::InternalError("cannot create a session directory under $TMPDIR or /tmp");
  }
  // Lets a later start clean up after this process if it is killed (CleanStaleSessions);
  // written first, so that a kill during start-up is covered too.
  WriteSessionOwner(cluster->session_dir_);
  std::string head_address = options.join_address;
  std::string connect_host = options.host == "0.0.0.0" ? "127.0.0.1" : options.host;
  if (head_address.empty()) {
    head::HeadService::Options head_options;
    head_options.host = options.host;
    head_options.port = options.port;
    head_options.on_shutdown_request = options.on_shutdown_request;
    // A shutdown request must carry this secret (kept in `raio start`'s cluster record).
    cluster->shutdown_token_ = RandomId<internal::BinaryId<16, ShutdownTokenTag>>().Hex();
    head_options.shutdown_token = cluster->shutdown_token_;
    // The head holds the cluster's configuration: this process's, now that the overrides
    // are applied; it hands it to the node at registration.
    head_options.system_config = config::CurrentValues();
    head_options.fail_infeasible = options.fail_infeasible;
    // An embedded cluster's one node lives in this process: nothing to watch.
    head_options.health_checks = !options.fail_infeasible;
    head_options.package_dir = cluster->session_dir_ + "/packages";
    auto head = head::HeadService::Create(head_options);
    if (!head.ok()) {
      cluster->Stop();
      return head.status();
    }
    cluster->head_ = std::move(*head);
    head_address = absl::StrCat(connect_host, ":", cluster->head_->port());
  }
  cluster->join_address_ = options.join_address;
  node::NodeManager::Options node_options;
  node_options.session_dir = cluster->session_dir_;
  node_options.head_address = head_address;
  node_options.total = *total;
  node_options.object_store_bytes = ObjectStoreBytes(options);
  // A head on every address registers its node at an address other hosts reach (not the
  // 127.0.0.1 the node uses to reach its own head).
  node_options.node_ip = !options.node_ip.empty()    ? options.node_ip
                         : options.host == "0.0.0.0" ? rpc::RoutableLocalIp()
                                                     : connect_host;
  node_options.labels = options.labels;
  node_options.fail_infeasible = options.fail_infeasible;
  node_options.port = options.node_port;
  node_options.node_id = options.node_id;
  node_options.on_cluster_lost = options.on_cluster_lost;
  node_options.head_in_process = options.join_address.empty();
  auto node = node::NodeManager::Create(std::move(node_options));
  if (!node.ok()) {
    cluster->Stop();
    return node.status();
  }
  cluster->node_ = std::move(*node);
  return cluster;
}

LocalCluster::~LocalCluster() { Stop(); }

std::string LocalCluster::head_address() const { return head_ ? head_->address() : join_address_; }

std::string LocalCluster::node_id() const { return node_ ? node_->id().Hex() : ""; }

std::string LocalCluster::node_address() const {
  if (!node_) return "";
  proto::Address a = node_->address();
  return absl::StrCat(a.ip(), ":", a.port());
}

void LocalCluster::Stop() {
  if (head_) head_->BeginClusterStop();  // the node's leaving is no death to warn about
  if (node_) node_->Stop();
  if (head_) head_->Stop();
  node_.reset();
  head_.reset();
  RemoveTree(session_dir_);
  session_dir_.clear();
}

}  // namespace raio::api
