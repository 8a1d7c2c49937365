// The raio command line: start / stop / status of a standalone cluster.
//
//   raio start --head [--host H] [--port P] [--num-cpus N] [--num-gpus N]
//                     [--memory BYTES] [--resources JSON] [--block]
//                     [--memory-usage-threshold FRACTION]
//                     [--memory-usage-threshold-bytes BYTES]
//                     [--system-config JSON]
//   raio stop
//   raio config [--address HOST:PORT|auto] [--json]
//   raio status [--address HOST:PORT|auto] [--json]
//   raio list objects [--address HOST:PORT|auto] [--json]
//   raio list actors [--address HOST:PORT|auto] [--json]
//   raio llm serve|convert|generate ...   (runs bin/raio-llm; see apps/llm/raio_llm_main.cc)
//
// `start --head` runs the head service and a node daemon in one background process and
// records it in $TMPDIR/raio/current_cluster (address, pid, log file); `stop` and
// `status` find the cluster there unless --address or RAIO_ADDRESS says otherwise
// ("auto" also means the recorded cluster). Usage errors exit 2.
#include <arpa/inet.h>
#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
#include "raio/rpc/listener.h"

namespace {

std::string StateDir() {
  const char* base = std::getenv("TMPDIR");
  return std::string(base && *base ? base : "/tmp") + "/raio";
}
std::string ClusterFile() { return StateDir() + "/current_cluster"; }

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
bool WriteClusterFile(const nlohmann::json& j) {
  std::string tmp = absl::StrCat(ClusterFile(), ".", ::getpid());
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::string text = j.dump() + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ::close(fd) == 0 && ok;
  ok = ok && ::rename(tmp.c_str(), ClusterFile().c_str()) == 0;
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

// Runs the cluster in this process until SIGTERM/SIGINT or a shutdown request.
int RunDaemon(const raio::api::LocalClusterOptions& base, int ready_fd, const std::string& log) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread starts
  raio::api::LocalClusterOptions options = base;
  options.on_shutdown_request = [] { ::kill(::getpid(), SIGTERM); };
  auto cluster = raio::api::LocalCluster::Create(options);
  std::string message;
  if (!cluster.ok()) {
    message = absl::StrCat("error: ", cluster.status().message());
  } else {
    std::string address = (*cluster)->head_address();
    std::optional<raio::ProcessStamp> self = raio::SelfProcessStamp();
    nlohmann::json j{{"address", address},
                     {"pid", ::getpid()},
                     {"log", log},
                     {"session_dir", (*cluster)->session_dir()},
                     {"shutdown_token", (*cluster)->shutdown_token()}};
    if (self) j["pid_start_ticks"] = self->start_ticks;
    if (WriteClusterFile(j)) {
      message = "ok " + address;
    } else {
      message = absl::StrCat("error: cannot write the cluster record ", ClusterFile(), ": ",
                             std::strerror(errno));
    }
  }
  if (ready_fd >= 0) {
    (void)!::write(ready_fd, message.data(), message.size());
    ::close(ready_fd);
  } else {
    std::cout << message << std::endl;
  }
  if (!cluster.ok()) return 1;
  if (message.rfind("ok ", 0) != 0) {  // no record: `raio stop` could not find it
    (*cluster)->Stop();
    return 1;
  }
  int sig = 0;
  sigwait(&set, &sig);
  RAIO_LOG_INFO("stopping on signal {}", sig);
  (*cluster)->Stop();
  auto j = ReadClusterFile();
  if (j && (*j)["pid"].get<int>() == ::getpid()) ::unlink(ClusterFile().c_str());
  return 0;
}

int Start(const raio::api::LocalClusterOptions& options, bool block) {
  if (auto j = ReadClusterFile(); j && DaemonAlive(*j)) {
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
  if (block) {
    raio::InitLogging(spdlog::level::info);
    return RunDaemon(options, -1, "");
  }
  std::string log = StateDir() + "/raio-" + std::to_string(::getpid()) + ".log";
  int fds[2];
  if (::pipe(fds) != 0) return 1;
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
  std::string address = message.substr(3);
  std::cout << "raio cluster started at " << address << "\n"
            << "  connect a driver:  RAIO_ADDRESS=" << address << " ./my_program\n"
            << "  status:            raio status\n"
            << "  stop:              raio stop\n"
            << "  log:               " << log << "\n";
  return 0;
}

// --address, else RAIO_ADDRESS, else the cluster `raio start` recorded on this machine;
// "auto" (as drivers accept it) also means the recorded cluster. "" when there is none.
std::string ResolveAddress(const std::string& flag) {
  std::string given = flag;
  if (given.empty()) {
    if (const char* env = std::getenv("RAIO_ADDRESS"); env && *env) given = env;
  }
  if (!given.empty() && given != "auto") return given;
  if (auto j = ReadClusterFile(); j && DaemonAlive(*j)) {
    return (*j)["address"].get<std::string>();
  }
  return "";
}

int Stop() {
  auto j = ReadClusterFile();
  if (!j || !DaemonAlive(*j)) {
    ::unlink(ClusterFile().c_str());
    // A killed daemon (or driver) may have left its session directory.
    std::string removed = ReclaimDeadProcessFiles();
    std::cout << "raio stop: no running cluster found"
              << (removed.empty() ? "" : "; removed the files of dead raio processes: " + removed)
              << "\n";
    return 0;
  }
  pid_t pid = (*j)["pid"].get<int>();
  ::kill(pid, SIGTERM);
  auto wait_gone = [&](std::chrono::seconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (DaemonAlive(*j) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return !DaemonAlive(*j);
  };
  if (!wait_gone(std::chrono::seconds(10))) {
    ::kill(pid, SIGKILL);
    wait_gone(std::chrono::seconds(5));
    std::cerr << "raio stop: the daemon did not stop in 10 s; killed it\n";
  }
  ::unlink(ClusterFile().c_str());
  std::cout << "raio cluster at " << (*j)["address"].get<std::string>() << " stopped\n";
  // A daemon killed above could not remove its files.
  if (std::string removed = ReclaimDeadProcessFiles(); !removed.empty()) {
    std::cout << "raio stop: removed the files of dead raio processes: " << removed << "\n";
  }
  return 0;
}

// Sends one request to the head and parses the reply; prints errors as `what: ...`.
bool CallHead(const std::string& address_flag, const char* what, uint32_t method,
              google::protobuf::Message* reply_out) {
  std::string address = ResolveAddress(address_flag);
  if (address.empty()) {
    std::cerr << what << ": no cluster found (pass --address or set RAIO_ADDRESS)\n";
    return false;
  }
  raio::EventLoop loop("raio-cli");
  auto conn = raio::rpc::ConnectTcp(loop.io(), address, raio::config::connect_timeout_ms());
  if (!conn.ok()) {
    std::cerr << what << ": " << conn.status().message() << "\n";
    return false;
  }
  (*conn)->Start(nullptr, nullptr);
  loop.Start();
  auto reply = raio::rpc::CallSync(**conn, method, raio::proto::Empty(),
                                   raio::config::control_rpc_timeout_ms());
  (*conn)->Close(absl::CancelledError("done"));
  if (!reply.ok() || !reply_out->ParseFromString(*reply)) {
    std::cerr << what << ": "
              << (reply.ok() ? "malformed reply" : std::string(reply.status().message())) << "\n";
    return false;
  }
  return true;
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  return out;
}

const char* ActorStateName(raio::proto::ActorState s) {
  switch (s) {
    case raio::proto::ACTOR_PENDING:
      return "PENDING";
    case raio::proto::ACTOR_ALIVE:
      return "ALIVE";
    case raio::proto::ACTOR_RESTARTING:
      return "RESTARTING";
    case raio::proto::ACTOR_DEAD:
      return "DEAD";
    default:
      return "?";
  }
}

void PrintActors(const raio::proto::ActorList& list) {
  std::printf("%-32s  %-10s  %-20s  %-20s  %-16s  %8s  %s\n", "ACTOR ID", "STATE", "NAME", "CLASS",
              "NODE", "RESTARTS", "DEATH CAUSE");
  for (const auto& a : list.actors()) {
    std::string name = a.name().empty() ? "-" : a.namespace_() + "/" + a.name();
    std::printf("%-32s  %-10s  %-20s  %-20s  %-16s  %8u  %s\n",
                raio::ActorId::FromBinary(a.actor_id()).Hex().c_str(), ActorStateName(a.state()),
                name.c_str(), a.class_name().c_str(), a.node_id().c_str(), a.num_restarts(),
                a.death_cause().empty() ? "-" : a.death_cause().c_str());
  }
}

std::string Fmt(const std::string& name, double v) {
  char buf[64];
  if (name == "memory") {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", v / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(buf, sizeof(buf), "%g", v);
  }
  return buf;
}

// "{CPU: 1, slot: 1}", names sorted (a protobuf map has no order).
std::string FormatDemand(const raio::proto::ResourceSet& demand) {
  std::map<std::string, double> sorted(demand.amounts().begin(), demand.amounts().end());
  std::string out = "{";
  for (const auto& [k, v] : sorted) {
    out += (out.size() > 1 ? ", " : "") + k + ": " + Fmt(k, v);
  }
  return out + "}";
}

// Tasks of one scheduling class (job, demand, function) waiting for a lease on a node.
struct PendingGroup {
  uint32_t job_id = 0;
  std::string function_name;
  std::string demand;
  std::size_t requests = 0;
  uint32_t latest_backlog = 0;  // the owner's queue length when it sent its latest request
  std::size_t Waiting() const {
    // An owner keeps min(queued tasks, max_pending_lease_requests_per_class) lease requests
    // open per class, and each request's `backlog` is the owner's queue length when it
    // was sent: a snapshot that includes the tasks the class's other requests will run
    // and that does not shrink as they are granted. So summing backlogs over-counts, and
    // so does their maximum; below the cap each open request stands for one waiting
    // task. At the cap, more may wait than there are requests: the latest snapshot is
    // the best figure the node has. Old owners send backlog 0: count the requests.
    if (latest_backlog == 0 ||
        requests < static_cast<std::size_t>(raio::config::max_pending_lease_requests_per_class())) {
      return requests;
    }
    return std::max<std::size_t>(requests, latest_backlog);
  }
};

// Groups a node's pending lease requests by job + demand + function, in the order the
// node received them (so the last request of a group carries the freshest backlog).
std::vector<PendingGroup> GroupPendingLeases(const raio::proto::NodeStats& node) {
  std::vector<PendingGroup> groups;
  for (const auto& p : node.pending_leases()) {
    std::string demand = FormatDemand(p.demand());
    auto it = std::find_if(groups.begin(), groups.end(), [&](const PendingGroup& g) {
      return g.job_id == p.job_id() && g.function_name == p.function_name() && g.demand == demand;
    });
    if (it == groups.end()) {
      it = groups.insert(groups.end(), PendingGroup{p.job_id(), p.function_name(), demand});
    }
    ++it->requests;
    it->latest_backlog = p.backlog();
  }
  return groups;
}

// At most this many workers are listed one per line per node; the rest are only counted.
constexpr int kMaxWorkersListed = 20;

int Status(const std::string& address_flag, bool json) {
  std::string address = ResolveAddress(address_flag);
  if (address.empty()) {
    std::cerr << "raio status: no cluster found (start one with `raio start --head`, or pass "
                 "--address / RAIO_ADDRESS)\n";
    return 1;
  }
  raio::proto::ClusterStatus status;
  if (!CallHead(address, "raio status", raio::proto::GET_CLUSTER_STATUS, &status)) return 1;
  if (json) {
    std::cout << ToJson(status) << "\n";
    return 0;
  }
  // The cluster's values, so that figures below read as the nodes meant them (e.g. the
  // lease requests an owner keeps open per class).
  (void)raio::config::ApplyOverrides(
      std::map<std::string, std::string>(status.system_config().begin(),
                                         status.system_config().end()),
      "the head's configuration");
  std::map<std::string, double> total, available;
  std::size_t pending_tasks = 0;
  std::cout << "======== raio cluster " << address << " ========\n";
  std::cout << "Nodes: " << status.nodes_size() << "\n";
  for (const auto& n : status.nodes()) {
    std::map<std::string, int> states;
    for (const auto& w : n.workers()) ++states[w.state()];
    std::cout << "  node " << n.node_id() << "  " << n.address()
              << "\n    workers: " << n.workers_size();
    for (const auto& [s, c] : states) std::cout << "  " << s << "=" << c;
    std::cout << "\n";
    for (int i = 0; i < n.workers_size() && i < kMaxWorkersListed; ++i) {
      const auto& w = n.workers(i);
      std::printf("      %-8s  pid %-7d  job %u\n", w.state().c_str(), w.pid(), w.job_id());
    }
    if (n.workers_size() > kMaxWorkersListed) {
      std::printf("      ... and %d more\n", n.workers_size() - kMaxWorkersListed);
    }
    for (const auto& [k, v] : n.total().amounts()) total[k] += v;
    for (const auto& [k, v] : n.available().amounts()) available[k] += v;
    for (const auto& g : GroupPendingLeases(n)) pending_tasks += g.Waiting();
  }
  std::cout << "Resources (in use / total):\n";
  for (const auto& [k, v] : total) {
    std::cout << "  " << k << ": " << Fmt(k, v - available[k]) << " / " << Fmt(k, v) << "\n";
  }
  uint64_t store_objects = 0, store_used = 0, store_capacity = 0, spilled = 0, spilled_bytes = 0;
  for (const auto& n : status.nodes()) {
    store_objects += n.object_store().num_objects();
    store_used += n.object_store().used_bytes();
    store_capacity += n.object_store().capacity_bytes();
    spilled += n.object_store().num_spilled();
    spilled_bytes += n.object_store().spilled_bytes();
  }
  std::cout << "Object store: " << store_objects << " objects, " << Fmt("memory", store_used)
            << " / " << Fmt("memory", store_capacity) << " used, " << spilled << " spilled ("
            << Fmt("memory", spilled_bytes) << ")\n";
  std::cout << "Pending tasks: " << pending_tasks << "\n";
  for (const auto& n : status.nodes()) {
    for (const auto& g : GroupPendingLeases(n)) {
      std::cout << "  waiting for resources: job " << g.job_id << " " << g.function_name
                << " demand " << g.demand << " (" << g.Waiting() << " waiting)\n";
    }
  }
  raio::proto::ActorList actors;
  if (CallHead(address, "raio status", raio::proto::LIST_CLUSTER_ACTORS, &actors)) {
    std::map<std::string, int> by_state;
    for (const auto& a : actors.actors()) ++by_state[ActorStateName(a.state())];
    std::cout << "Actors: " << actors.actors_size();
    for (const auto& [state, n] : by_state) std::cout << "  " << state << "=" << n;
    std::cout << "\n";
    int waiting = 0;
    for (const auto& a : actors.actors()) waiting += a.waiting_for_resources() ? 1 : 0;
    std::cout << "Pending actors: " << waiting << "\n";
    for (const auto& a : actors.actors()) {
      if (!a.waiting_for_resources()) continue;
      std::cout << "  waiting for resources: job " << a.job_id() << " actor " << a.class_name()
                << (a.name().empty() ? "" : " '" + a.name() + "'") << " "
                << raio::ActorId::FromBinary(a.actor_id()).Hex() << " ("
                << ActorStateName(a.state()) << ") demand " << FormatDemand(a.resources()) << "\n";
    }
    if (actors.actors_size() > 0) PrintActors(actors);
  }
  std::cout << "Jobs:\n";
  for (const auto& j : status.jobs()) {
    std::cout << "  job " << j.job_id() << "  " << j.state() << "  pid " << j.driver_pid() << "  "
              << j.executable() << "\n";
  }
  std::map<std::string, std::string> changed = raio::config::NonDefaultValues();
  std::cout << "System config: " << (changed.empty() ? "all defaults" : "") << "\n";
  for (const auto& [name, value] : changed) std::cout << "  " << name << " = " << value << "\n";
  return 0;
}

// Word-wraps `text` at `width` columns, each line after `indent` spaces.
std::string Wrap(std::string_view text, std::size_t indent, std::size_t width) {
  std::string out, line;
  auto flush = [&] {
    out += std::string(indent, ' ') + line + "\n";
    line.clear();
  };
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find(' ', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(at, end - at);
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) flush();
    line += (line.empty() ? "" : " ") + std::string(word);
    at = end + 1;
  }
  if (!line.empty()) flush();
  return out;
}

// `raio config`: the configuration table with this environment's values, or with a running
// cluster's when `address_flag` is given ("auto": the recorded cluster).
int ShowConfig(const std::string& address_flag, bool json) {
  if (!address_flag.empty()) {
    raio::proto::ClusterStatus status;
    if (!CallHead(address_flag, "raio config", raio::proto::GET_CLUSTER_STATUS, &status)) {
      return 1;
    }
    if (absl::Status s = raio::config::ApplyOverrides(
            std::map<std::string, std::string>(status.system_config().begin(),
                                               status.system_config().end()),
            "the head's configuration");
        !s.ok()) {
      std::cerr << "raio config: " << s.message() << "\n";
      return 1;
    }
  }
  std::vector<raio::config::EntryInfo> entries = raio::config::Describe();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : entries) {
      out.push_back({{"name", e.name},
                     {"type", raio::config::TypeName(e.type)},
                     {"default", e.default_value},
                     {"value", e.value},
                     {"unit", e.unit},
                     {"env", e.env_var},
                     {"doc", e.doc}});
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%-38s %-12s %-10s %-10s %-9s %s\n", "NAME", "TYPE", "DEFAULT", "VALUE", "UNIT",
              "ENVIRONMENT");
  for (const auto& e : entries) {
    std::printf("%-38s %-12s %-10s %-10s %-9s %s\n", std::string(e.name).c_str(),
                std::string(raio::config::TypeName(e.type)).c_str(), e.default_value.c_str(),
                e.value.c_str(), e.unit.empty() ? "-" : std::string(e.unit).c_str(),
                e.env_var.c_str());
    std::cout << Wrap(e.doc, 4, 96);
  }
  std::cout << "\nVALUE: "
            << (address_flag.empty() ? "this environment's (the defaults and RAIO_* variables)"
                                     : "the cluster's")
            << ". Set values with RAIO_<NAME>, InitOptions::system_config or\n"
               "`raio start --head --system-config '{\"name\": value}'` (docs/design/config.md).\n"
               "Fixed at build time, as every process must agree: max_frame_bytes = "
            << raio::config::kMaxFrameBytes << ".\n";
  return 0;
}

int ListActors(const std::string& address_flag, bool json) {
  raio::proto::ActorList list;
  if (!CallHead(address_flag, "raio list actors", raio::proto::LIST_CLUSTER_ACTORS, &list))
    return 1;
  if (json) {
    std::cout << ToJson(list) << "\n";
    return 0;
  }
  PrintActors(list);
  std::cout << list.actors_size() << " actors\n";
  return 0;
}

int ListObjects(const std::string& address_flag, bool json) {
  raio::proto::ObjectList list;
  if (!CallHead(address_flag, "raio list objects", raio::proto::LIST_CLUSTER_OBJECTS, &list)) {
    return 1;
  }
  if (json) {
    std::cout << ToJson(list) << "\n";
    return 0;
  }
  uint64_t total = 0;
  std::cout << "OBJECT ID                                   SIZE        STATE     PINS\n";
  for (const auto& o : list.objects()) {
    total += o.size_bytes();
    std::printf("%-42s  %10llu  %-8s  %llu\n",
                raio::ObjectId::FromBinary(o.object_id()).Hex().c_str(),
                static_cast<unsigned long long>(o.size_bytes()), o.state().c_str(),
                static_cast<unsigned long long>(o.pins()));
  }
  std::cout << list.objects_size() << " objects in shared-memory stores, " << total
            << " bytes (small objects live in their owners' processes and are not listed)\n";
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

int main(int argc, char** argv) {
  raio::UseOptimizedMutexes();
  if (argc > 1 && std::string(argv[1]) == "llm") return ExecLlm(argv);
  CLI::App app{"raio: start, stop and inspect a raio cluster"};
  app.require_subcommand(1);
  raio::api::LocalClusterOptions start_options;
  bool head = false, block = false;
  double num_cpus = -1, num_gpus = -1, memory = -1;
  std::string resources_json;
  auto* start = app.add_subcommand("start", "start a standalone cluster (head + node)");
  start->add_flag("--head", head, "start the head (required: joining nodes comes later)");
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
  start->add_option("--host", start_options.host, "address to listen on")
      ->capture_default_str()
      ->check(ip_address);
  start->add_option("--port", start_options.port, "TCP port of the head (0 = any free)")
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
  start->add_option("--num-cpus", num_cpus, "CPUs to offer (default: detected cores)")
      ->check(finite_non_negative);
  start->add_option("--num-gpus", num_gpus, "GPUs to offer (default: 0)")
      ->check(finite_non_negative);
  start->add_option("--memory", memory, "the memory resource in bytes (default: 70% of RAM)")
      ->check(finite_non_negative);
  double store_bytes = -1;
  start
      ->add_option("--object-store-memory", store_bytes,
                   "size of the shared-memory object store in bytes (default: 30% of RAM)")
      ->check(finite_non_negative);
  double usage_threshold = -1, usage_threshold_bytes = -1;
  start
      ->add_option("--memory-usage-threshold", usage_threshold,
                   "the node ends the leased worker using the most memory when the node's "
                   "memory use crosses this fraction (0, 1] of its memory (default: "
                   "RAIO_MEMORY_USAGE_THRESHOLD, else 0.95)")
      ->check(finite_non_negative);
  start
      ->add_option("--memory-usage-threshold-bytes", usage_threshold_bytes,
                   "the same as an absolute use in bytes; the smaller threshold applies "
                   "(default: RAIO_MEMORY_USAGE_THRESHOLD_BYTES, else none)")
      ->check(finite_non_negative);
  start->add_option("--resources", resources_json, "custom resources as JSON, e.g. '{\"TPU\": 4}'");
  std::string system_config_json;
  start->add_option("--system-config", system_config_json,
                    "overrides of the configuration table as a JSON object, e.g. "
                    "'{\"lease_idle_timeout_ms\": 50}'; they reach every node and worker "
                    "(`raio config` lists the names)");
  start->add_flag("--block", block, "run in the foreground");
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
  auto* list_actors =
      list->add_subcommand("actors", "actors: state, name, node, restarts, death cause");
  list_actors->add_option("--address", address,
                          "head address host:port, or auto (the cluster `raio start` recorded)");
  list_actors->add_flag("--json", json, "print JSON");
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the help or the error; every usage error exits 2 (its own codes are
    // 100+), --help and friends exit 0.
    return app.exit(e) == 0 ? 0 : 2;
  }
  absl::Status env_config = raio::config::ResetToEnvironment();
  raio::InitLogging(spdlog::level::warn);
  if (!env_config.ok()) {
    std::cerr << "raio: " << env_config.message() << "\n";
    if (start->parsed()) return 2;  // other commands go on with the defaults
  }

  if (start->parsed()) {
    if (!head) {
      std::cerr << "raio start: only --head is supported in this version\n";
      return 2;
    }
    if (num_cpus >= 0) start_options.num_cpus = num_cpus;
    if (num_gpus >= 0) start_options.num_gpus = num_gpus;
    if (memory >= 0) start_options.memory_bytes = memory;
    if (store_bytes >= 0) start_options.object_store_bytes = static_cast<uint64_t>(store_bytes);
    if (usage_threshold >= 0) start_options.memory_usage_threshold = usage_threshold;
    if (usage_threshold_bytes >= 0) {
      start_options.memory_usage_threshold_bytes = static_cast<uint64_t>(usage_threshold_bytes);
    }
    if (!resources_json.empty()) {
      try {
        auto j = nlohmann::json::parse(resources_json);
        if (!j.is_object()) throw std::runtime_error("expected a JSON object");
        for (auto& [k, v] : j.items()) {
          if (!v.is_number()) throw std::runtime_error("value of '" + k + "' is not a number");
          start_options.resources[k] = v.get<double>();
        }
      } catch (const std::exception& e) {
        std::cerr << "raio start: bad --resources: " << e.what() << "\n";
        return 2;
      }
    }
    if (!system_config_json.empty()) {
      try {
        auto j = nlohmann::json::parse(system_config_json);
        if (!j.is_object()) throw std::runtime_error("expected a JSON object");
        for (auto& [k, v] : j.items()) {
          if (v.is_string()) {
            start_options.system_config[k] = v.get<std::string>();
          } else if (v.is_number() || v.is_boolean()) {
            start_options.system_config[k] = v.dump();
          } else {
            throw std::runtime_error("value of '" + k + "' is not a number, string or bool");
          }
        }
      } catch (const std::exception& e) {
        std::cerr << "raio start: bad --system-config: " << e.what() << "\n";
        return 2;
      }
    }
    return Start(start_options, block);
  }
  if (stop->parsed()) return Stop();
  if (config->parsed()) return ShowConfig(address, json);
  if (status->parsed()) return Status(address, json);
  if (list_objects->parsed()) return ListObjects(address, json);
  if (list_actors->parsed()) return ListActors(address, json);
  return 0;
}
