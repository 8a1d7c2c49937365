// Real test hosts on one machine: each host is a Linux network namespace with its own IP
// on a private bridge, its own hostname (a UTS namespace per command) and its own TMPDIR
// (so its own raio session directories and `raio start` records). Hosts share only the
// filesystem, the process table and /dev/shm, which raio reaches only through paths. A
// `HostCluster` runs a raio cluster on them with the CLI: the head on host 0, a node on
// each other host, drivers (the test binary in a scenario mode) on any host.
//
// Layout of one TestHosts (pid = the test process's pid):
//   bridge  rtb<pid>            in the machine's namespace, no IP: nothing leaves it
//   host i  netns raiot-<pid>-<i>, veth rtv<pid>-<i> (bridge port) <-> eth0 (in the ns),
//           eth0 10.213.<k>.<i+1>/24, lo up; hostname host<i>; TMPDIR <tmp>/raiot-<pid>/host<i>
// where k is picked so that no address or route of this machine lies in 10.213.<k>.0/24
// (the hosts cannot reach it anyway: the bridge has no address).
//
// Creating hosts needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's `ip`;
// without them Create says why and tests skip. Teardown (the destructor, also after a
// failed test) kills every process left in the namespaces and removes the namespaces, the
// veths, the bridge and the TMPDIRs. What a crashed run left (its pid no longer runs) is
// removed by the next Create (CleanStale).
//
// Thread-safety: not thread-safe; use from the test's thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harness.h"

namespace raio_test {

// Environment variables added for one command, NAME -> value.
using Env = std::map<std::string, std::string>;

class TestHosts;

// A command running in the background on a test host (its own process group). Its
// stdout and stderr go to two files; Output() is stdout, then "[stderr]" and stderr when
// there was any (so that a log line never splits a line the test parses). The destructor
// kills the group if it still runs.
class HostProcess {
 public:
  HostProcess(pid_t pid, std::filesystem::path output) : pid_(pid), output_(std::move(output)) {}
  ~HostProcess();
  HostProcess(const HostProcess&) = delete;
  HostProcess& operator=(const HostProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::filesystem::path& output_path() const { return output_; }
  // The output so far.
  std::string Output() const;
  // Waits up to `timeout` for the command to exit; past it, kills its process group and
  // says so in the output (exit_code -1). Polls every 20 ms.
  CommandResult Wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_;
  std::filesystem::path output_;
  bool reaped_ = false;
};

class TestHosts {
 public:
  // Creates `n` hosts (1 <= n <= 16) after removing stale ones. Null when this machine
  // cannot (not root, no `ip`, namespaces refused, traffic over the bridge dropped), with
  // the reason in `*why_not`; a half-made set is torn down first.
  static std::unique_ptr<TestHosts> Create(int n, std::string* why_not);
  ~TestHosts();
  TestHosts(const TestHosts&) = delete;
  TestHosts& operator=(const TestHosts&) = delete;

  int size() const { return static_cast<int>(hosts_.size()); }
  const std::string& ip(int i) const { return hosts_.at(i).ip; }
  const std::string& netns(int i) const { return hosts_.at(i).netns; }
  const std::string& hostname(int i) const { return hosts_.at(i).hostname; }
  const std::filesystem::path& tmpdir(int i) const { return hosts_.at(i).tmpdir; }
  // The bridge's end of host i's link: `ip link set <veth> down` cuts the host off (its
  // processes keep running), `up` heals it.
  const std::string& veth(int i) const { return hosts_.at(i).veth; }
  const std::string& bridge() const { return bridge_; }

  // Runs `command` with /bin/sh on host i (its network namespace, hostname and TMPDIR,
  // plus `env`) and waits for it, at most `timeout` (then it is killed). Output as
  // HostProcess::Output.
  CommandResult Run(int i, const std::string& command, const Env& env = {},
                    std::chrono::milliseconds timeout = std::chrono::seconds(120)) const;
  // The same in the background.
  std::unique_ptr<HostProcess> Spawn(int i, const std::string& command, const Env& env = {}) const;

