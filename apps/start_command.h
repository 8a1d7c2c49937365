// `raio start`'s flags: a head (`--head`) or a node that joins one (`--address`), with the
// node's resources, the jobs API's address and storage, and the configuration overrides.
// apps/raio_main.cc runs what they describe. Thread-safety: main's thread only.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "jobs_server_process.h"
#include "raio/api/local_cluster.h"

namespace raio::cli {

// The parsed flags of `raio start`; CLI11 writes into them, ResolveStartCommand completes
// `options` and `jobs_server` from them. Negative numbers mean "not given".
struct StartCommand {
  CLI::App* app = nullptr;  // the `start` subcommand, owned by the parent CLI::App
  raio::api::LocalClusterOptions options;
  JobsServerOptions jobs_server;
  bool head = false, block = false;
  std::string join_address;  // --address HEAD_HOST:PORT
  int port = 0;
  double num_cpus = -1, num_gpus = -1, memory = -1, store_bytes = -1;
  double usage_threshold = -1, usage_threshold_bytes = -1;
  std::string labels_json, resources_json, system_config_json;
  std::string redis_address, redis_password, storage_namespace;
};

// Adds the `start` subcommand to `app`, its flags bound to `cmd`'s fields (which must
// outlive the parse).
void AddStartCommand(CLI::App& app, StartCommand& cmd);

// After a parse that named `start`: checks the flags together (a head's flags on a joining
// node, a malformed --labels/--resources/--system-config JSON, an --address without a port,
// --redis-address without the jobs API), reads RAIO_REDIS_ADDRESS, RAIO_REDIS_PASSWORD and
// RAIO_EXTERNAL_STORAGE_NAMESPACE, and fills cmd.options and cmd.jobs_server. Returns 0,
// or 2 after printing the usage error on stderr.
int ResolveStartCommand(StartCommand& cmd);

}  // namespace raio::cli
