// The raio command line: start / stop / status of a standalone cluster.
//
//   raio start --head [--host H] [--port P] [--num-cpus N] [--num-gpus N]
//                     [--memory BYTES] [--resources JSON] [--block]
//                     [--include-dashboard BOOL] [--dashboard-host H] [--dashboard-port P]
//                     [--redis-address HOST:PORT|unix:///PATH] [--redis-password PW]
//                     [--external-storage-namespace NS]
//                     [--memory-usage-threshold FRACTION]
//                     [--memory-usage-threshold-bytes BYTES]
//                     [--system-config JSON]
//   raio start --address HEAD_HOST:PORT [--node-ip IP] [--port P] [--num-cpus N]
//              [--num-gpus N] [--memory BYTES] [--resources JSON] [--labels JSON]
//              [--node-id HEX] [--object-store-memory BYTES] [--block]
//   raio stop
//   raio list nodes [--address HOST:PORT|auto] [--json]
//   raio config [--address HOST:PORT|auto] [--json]
//   raio status [--address HOST:PORT|auto] [--json]
//   raio list objects [--address HOST:PORT|auto] [--json]
//   raio list actors [--address HOST:PORT|auto] [--json]
//   raio list placement-groups [--address HOST:PORT|auto] [--json]
//   raio job submit|status|logs|stop|list|delete ...   (apps/job_cli.h)
//   raio llm serve|convert|generate ...   (runs bin/raio-llm; see apps/llm/raio_llm_main.cc)
//
// `start --head` runs the head service and a node daemon in one background process and
// records it in $TMPDIR/raio/current_cluster (address, pid, log file); `stop` and
// `status` find the cluster there unless --address or RAIO_ADDRESS says otherwise
// ("auto" also means the recorded cluster). `start --address` runs a node daemon that
// joins the head there, recorded in $TMPDIR/raio/nodes/<pid>.json; `stop` ends every
// node daemon recorded on this host, then the head. Usage errors exit 2.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "inspect.h"
#include "job_cli.h"
#include "jobs_server_process.h"
#include "raio/actor.pb.h"
#include "raio/api/local_cluster.h"
#include "raio/common/config.h"
#include "raio/common/event_loop.h"
#include "raio/common/logging.h"
#include "raio/common/mutex.h"
#include "raio/common/process.h"
#include "raio/head.pb.h"
#include "raio/internal/object_id.h"
#include "raio/node.pb.h"
#include "raio/node/memory_monitor.h"
#include "raio/rpc.pb.h"
#include "start_command.h"

