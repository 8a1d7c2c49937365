// `raio start`: its flags and their checks (apps/start_command.h).
#include "start_command.h"

#include <arpa/inet.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "raio/rpc/listener.h"

namespace raio::cli {
namespace {

using Json = nlohmann::json;

// Parses `text` (when given) as a JSON object and hands each member to `take`, which throws
// std::runtime_error to reject one. False after printing "raio start: bad FLAG: why".
bool ForEachMember(const char* flag, const std::string& text,
                   const std::function<void(const std::string&, const Json&)>& take) {
  if (text.empty()) return true;
  try {
    Json j = Json::parse(text);
    if (!j.is_object()) throw std::runtime_error("expected a JSON object");
    for (auto& [k, v] : j.items()) take(k, v);
    return true;
  } catch (const std::exception& e) {
    std::cerr << "raio start: bad " << flag << ": " << e.what() << "\n";
    return false;
  }
}

}  // namespace

void AddStartCommand(CLI::App& app, StartCommand& cmd) {
  cmd.app = app.add_subcommand(
      "start", "start a standalone cluster (--head: head + node) or a node that joins one");
  auto* head_flag = cmd.app->add_flag("--head", cmd.head, "start the head and a node on this host");
  auto* join_option = cmd.app->add_option(
      "--address", cmd.join_address, "HEAD_HOST:PORT: start a node daemon that joins that cluster");
  head_flag->excludes(join_option);
  cmd.app->add_option("--node-ip", cmd.options.node_ip,
                      "the IP other hosts reach this node at (default: --host for a head, else "
                      "the address this host reaches the head from)");
  cmd.app->add_option("--labels", cmd.labels_json,
                      "node labels as a JSON object of strings, e.g. '{\"zone\": \"a\"}'");
  cmd.app->add_option(
      "--node-id", cmd.options.node_id,
      "the node's id, 16 hex digits (default: random); a live node's id is refused");
  // An IP literal (the listener binds it); checked here so that a bad one is a usage error.
  auto ip_address = CLI::Validator(
      [](std::string& s) -> std::string {
        unsigned char buf[sizeof(struct in6_addr)];
        if (::inet_pton(AF_INET, s.c_str(), buf) == 1 ||
            ::inet_pton(AF_INET6, s.c_str(), buf) == 1) {
          return "";
        }
        return "not an IPv4 or IPv6 address: " + s;
      },
      "IP");
  cmd.app->get_option("--node-ip")->check(ip_address);
  cmd.app->add_option("--host", cmd.options.host, "address to listen on")
      ->capture_default_str()
      ->check(ip_address);
  cmd.app
      ->add_option("--port", cmd.port,
                   "TCP port of the head, or with --address of the node (0 = any free)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  auto finite_non_negative = CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        try {
          v = std::stod(s);
        } catch (...) {
          return "not a number: " + s;
        }
        return (std::isfinite(v) && v >= 0) ? "" : "must be a finite number >= 0, got " + s;
      },
      "NUMBER>=0");
  cmd.app->add_option("--num-cpus", cmd.num_cpus, "CPUs to offer (default: detected cores)")
      ->check(finite_non_negative);
  cmd.app->add_option("--num-gpus", cmd.num_gpus, "GPUs to offer (default: 0)")
      ->check(finite_non_negative);
  cmd.app->add_option("--memory", cmd.memory, "the memory resource in bytes (default: 70% of RAM)")
      ->check(finite_non_negative);
  cmd.app
      ->add_option("--object-store-memory", cmd.store_bytes,
                   "size of the shared-memory object store in bytes (default: 30% of RAM)")
      ->check(finite_non_negative);
  cmd.app
      ->add_option("--memory-usage-threshold", cmd.usage_threshold,
                   "the node ends the leased worker using the most memory when the node's "
                   "memory use crosses this fraction (0, 1] of its memory (default: "
                   "RAIO_MEMORY_USAGE_THRESHOLD, else 0.95)")
      ->check(finite_non_negative);
  cmd.app
      ->add_option("--memory-usage-threshold-bytes", cmd.usage_threshold_bytes,
                   "the same as an absolute use in bytes; the smaller threshold applies "
                   "(default: RAIO_MEMORY_USAGE_THRESHOLD_BYTES, else none)")
      ->check(finite_non_negative);
  cmd.app->add_option("--resources", cmd.resources_json,
                      "custom resources as JSON, e.g. '{\"TPU\": 4}'");
  cmd.app->add_option("--system-config", cmd.system_config_json,
                      "overrides of the configuration table as a JSON object, e.g. "
                      "'{\"lease_idle_timeout_ms\": 50}'; they reach every node and worker "
                      "(`raio config` lists the names)");
  cmd.app->add_flag("--block", cmd.block, "run in the foreground");
  cmd.app
      ->add_option("--include-dashboard", cmd.jobs_server.enabled,
                   "with --head: run the jobs API server (raio-jobs) beside the head")
      ->capture_default_str();
  cmd.app
      ->add_option("--dashboard-host", cmd.jobs_server.host,
                   "address the jobs API listens on; anyone who reaches it can run code on the "
                   "cluster, so it stays on loopback unless you say otherwise")
      ->capture_default_str()
      ->check(ip_address);
  cmd.app
      ->add_option("--dashboard-port", cmd.jobs_server.port, "port of the jobs API (0 = any free)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  // Ray's GCS fault tolerance: RAY_REDIS_ADDRESS, --redis-password,
  // RAY_external_storage_namespace.
  cmd.app->add_option("--redis-address", cmd.redis_address,
                      "with --head: keep the jobs API's records and logs in this Redis (HOST:PORT "
                      "or unix:///PATH), so that they survive a head restart (default: "
                      "RAIO_REDIS_ADDRESS, else files in the head's session)");
  cmd.app->add_option("--redis-password", cmd.redis_password,
                      "password of that Redis (default: RAIO_REDIS_PASSWORD)");
  cmd.app->add_option("--external-storage-namespace", cmd.storage_namespace,
                      "prefix of this cluster's keys in that Redis: one head per namespace "
                      "(default: RAIO_EXTERNAL_STORAGE_NAMESPACE, else raio)");
}

