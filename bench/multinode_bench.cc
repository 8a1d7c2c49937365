// multinode_bench: a cluster of 4 nodes on this machine (a head and 3 node daemons, each
// its own `raio start --block` process with its own TMPDIR, session directory, loopback IP
// and ports), and one driver attached to the head's node. Each row is printed beside its
// peer measured in the same run:
//
//   - async no-op tasks, 10,000 per batch, spread over the 3 nodes (SPREAD, and DEFAULT,
//     which spills under load), beside the same-node rate (target >= 50,000 tasks/s);
//   - sync no-op round trip to a task on another node (node affinity), median and p99,
//     beside the same-node round trip (target <= 2x);
//   - the same-node rows themselves (node affinity to the driver's node), so that a
//     regression of the single-node path shows here too;
//   - with a fourth node added: a 1 GiB object made on node 1 and read by a task on node 2, beside
//   a plain loopback
//     TCP stream of the same bytes into a mapping (target >= 0.7x), and the same object
//     read on 3 nodes at once (broadcast), beside the one transfer (target < 2x);
//   - node failure: a SIGKILLed node's tasks running elsewhere (beside the health-check
//     timeout), a 3-stage chain of 100 MiB objects rebuilt after its node's SIGKILL (beside
//     its first run, target < 2x), and same-node tasks/s with 10 idle nodes (target >= 0.95x).
//
//   build-release/bench/multinode_bench [--quick] [--no-json] [--json=PATH]
//                                       [--cpus-per-node=N] [--cli=PATH]
//
// The daemons are this process's children with PR_SET_PDEATHSIG, so they end with it
// (also when a phase hangs and the watchdog ends the run, or on ^C). The cluster runs
// tasks by re-executing this binary as its workers, so raio::Init is the first call in
// main in a worker.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <raio/raio.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

void Noop() {}
std::string WhereAmI() { return raio::GetNodeId(); }
// `bytes` bytes, every page written (so the store really holds them).
raio::Buffer MakeBytes(int64_t bytes) {
  std::string data(static_cast<std::size_t>(bytes), '\0');
  for (std::size_t i = 0; i < data.size(); i += 4096) data[i] = static_cast<char>(i >> 12);
  return raio::Buffer::FromString(std::move(data));
}
// The size of an argument that lives in the store: the task only maps it, so its time is
// the pull's (and a task's).
int64_t SizeOf(raio::Buffer b) { return static_cast<int64_t>(b.size()); }
// When it started (system clock, us since the epoch: comparable across processes) and on
// which node, after sleeping `ms`.
std::pair<int64_t, std::string> StartThenSleep(int ms) {
  const int64_t start = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return {start, raio::GetNodeId()};
}
// A stage of a chain: a new object of `in`'s size, each byte `in`'s plus one.
raio::Buffer NextStage(raio::Buffer in) {
  std::string out(reinterpret_cast<const char*>(in.data()), in.size());
  for (char& c : out) c = static_cast<char>(c + 1);
  return raio::Buffer::FromString(std::move(out));
}
// Its argument's size and the node that read it.
std::pair<int64_t, std::string> SizeWhere(raio::Buffer b) {
  return {static_cast<int64_t>(b.size()), raio::GetNodeId()};
}
RAIO_REMOTE(Noop, WhereAmI, MakeBytes, SizeOf, StartThenSleep, NextStage, SizeWhere);

namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  std::size_t rank = static_cast<std::size_t>(std::ceil(p / 100.0 * v.size()));  // nearest rank
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}
double Median(const std::vector<double>& v) { return Percentile(v, 50); }

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// ---------------------------------------------------------------------------------------
// Options, watchdog.

struct Options {
  bool quick = false;
  bool write_json = true;
  std::string json_path;  // empty: bench/results/multinode-<timestamp>.json
  int cpus_per_node = 0;  // 0: this machine's core count
  std::string cli = RAIO_CLI_PATH;
};

std::optional<Options> ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--no-json") {
      o.write_json = false;
    } else if (a.rfind("--json=", 0) == 0) {
      o.json_path = a.substr(7);
    } else if (a.rfind("--cpus-per-node=", 0) == 0) {
      o.cpus_per_node = std::max(1, std::atoi(a.c_str() + 16));
    } else if (a.rfind("--cli=", 0) == 0) {
      o.cli = a.substr(6);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--no-json] [--json=PATH] [--cpus-per-node=N] "
                   "[--cli=PATH]\n",
                   argv[0]);
      return std::nullopt;
    }
  }
  if (o.cpus_per_node == 0) o.cpus_per_node = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  return o;
}