namespace {

std::string StateDir() {
  const char* base = std::getenv("TMPDIR");
  return std::string(base && *base ? base : "/tmp") + "/raio";
}
std::string ClusterFile() { return StateDir() + "/current_cluster"; }

// The jobs API server `start --head` runs beside the head (apps/jobs_server_process.h).
raio::cli::JobsServerOptions g_jobs_server;
std::string NodesDir() { return StateDir() + "/nodes"; }
std::string NodeFile(pid_t pid) { return absl::StrCat(NodesDir(), "/", pid, ".json"); }

// Creates the state directory (0700) or checks the one there: it must be a directory of
// this user's that no one else may write, since the cluster record in it names the pid
// `raio stop` signals and holds the shutdown token. "" when fine, else why not.
std::string CheckStateDir() {
  const std::string dir = StateDir();
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::StrCat("cannot create ", dir, ": ", std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return absl::StrCat("cannot stat ", dir);
  if (!S_ISDIR(st.st_mode)) return absl::StrCat(dir, " is not a directory (a symlink?)");
  if (st.st_uid != ::geteuid()) {
    return absl::StrCat(dir, " belongs to uid ", st.st_uid, ", not to you (uid ", ::geteuid(),
                        "); remove it or set TMPDIR to a directory of yours");
  }
  if ((st.st_mode & 022) != 0) {
    return absl::StrCat(dir, " may be written by others (mode ", absl::Hex(st.st_mode & 0777),
                        " in hex); make it private: chmod 700 ", dir);
  }
  return "";
}

// Writes the cluster record: a new 0600 file renamed into place (never through a link
// someone left at its name).
bool WriteRecord(const std::string& path, const nlohmann::json& j) {
  std::string tmp = absl::StrCat(path, ".", ::getpid(), ".tmp");
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::string text = j.dump() + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ::close(fd) == 0 && ok;
  ok = ok && ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

std::optional<nlohmann::json> ReadClusterFile() {
  if (std::string why = CheckStateDir(); !why.empty()) {
    std::cerr << "raio: ignoring the cluster record: " << why << "\n";
    return std::nullopt;
  }
  std::ifstream in(ClusterFile());
  if (!in) return std::nullopt;
  try {
    return nlohmann::json::parse(in);
  } catch (...) {
    return std::nullopt;
  }
}

// Whether the daemon a cluster record names still runs. The record's start time (absent
// in records of older versions) tells it from a later process that got its pid, which
// `raio stop` must not signal.
bool DaemonAlive(const nlohmann::json& j) {
  pid_t pid = j.value("pid", 0);
  if (pid <= 0) return false;
  std::optional<uint64_t> start_ticks;
  if (j.contains("pid_start_ticks")) start_ticks = j["pid_start_ticks"].get<uint64_t>();
  return raio::CheckProcess(pid, start_ticks) != raio::ProcessLiveness::kGone;
}

// Removes what dead raio processes left (api::ReclaimDeadProcessFiles) and says what in
// one line, e.g. "1 session directory: 4 KiB"; "" when nothing.
std::string ReclaimDeadProcessFiles() {
  raio::Reclaimed r = raio::api::ReclaimDeadProcessFiles();
  if (r.files == 0) return "";
  std::string what =
      absl::StrCat(r.files, r.files == 1 ? " session directory" : " session directories");
  const uint64_t bytes = r.bytes;
  if (bytes < (1 << 20)) return absl::StrCat(what, ": ", (bytes + 1023) >> 10, " KiB");
  char mib[32];
  std::snprintf(mib, sizeof(mib), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return absl::StrCat(what, ": ", mib);
}

// The record `raio stop`, `raio status` and drivers read of the daemon running `cluster`.
nlohmann::json DaemonRecord(raio::api::LocalCluster& cluster, bool joining,
                            const std::string& log) {
  nlohmann::json j{{"address", cluster.head_address()},
                   {"pid", ::getpid()},
                   {"log", log},
                   {"session_dir", cluster.session_dir()},
                   {"node_id", cluster.node_id()},
                   {"node_address", cluster.node_address()}};
  if (!joining) j["shutdown_token"] = cluster.shutdown_token();
  if (std::optional<raio::ProcessStamp> self = raio::SelfProcessStamp()) {
    j["pid_start_ticks"] = self->start_ticks;
  }
  return j;
}

// A joined node that lost the cluster (declared dead, cut off, head restarted): its old
// node is stopped (workers ended, objects dropped) and a new one registers under a new id,
// every node_rejoin_backoff_ms until the head takes it. False when SIGTERM/SIGINT came
// first (then no node runs).
bool Rejoin(raio::api::LocalClusterOptions& options, const sigset_t& stop_signals,
            std::unique_ptr<raio::api::LocalCluster>& cluster, const std::string& record,
            const std::string& log) {
  const std::string old_id = cluster->node_id();
  cluster->Stop();
  cluster.reset();
  options.node_id.clear();  // the head never takes a dead node's id again
  RAIO_LOG_WARN("node {} lost the cluster; registering with {} under a new id", old_id,
                options.join_address);
  for (;;) {
    auto next = raio::api::LocalCluster::Create(options);
    if (next.ok()) {
      cluster = std::move(*next);
      if (!WriteRecord(record, DaemonRecord(*cluster, true, log))) {
        RAIO_LOG_WARN("cannot rewrite the record {}: {}", record, std::strerror(errno));
      }
      RAIO_LOG_INFO("node {} rejoined the cluster at {} (was node {})", cluster->node_id(),
                    options.join_address, old_id);
      return true;
    }
    RAIO_LOG_WARN("cannot rejoin the cluster at {} yet: {}", options.join_address,
                  next.status().message());
    const auto backoff = raio::config::node_rejoin_backoff_ms();
    timespec ts{static_cast<time_t>(backoff.count() / 1000),
                static_cast<long>((backoff.count() % 1000) * 1000000)};
    int sig = sigtimedwait(&stop_signals, nullptr, &ts);
    if (sig == SIGTERM || sig == SIGINT) return false;
  }
}

// Runs the cluster in this process until SIGTERM/SIGINT or a shutdown request. A joined
// node that loses the cluster registers again under a new id (Rejoin).
int RunDaemon(const raio::api::LocalClusterOptions& base, int ready_fd, const std::string& log) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigset_t stop_signals = set;
  sigaddset(&set, SIGUSR1);                   // the node lost the cluster
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread starts
  raio::api::LocalClusterOptions options = base;
  options.on_shutdown_request = [] { ::kill(::getpid(), SIGTERM); };
  const bool joining = !options.join_address.empty();
  if (joining) options.on_cluster_lost = [](const std::string&) { ::kill(::getpid(), SIGUSR1); };
  auto cluster = raio::api::LocalCluster::Create(options);
  std::string message;
  const std::string record = joining ? NodeFile(::getpid()) : ClusterFile();
  raio::cli::JobsServer jobs_server;
  std::string dashboard_line;
  if (cluster.ok() && !joining && g_jobs_server.enabled) {
    jobs_server =
        raio::cli::StartJobsServer(g_jobs_server, (*cluster)->head_address(), (*cluster)->node_id(),
                                   (*cluster)->session_dir() + "/jobs");
    dashboard_line = jobs_server.error.empty() ? "dashboard " + jobs_server.address
                                               : "dashboard-error " + jobs_server.error;
    if (!jobs_server.error.empty() && !g_jobs_server.redis_address.empty()) {
      // Asked to keep its jobs in Redis, the head does not run without them.
      RAIO_LOG_ERROR("the jobs API cannot start: {}", jobs_server.error);
      const std::string why = jobs_server.error;
      (*cluster)->Stop();
      const std::string message = absl::StrCat("error: ", why);
      if (ready_fd >= 0) {
        (void)!::write(ready_fd, message.data(), message.size());
        ::close(ready_fd);
      } else {
        std::cout << message << std::endl;
      }
      return 1;
    }
    if (!jobs_server.error.empty()) {
      RAIO_LOG_WARN("the jobs API is off: {}", jobs_server.error);
    }
  }
  nlohmann::json daemon_record;
  if (cluster.ok()) {
    daemon_record = DaemonRecord(**cluster, joining, log);
    if (!jobs_server.address.empty()) daemon_record["dashboard_address"] = jobs_server.address;
  }
  if (!cluster.ok()) {
    message = absl::StrCat("error: ", cluster.status().message());
  } else if (WriteRecord(record, daemon_record)) {
    message = absl::StrCat("ok ", (*cluster)->head_address(), " ", (*cluster)->node_id(), " ",
                           (*cluster)->node_address());
  } else {
    message = absl::StrCat("error: cannot write the record ", record, ": ", std::strerror(errno));
  }
  const bool ok = message.rfind("ok ", 0) == 0;
  if (!dashboard_line.empty()) message += "\n" + dashboard_line;
  if (ready_fd >= 0) {
    (void)!::write(ready_fd, message.data(), message.size());
    ::close(ready_fd);
  } else {
    std::cout << message << std::endl;
  }
  if (!cluster.ok()) return 1;
  if (!ok) {  // no record: `raio stop` could not find it
    raio::cli::StopJobsServer(jobs_server);
    (*cluster)->Stop();
    return 1;
  }
  std::unique_ptr<raio::api::LocalCluster> running = std::move(*cluster);
  int sig = 0;
  for (;;) {
    sigwait(&set, &sig);
    if (sig != SIGUSR1) break;
    if (!Rejoin(options, stop_signals, running, record, log)) break;
  }
  RAIO_LOG_INFO("stopping on signal {}", sig);
  // The jobs server is a driver of this cluster: it goes first.
  raio::cli::StopJobsServer(jobs_server);
  if (running) running->Stop();
  if (joining) {
    ::unlink(record.c_str());
    return 0;
  }
  auto j = ReadClusterFile();
  if (j && (*j)["pid"].get<int>() == ::getpid()) ::unlink(ClusterFile().c_str());
  return 0;
}

int Start(const raio::api::LocalClusterOptions& options, bool block) {
  const bool joining = !options.join_address.empty();
  if (auto j = ReadClusterFile(); !joining && j && DaemonAlive(*j)) {
    std::cerr << "raio: a cluster is already running at " << (*j)["address"].get<std::string>()
              << " (pid " << (*j)["pid"] << "); run `raio stop` first\n";
    return 1;
  }
  // Applied here too (the daemon is forked from this process and applies them again):
  // a bad entry is a usage error on the terminal, not in the daemon's log.
  if (absl::Status s = raio::api::ApplyClusterConfig(options); !s.ok()) {
    std::cerr << "raio start: " << s.message() << "\n";
    return 2;
  }
  if (auto total = raio::api::NodeResources(options); !total.ok()) {
    std::cerr << "raio start: " << total.status().message() << "\n";
    return 2;
  }
  if (std::string why = CheckStateDir(); !why.empty()) {
    std::cerr << "raio start: " << why << "\n";
    return 1;
  }
  if (joining && ::mkdir(NodesDir().c_str(), 0700) != 0 && errno != EEXIST) {
    std::cerr << "raio start: cannot create " << NodesDir() << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  if (block) {
    raio::InitLogging(spdlog::level::info);
    return RunDaemon(options, -1, "");
  }
  std::string log = StateDir() + "/raio-" + std::to_string(::getpid()) + ".log";
  int fds[2];
  // Close-on-exec: the daemon starts raio-jobs, which must not hold the write end open.
  if (::pipe2(fds, O_CLOEXEC) != 0) return 1;
  pid_t child = ::fork();
  if (child < 0) {
    std::perror("fork");
    return 1;
  }
  if (child == 0) {
    ::close(fds[0]);
    ::setsid();
    if (::fork() > 0) _exit(0);  // the grandchild is the daemon, re-parented to init
    FILE* f = std::freopen(log.c_str(), "a", stdout);
    (void)f;
    ::dup2(::fileno(stdout), STDERR_FILENO);
    std::freopen("/dev/null", "r", stdin);
    raio::InitLogging(spdlog::level::info);
    _exit(RunDaemon(options, fds[1], log));
  }
  ::close(fds[1]);
  ::waitpid(child, nullptr, 0);
  std::string message;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) message.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  if (message.rfind("ok ", 0) != 0) {
    std::cerr << "raio start: " << (message.empty() ? "the daemon died; see " + log : message)
              << "\n";
    return 1;
  }
  std::string dashboard;
  if (auto nl = message.find('\n'); nl != std::string::npos) {
    dashboard = message.substr(nl + 1);
    message.resize(nl);
  }
  std::vector<std::string> words = absl::StrSplit(message.substr(3), ' ');
  words.resize(3);
  const std::string& address = words[0];
  if (joining) {
    std::cout << "raio node " << words[1] << " at " << words[2] << " joined the cluster at "
              << address << "\n"
              << "  status:            raio status --address " << address << "\n"
              << "  stop:              raio stop\n"
              << "  log:               " << log << "\n";
    return 0;
  }
  std::cout << "raio cluster started at " << address << "\n"
            << "  connect a driver:  RAIO_ADDRESS=" << address << " ./my_program\n"
            << "  add a node:        raio start --address " << address << "\n"
            << "  status:            raio status\n";
  if (dashboard.rfind("dashboard ", 0) == 0) {
    std::cout << "  jobs API:          " << dashboard.substr(10)
              << "  (raio job submit -- COMMAND)\n";
  }
  std::cout << "  stop:              raio stop\n"
            << "  log:               " << log << "\n";
  if (dashboard.rfind("dashboard-error ", 0) == 0) {
    std::cerr << "raio start: warning: the jobs API is off: " << dashboard.substr(16) << "\n";
  }
  return 0;
}

// Ends the daemon of record `j` (SIGTERM, then SIGKILL after 10 s). Whether it had to be
// killed.
bool EndDaemon(const nlohmann::json& j) {
  pid_t pid = j["pid"].get<int>();
  ::kill(pid, SIGTERM);
  auto wait_gone = [&](std::chrono::seconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (DaemonAlive(j) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return !DaemonAlive(j);
  };
  if (wait_gone(std::chrono::seconds(10))) return false;
  ::kill(pid, SIGKILL);
  wait_gone(std::chrono::seconds(5));
  return true;
}

// Ends the node daemons `raio start --address` recorded on this host; says how many.
int StopNodes() {
  int stopped = 0;
  DIR* dir = ::opendir(NodesDir().c_str());
  if (dir == nullptr) return 0;
  std::vector<std::string> files;
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name.size() > 5 && name.ends_with(".json")) files.push_back(NodesDir() + "/" + name);
  }
  ::closedir(dir);
  for (const auto& file : files) {
    std::ifstream in(file);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (...) {
      ::unlink(file.c_str());
      continue;
    }
    if (DaemonAlive(j)) {
      bool killed = EndDaemon(j);
      std::cout << "raio node " << j.value("node_id", std::string("?")) << " at "
                << j.value("node_address", std::string("?")) << " stopped"
                << (killed ? " (killed: it did not stop in 10 s)" : "") << "\n";
      ++stopped;
    }
    ::unlink(file.c_str());
  }
  return stopped;
}

// --address, else RAIO_ADDRESS, else the cluster `raio start` recorded on this machine;
// "auto" (as drivers accept it) also means the recorded cluster. "" when there is none.
int Stop() {
  int nodes = StopNodes();
  auto j = ReadClusterFile();
  if (!j || !DaemonAlive(*j)) {
    ::unlink(ClusterFile().c_str());
    if (nodes > 0) return 0;
    // A killed daemon (or driver) may have left its session directory.
    std::string removed = ReclaimDeadProcessFiles();
    std::cout << "raio stop: no running cluster found"
              << (removed.empty() ? "" : "; removed the files of dead raio processes: " + removed)
              << "\n";
    return 0;
  }
  if (EndDaemon(*j)) std::cerr << "raio stop: the daemon did not stop in 10 s; killed it\n";
  ::unlink(ClusterFile().c_str());
  std::cout << "raio cluster at " << (*j)["address"].get<std::string>() << " stopped\n";
  // A daemon killed above could not remove its files.
  if (std::string removed = ReclaimDeadProcessFiles(); !removed.empty()) {
    std::cout << "raio stop: removed the files of dead raio processes: " << removed << "\n";
  }
  return 0;
}

// `raio llm ...` runs raio-llm from this executable's directory, so that this CLI never
// links libtorch. Returns only if that binary cannot be run.
int ExecLlm(char** argv) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, n) : std::string(argv[0]);
  dir = dir.substr(0, dir.rfind('/') + 1);
  std::string bin = dir + "raio-llm";
  std::vector<char*> args = {bin.data()};
  for (char** a = argv + 2; *a; ++a) args.push_back(*a);
  args.push_back(nullptr);
  execv(bin.c_str(), args.data());
  std::cerr << "raio: cannot run " << bin << " (built with RAIO_BUILD_LLM=ON?)\n";
  return 2;
}

}  // namespace