int ResolveStartCommand(StartCommand& cmd) {
  if (!cmd.head && cmd.join_address.empty()) {
    std::cerr << "raio start: give --head (start a cluster) or --address HEAD_HOST:PORT "
                 "(join one)\n";
    return 2;
  }
  if (!cmd.join_address.empty()) {
    if (!cmd.redis_address.empty() || !cmd.redis_password.empty() ||
        !cmd.storage_namespace.empty()) {
      std::cerr << "raio start: --redis-address, --redis-password and "
                   "--external-storage-namespace are the head's (its jobs API's storage)\n";
      return 2;
    }
    if (!cmd.system_config_json.empty()) {
      std::cerr << "raio start: --system-config is the head's: a joining node takes the "
                   "cluster's configuration\n";
      return 2;
    }
    if (cmd.join_address.find(':') == std::string::npos) {
      std::cerr << "raio start: --address must be HEAD_HOST:PORT, got " << cmd.join_address << "\n";
      return 2;
    }
    cmd.options.join_address = cmd.join_address;
    cmd.options.node_port = cmd.port;
    cmd.options.fail_infeasible = false;
    if (cmd.options.node_ip.empty()) {
      cmd.options.node_ip = raio::rpc::LocalIpToward(cmd.join_address);
      if (cmd.options.node_ip.empty()) {
        std::cerr << "raio start: cannot tell this host's IP toward " << cmd.join_address
                  << "; give --node-ip\n";
        return 2;
      }
    }
  } else {
    cmd.options.port = cmd.port;
    cmd.options.fail_infeasible = false;
    auto from_env = [](std::string& value, const char* name) {
      if (const char* v = std::getenv(name); value.empty() && v != nullptr) value = v;
    };
    if (!cmd.redis_address.empty() && !cmd.jobs_server.enabled) {
      std::cerr << "raio start: --redis-address keeps the jobs API's records; it needs the "
                   "jobs API (--include-dashboard true)\n";
      return 2;
    }
    from_env(cmd.redis_address, "RAIO_REDIS_ADDRESS");
    from_env(cmd.redis_password, "RAIO_REDIS_PASSWORD");
    from_env(cmd.storage_namespace, "RAIO_EXTERNAL_STORAGE_NAMESPACE");
    cmd.jobs_server.redis_address = cmd.jobs_server.enabled ? cmd.redis_address : "";
    cmd.jobs_server.redis_password = cmd.redis_password;
    if (!cmd.storage_namespace.empty()) cmd.jobs_server.storage_namespace = cmd.storage_namespace;
    if (cmd.jobs_server.enabled && !raio::cli::IsLoopbackHost(cmd.jobs_server.host)) {
      std::cerr << "raio start: WARNING: the jobs API listens on " << cmd.jobs_server.host << ":"
                << cmd.jobs_server.port
                << ", beyond this host: anyone who can reach it can run any command on the "
                   "cluster (raio has no authentication yet). Keep it behind a firewall, or "
                   "use the default --dashboard-host 127.0.0.1 and an SSH tunnel.\n";
    }
  }
  if (!ForEachMember("--labels", cmd.labels_json, [&](const std::string& k, const Json& v) {
        if (!v.is_string()) throw std::runtime_error("value of '" + k + "' is not a string");
        if (k.empty()) throw std::runtime_error("a label has an empty key");
        cmd.options.labels[k] = v.get<std::string>();
      })) {
    return 2;
  }
  if (cmd.num_cpus >= 0) cmd.options.num_cpus = cmd.num_cpus;
  if (cmd.num_gpus >= 0) cmd.options.num_gpus = cmd.num_gpus;
  if (cmd.memory >= 0) cmd.options.memory_bytes = cmd.memory;
  if (cmd.store_bytes >= 0) cmd.options.object_store_bytes = static_cast<uint64_t>(cmd.store_bytes);
  if (cmd.usage_threshold >= 0) cmd.options.memory_usage_threshold = cmd.usage_threshold;
  if (cmd.usage_threshold_bytes >= 0) {
    cmd.options.memory_usage_threshold_bytes = static_cast<uint64_t>(cmd.usage_threshold_bytes);
  }
  if (!ForEachMember("--resources", cmd.resources_json, [&](const std::string& k, const Json& v) {
        if (!v.is_number()) throw std::runtime_error("value of '" + k + "' is not a number");
        cmd.options.resources[k] = v.get<double>();
      })) {
    return 2;
  }
  if (!ForEachMember(
          "--system-config", cmd.system_config_json, [&](const std::string& k, const Json& v) {
            if (v.is_string()) {
              cmd.options.system_config[k] = v.get<std::string>();
            } else if (v.is_number() || v.is_boolean()) {
              cmd.options.system_config[k] = v.dump();
            } else {
              throw std::runtime_error("value of '" + k + "' is not a number, string or bool");
            }
          })) {
    return 2;
  }
  return 0;
}

}  // namespace raio::cli
