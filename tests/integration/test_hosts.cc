#include "test_hosts.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <thread>

extern char** environ;

namespace raio_test {
namespace {

constexpr char kNetnsDir[] = "/run/netns";
constexpr char kNetnsPrefix[] = "raiot-";  // raiot-<pid>-<i>
constexpr char kBridgePrefix[] = "rtb";    // rtb<pid>
constexpr char kVethPrefix[] = "rtv";      // rtv<pid>-<i>
constexpr int kMaxHosts = 16;

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The path of iproute2's `ip`, or "" when there is none (root's PATH has /usr/sbin, a
// user's may not).
const std::string& IpPath() {
  static const std::string path = [] {
    auto r = RunCommand("command -v ip", false);
    std::string p = r.output.substr(0, r.output.find('\n'));
    if (r.exit_code == 0 && !p.empty()) return p;
    for (const char* c : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
      if (::access(c, X_OK) == 0) return std::string(c);
    }
    return std::string();
  }();
  return path;
}

CommandResult Ip(const std::string& args) { return RunCommand(IpPath() + " " + args); }

// Field 22 of /proc/<pid>/stat (start time in clock ticks), or nullopt when there is no
// such process.
std::optional<uint64_t> StartTicks(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  auto paren = stat.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream in(stat.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && (in >> field); ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return std::nullopt;
}

std::filesystem::path RootOf(pid_t pid) {
  return std::filesystem::temp_directory_path() / (kNetnsPrefix + std::to_string(pid));
}

// Whether the test process `pid` that made hosts still runs: the pid exists and, when its
// root directory recorded its start time, with that start time (not a reused pid).
bool OwnerAlive(pid_t pid) {
  std::optional<uint64_t> ticks = StartTicks(pid);
  if (!ticks) return false;
  std::istringstream record(ReadFile(RootOf(pid) / "owner"));
  long long recorded_pid = 0;
  uint64_t recorded_ticks = 0;
  if (record >> recorded_pid >> recorded_ticks && recorded_pid == pid) {
    return recorded_ticks == *ticks;
  }
  return true;
}

// The pid in a name "<prefix><pid>" or "<prefix><pid>-<i>"; 0 when it has another shape.
pid_t PidInName(const std::string& name, const std::string& prefix, bool indexed) {
  std::regex shape(prefix + (indexed ? "([0-9]+)-[0-9]+" : "([0-9]+)"));
  std::smatch m;
  if (!std::regex_match(name, m, shape)) return 0;
  return static_cast<pid_t>(std::strtol(m[1].str().c_str(), nullptr, 10));
}

// Names of this machine's network links (`ip -o link show`, without "@peer").
std::vector<std::string> LinkNames() {
  std::vector<std::string> names;
  std::istringstream in(Ip("-o link show").output);
  for (std::string line; std::getline(in, line);) {
    // "5: rtb123: <BROADCAST,..." or "7: rtv123-0@if6: <...".
    auto colon = line.find(": ");
    if (colon == std::string::npos) continue;
    std::string name = line.substr(colon + 2);
    name = name.substr(0, name.find_first_of(":@ "));
    names.push_back(name);
  }
  return names;
}

// The inode of network namespace `netns` (its /run/netns file), or 0.
ino_t NetnsInode(const std::string& netns) {
  struct stat st {};
  std::string path = std::string(kNetnsDir) + "/" + netns;
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

// Pids of the processes in the network namespace with inode `ino`.
std::vector<pid_t> PidsInNetns(ino_t ino) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat st {};
    if (::stat((e.path() / "ns/net").c_str(), &st) == 0 && st.st_ino == ino) {
      pids.push_back(static_cast<pid_t>(std::stol(name)));
    }
  }
  return pids;
}

// SIGKILLs what runs in namespace `netns` until nothing does (at most 10 s).
int KillInNetns(const std::string& netns) {
  const ino_t ino = NetnsInode(netns);
  if (ino == 0) return 0;
  int signalled = 0;
  WaitFor(
      [&] {
        std::vector<pid_t> pids = PidsInNetns(ino);
        for (pid_t pid : pids) {
          if (pid != ::getpid() && ::kill(pid, SIGKILL) == 0) ++signalled;
        }
        return pids.empty();
      },
      std::chrono::seconds(10));
  return signalled;
}

// The third octet of a /24 under 10.213.0.0/16 that no address or route of this machine
// names. The hosts' subnet is private to their bridge (which has no address), so this is
// for the reader of `ip addr`, not for routing.
int PickSubnet() {
  const std::string taken = Ip("-o -4 addr show").output + Ip("-4 route show table all").output;
  const int start = static_cast<int>(::getpid() % 254);
  for (int j = 0; j < 254; ++j) {
    int k = (start + j) % 254 + 1;
    std::regex used("(^|[^0-9])10\\.213\\." + std::to_string(k) + "\\.");
    if (!std::regex_search(taken, used)) return k;
  }
  return 0;
}

// Effective capabilities of this process (CapEff of /proc/self/status).
uint64_t EffectiveCapabilities() {
  std::istringstream in(ReadFile("/proc/self/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("CapEff:", 0) == 0) return std::strtoull(line.c_str() + 7, nullptr, 16);
  }
  return 0;
}

struct ChildSetup {
  std::string netns_path;
  std::string hostname;
  std::filesystem::path output;
  std::vector<std::string> env;  // NAME=value
};

// Forks a child that enters the host (network namespace, a new UTS namespace with the
// host's name), leads its own process group, writes stdout to `setup.output` and stderr
// to `setup.output` + ".err", and runs `body` in a child of its own that dies with the test
// (BecomeGuardedChild: the pid returned is the guard's, which exits as `body` does);
// `body` must only make system calls and exec or _exit. Everything is prepared before
// the fork: the test process has no other threads, but the child only execs anyway.
template <typename Body>
pid_t ForkInHost(const ChildSetup& setup, Body body) {
  const int netns_fd = ::open(setup.netns_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (netns_fd < 0) return -1;
  const int out_fd = ::open(setup.output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const std::string err_path = setup.output.string() + ".err";
  const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out_fd < 0 || err_fd < 0) {
    for (int fd : {netns_fd, out_fd, err_fd}) {
      if (fd >= 0) ::close(fd);
    }
    return -1;
  }
  const pid_t self = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd < 0 || ::dup2(null_fd, STDIN_FILENO) < 0 || ::dup2(out_fd, STDOUT_FILENO) < 0 ||
        ::dup2(err_fd, STDERR_FILENO) < 0) {
      _exit(120);
    }
    // Only stdin, stdout and stderr reach the command: a pipe end of the test's would keep
    // the test waiting for an EOF as long as a daemon started here lives.
    ::close_range(3, ~0u, CLOSE_RANGE_CLOEXEC);
    if (::setns(netns_fd, CLONE_NEWNET) != 0) {
      static const char msg[] = "test host: setns failed\n";
      (void)!::write(STDERR_FILENO, msg, sizeof(msg) - 1);
      _exit(121);
    }
    if (::unshare(CLONE_NEWUTS) != 0 ||
        ::sethostname(setup.hostname.data(), setup.hostname.size()) != 0) {
      static const char msg[] = "test host: cannot set the hostname\n";
      (void)!::write(STDERR_FILENO, msg, sizeof(msg) - 1);
      _exit(122);
    }
    // The command and what it starts in the foreground or background die with the test,
    // even outside tests/sandbox.sh (daemons leave the group: Teardown ends them).
    BecomeGuardedChild(self);
    body();
    _exit(127);
  }
  ::close(netns_fd);
  ::close(out_fd);
  ::close(err_fd);
  if (pid > 0) ::setpgid(pid, pid);  // also here: no race with a kill of the group
  return pid;
}

}  // namespace

// ---- HostProcess ----

HostProcess::~HostProcess() {
  if (reaped_ || pid_ <= 0) return;
  ::kill(-pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

std::string HostProcess::Output() const {
  std::string out = ReadFile(output_);
  std::string err = ReadFile(output_.string() + ".err");
  if (err.empty()) return out;
  return out + (out.empty() || out.back() == '\n' ? "" : "\n") + "[stderr]\n" + err;
}

CommandResult HostProcess::Wait(std::chrono::milliseconds timeout) {
  CommandResult r;
  if (pid_ <= 0) {
    r.output = "test host: the command could not be started";
    return r;
  }
  int status = 0;
  bool exited =
      reaped_ || WaitFor([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
  if (!exited) {
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
  }
  reaped_ = true;
  r.output = Output();
  if (!exited) {
    r.output += "\n[test host: killed after " + std::to_string(timeout.count()) + " ms]\n";
  } else if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  }
  return r;
}

// ---- TestHosts ----

int TestHosts::CleanStale() {
  if (IpPath().empty()) return 0;
  int removed = 0;
  std::error_code ec;
  std::vector<std::string> stale_netns;
  for (const auto& e : std::filesystem::directory_iterator(kNetnsDir, ec)) {
    const std::string name = e.path().filename().string();
    pid_t pid = PidInName(name, kNetnsPrefix, true);
    if (pid > 0 && !OwnerAlive(pid)) stale_netns.push_back(name);
  }
  for (const auto& name : stale_netns) {
    KillInNetns(name);
    if (Ip("netns del " + name).exit_code == 0) ++removed;
  }
  for (const auto& name : LinkNames()) {
    pid_t pid = PidInName(name, kVethPrefix, true);
    if (pid == 0) pid = PidInName(name, kBridgePrefix, false);
    if (pid > 0 && !OwnerAlive(pid) && Ip("link del " + name).exit_code == 0) ++removed;
  }
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), ec)) {
    pid_t pid = PidInName(e.path().filename().string(), kNetnsPrefix, false);
    if (pid > 0 && !OwnerAlive(pid)) std::filesystem::remove_all(e.path(), ec);
  }
  return removed;
}

std::unique_ptr<TestHosts> TestHosts::Create(int n, std::string* why_not) {
  if (n < 1 || n > kMaxHosts) {
    *why_not = "between 1 and 16 hosts, not " + std::to_string(n);
    return nullptr;
  }
  constexpr uint64_t kNetAdmin = 1ull << 12, kSysAdmin = 1ull << 21;
  const uint64_t caps = EffectiveCapabilities();
  if ((caps & kNetAdmin) == 0 || (caps & kSysAdmin) == 0) {
    *why_not =
        "network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN (run as root); this "
        "process (uid " +
        std::to_string(::geteuid()) + ") lacks " +
        ((caps & kNetAdmin) == 0 ? "CAP_NET_ADMIN" : "CAP_SYS_ADMIN");
    return nullptr;
  }
  if (IpPath().empty()) {
    *why_not = "no `ip` command (Debian: apt-get install iproute2)";
    return nullptr;
  }
  CleanStale();

  std::unique_ptr<TestHosts> hosts(new TestHosts());
  const pid_t self = ::getpid();
  const std::string pid = std::to_string(self);
  hosts->root_ = RootOf(self);
  std::error_code ec;
  std::filesystem::remove_all(hosts->root_, ec);
  std::filesystem::create_directories(hosts->root_, ec);
  if (ec) {
    *why_not = "cannot create " + hosts->root_.string() + ": " + ec.message();
    return nullptr;
  }
  std::ofstream(hosts->root_ / "owner") << self << " " << StartTicks(self).value_or(0) << "\n";

  const int k = PickSubnet();
  if (k == 0) {
    *why_not = "every 10.213.<k>.0/24 is in use on this machine";
    return nullptr;
  }
  auto fail = [&](const std::string& what, const CommandResult& r) {
    *why_not = what + ": " + r.output;
    hosts.reset();  // tears down what was made
    return nullptr;
  };
  hosts->bridge_ = kBridgePrefix + pid;
  if (auto r = Ip("link add " + hosts->bridge_ + " type bridge"); r.exit_code != 0) {
    return fail("cannot create a bridge (ip link add " + hosts->bridge_ + " type bridge)", r);
  }
  hosts->bridge_created_ = true;
  if (auto r = Ip("link set " + hosts->bridge_ + " up"); r.exit_code != 0) {
    return fail("cannot bring the bridge up", r);
  }
  for (int i = 0; i < n; ++i) {
    Host h;
    h.netns = kNetnsPrefix + pid + "-" + std::to_string(i);
    h.veth = kVethPrefix + pid + "-" + std::to_string(i);
    h.ip = "10.213." + std::to_string(k) + "." + std::to_string(i + 1);
    h.hostname = "host" + std::to_string(i);
    h.tmpdir = hosts->root_ / h.hostname;
    std::filesystem::create_directories(h.tmpdir, ec);
    hosts->hosts_.push_back(h);
    if (auto r = Ip("netns add " + h.netns); r.exit_code != 0) {
      return fail("cannot create a network namespace (ip netns add)", r);
    }
    hosts->created_netns_ = i + 1;
    for (const std::string& cmd :
         {"link add " + h.veth + " type veth peer name eth0 netns " + h.netns,
          "link set " + h.veth + " master " + hosts->bridge_, "link set " + h.veth + " up",
          "-n " + h.netns + " addr add " + h.ip + "/24 dev eth0",
          "-n " + h.netns + " link set eth0 up", "-n " + h.netns + " link set lo up"}) {
      if (auto r = Ip(cmd); r.exit_code != 0) return fail("ip " + cmd, r);
    }
  }
  // Each host sees its own name and address, and reaches the others over the bridge: a
  // TCP connection to a port where nothing listens is refused at once (a reset), which
  // only a reachable peer sends. A firewall that filters bridged traffic (bridge-nf-call-
  // iptables with a FORWARD policy of DROP) makes it time out instead.
  for (int i = 0; i < n; ++i) {
    auto r = hosts->Run(i, "hostname", {}, std::chrono::seconds(10));
    if (r.exit_code != 0 || r.output != hosts->hostname(i) + "\n") {
      return fail("cannot run a command on host " + std::to_string(i), r);
    }
  }
  for (int i = 1; i < n; ++i) {
    ChildSetup setup{std::string(kNetnsDir) + "/" + hosts->netns(i),
                     hosts->hostname(i),
                     hosts->tmpdir(i) / "probe.out",
                     {}};
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(1);
    ::inet_pton(AF_INET, hosts->ip(0).c_str(), &to.sin_addr);
    pid_t child = ForkInHost(setup, [&] {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      if (fd < 0) _exit(2);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0) _exit(0);
      if (errno == ECONNREFUSED) _exit(0);
      if (errno != EINPROGRESS) _exit(3);
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 3000) != 1) _exit(4);  // no answer in 3 s
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      _exit(err == 0 || err == ECONNREFUSED ? 0 : 5);
    });
    HostProcess probe(child, setup.output);
    CommandResult r = probe.Wait(std::chrono::seconds(10));
    if (r.exit_code != 0) {
      r.output += "(probe exit " + std::to_string(r.exit_code) + ")";
      return fail("host " + std::to_string(i) + " cannot reach host 0 (" + hosts->ip(0) +
                      ") over the bridge; is bridged traffic filtered (net.bridge.bridge-nf-"
                      "call-iptables=1 and an iptables FORWARD policy of DROP)?",
                  r);
    }
  }
  return hosts;
}