namespace raio::cli {

std::string ResolveAddress(const std::string& flag) {
  std::string given = flag;
  if (given.empty()) {
    if (const char* env = std::getenv("RAIO_ADDRESS"); env && *env) given = env;
  }
  if (!given.empty() && given != "auto") return given;
  if (auto j = ReadClusterFile(); j && DaemonAlive(*j)) {
    return (*j)["address"].get<std::string>();
  }
  // A host that only runs a node (`raio start --address`): the head its live node joined.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(NodesDir(), ec)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    try {
      nlohmann::json j = nlohmann::json::parse(in);
      if (DaemonAlive(j) && j.contains("address")) return j["address"].get<std::string>();
    } catch (...) {
      continue;  // a record being written, or not one of ours
    }
  }
  return "";
}

}  // namespace raio::cli

int main(int argc, char** argv) {
  raio::UseOptimizedMutexes();
  if (argc > 1 && std::string(argv[1]) == "llm") return ExecLlm(argv);
  CLI::App app{"raio: start, stop and inspect a raio cluster"};
  app.require_subcommand(1);
  raio::cli::StartCommand start;
  raio::cli::AddStartCommand(app, start);
  auto* stop = app.add_subcommand("stop", "stop the cluster started by `raio start`");
  std::string address;
  bool json = false;
  auto* config = app.add_subcommand(
      "config", "list the configuration table: names, types, defaults, values, units");
  config->add_option("--address", address,
                     "show the values of the cluster at host:port, or auto (the cluster "
                     "`raio start` recorded), instead of this environment's");
  config->add_flag("--json", json, "print JSON");
  auto* status =
      app.add_subcommand("status", "show nodes, resources, workers, pending tasks, jobs");
  status->add_option("--address", address,
                     "head address host:port, or auto (the cluster `raio start` recorded)");
  status->add_flag("--json", json, "print the raw status as JSON");
  auto* list = app.add_subcommand("list", "list cluster state");
  auto* list_objects = list->add_subcommand("objects", "objects in the nodes' object stores");
  list->require_subcommand(1);
  list_objects->add_option("--address", address,
                           "head address host:port, or auto (the cluster `raio start` recorded)");
  list_objects->add_flag("--json", json, "print JSON");
  auto* list_nodes =
      list->add_subcommand("nodes", "nodes: id, address, host, labels, resources in use");
  list_nodes->add_option("--address", address,
                         "head address host:port, or auto (the cluster `raio start` recorded)");
  list_nodes->add_flag("--json", json, "print JSON");
  auto* list_actors =
      list->add_subcommand("actors", "actors: state, name, node, restarts, death cause");
  list_actors->add_option("--address", address,
                          "head address host:port, or auto (the cluster `raio start` recorded)");
  list_actors->add_flag("--json", json, "print JSON");
  auto* list_pgs = list->add_subcommand(
      "placement-groups", "placement groups: strategy, state, bundles and the nodes holding them");
  list_pgs->add_option("--address", address,
                       "head address host:port, or auto (the cluster `raio start` recorded)");
  list_pgs->add_flag("--json", json, "print JSON");
  raio::cli::JobCommands jobs([] {
    auto j = ReadClusterFile();
    return j && DaemonAlive(*j) ? j->value("dashboard_address", std::string()) : std::string();
  });
  jobs.Register(app);  // after the others: `raio --help` lists it last
  // CLI11 reports a word that names no subcommand as "A subcommand is required": name it.
  auto unknown_word = [](CLI::App* parent, const char* word, const std::string& what) {
    if (word[0] == '-') return false;
    std::vector<std::string> names;
    for (CLI::App* sub : parent->get_subcommands([](CLI::App*) { return true; })) {
      if (sub->get_name() == word) return false;
      names.push_back(sub->get_name());
    }
    std::cerr << what << ": unknown command '" << word
              << "'; expected one of: " << absl::StrJoin(names, ", ") << "\n";
    return true;
  };
  if (argc > 1 && unknown_word(&app, argv[1], "raio")) return 2;
  if (argc > 2 && std::string(argv[1]) == "list" && unknown_word(list, argv[2], "raio list")) {
    return 2;
  }
  if (argc > 1 && std::string(argv[1]) == "job") {
    CLI::App* job = app.get_subcommand("job");
    if (argc > 2 && unknown_word(job, argv[2], "raio job")) return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the help or the error; every usage error exits 2 (its own codes are
    // 100+), --help and friends exit 0.
    return app.exit(e) == 0 ? 0 : 2;
  }
  // `raio start` becomes the daemon, whose command line `ps` shows for its whole life: the
  // Redis password (parsed by now) is overwritten there.
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--redis-password" && i + 1 < argc) {
      std::memset(argv[i + 1], '*', std::strlen(argv[i + 1]));
    } else if (arg.starts_with("--redis-password=")) {
      std::memset(argv[i] + 17, '*', arg.size() - 17);
    }
  }
  absl::Status env_config = raio::config::ResetToEnvironment();
  raio::InitLogging(spdlog::level::warn);
  if (!env_config.ok()) {
    std::cerr << "raio: " << env_config.message() << "\n";
    if (start.app->parsed()) return 2;  // other commands go on with the defaults
  }

  if (jobs.Parsed()) return jobs.Run();
  if (start.app->parsed()) {
    if (int code = raio::cli::ResolveStartCommand(start); code != 0) return code;
    g_jobs_server = start.jobs_server;
    return Start(start.options, start.block);
  }
  if (stop->parsed()) return Stop();
  if (config->parsed()) return raio::cli::ShowConfig(address, json);
  if (status->parsed()) return raio::cli::Status(address, json);
  if (list_objects->parsed()) return raio::cli::ListObjects(address, json);
  if (list_actors->parsed()) return raio::cli::ListActors(address, json);
  if (list_nodes->parsed()) return raio::cli::ListNodes(address, json);
  if (list_pgs->parsed()) return raio::cli::ListPlacementGroups(address, json);
  return 0;
}