  // SIGKILLs every process in host i's network namespace until none is left (at most a
  // few seconds); returns how many were signalled.
  int KillAll(int i) const;

  // Removes the namespaces, veths, bridges and TMPDIRs that TestHosts of processes that
  // no longer run left (a crashed or killed test), after killing what runs in those
  // namespaces. Returns how many namespaces and links it removed.
  static int CleanStale();

 private:
  struct Host {
    std::string netns;
    std::string veth;  // the bridge's end, in this machine's namespace
    std::string ip;
    std::string hostname;
    std::filesystem::path tmpdir;
  };
  TestHosts() = default;
  void Teardown();

  std::string bridge_;
  std::filesystem::path root_;  // <tmp>/raiot-<pid>
  std::vector<Host> hosts_;
  int created_netns_ = 0;  // how many of hosts_ have a namespace (for a half-made set)
  bool bridge_created_ = false;
};

// A raio cluster on test hosts, started with the CLI: `raio start --head --host ip(0)` on
// host 0, then `raio start --address HEAD --node-ip ip(i)` on each host i > 0 (Options
// change the head's host and leave --node-ip out). Stop (also
// the destructor) runs `raio stop` on every host, nodes first.
class HostCluster {
 public:
  struct Options {
    std::string cli;   // path of the raio CLI
    std::string self;  // this test binary (drivers run it with RAIO_TEST_SCENARIO)
    std::string head_flags = "--num-cpus 2";
    std::string node_flags = "--num-cpus 2";  // for every node; per host below wins
    std::map<int, std::string> node_flags_of_host;
    // The head's --host ("" = ip(0)); with "0.0.0.0" nodes still join at ip(0).
    std::string head_host;
    // Hosts whose node gets no --node-ip (it finds its IP toward the head itself).
    std::set<int> hosts_without_node_ip;
    // Directories that host i's node (and so its workers) cannot see: an empty tmpfs is
    // mounted over each in a mount namespace of the node's own (`unshare -m`), as if the
    // host had never had them, e.g. the build directory of this test binary.
    std::map<int, std::vector<std::string>> hidden_dirs_of_host;
  };
  // Null with `*error` when a daemon did not start; what started is stopped.
  static std::unique_ptr<HostCluster> Create(const TestHosts& hosts, Options options,
                                             std::string* error);
  ~HostCluster() { Stop(); }
  HostCluster(const HostCluster&) = delete;
  HostCluster& operator=(const HostCluster&) = delete;

  const TestHosts& hosts() const { return hosts_; }
  // "ip(0):port", where nodes and drivers reach the head.
  const std::string& head_address() const { return head_address_; }
  // The hex node id of the node on host i (the head's node on host 0).
  const std::string& node_id(int i) const { return node_ids_.at(i); }

  // `raio ARGS` on host i (RAIO_ADDRESS unset: give --address where needed).
  CommandResult Cli(int i, const std::string& args) const;
  // `raio list nodes --json` run on host i: the "nodes" array without the dead ones
  // (empty when the call failed).
  nlohmann::json ListNodes(int i) const;
  // This binary in scenario `scenario` on host i: RAIO_ADDRESS=head_address(),
  // RAIO_TEST_SCENARIO=scenario, plus `env` (e.g. RAIO_NODE_ID). Waits up to `timeout`.
  CommandResult Driver(int i, const std::string& scenario, const Env& env = {},
                       std::chrono::milliseconds timeout = std::chrono::seconds(120)) const;
  std::unique_ptr<HostProcess> SpawnDriver(int i, const std::string& scenario,
                                           const Env& env = {}) const;
  // The last `lines` lines of every daemon log on every host, for a failed test.
  std::string DaemonLogs(int lines = 40) const;
  // `raio stop` on hosts n-1 .. 0; returns their outputs. Idempotent.
  std::string Stop();

 private:
  HostCluster(const TestHosts& hosts, Options options)
      : hosts_(hosts), options_(std::move(options)) {}

  const TestHosts& hosts_;
  Options options_;
  std::string head_address_;
  std::vector<std::string> node_ids_;
  bool stopped_ = false;
};

}  // namespace raio_test