TestHosts::~TestHosts() { Teardown(); }

void TestHosts::Teardown() {
  for (int i = 0; i < created_netns_; ++i) KillInNetns(hosts_[i].netns);
  for (int i = 0; i < created_netns_; ++i) {
    Ip("netns del " + hosts_[i].netns);
    // Deleting the namespace destroys its veth and so the bridge's end; the kernel does
    // that asynchronously, so delete the end too and wait until it is gone.
    Ip("link del " + hosts_[i].veth);
  }
  if (bridge_created_) Ip("link del " + bridge_);
  const std::string pid = std::to_string(::getpid());
  WaitFor(
      [&] {
        for (const auto& name : LinkNames()) {
          if (PidInName(name, kVethPrefix, true) == ::getpid() ||
              PidInName(name, kBridgePrefix, false) == ::getpid()) {
            Ip("link del " + name);
            return false;
          }
        }
        return true;
      },
      std::chrono::seconds(5));
  created_netns_ = 0;
  bridge_created_ = false;
  std::error_code ec;
  if (!root_.empty()) std::filesystem::remove_all(root_, ec);
}

std::unique_ptr<HostProcess> TestHosts::Spawn(int i, const std::string& command,
                                              const Env& env) const {
  const Host& h = hosts_.at(i);
  static int sequence = 0;
  ChildSetup setup{std::string(kNetnsDir) + "/" + h.netns,
                   h.hostname,
                   h.tmpdir / ("cmd-" + std::to_string(++sequence) + ".out"),
                   {}};
  Env all = env;
  all["TMPDIR"] = h.tmpdir.string();
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    std::string name = kv.substr(0, kv.find('='));
    // A test's own RAIO_ADDRESS or scenario must not leak into what runs on a host.
    if (all.count(name) || name == "RAIO_ADDRESS" || name == "RAIO_NODE_ID" ||
        name == "RAIO_TEST_SCENARIO" || name == "RAIO_WORKER_MODE") {
      continue;
    }
    setup.env.push_back(kv);
  }
  for (const auto& [name, value] : all) setup.env.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (auto& kv : setup.env) envp.push_back(kv.data());
  envp.push_back(nullptr);
  std::string cmd = command;
  char sh[] = "/bin/sh", dash_c[] = "-c";
  char* argv[] = {sh, dash_c, cmd.data(), nullptr};
  pid_t pid = ForkInHost(setup, [&] { ::execve(sh, argv, envp.data()); });
  return std::make_unique<HostProcess>(pid, setup.output);
}

