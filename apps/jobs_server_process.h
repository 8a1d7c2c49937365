// The jobs API server process (bin/raio-jobs) that `raio start --head` runs beside the
// head: started from the daemon once its cluster is up, ended before the cluster stops.
// docs/design/jobs.md.
// Thread-safety: call from the daemon's main thread (the child's parent-death signal is
// tied to the thread that starts it).
#pragma once

#include <sys/types.h>

#include <string>

namespace raio::cli {

struct JobsServerOptions {
  bool enabled = true;
  std::string host = "127.0.0.1";  // --dashboard-host
  int port = 8265;                 // --dashboard-port; 0 = any free
  // Where raio-jobs keeps job records and logs: "" for files in the head's session, else a
  // Redis (--redis-address / RAIO_REDIS_ADDRESS: HOST:PORT or unix:///PATH), with its
  // password (--redis-password / RAIO_REDIS_PASSWORD, handed over in the environment) and
  // key namespace (--external-storage-namespace / RAIO_EXTERNAL_STORAGE_NAMESPACE).
  std::string redis_address;
  std::string redis_password;
  std::string storage_namespace = "raio";
};

struct JobsServer {
  pid_t pid = 0;        // 0 when not running
  std::string address;  // http://HOST:PORT once it listens
  std::string error;    // why it does not run, "" when it does
};

// Starts raio-jobs (from this executable's directory) for the cluster whose head is at
// `head_address`, attached to node `node_id`, keeping its state under `state_dir`, and
// waits up to 10 s for it to listen. Never throws; a failure is in `error` (with a Redis,
// one that cannot be reached names its address).
JobsServer StartJobsServer(const JobsServerOptions& options, const std::string& head_address,
                           const std::string& node_id, const std::string& state_dir);

// SIGTERM, then SIGKILL after 10 s; reaps it. Blocks until it is gone.
void StopJobsServer(JobsServer& server);

// Whether `host` is a loopback address (127.0.0.0/8, ::1, localhost).
bool IsLoopbackHost(const std::string& host);

}  // namespace raio::cli
