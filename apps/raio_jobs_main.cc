// raio-jobs: the jobs API server of a cluster (docs/design/jobs.md). `raio start --head`
// runs it beside the head unless --include-dashboard false; it serves Ray's Jobs REST
// routes on --host:--port and runs each job's entrypoint under a supervisor actor
// (src/raio/jobs/). It is a raio driver, so the cluster also starts this executable in
// worker mode for those actors: raio::Init at the top of main turns it into a worker then.
//
//   raio-jobs --address HEAD_HOST:PORT --state-dir DIR [--host 127.0.0.1] [--port 8265]
//             [--max-package-bytes N] [--stop-grace-ms N] [--ready-fd FD]
//             [--redis-address HOST:PORT|unix:///PATH] [--external-storage-namespace NS]
//
// The defaults of --max-package-bytes (100 MiB) and --stop-grace-ms (3000) can also come
// from RAIO_JOBS_MAX_PACKAGE_BYTES, RAIO_JOBS_STOP_GRACE_MS and RAIO_JOBS_REQUEST_TIMEOUT_MS
// (the HTTP read deadline) in its environment.
//
// Records and log copies go to files under --state-dir, or with --redis-address (or
// RAIO_REDIS_ADDRESS) to that Redis, under the namespace --external-storage-namespace
// (RAIO_EXTERNAL_STORAGE_NAMESPACE, default "raio"); the password comes from
// RAIO_REDIS_PASSWORD only, so that it never shows in the process list. A Redis that
// cannot be reached at start is an error (reported on the ready descriptor).
//
// With --ready-fd it writes "ok PORT" (or "error: why") to that descriptor once it
// listens, then closes it. SIGTERM or SIGINT stop it; it also stops when the process that
// started it dies.
#include <raio/raio.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "raio/jobs/http_server.h"
#include "raio/jobs/job_manager.h"
#include "raio/jobs/redis_job_store.h"
#include "spdlog/spdlog.h"

namespace {

void Ready(int fd, const std::string& message) {
  if (fd < 0) {
    std::cout << message << std::endl;
    return;
  }
  (void)!::write(fd, message.data(), message.size());
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* mode = std::getenv("RAIO_WORKER_MODE"); mode != nullptr && *mode == '1') {
    raio::Init(argc, argv);  // a supervisor's worker: never returns
    return 0;
  }
  // spdlog's registry is a function-local static of the (uninstrumented) library: build it
  // here, before any thread, so that the threads that log or call raio::Init later find it
  // made (ThreadSanitizer sees no order through the library's inlined init check).
  spdlog::default_logger_raw();
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) return 0;  // the parent is already gone

  CLI::App app{"raio-jobs: the jobs API server of a raio cluster"};
  raio::jobs::JobManagerOptions manager;
  raio::jobs::HttpServerOptions server;
  int ready_fd = -1;
  int64_t grace_ms = 3000;
  // Defaults from the environment, so that `raio start` (whose environment this inherits)
  // can set them.
  if (const char* v = std::getenv("RAIO_JOBS_MAX_PACKAGE_BYTES"); v && *v) {
    manager.max_package_bytes = std::strtoull(v, nullptr, 10);
  }
  if (const char* v = std::getenv("RAIO_JOBS_STOP_GRACE_MS"); v && *v) {
    grace_ms = std::strtoll(v, nullptr, 10);
  }
  if (const char* v = std::getenv("RAIO_JOBS_REQUEST_TIMEOUT_MS"); v && *v) {
    server.request_read_timeout = std::chrono::milliseconds(std::strtoll(v, nullptr, 10));
  }
  raio::jobs::RedisStoreOptions redis;
  if (const char* v = std::getenv("RAIO_REDIS_ADDRESS"); v && *v) redis.address = v;
  if (const char* v = std::getenv("RAIO_REDIS_PASSWORD"); v && *v) redis.password = v;
  if (const char* v = std::getenv("RAIO_EXTERNAL_STORAGE_NAMESPACE"); v && *v) redis.ns = v;
  app.add_option("--address", manager.head_address, "HEAD_HOST:PORT of the cluster")->required();
  app.add_option("--state-dir", manager.state_dir, "where job records, logs and packages live")
      ->required();
  app.add_option("--host", server.host, "address to listen on")->capture_default_str();
  app.add_option("--port", server.port, "port to listen on (0: any free)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--max-package-bytes", manager.max_package_bytes,
                 "largest working directory package accepted, in bytes")
      ->capture_default_str();
  app.add_option("--stop-grace-ms", grace_ms,
                 "between SIGTERM and SIGKILL when a job is stopped, in ms")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ready-fd", ready_fd, "descriptor to report readiness on");
  app.add_option("--redis-address", redis.address,
                 "keep job records and logs in this Redis (HOST:PORT or unix:///PATH), so that "
                 "they survive a head restart; password from RAIO_REDIS_PASSWORD");
  app.add_option("--external-storage-namespace", redis.ns,
                 "prefix of the Redis keys: one head per namespace")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  manager.stop_grace = std::chrono::milliseconds(grace_ms);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread starts
  ::signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<raio::jobs::JobStore> store;  // nullptr: files in --state-dir
  if (!redis.address.empty()) {
    auto r = raio::jobs::RedisJobStore::Create(redis);
    if (!r.ok()) {
      Ready(ready_fd, absl::StrCat("error: ", r.status().message()));
      return 1;
    }
    spdlog::info("jobs: records and logs in {}", (*r)->Describe());
    store = std::move(*r);
  }
  auto jobs = raio::jobs::JobManager::Create(manager, std::move(store));
  if (!jobs.ok()) {
    Ready(ready_fd, absl::StrCat("error: ", jobs.status().message()));
    return 1;
  }
  (*jobs)->Start();
  raio::jobs::HttpServer http(jobs->get(), server);
  absl::StatusOr<int> port = http.Start();
  if (!port.ok()) {
    (*jobs)->Stop();
    Ready(ready_fd, absl::StrCat("error: ", port.status().message()));
    return 1;
  }
  spdlog::info("jobs API listening on http://{}:{}", server.host, *port);
  Ready(ready_fd, absl::StrCat("ok ", *port));
  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("jobs API stopping on signal {}", sig);
  http.Stop();
  (*jobs)->Stop();
  return 0;
}