CommandResult TestHosts::Run(int i, const std::string& command, const Env& env,
                             std::chrono::milliseconds timeout) const {
  std::unique_ptr<HostProcess> p = Spawn(i, command, env);
  CommandResult r = p->Wait(timeout);
  std::error_code ec;
  std::filesystem::remove(p->output_path(), ec);
  std::filesystem::remove(p->output_path().string() + ".err", ec);
  return r;
}

int TestHosts::KillAll(int i) const { return KillInNetns(hosts_.at(i).netns); }

// ---- HostCluster ----

std::unique_ptr<HostCluster> HostCluster::Create(const TestHosts& hosts, Options options,
                                                 std::string* error) {
  std::unique_ptr<HostCluster> c(new HostCluster(hosts, std::move(options)));
  c->node_ids_.resize(hosts.size());
  auto fail = [&](const std::string& what, const CommandResult& r) {
    *error =
        what + " (exit " + std::to_string(r.exit_code) + "):\n" + r.output + "\n" + c->DaemonLogs();
    c.reset();  // stops what started
    return nullptr;
  };
  const std::string head_host = c->options_.head_host.empty() ? hosts.ip(0) : c->options_.head_host;
  // Without the jobs API, which listens on loopback (docs/design/jobs.md): these hosts
  // check that nothing of the core does.
  auto r = c->Cli(0, "start --head --host " + head_host + " --port 0 --include-dashboard false " +
                         c->options_.head_flags);
  auto pos = r.output.find("started at ");
  if (r.exit_code != 0 || pos == std::string::npos) return fail("raio start --head on host 0", r);
  const std::string printed = r.output.substr(pos + 11, r.output.find('\n', pos) - pos - 11);
  // The port of what the head printed, at the address other hosts reach it at.
  c->head_address_ = hosts.ip(0) + printed.substr(printed.rfind(':'));
  for (int i = 1; i < hosts.size(); ++i) {
    auto it = c->options_.node_flags_of_host.find(i);
    const std::string& flags =
        it != c->options_.node_flags_of_host.end() ? it->second : c->options_.node_flags;
    const std::string node_ip =
        c->options_.hosts_without_node_ip.count(i) ? "" : " --node-ip " + hosts.ip(i);
    const std::string start = ShellQuote(c->options_.cli) + " start --address " + c->head_address_ +
                              node_ip + " " + flags;
    auto hidden = c->options_.hidden_dirs_of_host.find(i);
    if (hidden == c->options_.hidden_dirs_of_host.end()) {
      r = c->Cli(i, "start --address " + c->head_address_ + node_ip + " " + flags);
    } else {
      // The daemon `raio start` forks keeps the mount namespace, and so its workers.
      std::string mounts;
      for (const std::string& dir : hidden->second) {
        mounts += "mount -t tmpfs -o size=1m raio-hidden " + ShellQuote(dir) + " && ";
      }
      r = hosts.Run(
          i, "unshare -m --propagation private sh -c " + ShellQuote(mounts + "exec " + start), {},
          std::chrono::seconds(60));
    }
    pos = r.output.find("raio node ");
    if (r.exit_code != 0 || pos == std::string::npos) {
      return fail("raio start --address on host " + std::to_string(i), r);
    }
    c->node_ids_[i] = r.output.substr(pos + 10, 16);
  }
  // The head's own node.
  nlohmann::json nodes;
  bool listed = WaitFor(
      [&] {
        nodes = c->ListNodes(0);
        if (static_cast<int>(nodes.size()) != hosts.size()) return false;
        // The one node not started on hosts 1..n-1 (whatever address it registered).
        for (const auto& n : nodes) {
          const std::string id = n["node_id"];
          if (std::find(c->node_ids_.begin() + 1, c->node_ids_.end(), id) == c->node_ids_.end()) {
            c->node_ids_[0] = id;
          }
        }
        return !c->node_ids_[0].empty();
      },
      std::chrono::seconds(20));
  if (!listed) {
    return fail("the head did not list " + std::to_string(hosts.size()) + " nodes",
                {0, nodes.dump(2)});
  }
  return c;
}