// Ends the process if a phase runs past its deadline, naming it; the daemons end with
// this process (PR_SET_PDEATHSIG).
class Watchdog {
 public:
  Watchdog() : thread_([this] { Loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Enter(const std::string& phase, std::chrono::seconds limit) {
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = phase;
    deadline_ = Clock::now() + limit;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (deadline_ && Clock::now() >= *deadline_) {
        std::fprintf(stderr, "\nmultinode_bench: phase '%s' did not finish in time; exiting\n",
                     phase_.c_str());
        std::_Exit(3);
      }
      cv_.wait_for(lock, std::chrono::milliseconds(200));
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string phase_;
  std::optional<Clock::time_point> deadline_;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------
// The cluster: `raio start --block` children.

struct Daemon {
  pid_t pid = -1;
  std::filesystem::path tmpdir;
  std::string address;  // the head's
  std::string node_id;
  std::string node_address;
};

// Starts `cli start --block ARGS` with TMPDIR=`tmpdir`, output to tmpdir/daemon.log, and
// waits for its "ok HEAD NODE_ID NODE_ADDRESS" line. Throws when it fails.
Daemon StartDaemon(const Options& opt, const std::filesystem::path& tmpdir,
                   std::vector<std::string> args) {
  std::filesystem::create_directories(tmpdir);
  const std::filesystem::path log = tmpdir / "daemon.log";
  std::vector<std::string> argv_s = {opt.cli, "start", "--block"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string tmp = tmpdir.string();
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) _exit(1);  // the parent is already gone
    std::FILE* f = std::freopen(log.c_str(), "w", stdout);
    (void)f;
    ::dup2(::fileno(stdout), STDERR_FILENO);
    ::setenv("TMPDIR", tmp.c_str(), 1);
    ::unsetenv("RAIO_ADDRESS");
    ::execv(argv[0], argv.data());
    std::perror("exec raio");
    _exit(127);
  }
  if (pid < 0) throw std::runtime_error("fork failed");
  Daemon d;
  d.pid = pid;
  d.tmpdir = tmpdir;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    std::istringstream in(ReadFile(log));
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("ok ", 0) == 0) {
        std::istringstream words(line.substr(3));
        words >> d.address >> d.node_id >> d.node_address;
        return d;
      }
      if (line.rfind("error", 0) == 0) {
        throw std::runtime_error("raio start " + argv_s.back() + " failed: " + line);
      }
    }
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      throw std::runtime_error("the daemon exited; its log:\n" + ReadFile(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("the daemon did not start in 30 s; its log:\n" + ReadFile(log));
}

class Cluster {
 public:
  // Head on 127.0.0.1, nodes on 127.0.0.2 and 127.0.0.3 (all of 127/8 is this machine's);
  // AddNode adds one on 127.0.0.4 for the broadcast. Each store holds the largest object
  // moved plus room (ObjectBytes).
  Cluster(const Options& opt, const std::filesystem::path& dir) : opt_(opt), dir_(dir) {
    const std::string cpus = std::to_string(opt.cpus_per_node);
    const std::string store = std::to_string(ObjectBytes(opt) + (512ull << 20));
    daemons_.push_back(StartDaemon(opt, dir / "head",
                                   {"--head", "--host", "127.0.0.1", "--port", "0", "--num-cpus",
                                    cpus, "--object-store-memory", store}));
    for (int i = 1; i <= 2; ++i) AddNode();
  }
  // `cpus` CPUs (default: the option's) and a store of `store_bytes` (default: the largest
  // object moved plus room).
  void AddNode(int cpus_n = -1, uint64_t store_bytes = 0) {
    const std::string cpus = std::to_string(cpus_n < 0 ? opt_.cpus_per_node : cpus_n);
    const std::string store =
        std::to_string(store_bytes > 0 ? store_bytes : ObjectBytes(opt_) + (512ull << 20));
    const int i = size();
    {
      daemons_.push_back(StartDaemon(
          opt_, dir_ / ("node" + std::to_string(i)),
          {"--address", daemons_[0].address, "--node-ip", "127.0.0." + std::to_string(i + 1),
           "--port", "0", "--num-cpus", cpus, "--object-store-memory", store}));
    }
  }
  ~Cluster() {
    // Nodes first, then the head; each stops its workers on SIGTERM.
    for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it) {
      ::kill(it->pid, SIGTERM);
      int status = 0;
      const auto deadline = Clock::now() + std::chrono::seconds(15);
      while (::waitpid(it->pid, &status, WNOHANG) != it->pid) {
        if (Clock::now() > deadline) {
          ::kill(it->pid, SIGKILL);
          ::waitpid(it->pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const Daemon& daemon(int i) const { return daemons_.at(i); }
  // SIGKILLs daemon i (its workers end with it); the destructor reaps it.
  void Kill(int i) { ::kill(daemons_.at(i).pid, SIGKILL); }
  int size() const { return static_cast<int>(daemons_.size()); }
  // The object moved by the transfer rows: 1 GiB (256 MiB with --quick).
  static uint64_t ObjectBytes(const Options& opt) {
    return opt.quick ? (uint64_t{256} << 20) : (uint64_t{1} << 30);
  }

 private:
  const Options& opt_;
  std::filesystem::path dir_;
  std::vector<Daemon> daemons_;
};

// ---------------------------------------------------------------------------------------
// Rows.

struct Row {
  std::string benchmark;
  double value = 0;
  std::string unit;
  std::string peer;  // what it is compared with, measured in this run ("" for none)
  double ratio = std::nan("");
  std::string target;
  std::optional<bool> pass;
  nlohmann::json detail = nlohmann::json::object();
};

std::string Fmt(double v) {
  if (!std::isfinite(v)) return "n/a";
  std::ostringstream s;
  s << std::fixed << std::setprecision(v >= 1000 ? 0 : (v >= 10 ? 1 : 2)) << v;
  return s.str();
}

void PrintTable(const std::vector<Row>& rows) {
  std::size_t w0 = 9, w3 = 4;
  for (const auto& r : rows) {
    w0 = std::max(w0, r.benchmark.size());
    w3 = std::max(w3, r.peer.size());
  }
  auto line = [&](const std::string& a, const std::string& b, const std::string& c,
                  const std::string& d, const std::string& e, const std::string& f,
                  const std::string& g) {
    std::printf("%-*s  %10s  %-7s  %-*s  %6s  %-10s  %s\n", static_cast<int>(w0), a.c_str(),
                b.c_str(), c.c_str(), static_cast<int>(w3), d.c_str(), e.c_str(), f.c_str(),
                g.c_str());
  };
  std::printf("\n");
  line("benchmark", "result", "unit", "peer (same run)", "ratio", "target", "flag");
  line(std::string(w0, '-'), std::string(10, '-'), std::string(7, '-'), std::string(w3, '-'),
       std::string(6, '-'), std::string(10, '-'), "----");
  for (const auto& r : rows) {
    line(r.benchmark, Fmt(r.value), r.unit, r.peer.empty() ? "-" : r.peer,
         std::isfinite(r.ratio) ? Fmt(r.ratio) + "x" : "-", r.target.empty() ? "-" : r.target,
         !r.pass ? "-" : (*r.pass ? "pass" : "MISS"));
  }
  std::printf("\n");
}

// ---------------------------------------------------------------------------------------
// Benchmarks.

struct Async {
  std::vector<double> rates;  // tasks/s per batch
  double best() const { return *std::max_element(rates.begin(), rates.end()); }
  double median() const { return Median(rates); }
};

// Batches of `batch` no-op tasks under `strategy`: submit all, then Get all.
Async RunAsync(const raio::SchedulingStrategy& strategy, int batch, int rounds, Watchdog& wd,
               const std::string& name) {
  Async out;
  for (int round = 0; round <= rounds; ++round) {  // round 0 warms up
    wd.Enter(name + " round " + std::to_string(round), std::chrono::seconds(90));
    std::vector<raio::ObjectRef<void>> refs;
    refs.reserve(batch);
    Clock::time_point t0 = Clock::now();
    for (int i = 0; i < batch; ++i) {
      refs.push_back(raio::Task(Noop).SetSchedulingStrategy(strategy).Remote());
    }
    for (const auto& r : refs) r.Get();
    if (round > 0) out.rates.push_back(batch / (MicrosSince(t0, Clock::now()) / 1e6));
  }
  return out;
}

// Sync round trips of a no-op task under `strategy` (median, p99 in us).
std::vector<double> RunSync(const raio::SchedulingStrategy& strategy, int warmup, int max_samples,
                            std::chrono::seconds budget, Watchdog& wd, const std::string& name) {
  wd.Enter(name + " warm-up", std::chrono::seconds(60));
  for (int i = 0; i < warmup; ++i) raio::Task(Noop).SetSchedulingStrategy(strategy).Remote().Get();
  wd.Enter(name, budget + std::chrono::seconds(60));
  std::vector<double> us;
  us.reserve(max_samples);
  const auto stop = Clock::now() + budget;
  while (static_cast<int>(us.size()) < max_samples && Clock::now() < stop) {
    Clock::time_point t0 = Clock::now();
    raio::Task(Noop).SetSchedulingStrategy(strategy).Remote().Get();
    us.push_back(MicrosSince(t0, Clock::now()));
  }
  return us;
}

// Where `n` tasks under `strategy` ran: node id -> count. Also proves that the other
// nodes run this binary's tasks before any timing.
std::map<std::string, int> Placement(const raio::SchedulingStrategy& strategy, int n) {
  std::vector<raio::ObjectRef<std::string>> refs;
  for (int i = 0; i < n; ++i) {
    refs.push_back(raio::Task(WhereAmI).SetSchedulingStrategy(strategy).Remote());
  }
  std::map<std::string, int> count;
  for (auto& r : refs) ++count[r.Get(std::chrono::seconds(60))];
  return count;
}

nlohmann::json ToJson(const std::map<std::string, int>& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : m) j[k] = v;
  return j;
}

// "head 3400, node1 3300, node2 3300": tasks per node, named by role.
std::string Describe(const std::map<std::string, int>& placement, const Cluster& cluster) {
  std::string out;
  for (int i = 0; i < cluster.size(); ++i) {
    auto it = placement.find(cluster.daemon(i).node_id);
    out += (i ? ", " : "") + std::string(i == 0 ? "head" : "node" + std::to_string(i)) + " " +
           std::to_string(it == placement.end() ? 0 : it->second);
  }
  return out;
}

// Seconds to move `bytes` over a plain loopback TCP connection on this machine, written
// from an 8 MiB buffer and read into a `bytes` mapping whose pages are present already
// (as the store's are: it prefaults them), so that page faults do not slow the floor:
// what the transfer rows are compared with. Best of `tries`.
double TcpStreamSeconds(uint64_t bytes, int tries) {
  double best = 1e9;
  for (int t = 0; t < tries; ++t) {
    int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listener, 1) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw std::runtime_error("cannot make a loopback listener");
    }
    void* dest = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (dest == MAP_FAILED) throw std::runtime_error("cannot map the floor's buffer");
    std::thread writer([&] {
      int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) std::abort();
      std::vector<char> chunk(8u << 20, 'x');
      for (uint64_t sent = 0; sent < bytes;) {
        ssize_t n = ::send(s, chunk.data(), std::min<uint64_t>(chunk.size(), bytes - sent), 0);
        if (n <= 0) break;
        sent += static_cast<uint64_t>(n);
      }
      ::close(s);
    });
    int conn = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    const auto t0 = Clock::now();
    uint64_t got = 0;
    while (got < bytes) {
      ssize_t n = ::recv(conn, static_cast<char*>(dest) + got, bytes - got, 0);
      if (n <= 0) break;
      got += static_cast<uint64_t>(n);
    }
    const double secs = MicrosSince(t0, Clock::now()) / 1e6;
    writer.join();
    ::close(conn);
    ::close(listener);
    ::munmap(dest, bytes);
    if (got == bytes) best = std::min(best, secs);
  }
  return best;
}

// TcpStreamSeconds in a child process of its own, away from this driver's threads (its
// event loop busy-polls a while after each event).
double TcpStreamSecondsInChild(uint64_t bytes, int tries) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid == 0) {
    const double secs = TcpStreamSeconds(bytes, tries);
    (void)!::write(fds[1], &secs, sizeof(secs));
    _exit(0);
  }
  ::close(fds[1]);
  double secs = std::nan("");
  const bool got = pid > 0 && ::read(fds[0], &secs, sizeof(secs)) == sizeof(secs);
  ::close(fds[0]);
  if (pid > 0) ::waitpid(pid, nullptr, 0);
  if (!got) throw std::runtime_error("the TCP floor's child process failed");
  return secs;
}

struct Transfers {
  std::vector<double> one;        // seconds: a fresh object pulled by one other node
  std::vector<double> broadcast;  // seconds: a fresh object pulled by 3 nodes at once
};

// Fresh objects of `bytes` made on cluster node 1 each round (not timed), then read by a
// task on node 2 (one transfer) or by tasks on nodes 2, 3 and the head's at once
// (broadcast); each time is from submitting the reading tasks to their last result.
Transfers RunTransfers(const Cluster& cluster, uint64_t bytes, int rounds, Watchdog& wd) {
  auto on = [&](int i) {
    return raio::SchedulingStrategy::NodeAffinity(cluster.daemon(i).node_id);
  };
  Transfers out;
  for (int round = 0; round <= rounds; ++round) {  // round 0 warms up
    for (bool broadcast : {false, true}) {
      wd.Enter(
          std::string(broadcast ? "broadcast" : "transfer") + " round " + std::to_string(round),
          std::chrono::seconds(180));
      auto object =
          raio::Task(MakeBytes).SetSchedulingStrategy(on(1)).Remote(static_cast<int64_t>(bytes));
      raio::Wait(std::vector<raio::ObjectRef<raio::Buffer>>{object}, 1, std::chrono::seconds(120));
      const auto t0 = Clock::now();
      std::vector<raio::ObjectRef<int64_t>> reads;
      for (int i : broadcast ? std::vector<int>{2, 3, 0} : std::vector<int>{2}) {
        reads.push_back(raio::Task(SizeOf).SetSchedulingStrategy(on(i)).Remote(object));
      }
      for (auto& r : reads) {
        if (static_cast<uint64_t>(r.Get(std::chrono::seconds(120))) != bytes) {
          throw std::runtime_error("a node read an object of the wrong size");
        }
      }
      const double secs = MicrosSince(t0, Clock::now()) / 1e6;
      if (round > 0) (broadcast ? out.broadcast : out.one).push_back(secs);
    }
  }
  return out;
}

std::vector<Row> RunAll(const Options& opt, Cluster& cluster, Watchdog& wd,
                        std::vector<std::string>* notes) {
  const std::string self = cluster.daemon(0).node_id, other = cluster.daemon(1).node_id;
  const auto on_self = raio::SchedulingStrategy::NodeAffinity(self);
  const auto on_other = raio::SchedulingStrategy::NodeAffinity(other);
  const auto spread = raio::SchedulingStrategy::Spread();
  const int batch = 10000, rounds = opt.quick ? 2 : 5;
  const int cpus = opt.cpus_per_node;

  // Every node runs this binary's tasks; workers are up on each before any timing.
  wd.Enter("warm-up on every node", std::chrono::seconds(120));
  for (int i = 0; i < cluster.size(); ++i) {
    auto count =
        Placement(raio::SchedulingStrategy::NodeAffinity(cluster.daemon(i).node_id), 2 * cpus);
    if (count.size() != 1 || count.begin()->first != cluster.daemon(i).node_id) {
      throw std::runtime_error("affinity to node " + cluster.daemon(i).node_id + " ran on " +
                               ToJson(count).dump());
    }
  }
  std::printf("  async no-op, same node ...\n");
  std::fflush(stdout);
  Async same = RunAsync(on_self, batch, rounds, wd, "async same node");
  std::printf("  async no-op, 3 nodes SPREAD ...\n");
  std::fflush(stdout);
  Async spread_rates = RunAsync(spread, batch, rounds, wd, "async SPREAD");
  std::printf("  async no-op, 3 nodes DEFAULT ...\n");
  std::fflush(stdout);
  Async dflt = RunAsync(raio::SchedulingStrategy::Default(), batch, rounds, wd, "async DEFAULT");
  // Where the spread batches ran: the same batches of WhereAmI (a no-op that returns its
  // node's id), counted. A lease serves many tasks, so SPREAD spreads leases, not tasks.
  wd.Enter("placement of the spread batches", std::chrono::seconds(120));
  auto spread_placement = Placement(spread, batch);
  auto default_placement = Placement(raio::SchedulingStrategy::Default(), batch);
  notes->push_back("where a 10k SPREAD batch ran: " + Describe(spread_placement, cluster));
  notes->push_back("where a 10k DEFAULT batch ran: " + Describe(default_placement, cluster));
  const int warmup = opt.quick ? 200 : 1000, samples = opt.quick ? 5000 : 50000;
  const auto budget = std::chrono::seconds(opt.quick ? 1 : 4);
  std::printf("  sync round trips, same node and other node ...\n");
  std::fflush(stdout);
  std::vector<double> sync_same = RunSync(on_self, warmup, samples, budget, wd, "sync same node");
  std::vector<double> sync_other =
      RunSync(on_other, warmup, samples, budget, wd, "sync other node");

  std::vector<Row> rows;
  auto add = [&rows](std::string name, double value, std::string unit, std::string peer,
                     double ratio, std::string target, std::optional<bool> pass,
                     nlohmann::json detail) {
    Row r;
    r.benchmark = std::move(name);
    r.value = value;
    r.unit = std::move(unit);
    r.peer = std::move(peer);
    r.ratio = ratio;
    r.target = std::move(target);
    r.pass = pass;
    r.detail = std::move(detail);
    rows.push_back(std::move(r));
  };
  const double none = std::nan("");
  const std::string same_peer = "same node " + Fmt(same.median()) + " tasks/s";
  add("async no-op, same node, 10k batch (median)", same.median(), "tasks/s", "", none, ">= 100000",
      same.median() >= 100000, {{"tasks_per_s_each_batch", same.rates}, {"best", same.best()}});
  add("async no-op, 3 nodes SPREAD, 10k batch (median)", spread_rates.median(), "tasks/s",
      same_peer, spread_rates.median() / same.median(), ">= 50000", spread_rates.median() >= 50000,
      {{"tasks_per_s_each_batch", spread_rates.rates},
       {"best", spread_rates.best()},
       {"placement_of_a_batch", ToJson(spread_placement)}});
  add("async no-op, 3 nodes DEFAULT, 10k batch (median)", dflt.median(), "tasks/s", same_peer,
      dflt.median() / same.median(), "", std::nullopt,
      {{"tasks_per_s_each_batch", dflt.rates},
       {"best", dflt.best()},
       {"placement_of_a_batch", ToJson(default_placement)}});
  const double same_med = Median(sync_same), other_med = Median(sync_other);
  const double same_p99 = Percentile(sync_same, 99), other_p99 = Percentile(sync_other, 99);
  add("sync no-op round trip, same node (median)", same_med, "us", "", none, "<= 50",
      same_med <= 50, {{"samples", sync_same.size()}, {"min_us", Percentile(sync_same, 0)}});
  add("sync no-op round trip, same node (p99)", same_p99, "us", "", none, "", std::nullopt,
      nlohmann::json::object());
  add("sync no-op round trip, other node (median)", other_med, "us",
      "same node " + Fmt(same_med) + " us", other_med / same_med, "<= 2x",
      other_med / same_med <= 2,
      {{"samples", sync_other.size()}, {"min_us", Percentile(sync_other, 0)}});
  add("sync no-op round trip, other node (p99)", other_p99, "us",
      "same node " + Fmt(same_p99) + " us", other_p99 / same_p99, "", std::nullopt,
      nlohmann::json::object());

  // ---- Objects between nodes, with a fourth node for the broadcast to 3 others.
  wd.Enter("a fourth node", std::chrono::seconds(60));
  cluster.AddNode();
  // Until the driver's node has it in its view (the head's next update), an affinity to
  // it is refused as unschedulable.
  const std::string fourth = cluster.daemon(cluster.size() - 1).node_id;
  for (int attempt = 0;; ++attempt) {
    try {
      if (Placement(raio::SchedulingStrategy::NodeAffinity(fourth), cpus).count(fourth)) break;
    } catch (const raio::UnschedulableError&) {
      if (attempt >= 100) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  const uint64_t bytes = Cluster::ObjectBytes(opt);
  const double gib = static_cast<double>(bytes) / (1ull << 30);
  const std::string size = opt.quick ? "256 MiB" : "1 GiB";
  std::printf("  %s object transfers and broadcasts ...\n", size.c_str());
  std::fflush(stdout);
  Transfers t = RunTransfers(cluster, bytes, opt.quick ? 2 : 3, wd);
  wd.Enter("loopback TCP floor", std::chrono::seconds(120));
  const double floor_s = TcpStreamSecondsInChild(bytes, 3);
  const double one_s = Median(t.one), broadcast_s = Median(t.broadcast);
  const double floor_gbps = gib / floor_s, one_gbps = gib / one_s;
  add("object " + size + " node1 -> node2 (median)", one_gbps, "GiB/s",
      "loopback TCP " + Fmt(floor_gbps) + " GiB/s", one_gbps / floor_gbps, ">= 0.7x",
      one_gbps / floor_gbps >= 0.7, {{"seconds_each", t.one}, {"tcp_floor_seconds", floor_s}});
  add("broadcast " + size + " node1 -> 3 nodes (median)", broadcast_s, "s",
      "one transfer " + Fmt(one_s) + " s", broadcast_s / one_s, "< 2x", broadcast_s / one_s < 2,
      {{"seconds_each", t.broadcast}});

  // ---- Node failure: SIGKILL the fourth node while tasks run on every node (half the
  // cluster's CPUs busy, so that a retried task finds a free CPU at once); its tasks run
  // elsewhere (retried within max_retries) after the head sees its connection close.
  wd.Enter("failover", std::chrono::seconds(120));
  std::printf("  failover of a SIGKILLed node ...\n");
  std::fflush(stdout);
  const int killed = cluster.size() - 1;
  const std::string killed_id = cluster.daemon(killed).node_id;
  std::vector<raio::ObjectRef<std::pair<int64_t, std::string>>> stamps;
  for (int i = 0; i < 2 * cpus; ++i) {
    stamps.push_back(raio::Task(StartThenSleep).SetSchedulingStrategy(spread).Remote(3000));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // all started by now
  const int64_t kill_us = std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  cluster.Kill(killed);
  double failover_s = 0;
  int moved = 0;
  for (auto& ref : stamps) {
    auto [start_us, node] = ref.Get(std::chrono::seconds(60));
    if (start_us > kill_us) {
      ++moved;
      failover_s = std::max(failover_s, static_cast<double>(start_us - kill_us) / 1e6);
    }
  }
  // The default health_check_failure_threshold x max(period, timeout): this cluster's.
  const double timeout_s = 10 * 1.0;
  add("failover: SIGKILL of a node -> its tasks running elsewhere (max)", failover_s, "s",
      "health-check timeout " + Fmt(timeout_s) + " s", failover_s / timeout_s, "< timeout + 1 s",
      moved > 0 && failover_s < timeout_s + 1,
      {{"tasks_moved", moved}, {"tasks", stamps.size()}, {"killed_node", killed_id}});
  if (moved == 0) notes->push_back("failover: no task ran on the killed node (SPREAD missed it)");

  // ---- Lineage reconstruction: a 3-stage chain of 100 MiB objects made on a new node
  // (soft affinity: a re-run may go elsewhere), its end read by a small task there; the
  // node is SIGKILLed and the same read runs again (DEFAULT strategy): the driver, which
  // owns the chain, re-runs all three stages elsewhere. Timed from the SIGKILL, detection
  // included (the head sees the daemon's connection close).
  wd.Enter("reconstruction", std::chrono::seconds(180));
  std::printf("  reconstruction of a 3-stage chain of 100 MiB objects ...\n");
  std::fflush(stdout);
  cluster.AddNode(4);
  const std::string holder = cluster.daemon(cluster.size() - 1).node_id;
  const auto on_holder = raio::SchedulingStrategy::NodeAffinity(holder, /*soft=*/true);
  // Until the driver's node sees it with room (a soft affinity goes elsewhere before).
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (Placement(on_holder, 1).count(holder)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int64_t chain_bytes = int64_t{100} << 20;
  // A soft affinity goes elsewhere when the node has no room, and the owner keeps its idle
  // leases a while, one per scheduling class (here 4: the placement probe, both stage
  // functions, the read): the node has 4 CPUs, and the chain runs again (up to 5 times)
  // if its end was still read elsewhere.
  raio::ObjectRef<raio::Buffer> chain_end;
  std::pair<int64_t, std::string> first_read;
  double chain_s = 0;
  int chain_runs = 0;
  do {
    ++chain_runs;
    const Clock::time_point c0 = Clock::now();
    auto first = raio::Task(MakeBytes).SetSchedulingStrategy(on_holder).Remote(chain_bytes);
    auto second = raio::Task(NextStage).SetSchedulingStrategy(on_holder).Remote(first);
    chain_end = raio::Task(NextStage).SetSchedulingStrategy(on_holder).Remote(second);
    first_read = raio::Task(SizeWhere).SetSchedulingStrategy(on_holder).Remote(chain_end).Get(
        std::chrono::seconds(60));
    chain_s = MicrosSince(c0, Clock::now()) / 1e6;
  } while (first_read.second != holder && chain_runs < 5);
  const auto& [size_before, read_on] = first_read;
  cluster.Kill(cluster.size() - 1);
  const Clock::time_point r0 = Clock::now();
  const auto [size_after, reread_on] =
      raio::Task(SizeWhere).Remote(chain_end).Get(std::chrono::seconds(120));
  const double rebuild_s = MicrosSince(r0, Clock::now()) / 1e6;
  const bool moved_chain = read_on == holder && reread_on != holder;
  add("reconstruction: 3-stage chain of 100 MiB after its node's SIGKILL", rebuild_s, "s",
      "first run " + Fmt(chain_s) + " s", rebuild_s / chain_s, "< 2x",
      rebuild_s / chain_s < 2 && moved_chain && size_before == chain_bytes &&
          size_after == chain_bytes,
      {{"chain_seconds", chain_s},
       {"killed_node", holder},
       {"first_read_on", read_on},
       {"chain_runs", chain_runs},
       {"read_again_on", reread_on},
       {"size_after", size_after}});
  if (!moved_chain) {
    notes->push_back("reconstruction: the chain was read on " + read_on + ", then on " + reread_on +
                     " (killed: " + holder + ")");
  }

  // ---- Placement groups on the nodes left (the head's and one other): a 4-bundle SPREAD
  // group created (until CREATED) and removed, one at a time; then many in a loop. The
  // floor: one lookup of a group (driver -> node -> head -> back), the path every call takes.
  wd.Enter("placement groups", std::chrono::seconds(300));
  std::printf("  placement groups: create + remove of a 4-bundle group ...\n");
  std::fflush(stdout);
  const int pg_samples = opt.quick ? 50 : 300;
  const int pg_loop = opt.quick ? 200 : 1000;
  const std::vector<std::map<std::string, double>> four(4, {{"CPU", 0.25}});
  std::vector<double> create_us, remove_us, lookup_us;
  for (int i = 0; i < pg_samples + 10; ++i) {
    const Clock::time_point t0 = Clock::now();
    raio::PlacementGroup pg =
        raio::CreatePlacementGroup({"", four, raio::PlacementStrategy::SPREAD});
    if (!pg.Wait(60)) throw std::runtime_error("a 4-bundle group was not created in 60 s");
    const Clock::time_point t1 = Clock::now();
    raio::GetPlacementGroupById(pg.GetID());
    const Clock::time_point t2 = Clock::now();
    raio::RemovePlacementGroup(pg.GetID());
    const Clock::time_point t3 = Clock::now();
    if (i < 10) continue;  // warm-up
    create_us.push_back(MicrosSince(t0, t1));
    lookup_us.push_back(MicrosSince(t1, t2));
    remove_us.push_back(MicrosSince(t2, t3));
  }
  const double lookup = Median(lookup_us);
  // Ray's stress test on its machine (reference-ray.md): 1.75 ms create, 1.52 ms remove.
  add("placement group: create a 4-bundle SPREAD group until CREATED (median)",
      Median(create_us) / 1000, "ms", "lookup RPC " + Fmt(lookup / 1000) + " ms; Ray 1.75 ms",
      1.75 / (Median(create_us) / 1000), ">= 10x Ray", Median(create_us) / 1000 <= 0.175,
      {{"p90_ms", Percentile(create_us, 90) / 1000}, {"samples", pg_samples}});
  add("placement group: remove it, bundles freed on every node (median)", Median(remove_us) / 1000,
      "ms", "lookup RPC " + Fmt(lookup / 1000) + " ms; Ray 1.52 ms",
      1.52 / (Median(remove_us) / 1000), ">= 10x Ray", Median(remove_us) / 1000 <= 0.152,
      {{"p90_ms", Percentile(remove_us, 90) / 1000}});
  std::printf("  placement groups: %d created and removed in a loop ...\n", pg_loop);
  std::fflush(stdout);
  const Clock::time_point l0 = Clock::now();
  for (int i = 0; i < pg_loop; ++i) {
    raio::PlacementGroup pg =
        raio::CreatePlacementGroup({"", {{{"CPU", 0.25}}}, raio::PlacementStrategy::PACK});
    if (!pg.Wait(60)) throw std::runtime_error("a group of the loop was not created in 60 s");
    raio::RemovePlacementGroup(pg.GetID());
  }
  const double per_s = pg_loop / (MicrosSince(l0, Clock::now()) / 1e6);
  add("placement groups created and removed in a loop", per_s, "groups/s", "Ray 18.9 groups/s",
      per_s / 18.9, ">= 10x Ray", per_s >= 189, {{"groups", pg_loop}});

  // ---- Health checks cost the per-task path nothing: the same-node batches again with 10
  // idle nodes (no CPUs, small stores) in the cluster.
  wd.Enter("10 idle nodes", std::chrono::seconds(180));
  std::printf("  async no-op, same node, with 10 idle nodes ...\n");
  std::fflush(stdout);
  // Measured just before, so that both figures see the same machine load.
  Async before = RunAsync(on_self, batch, rounds, wd, "async same node, before idle nodes");
  for (int i = 0; i < 10; ++i) cluster.AddNode(0, uint64_t{64} << 20);
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // a few health checks each
  Async idle = RunAsync(on_self, batch, rounds, wd, "async same node, 10 idle nodes");
  add("async no-op, same node, 10 idle nodes in the cluster (median)", idle.median(), "tasks/s",
      "without them " + Fmt(before.median()) + " tasks/s", idle.median() / before.median(),
      ">= 0.95x", idle.median() / before.median() >= 0.95,
      {{"tasks_per_s_each_batch", idle.rates},
       {"best", idle.best()},
       {"without_tasks_per_s_each_batch", before.rates}});
  return rows;
}

// ---------------------------------------------------------------------------------------
// Machine description, JSON.

std::string FirstMatch(const std::string& path, const std::string& key) {
  std::istringstream in(ReadFile(path));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0 && line.find(':') != std::string::npos) {
      std::string v = line.substr(line.find(':') + 1);
      return v.erase(0, v.find_first_not_of(" \t"));
    }
  }
  return "";
}

std::string LoadAverages() {
  std::istringstream in(ReadFile("/proc/loadavg"));
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string UtcTimestamp(const char* fmt) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), fmt, &tm);
  return buf;
}

void WriteJson(const Options& opt, const std::vector<Row>& rows, const nlohmann::json& machine) {
  nlohmann::json j;
  j["timestamp_utc"] = UtcTimestamp("%Y-%m-%dT%H:%M:%SZ");
  j["machine"] = machine;
  j["cpus_per_node"] = opt.cpus_per_node;
  j["quick"] = opt.quick;
  for (const auto& r : rows) {
    j["results"].push_back(
        {{"benchmark", r.benchmark},
         {"result", std::isfinite(r.value) ? nlohmann::json(r.value) : nlohmann::json()},
         {"unit", r.unit},
         {"peer", r.peer},
         {"ratio", std::isfinite(r.ratio) ? nlohmann::json(r.ratio) : nlohmann::json()},
         {"target", r.target},
         {"pass", r.pass ? nlohmann::json(*r.pass) : nlohmann::json()},
         {"detail", r.detail}});
  }
  std::filesystem::path file = !opt.json_path.empty()
                                   ? std::filesystem::path(opt.json_path)
                                   : std::filesystem::path(RAIO_BENCH_SOURCE_DIR) / "results" /
                                         ("multinode-" + UtcTimestamp("%Y%m%dT%H%M%SZ") + ".json");
  std::error_code ec;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
  std::ofstream out(file);
  if (!out) {
    std::fprintf(stderr, "multinode_bench: cannot write %s\n", file.c_str());
    return;
  }
  out << j.dump(2) << "\n";
  std::printf("results written to %s\n", file.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // A worker of the cluster re-runs this binary and never gets past this line.
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);
  std::optional<Options> opt = ParseOptions(argc, argv);
  if (!opt) return 2;

  nlohmann::json machine;
  machine["cpu_model"] = FirstMatch("/proc/cpuinfo", "model name");
  machine["nproc"] = ::sysconf(_SC_NPROCESSORS_ONLN);
  machine["loadavg_before"] = LoadAverages();
  struct utsname u {};
  if (::uname(&u) == 0) machine["kernel"] = std::string(u.sysname) + " " + u.release;
#ifndef NDEBUG
  machine["build"] = "assertions on (not a Release build?)";
#endif
  std::printf(
      "multinode_bench: 3 nodes on this machine (head + 2 node daemons; a third for the "
      "broadcast), %d CPUs each\n",
      opt->cpus_per_node);
  std::printf("  CPU: %s, %ld online; load average %s (1, 5, 15 min)%s\n",
              machine["cpu_model"].get<std::string>().c_str(), ::sysconf(_SC_NPROCESSORS_ONLN),
              machine["loadavg_before"].get<std::string>().c_str(), opt->quick ? "; --quick" : "");
  std::fflush(stdout);

  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("raio-multinode-bench-" + std::to_string(::getpid()));
  std::vector<Row> rows;
  std::vector<std::string> notes;
  int rc = 0;
  const Clock::time_point t_start = Clock::now();
  {
    Watchdog wd;
    try {
      wd.Enter("cluster start", std::chrono::seconds(90));
      Cluster cluster(*opt, dir);
      std::printf("  head %s, nodes %s (%s) %s (%s) %s (%s)\n", cluster.daemon(0).address.c_str(),
                  cluster.daemon(0).node_id.c_str(), cluster.daemon(0).node_address.c_str(),
                  cluster.daemon(1).node_id.c_str(), cluster.daemon(1).node_address.c_str(),
                  cluster.daemon(2).node_id.c_str(), cluster.daemon(2).node_address.c_str());
      std::fflush(stdout);
      raio::InitOptions init;
      init.address = cluster.daemon(0).address;
      init.node_id = cluster.daemon(0).node_id;  // all nodes share this host: name the head's
      raio::Init(init, argc, argv);
      try {
        rows = RunAll(*opt, cluster, wd, &notes);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "multinode_bench: %s\n", e.what());
        rc = 1;
      }
      wd.Enter("shutdown", std::chrono::seconds(60));
      raio::Shutdown();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "multinode_bench: %s\n", e.what());
      rc = 1;
    }
  }
  machine["loadavg_after"] = LoadAverages();
  PrintTable(rows);
  for (const auto& note : notes) std::printf("%s\n", note.c_str());
  std::printf("total %.1f s, load average %s before, %s after\n",
              MicrosSince(t_start, Clock::now()) / 1e6,
              machine["loadavg_before"].get<std::string>().c_str(),
              machine["loadavg_after"].get<std::string>().c_str());
  if (opt->write_json && !rows.empty()) WriteJson(*opt, rows, machine);
  return rc;
}
