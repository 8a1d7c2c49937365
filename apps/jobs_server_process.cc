#include "jobs_server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace raio::cli {

namespace {

std::string SelfDir() {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string path = n > 0 ? std::string(self, static_cast<size_t>(n)) : "";
  return path.substr(0, path.rfind('/') + 1);
}

}  // namespace

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  return ::inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

JobsServer StartJobsServer(const JobsServerOptions& options, const std::string& head_address,
                           const std::string& node_id, const std::string& state_dir) {
  JobsServer server;
  const std::string bin = SelfDir() + "raio-jobs";
  if (::access(bin.c_str(), X_OK) != 0) {
    server.error = absl::StrCat("cannot run ", bin, ": ", std::strerror(errno));
    return server;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    server.error = absl::StrCat("pipe: ", std::strerror(errno));
    return server;
  }
  std::vector<std::string> args = {bin,           "--address", head_address,
                                   "--state-dir", state_dir,   "--host",
                                   options.host,  "--port",    std::to_string(options.port),
                                   "--ready-fd",  "3"};
  if (!options.redis_address.empty()) {
    args.insert(args.end(), {"--redis-address", options.redis_address,
                             "--external-storage-namespace", options.storage_namespace});
  }
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    // The storage settings travel as the options say, not as inherited.
    if (kv.starts_with("RAIO_ADDRESS=") || kv.starts_with("RAIO_NODE_ID=") ||
        kv.starts_with("RAIO_WORKER_MODE=") || kv.starts_with("RAIO_REDIS_ADDRESS=") ||
        kv.starts_with("RAIO_REDIS_PASSWORD=") ||
        kv.starts_with("RAIO_EXTERNAL_STORAGE_NAMESPACE=")) {
      continue;
    }
    env.emplace_back(kv);
  }
  // In the environment, not argv: /proc/PID/cmdline is readable by every user.
  if (!options.redis_password.empty()) {
    env.push_back("RAIO_REDIS_PASSWORD=" + options.redis_password);
  }
  // Its driver attaches to the head's node, whatever else runs on this host.
  env.push_back("RAIO_NODE_ID=" + node_id);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, bin.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    server.error = absl::StrCat("cannot start ", bin, ": ", std::strerror(rc));
    return server;
  }
  server.pid = pid;
  std::string message;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[512];
    ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;  // closed: the message is complete
    message.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (message.rfind("ok ", 0) == 0) {
    std::string host = options.host.find(':') != std::string::npos
                           ? absl::StrCat("[", options.host, "]")
                           : options.host;
    if (options.host == "0.0.0.0") host = "127.0.0.1";
    if (options.host == "::") host = "[::1]";
    server.address = absl::StrCat("http://", host, ":", message.substr(3));
    return server;
  }
  server.error = message.empty() ? "raio-jobs did not report ready within 10 s; see the log"
                                 : message.substr(message.rfind("error: ", 0) == 0 ? 7 : 0);
  StopJobsServer(server);
  return server;
}

void StopJobsServer(JobsServer& server) {
  if (server.pid <= 0) return;
  ::kill(server.pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool gone = false;
  while (!gone && std::chrono::steady_clock::now() < deadline) {
    pid_t r = ::waitpid(server.pid, nullptr, WNOHANG);
    gone = r == server.pid || (r < 0 && errno == ECHILD);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!gone) {
    ::kill(server.pid, SIGKILL);
    ::waitpid(server.pid, nullptr, 0);
  }
  server.pid = 0;
}

}  // namespace raio::cli