nlohmann::json HostCluster::ListNodes(int i) const {
  CommandResult r = Cli(i, "list nodes --json --address " + head_address_);
  std::string out = r.output;
  if (auto err = out.rfind("[stderr]\n", 0) == 0 ? 0 : out.find("\n[stderr]\n");
      err != std::string::npos) {
    out.resize(err);
  }
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (r.exit_code != 0 || !j.is_object()) return nlohmann::json::array();
  nlohmann::json alive = nlohmann::json::array();
  for (const auto& n : j.value("nodes", nlohmann::json::array())) {
    if (n.value("state", "") != "dead") alive.push_back(n);
  }
  return alive;
}

CommandResult HostCluster::Cli(int i, const std::string& args) const {
  return hosts_.Run(i, ShellQuote(options_.cli) + " " + args, {}, std::chrono::seconds(60));
}

CommandResult HostCluster::Driver(int i, const std::string& scenario, const Env& env,
                                  std::chrono::milliseconds timeout) const {
  return SpawnDriver(i, scenario, env)->Wait(timeout);
}

std::unique_ptr<HostProcess> HostCluster::SpawnDriver(int i, const std::string& scenario,
                                                      const Env& env) const {
  Env all = env;
  all["RAIO_ADDRESS"] = head_address_;
  all["RAIO_TEST_SCENARIO"] = scenario;
  return hosts_.Spawn(i, ShellQuote(options_.self), all);
}

std::string HostCluster::DaemonLogs(int lines) const {
  std::string out;
  std::error_code ec;
  for (int i = 0; i < hosts_.size(); ++i) {
    for (const auto& e : std::filesystem::directory_iterator(hosts_.tmpdir(i) / "raio", ec)) {
      if (e.path().extension() != ".log") continue;
      std::string text = ReadFile(e.path());
      std::size_t start = text.size();
      for (int n = 0; n <= lines && start != std::string::npos && start > 0; ++n) {
        start = text.rfind('\n', start - 1);
      }
      start = start == std::string::npos ? 0 : start + 1;
      out += "---- host" + std::to_string(i) + " " + e.path().filename().string() + " (last " +
             std::to_string(lines) + " lines)\n" + text.substr(start);
    }
  }
  return out;
}

std::string HostCluster::Stop() {
  if (stopped_) return "";
  stopped_ = true;
  std::string out;
  for (int i = hosts_.size() - 1; i >= 0; --i) {
    auto r = Cli(i, "stop");
    out += "host" + std::to_string(i) + ": " + r.output;
  }
  return out;
}

}  // namespace raio_test
