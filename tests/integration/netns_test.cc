// A raio cluster on real test hosts: three Linux network namespaces on a private bridge,
// each with its own IP, hostname and TMPDIR (test_hosts.h). The head runs on host 0, a
// node joins from each of hosts 1 and 2 with `--node-ip` its namespace's IP, and drivers
// are this binary in a scenario mode run inside a namespace. Nothing reaches another
// host over loopback here, so an address that says 127.0.0.1 breaks these tests where
// the one-machine multinode test cannot tell.
//
// Adding a test: write a scenario (a function below, registered in kScenarios), then
// `cluster_->Driver(host, "name", {{"VAR", "value"}})` returns its output and exit code;
// `SpawnDriver` runs one in the background.
//
// Needs root (network namespaces); skips with the reason elsewhere.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <raio/raio.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "raio/testkit/time_scale.h"
#include "scenario_main.h"
#include "test_functions.h"
#include "test_hosts.h"

using namespace raio_test;
using namespace std::chrono_literals;
using nlohmann::json;
using raio::testkit::Scaled;
using raio::testkit::ScaledMs;

namespace {

std::string g_self;

// The words after `key ` on each line that starts with it, in order.
std::vector<std::string> Values(const std::string& output, const std::string& key) {
  std::vector<std::string> values;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + " ", 0) == 0) values.push_back(line.substr(key.size() + 1));
  }
  return values;
}

std::string Value(const std::string& output, const std::string& key) {
  auto v = Values(output, key);
  return v.empty() ? "<no line '" + key + " ...'>" : v.front();
}

// The IPv4 "ip:port" endpoints that listen for TCP in host i's namespace (its
// /proc/net/tcp, which shows the sockets of the reader's namespace); IPv6 ones as
// "[v6]:port" (none expected).
std::vector<std::string> TcpListeners(const TestHosts& hosts, int i) {
  auto r = hosts.Run(i, "cat /proc/net/tcp; cat /proc/net/tcp6");
  std::vector<std::string> out;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string slot, local, remote, state;
    if (!(f >> slot >> local >> remote >> state) || state != "0A") continue;  // 0A: LISTEN
    const auto colon = local.find(':');
    const int port = std::stoi(local.substr(colon + 1), nullptr, 16);
    if (colon != 8) {
      out.push_back("[v6]:" + std::to_string(port));
      continue;
    }
    const uint32_t addr = std::stoul(local.substr(0, 8), nullptr, 16);  // little-endian
    out.push_back(std::to_string(addr & 0xff) + "." + std::to_string((addr >> 8) & 0xff) + "." +
                  std::to_string((addr >> 16) & 0xff) + "." + std::to_string(addr >> 24) + ":" +
                  std::to_string(port));
  }
  return out;
}

class NetnsClusterTest : public ::testing::Test {
 protected:
  static constexpr int kHosts = 3;

  void SetUp() override {
    std::string why_not;
    hosts_ = TestHosts::Create(kHosts, &why_not);
    if (!hosts_) GTEST_SKIP() << "no test hosts on this machine: " << why_not;
    std::string error;
    cluster_ = HostCluster::Create(*hosts_, ClusterOptions(), &error);
    ASSERT_TRUE(cluster_) << error;
  }
  // Every node (and the head's) offers 2 CPUs.
  virtual HostCluster::Options ClusterOptions() const {
    HostCluster::Options options;
    options.cli = RAIO_CLI_PATH;
    options.self = g_self;
    options.head_flags = "--num-cpus 2";
    options.node_flags = "--num-cpus 2";
    return options;
  }
  void TearDown() override {
    if (cluster_ && HasFailure()) std::cout << cluster_->DaemonLogs();
    cluster_.reset();  // `raio stop` on every host
    hosts_.reset();    // kills what is left, removes namespaces, veths, the bridge
  }
  // Node ids of the three hosts' nodes.
  std::set<std::string> AllNodes() const {
    return {cluster_->node_id(0), cluster_->node_id(1), cluster_->node_id(2)};
  }

  std::unique_ptr<TestHosts> hosts_;
  std::unique_ptr<HostCluster> cluster_;
};

TEST_F(NetnsClusterTest, NodesListTheirNamespaceIpsAndNoLoopbackAddress) {
  for (int viewer = 0; viewer < kHosts; ++viewer) {  // every host sees the same table
    json nodes = cluster_->ListNodes(viewer);
    ASSERT_EQ(nodes.size(), 3u) << "from host " << viewer << ": " << nodes.dump(2);
    std::map<std::string, json> by_id;
    for (const auto& n : nodes) by_id[n["node_id"].get<std::string>()] = n;
    for (int i = 0; i < kHosts; ++i) {
      ASSERT_EQ(by_id.count(cluster_->node_id(i)), 1u) << nodes.dump(2);
      const json& n = by_id[cluster_->node_id(i)];
      EXPECT_EQ(n["address"].value("ip", ""), hosts_->ip(i)) << n.dump(2);
      EXPECT_GT(n["address"].value("port", 0), 0) << n.dump(2);
      EXPECT_EQ(n.value("hostname", ""), hosts_->hostname(i)) << n.dump(2);
      EXPECT_EQ(n.value("state", ""), "alive") << n.dump(2);
    }
    EXPECT_EQ(nodes.dump().find("127.0.0.1"), std::string::npos) << nodes.dump(2);
  }
  // While a driver on host 1 has workers on every node (a SPREAD round ran), nothing
  // listens on loopback on any host: the daemons, workers and the driver's owner service
  // listen on their host's IP (TCP) and on Unix sockets.
  const std::filesystem::path go = hosts_->tmpdir(1) / "go";
  auto driver = cluster_->SpawnDriver(1, "share", {{"GO_FILE", go.string()}, {"ROUNDS", "2"}});
  ASSERT_TRUE(WaitFor([&] { return driver->Output().find("waiting") != std::string::npos; }, 60s))
      << driver->Output();
  for (int i = 0; i < kHosts; ++i) {
    std::vector<std::string> listening = TcpListeners(*hosts_, i);
    EXPECT_FALSE(listening.empty()) << "host " << i;
    for (const std::string& address : listening) {
      EXPECT_EQ(address.rfind(hosts_->ip(i) + ":", 0), 0u)
          << "host " << i << " listens on " << address;
    }
  }
  auto status = cluster_->Cli(0, "status --json --address " + cluster_->head_address());
  ASSERT_EQ(status.exit_code, 0) << status.output;
  EXPECT_EQ(status.output.find("127.0.0.1"), std::string::npos) << status.output;
  auto text = cluster_->Cli(2, "list nodes --address " + cluster_->head_address());
  EXPECT_NE(text.output.find("3 nodes"), std::string::npos) << text.output;
  for (int i = 0; i < kHosts; ++i) {
    EXPECT_NE(text.output.find(hosts_->ip(i) + ":"), std::string::npos) << text.output;
  }
  std::ofstream(go) << "go\n";
  auto r = driver->Wait(Scaled(60s));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(cluster_->DaemonLogs(100000).find("127.0.0.1"), std::string::npos);
}

TEST_F(NetnsClusterTest, ADriverAttachesToTheNodeOfItsOwnHost) {
  // No RAIO_NODE_ID: the head picks the node at the IP the driver reaches it from.
  for (int i = 0; i < kHosts; ++i) {
    auto r = cluster_->Driver(i, "where");
    ASSERT_EQ(r.exit_code, 0) << "host " << i << ": " << r.output;
    EXPECT_EQ(Value(r.output, "driver"), cluster_->node_id(i)) << r.output;
    EXPECT_EQ(Value(r.output, "node"), cluster_->node_id(i)) << r.output;  // packs locally
  }
  // The CLI on a host that only runs a node finds the cluster through that node's record.
  auto listed = cluster_->Cli(2, "list nodes");
  EXPECT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_NE(listed.output.find("3 nodes"), std::string::npos) << listed.output;
  auto named = cluster_->Driver(2, "where", {{"RAIO_NODE_ID", cluster_->node_id(2)}});
  ASSERT_EQ(named.exit_code, 0) << named.output;
  EXPECT_EQ(Value(named.output, "driver"), cluster_->node_id(2)) << named.output;
}

TEST_F(NetnsClusterTest, TasksSpillToNodesOnOtherHostsUnderLoad) {
  // Six one-CPU tasks that hold their CPU until all six run, from host 1, whose node has
  // 2 CPUs: they only all run at once if its node spills four of them to the other hosts.
  const std::filesystem::path meet = hosts_->tmpdir(1) / "spill-meet";
  std::filesystem::create_directories(meet);
  auto r = cluster_->Driver(1, "spill", {{"MEET_DIR", meet.string()}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> ran = Values(r.output, "node");
  ASSERT_EQ(ran.size(), 6u) << r.output;
  std::multiset<std::string> count(ran.begin(), ran.end());
  for (const std::string& id : ran) EXPECT_EQ(AllNodes().count(id), 1u) << id;
  for (const std::string& id : AllNodes()) EXPECT_EQ(count.count(id), 2u) << id << "\n" << r.output;
}

TEST_F(NetnsClusterTest, SpreadPutsTasksOnAllThreeHosts) {
  auto r = cluster_->Driver(2, "spread",
                            {{"ALL_NODES", cluster_->node_id(0) + "," + cluster_->node_id(1) + "," +
                                               cluster_->node_id(2)}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> ran = Values(r.output, "spread");
  EXPECT_EQ(std::set<std::string>(ran.begin(), ran.end()), AllNodes()) << r.output;
}

TEST_F(NetnsClusterTest, HardAffinityRunsOnTheNamedHostAndSoftAffinityToAnUnknownNodeRunsAnyway) {
  auto r = cluster_->Driver(1, "affinity", {{"TARGET_NODE", cluster_->node_id(2)}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Values(r.output, "affinity"), std::vector<std::string>(3, cluster_->node_id(2)))
      << r.output;
  EXPECT_EQ(AllNodes().count(Value(r.output, "soft-unknown")), 1u) << r.output;
  EXPECT_EQ(Value(r.output, "hard-unknown"), "UnschedulableError") << r.output;
  // And to the head's host from host 2.
  r = cluster_->Driver(2, "affinity", {{"TARGET_NODE", cluster_->node_id(0)}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Values(r.output, "affinity"), std::vector<std::string>(3, cluster_->node_id(0)))
      << r.output;
}

TEST_F(NetnsClusterTest, SmallArgumentsResultsAndErrorsRoundTripBetweenHosts) {
  // The driver on host 1 runs each task on host 2's node (hard affinity); its arguments
  // and results cross the bridge both ways.
  auto r = cluster_->Driver(1, "roundtrip", {{"TARGET_NODE", cluster_->node_id(2)}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Value(r.output, "scale"), "3 -6 p*") << r.output;
  EXPECT_EQ(Value(r.output, "sum"), std::to_string(10000 * 9999 / 2)) << r.output;
  EXPECT_EQ(Value(r.output, "string"), std::to_string(60 * 1024 + 1) + " !") << r.output;
  EXPECT_EQ(Value(r.output, "ref arg"), "25") << r.output;
  EXPECT_EQ(Value(r.output, "error"),
            "TaskError std::runtime_error " + cluster_->node_id(2) + " bad input 7")
      << r.output;
  EXPECT_EQ(Value(r.output, "nested"), std::to_string(1 + 4 + 9 + 16 + 25)) << r.output;
  for (const std::string& where : Values(r.output, "ran on")) {
    EXPECT_EQ(where, cluster_->node_id(2)) << r.output;
  }
  EXPECT_EQ(Values(r.output, "ran on").size(), 3u) << r.output;
}

TEST_F(NetnsClusterTest, DriversOnDifferentHostsShareTheCluster) {
  // A long driver on host 1 runs work on all nodes, waits while a second driver on host
  // 2 runs its own work and exits (its job ends on every node), then runs again.
  const std::filesystem::path go = hosts_->tmpdir(1) / "go";
  const std::string all =
      cluster_->node_id(0) + "," + cluster_->node_id(1) + "," + cluster_->node_id(2);
  auto first = cluster_->SpawnDriver(
      1, "share", {{"GO_FILE", go.string()}, {"ROUNDS", "2"}, {"ALL_NODES", all}});
  ASSERT_TRUE(WaitFor([&] { return first->Output().find("waiting") != std::string::npos; }, 60s))
      << first->Output();
  auto second = cluster_->Driver(2, "share", {{"ROUNDS", "1"}, {"ALL_NODES", all}});
  ASSERT_EQ(second.exit_code, 0) << second.output;
  std::ofstream(go) << "go\n";
  auto r = first->Wait(Scaled(60s));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  EXPECT_EQ(Value(r.output, "driver"), cluster_->node_id(1)) << r.output;
  EXPECT_EQ(Value(second.output, "driver"), cluster_->node_id(2)) << second.output;
  for (const auto* out : {&r.output, &second.output}) {
    for (const std::string& round : Values(*out, "round")) {
      std::istringstream in(round);
      std::string n;
      std::set<std::string> nodes;
      in >> n;
      for (std::string id; in >> id;) nodes.insert(id);
      EXPECT_EQ(nodes, AllNodes()) << *out;
    }
    EXPECT_EQ(Value(*out, "sum"), std::to_string(2 * (0 + 1 + 2 + 3 + 4 + 5))) << *out;
  }
  EXPECT_EQ(Values(r.output, "round").size(), 2u) << r.output;
  // Both hosts' CLIs see all three nodes.
  for (int i : {1, 2}) EXPECT_EQ(cluster_->ListNodes(i).size(), 3u) << "host " << i;
}

// A 1 GiB object made on host 1's node, read by tasks on host 2's and host 0's nodes at
// once: each pulls it across the bridge in chunks, and each checksum matches the one the
// driver computes from the pattern. (256 MiB under a sanitizer, which slows every byte.)
TEST_F(NetnsClusterTest, AGibObjectMadeOnOneHostIsReadOnTwoOthersIntact) {
  auto r = cluster_->Driver(0, "gib",
                            {{"NODE_A", cluster_->node_id(1)},
                             {"NODE_B", cluster_->node_id(2)},
                             {"NODE_C", cluster_->node_id(0)}},
                            Scaled(180s));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string expected = Value(r.output, "expected");
  std::vector<std::string> sums = Values(r.output, "sum");
  ASSERT_EQ(sums.size(), 2u) << r.output;
  EXPECT_EQ(sums[0], expected + " " + cluster_->node_id(2)) << r.output;
  EXPECT_EQ(sums[1], expected + " " + cluster_->node_id(0)) << r.output;
  EXPECT_EQ(Value(r.output, "made on"), cluster_->node_id(1)) << r.output;
}

// A worker on another host that dies is handled as on one node: a task with a retry left
// runs again there, one without fails with WorkerCrashedError naming that host's node.
TEST_F(NetnsClusterTest, AWorkerThatDiesOnAnotherHostIsRetriedThenReportedWithItsNode) {
  auto r = cluster_->Driver(1, "crash",
                            {{"TARGET_NODE", cluster_->node_id(2)},
                             {"MARKER", (hosts_->tmpdir(2) / "crashed-once").string()}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Value(r.output, "retried"), "7") << r.output;
  const std::string crash = Value(r.output, "crash");
  EXPECT_NE(crash.find("WorkerCrashedError"), std::string::npos) << r.output;
  EXPECT_NE(crash.find("on node " + cluster_->node_id(2) + " died"), std::string::npos) << r.output;
  EXPECT_NE(crash.find("1 retries ran out"), std::string::npos) << r.output;
}

// A named actor that a driver on host 1 creates on host 2's node is found by name and
// called from a driver on host 0; the calls go straight to its worker across the bridge.
TEST_F(NetnsClusterTest, AnActorCreatedFromOneHostIsCalledByNameFromAnother) {
  const std::filesystem::path go = hosts_->tmpdir(1) / "go";
  auto owner = cluster_->SpawnDriver(
      1, "actor_owner", {{"TARGET_NODE", cluster_->node_id(2)}, {"GO_FILE", go.string()}});
  ASSERT_TRUE(WaitFor([&] { return owner->Output().find("ready") != std::string::npos; }, 60s))
      << owner->Output();
  // The head's directory (asked from host 0) places it on host 2's node.
  auto listed = cluster_->Cli(0, "list actors --json --address " + cluster_->head_address());
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  std::string node;
  for (const auto& a : json::parse(listed.output, nullptr, false).value("actors", json::array())) {
    if (a.value("name", "") == "acc") node = a.value("node_id", "");
  }
  EXPECT_EQ(node, cluster_->node_id(2)) << listed.output;
  auto caller = cluster_->Driver(0, "actor_caller");
  ASSERT_EQ(caller.exit_code, 0) << caller.output;
  EXPECT_EQ(Value(caller.output, "called"), "16") << caller.output;
  std::ofstream(go) << "go\n";
  auto r = owner->Wait(Scaled(60s));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Value(r.output, "after caller"), "16") << r.output;
}

// Host 2's node is started without --node-ip.
// Health checks every 500 ms, a node dead after 6 missed ones (about 3 s; with 1 s, a node
// busy fetching the test's executable under TSan on a loaded machine was declared dead
// before the cut); nodes retry joining every 200 ms. The period and timeout are scaled (a
// slower build answers slower), the count is not: the death cause names it.
class NetnsPartitionTest : public NetnsClusterTest {
 protected:
  HostCluster::Options ClusterOptions() const override {
    HostCluster::Options options = NetnsClusterTest::ClusterOptions();
    options.head_flags = "--num-cpus 2 --system-config '{\"health_check_period_ms\": " +
                         std::to_string(ScaledMs(500ms)) +
                         ", \"health_check_timeout_ms\": " + std::to_string(ScaledMs(500ms)) +
                         ", \"health_check_failure_threshold\": 6, "
                         "\"node_rejoin_backoff_ms\": 200}'";
    return options;
  }
  // `raio list nodes --json` from host 0, dead nodes included.
  json AllNodeEntries() const {
    CommandResult r = cluster_->Cli(0, "list nodes --json --address " + cluster_->head_address());
    std::string out = r.output.substr(0, r.output.find("[stderr]"));
    json j = json::parse(out, nullptr, false);
    return j.is_object() ? j.value("nodes", json::array()) : json::array();
  }
  void SetLink(int host, bool up) {
    std::string cmd = "ip link set " + hosts_->veth(host) + (up ? " up" : " down");
    auto r = RunCommand(cmd);
    ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  }
};

TEST_F(NetnsPartitionTest, AHostCutOffIsDeclaredDeadItsDriversToldAndItRejoinsWhenHealed) {
  const std::string old_node = cluster_->node_id(1);
  const std::filesystem::path mark0 = hosts_->tmpdir(0) / "started-on-1";
  const std::filesystem::path mark1 = hosts_->tmpdir(1) / "started-here";
  // From host 0, a task on host 1's node; on host 1, a driver whose task runs there.
  auto remote =
      cluster_->SpawnDriver(0, "long_task", {{"TARGET_NODE", old_node}, {"MARK", mark0.string()}});
  auto stranded = cluster_->SpawnDriver(1, "long_task", {{"MARK", mark1.string()}});
  ASSERT_TRUE(WaitFor(
      [&] { return std::filesystem::exists(mark0) && std::filesystem::exists(mark1); }, 90s))
      << remote->Output() << stranded->Output();
  SetLink(1, false);
  // The head declares host 1's node dead; the task's owner on host 0 hears why.
  json dead;
  EXPECT_TRUE(WaitFor(
      [&] {
        for (const auto& n : AllNodeEntries()) {
          if (n.value("node_id", "") == old_node && n.value("state", "") == "dead") dead = n;
        }
        return dead.is_object();
      },
      30s));
  EXPECT_NE(dead.value("death_cause", "").find("missed 6 health checks"), std::string::npos)
      << dead.dump();
  CommandResult r0 = remote->Wait(Scaled(60s));
  EXPECT_NE(r0.output.find("NodeDiedError: node " + old_node + " died while running"),
            std::string::npos)
      << r0.output;
  EXPECT_NE(r0.output.find("missed 6 health checks"), std::string::npos) << r0.output;
  // The driver on the cut-off host is told its cluster is gone, not left hanging.
  CommandResult r1 = stranded->Wait(Scaled(60s));
  EXPECT_NE(r1.output.find("ClusterUnavailableError"), std::string::npos) << r1.output;
  // Healed: host 1's daemon joins again under a new id.
  SetLink(1, true);
  std::string new_node;
  EXPECT_TRUE(WaitFor(
      [&] {
        for (const auto& n : cluster_->ListNodes(0)) {
          if (n.value("hostname", "") == hosts_->hostname(1)) new_node = n.value("node_id", "");
        }
        return !new_node.empty() && new_node != old_node;
      },
      60s))
      << cluster_->DaemonLogs();
  CommandResult on = cluster_->Driver(0, "on_node", {{"TARGET_NODE", new_node}});
  EXPECT_NE(on.output.find("ran on " + new_node), std::string::npos) << on.output;
}

class NetnsDefaultNodeIpTest : public NetnsClusterTest {
 protected:
  HostCluster::Options ClusterOptions() const override {
    HostCluster::Options options = NetnsClusterTest::ClusterOptions();
    options.hosts_without_node_ip = {2};
    return options;
  }
};

TEST_F(NetnsDefaultNodeIpTest, ANodeWithoutNodeIpRegistersTheAddressItReachesTheHeadFrom) {
  bool found = false;
  for (const auto& n : cluster_->ListNodes(1)) {
    if (n["node_id"] != cluster_->node_id(2)) continue;
    found = true;
    EXPECT_EQ(n["address"].value("ip", ""), hosts_->ip(2)) << n.dump(2);
  }
  EXPECT_TRUE(found);
  auto r = cluster_->Driver(1, "affinity", {{"TARGET_NODE", cluster_->node_id(2)}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Values(r.output, "affinity"), std::vector<std::string>(3, cluster_->node_id(2)))
      << r.output;
}

// The head listens on every address (`--host 0.0.0.0`) and gets no --node-ip, as a user
// who wants other hosts to reach it would start it.
class NetnsHeadOnAllAddressesTest : public NetnsClusterTest {
 protected:
  HostCluster::Options ClusterOptions() const override {
    HostCluster::Options options = NetnsClusterTest::ClusterOptions();
    options.head_host = "0.0.0.0";
    return options;
  }
};

// Its node registers the address other hosts reach it at (it once took 127.0.0.1, the
// address it reaches its own head at).
TEST_F(NetnsHeadOnAllAddressesTest, TheHeadsNodeRegistersARoutableAddress) {
  for (const auto& n : cluster_->ListNodes(1)) {
    if (n["node_id"] == cluster_->node_id(0)) {
      EXPECT_EQ(n["address"].value("ip", ""), hosts_->ip(0)) << n.dump(2);
    }
  }
}

// A hard node affinity to the head's node from another host runs there. (While that
// node was unreachable, the owner's node ran it itself once the spillback hops ran out;
// now such a lease is refused as INFEASIBLE, NodeManager::ExcludesThisNode.)
TEST_F(NetnsHeadOnAllAddressesTest, HardAffinityToTheHeadsNodeFromAnotherHostRunsThere) {
  auto r = cluster_->Driver(1, "affinity",
                            {{"TARGET_NODE", cluster_->node_id(0)}, {"GET_TIMEOUT_S", "10"}});
  for (const std::string& ran : Values(r.output, "affinity")) {
    EXPECT_EQ(ran, cluster_->node_id(0)) << r.output;
  }
}

// Hosts 1 and 2 never had this test binary: their nodes cannot see its directory (an
// empty tmpfs over it in a mount namespace of their own). Host 2 cannot see libraio's
// directory either, so the binary cannot even load there.
class NetnsCodeUploadTest : public NetnsClusterTest {
 protected:
  static std::string LibraioDir() {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
      auto at = line.find('/');
      if (at != std::string::npos && line.find("libraio.so") != std::string::npos) {
        return std::filesystem::path(line.substr(at)).parent_path().string();
      }
    }
    return "";
  }
  HostCluster::Options ClusterOptions() const override {
    HostCluster::Options options = NetnsClusterTest::ClusterOptions();
    const std::string self_dir = std::filesystem::path(g_self).parent_path().string();
    options.hidden_dirs_of_host[1] = {self_dir};
    options.hidden_dirs_of_host[2] = {self_dir, LibraioDir()};
    return options;
  }
};

TEST_F(NetnsCodeUploadTest,
       ANodeWithoutTheBinaryFetchesItAndTheDeclaredFilesOnceAndOneThatCannotRunItSaysWhy) {
  ASSERT_FALSE(LibraioDir().empty()) << "this test binary does not load libraio.so";
  const Env env = {{"JOB_DIR", hosts_->tmpdir(0).string()},
                   {"RAIO_JOB_FILES", "conf/greeting.txt"},
                   {"NODE_1", cluster_->node_id(1)},
                   {"NODE_2", cluster_->node_id(2)}};
  auto r = cluster_->Driver(0, "package", env);
  ASSERT_EQ(r.exit_code, 0) << r.output << cluster_->DaemonLogs();
  // On host 1 the task ran the copy fetched from the head, in the job's directory there,
  // where the declared file is at its relative path.
  const std::string ran = Value(r.output, "host1");
  EXPECT_NE(ran.find("/packages/"), std::string::npos) << r.output;
  EXPECT_EQ(ran.find(g_self), std::string::npos) << r.output;
  EXPECT_NE(ran.find("/jobs/"), std::string::npos) << r.output;
  EXPECT_NE(ran.find("hello from host 0"), std::string::npos) << r.output;
  // On host 2 it cannot load libraio: the task fails, naming the node and the cause.
  const std::string failed = Value(r.output, "host2");
  EXPECT_NE(failed.find("WorkerCrashedError"), std::string::npos) << r.output;
  EXPECT_NE(failed.find(cluster_->node_id(2)), std::string::npos) << r.output;
  EXPECT_NE(failed.find("libraio.so"), std::string::npos) << r.output;
  // A second job with the same binary: host 1's node takes it from its cache.
  auto again = cluster_->Driver(0, "package", env);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(Value(again.output, "host1").find("hello from host 0"), std::string::npos)
      << again.output;
  const std::string logs = cluster_->DaemonLogs(100000);
  std::size_t fetches = 0;
  for (std::size_t at = 0; (at = logs.find("fetching package file", at)) != std::string::npos;
       ++at) {
    ++fetches;
  }
  // The executable and the file on hosts 1 and 2, each once: the second job found them
  // in the nodes' caches.
  EXPECT_EQ(fetches, 4u) << logs;
}

// The fixture itself: teardown leaves no namespace, link, process or directory behind,
// and what a killed test process left is removed by the next one.
class TestHostsTest : public ::testing::Test {
 protected:
  static std::set<std::string> Matching(const std::string& listing, const std::string& needle) {
    std::set<std::string> found;
    std::istringstream in(listing);
    for (std::string line; std::getline(in, line);) {
      if (line.find(needle) != std::string::npos) found.insert(line);
    }
    return found;
  }
};

TEST_F(TestHostsTest, TeardownRemovesNamespacesLinksProcessesAndDirectories) {
  std::string why_not;
  auto hosts = TestHosts::Create(2, &why_not);
  if (!hosts) GTEST_SKIP() << "no test hosts on this machine: " << why_not;
  const std::string netns = hosts->netns(0), bridge = hosts->bridge();
  const std::filesystem::path dir = hosts->tmpdir(0).parent_path();
  // A process left running on a host (as a daemon whose `raio stop` failed would be).
  auto sleeper = hosts->Run(1, "sleep 600 >/dev/null 2>&1 & echo $!");
  ASSERT_EQ(sleeper.exit_code, 0) << sleeper.output;
  const pid_t pid = std::stoi(sleeper.output);
  EXPECT_FALSE(ProcessGone(pid));
  EXPECT_EQ(Matching(RunCommand("ip netns list").output, netns).size(), 1u);
  hosts.reset();
  EXPECT_TRUE(WaitFor([&] { return ProcessGone(pid); }, 5s)) << pid;
  EXPECT_TRUE(Matching(RunCommand("ip netns list").output, netns).empty());
  const std::string prefix = bridge.substr(3);  // the pid: in the bridge's and veths' names
  EXPECT_TRUE(Matching(RunCommand("ip -o link show").output, "rtb" + prefix).empty());
  EXPECT_TRUE(Matching(RunCommand("ip -o link show").output, "rtv" + prefix + "-").empty());
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

TEST_F(TestHostsTest, CreateRemovesWhatAKilledTestProcessLeft) {
  std::string why_not;
  if (!TestHosts::Create(1, &why_not)) GTEST_SKIP() << "no test hosts: " << why_not;
  // A child makes hosts, starts a process on one, and ends without tearing down.
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    std::string why;
    TestHosts* leaked = TestHosts::Create(2, &why).release();
    std::string line = "none";
    if (leaked != nullptr) {
      auto r = leaked->Run(1, "sleep 600 >/dev/null 2>&1 & echo $!");
      line = leaked->netns(1) + " " + leaked->bridge() + " " + r.output;
    }
    (void)!::write(fds[1], line.data(), line.size());
    _exit(0);
  }
  ::close(fds[1]);
  std::string line;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) line.append(buf, n);
  ::close(fds[0]);
  ::waitpid(child, nullptr, 0);
  std::istringstream in(line);
  std::string netns, bridge;
  pid_t sleeper = 0;
  ASSERT_TRUE(in >> netns >> bridge >> sleeper) << line;
  EXPECT_FALSE(ProcessGone(sleeper));
  EXPECT_EQ(Matching(RunCommand("ip netns list").output, netns).size(), 1u);
  EXPECT_EQ(Matching(RunCommand("ip -o link show").output, bridge + ":").size(), 1u);

  EXPECT_GE(TestHosts::CleanStale(), 1);
  EXPECT_TRUE(WaitFor([&] { return ProcessGone(sleeper); }, 5s)) << sleeper;
  EXPECT_TRUE(Matching(RunCommand("ip netns list").output, netns).empty());
  EXPECT_TRUE(WaitFor(
      [&] {
        std::string links = RunCommand("ip -o link show").output;
        return Matching(links, bridge + ":").empty() &&
               Matching(links, "rtv" + bridge.substr(3) + "-").empty();
      },
      5s));
}

// ---- scenarios (drivers, run on a host) ----

std::string GetEnv(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

raio::SchedulingStrategy On(const std::string& node) {
  return raio::SchedulingStrategy::NodeAffinity(node);
}

// A task on each of ALL_NODES (comma-separated) first, so that each has this job's package
// and a worker before a SPREAD round: a lease serves several tasks, so a node still
// fetching the package (slow under a sanitizer) when the driver's own lease is free again
// would leave its SPREAD task to that lease (SPREAD spreads leases, not tasks).
void WarmUpAllNodes() {
  std::istringstream all(GetEnv("ALL_NODES"));
  for (std::string node; std::getline(all, node, ',');) {
    if (!node.empty())
      raio::Task(NodeIdAfterMs).SetSchedulingStrategy(On(node)).Remote(0).Get(Scaled(60s));
  }
}

// Creates file `path` (the task has started), then sleeps `ms`; returns its node's id.
std::string MarkThenSleep(std::string path, int ms) {
  std::ofstream(path) << "started\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return raio::GetNodeId();
}
RAIO_REMOTE(MarkThenSleep);

// A long task without retries on TARGET_NODE (it creates MARK when it starts), or on the
// driver's own node when TARGET_NODE is unset; prints the error its Get ends with.
int ScenarioLongTask() {
  raio::Init();
  auto call = raio::Task(MarkThenSleep).SetMaxRetries(0);
  if (!GetEnv("TARGET_NODE").empty()) call.SetSchedulingStrategy(On(GetEnv("TARGET_NODE")));
  // It outlives the cut and the health checks that declare its node dead.
  auto ref = call.Remote(GetEnv("MARK"), static_cast<int>(ScaledMs(120s)));
  try {
    std::cout << "returned from " << ref.Get(Scaled(180s)) << std::endl;
  } catch (const raio::NodeDiedError& e) {
    std::cout << "NodeDiedError: " << e.what() << std::endl;
  } catch (const raio::ClusterUnavailableError& e) {
    std::cout << "ClusterUnavailableError: " << e.what() << std::endl;
  } catch (const std::exception& e) {
    std::cout << "other error: " << e.what() << std::endl;
  }
  try {
    raio::Shutdown();
  } catch (const std::exception& e) {
    std::cout << "Shutdown: " << e.what() << std::endl;
  }
  return 0;
}

// One quick task on TARGET_NODE: prints where it ran.
int ScenarioOnNode() {
  raio::Init();
  std::cout << "ran on "
            << raio::Task(NodeIdAfterMs)
                   .SetSchedulingStrategy(On(GetEnv("TARGET_NODE")))
                   .Remote(0)
                   .Get(Scaled(60s))
            << std::endl;
  raio::Shutdown();
  return 0;
}

int ScenarioWhere() {
  raio::Init();
  std::cout << "driver " << raio::GetNodeId() << "\n";
  std::cout << "node " << raio::Task(NodeIdAfterMs).Remote(0).Get(Scaled(60s)) << "\n";
  raio::Shutdown();
  return 0;
}

int ScenarioSpill() {
  raio::Init();
  std::vector<raio::ObjectRef<std::string>> refs;
  // Each task waits until all six run, so none frees its CPU for another; one that gives up
  // waiting throws, and so does this driver.
  const std::string meet = std::getenv("MEET_DIR");
  const int wait_ms = static_cast<int>(ScaledMs(60s));
  for (int i = 0; i < 6; ++i) refs.push_back(raio::Task(NodeIdOnceAllMet).Remote(meet, 6, wait_ms));
  for (auto& r : refs) std::cout << "node " << r.Get(Scaled(90s)) << "\n";
  raio::Shutdown();
  return 0;
}

// A fresh directory for a meeting, under this host's TMPDIR (which every host sees).
std::filesystem::path MeetingDir(const std::string& tag) {
  const std::filesystem::path meet = std::filesystem::temp_directory_path() /
                                     ("spread-meet-" + std::to_string(getpid()) + "-" + tag);
  std::filesystem::create_directories(meet);
  return meet;
}

// `n` SPREAD tasks that each wait until all `n` run (meeting in directory `meet`), so that
// each holds its own lease: no lease freed early serves a second one, and where they ran is
// the scheduler's choice alone. A task that does not meet the others throws (at its Get).
std::vector<raio::ObjectRef<std::string>> MeetingSpreadTasks(int n,
                                                             const std::filesystem::path& meet) {
  std::vector<raio::ObjectRef<std::string>> refs;
  for (int i = 0; i < n; ++i) {
    refs.push_back(raio::Task(NodeIdOnceAllMet)
                       .SetSchedulingStrategy(raio::SchedulingStrategy::Spread())
                       .Remote(meet.string(), n, static_cast<int>(ScaledMs(60s))));
  }
  return refs;
}

int ScenarioSpread() {
  raio::Init();
  WarmUpAllNodes();
  std::vector<raio::ObjectRef<std::string>> refs = MeetingSpreadTasks(3, MeetingDir("spread"));
  for (auto& r : refs) std::cout << "spread " << r.Get(Scaled(90s)) << "\n";
  raio::Shutdown();
  return 0;
}

template <typename F>
std::string ErrorKind(F f) {
  try {
    f();
    return "no error";
  } catch (const raio::UnschedulableError&) {
    return "UnschedulableError";
  } catch (const raio::TaskError& e) {
    return "TaskError " + e.exception_type() + " " + e.node_id() + " " + e.message();
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Three tasks with hard affinity to TARGET_NODE (each Get waits GET_TIMEOUT_S, default
// 60, scaled), then soft and hard affinity to a node that does not exist.
int ScenarioAffinity() {
  raio::Init();
  const std::string target = GetEnv("TARGET_NODE");
  const std::chrono::seconds timeout = Scaled(std::chrono::seconds(
      GetEnv("GET_TIMEOUT_S").empty() ? 60 : std::stoi(GetEnv("GET_TIMEOUT_S"))));
  std::vector<raio::ObjectRef<std::string>> refs;
  for (int i = 0; i < 3; ++i) {
    refs.push_back(raio::Task(NodeIdAfterMs).SetSchedulingStrategy(On(target)).Remote(100));
  }
  for (auto& r : refs) std::cout << "affinity " << r.Get(timeout) << std::endl;
  std::cout << "soft-unknown "
            << raio::Task(NodeIdAfterMs)
                   .SetSchedulingStrategy(
                       raio::SchedulingStrategy::NodeAffinity("00000000000000ab", true))
                   .Remote(0)
                   .Get(Scaled(60s))
            << "\n";
  std::cout << "hard-unknown " << ErrorKind([] {
    raio::Task(NodeIdAfterMs)
        .SetSchedulingStrategy(On("00000000000000ab"))
        .Remote(0)
        .Get(Scaled(60s));
  }) << "\n";
  raio::Shutdown();
  return 0;
}

int ScenarioRoundTrip() {
  raio::Init();
  const std::string target = GetEnv("TARGET_NODE");
  Point p = raio::Task(Scale)
                .SetSchedulingStrategy(On(target))
                .Remote(Point{1, -2, "p"}, 3.0)
                .Get(Scaled(60s));
  std::cout << "scale " << p.x << " " << p.y << " " << p.label << "\n";
  std::vector<int> values(10000);
  for (int i = 0; i < 10000; ++i) values[i] = i;
  std::cout
      << "sum "
      << raio::Task(SumVector).SetSchedulingStrategy(On(target)).Remote(values).Get(Scaled(60s))
      << "\n";
  std::string big(60 * 1024, 'x');  // under the inline limit, well over one TCP segment
  std::string back = raio::Task(RAIO_FUNC(Overloaded, std::string))
                         .SetSchedulingStrategy(On(target))
                         .Remote(big)
                         .Get(Scaled(60s));
  std::cout << "string " << back.size() << " " << back.substr(back.size() - 1) << "\n";
  // A result made on the other host, owned by this driver, as the argument of a task
  // there again.
  auto five = raio::Task(Add).SetSchedulingStrategy(On(target)).Remote(2, 3);
  std::cout << "ref arg "
            << raio::Task(Square).SetSchedulingStrategy(On(target)).Remote(five).Get(Scaled(60s))
            << "\n";
  std::cout << "error " << ErrorKind([&] {
    raio::Task(ThrowsRuntimeError).SetSchedulingStrategy(On(target)).Remote(7).Get(Scaled(60s));
  }) << "\n";
  // A task there that submits tasks of its own (its worker owns them).
  std::cout << "nested "
            << raio::Task(NestedSum).SetSchedulingStrategy(On(target)).Remote(5).Get(Scaled(60s))
            << "\n";
  for (int i = 0; i < 3; ++i) {
    std::cout
        << "ran on "
        << raio::Task(NodeIdAfterMs).SetSchedulingStrategy(On(target)).Remote(0).Get(Scaled(60s))
        << "\n";
  }
  raio::Shutdown();
  return 0;
}

// Waits until the head sees every node's CPUs all free: no other job's work or lease is
// left, so that a SPREAD round finds room on every node (SPREAD leaves out a node that the
// view says is full).
bool WaitForIdleCluster() {
  return WaitFor(
      [] {
        auto r = RunCommand(
            std::string(RAIO_CLI_PATH) + " status --json --address " + GetEnv("RAIO_ADDRESS"),
            /*merge_stderr=*/false);
        json s = json::parse(r.output, nullptr, false);
        if (!s.is_object() || s.value("nodes", json::array()).size() != 3) return false;
        for (const auto& n : s["nodes"]) {
          if (n["available"]["amounts"].value("CPU", -1.0) !=
              n["total"]["amounts"].value("CPU", -2.0)) {
            return false;
          }
        }
        return true;
      },
      30s);
}

// ROUNDS rounds of: 3 SPREAD tasks that meet (one per node, printed as "round <i> <ids>") and,
// once they all run, 6 Add tasks whose sum is printed; between rounds, waits for GO_FILE to
// exist. Each round starts on a cluster the head sees idle.
int ScenarioShare() {
  raio::Init();
  std::cout << "driver " << raio::GetNodeId() << std::endl;
  WarmUpAllNodes();
  const int rounds = std::stoi(GetEnv("ROUNDS"));
  for (int round = 0; round < rounds; ++round) {
    if (round > 0) {
      std::cout << "waiting" << std::endl;
      const std::string go = GetEnv("GO_FILE");
      if (!WaitFor([&] { return std::filesystem::exists(go); }, 60s)) return 66;
    }
    if (!WaitForIdleCluster()) {
      std::cout << "round " << round << ": the cluster never looked idle" << std::endl;
      return 67;
    }
    const std::filesystem::path meet = MeetingDir("round" + std::to_string(round));
    std::vector<raio::ObjectRef<std::string>> where = MeetingSpreadTasks(3, meet);
    // The Adds come once the SPREAD tasks hold their CPUs, not racing them for a node's.
    auto entries = [&] {
      return std::distance(std::filesystem::directory_iterator(meet),
                           std::filesystem::directory_iterator{});
    };
    if (!WaitFor([&] { return entries() >= 3; }, 60s)) {
      std::cout << "round " << round << ": " << entries() << " of 3 SPREAD tasks started"
                << std::endl;
      return 68;
    }
    std::vector<raio::ObjectRef<int>> sums;
    for (int i = 0; i < 6; ++i) sums.push_back(raio::Task(Add).Remote(i, i));
    std::cout << "round " << round;
    for (auto& r : where) std::cout << " " << r.Get(Scaled(90s));
    std::cout << "\n";
    int sum = 0;
    for (auto& r : sums) sum += r.Get(Scaled(60s));
    std::cout << "sum " << sum << std::endl;
  }
  raio::Shutdown();
  return 0;
}

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int64_t kBigObjectBytes = int64_t{256} << 20;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr int64_t kBigObjectBytes = int64_t{256} << 20;
#else
constexpr int64_t kBigObjectBytes = int64_t{1} << 30;
#endif
#else
constexpr int64_t kBigObjectBytes = int64_t{1} << 30;
#endif

// Byte i of the big object's pattern, and a checksum of 8-byte words (size a multiple
// of 8) that any changed, lost or reordered word changes.
uint64_t PatternWord(uint64_t i) { return (i + 1) * 0x9E3779B97F4A7C15ull; }
uint64_t Checksum(const uint8_t* p, std::size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  return h;
}

raio::Buffer MakeBigObject(int64_t bytes) {
  std::string data(static_cast<std::size_t>(bytes), '\0');
  for (std::size_t i = 0; i * 8 < data.size(); ++i) {
    const uint64_t w = PatternWord(i);
    std::memcpy(data.data() + i * 8, &w, 8);
  }
  return raio::Buffer::FromString(std::move(data));
}
RAIO_REMOTE(MakeBigObject);

// "<checksum> <size>" of `b` and the node that read it.
std::string ChecksumOnNode(raio::Buffer b) {
  return std::to_string(Checksum(b.data(), b.size())) + " " + std::to_string(b.size()) + " " +
         raio::GetNodeId();
}
RAIO_REMOTE(ChecksumOnNode);

// Makes the big object on NODE_A, reads it on NODE_B and NODE_C at once; prints
// "expected <checksum> <size>", "made on <node>", and "sum <checksum> <size> <node>" for B
// then C.
int ScenarioGib() {
  raio::Init();
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i * 8 < kBigObjectBytes; ++i) h = (h ^ PatternWord(i)) * 1099511628211ull;
  std::cout << "expected " << h << " " << kBigObjectBytes << std::endl;
  auto big =
      raio::Task(MakeBigObject).SetSchedulingStrategy(On(GetEnv("NODE_A"))).Remote(kBigObjectBytes);
  raio::Wait(std::vector<raio::ObjectRef<raio::Buffer>>{big}, 1, Scaled(120s));
  std::cout << "made on "
            << raio::Task(NodeIdAfterMs)
                   .SetSchedulingStrategy(On(GetEnv("NODE_A")))
                   .Remote(0)
                   .Get(Scaled(60s))
            << std::endl;
  auto b = raio::Task(ChecksumOnNode).SetSchedulingStrategy(On(GetEnv("NODE_B"))).Remote(big);
  auto c = raio::Task(ChecksumOnNode).SetSchedulingStrategy(On(GetEnv("NODE_C"))).Remote(big);
  std::cout << "sum " << b.Get(Scaled(120s)) << std::endl;
  std::cout << "sum " << c.Get(Scaled(120s)) << std::endl;
  raio::Shutdown();
  return 0;
}

// On TARGET_NODE: CrashOnce(MARKER) with one retry ("retried <value>"), then a task that
// always crashes, with one retry ("crash <error>").
int ScenarioCrash() {
  raio::Init();
  const auto on = On(GetEnv("TARGET_NODE"));
  std::cout << "retried "
            << raio::Task(CrashOnce)
                   .SetSchedulingStrategy(on)
                   .SetMaxRetries(1)
                   .Remote(GetEnv("MARKER"))
                   .Get(Scaled(60s))
            << std::endl;
  try {
    raio::Task(Crash).SetSchedulingStrategy(on).SetMaxRetries(1).Remote(1).Get(Scaled(60s));
    std::cout << "crash none" << std::endl;
  } catch (const raio::WorkerCrashedError& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    std::cout << "crash WorkerCrashedError " << what << std::endl;
  }
  raio::Shutdown();
  return 0;
}

// Creates the actor "acc" (namespace "shared", start 10) on TARGET_NODE, adds 1, prints
// "ready", waits for GO_FILE, then prints "after caller <total>".
int ScenarioActorOwner() {
  raio::InitOptions options;
  options.ns = "shared";
  raio::Init(options);
  auto acc = raio::Actor(raio_test::Accumulator::Create)
                 .SetName("acc")
                 .SetSchedulingStrategy(On(GetEnv("TARGET_NODE")))
                 .Remote(10);
  if (acc.Task(&raio_test::Accumulator::Add).Remote(1).Get(Scaled(60s)) != 11) return 1;
  std::cout << "ready" << std::endl;
  if (!WaitFor([&] { return std::filesystem::exists(GetEnv("GO_FILE")); }, 60s)) return 66;
  std::cout << "after caller " << acc.Task(&raio_test::Accumulator::Add).Remote(0).Get(Scaled(60s))
            << std::endl;
  raio::Shutdown();
  return 0;
}

// Finds "acc" by name and adds 5: "called <total>".
int ScenarioActorCaller() {
  raio::InitOptions options;
  options.ns = "shared";
  raio::Init(options);
  auto acc = raio::GetActor<raio_test::Accumulator>("acc");
  if (!acc) return 3;
  std::cout << "called " << acc->Task(&raio_test::Accumulator::Add).Remote(5).Get(Scaled(60s))
            << std::endl;
  raio::Shutdown();
  return 0;
}

// "<executable> <working directory> <contents of `path`>" of the worker that runs it.
std::string WhereIsJobFile(std::string path) {
  std::ifstream in(path);
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return std::filesystem::read_symlink("/proc/self/exe").string() + " " +
         std::filesystem::current_path().string() + " " + (in ? contents : "<missing>");
}
RAIO_REMOTE(WhereIsJobFile);

// In JOB_DIR, writes conf/greeting.txt (declared in RAIO_JOB_FILES), then asks NODE_1 and
// NODE_2 for it (hard affinity): "host1 ..." and "host2 ..." (the result or the error).
int ScenarioPackage() {
  std::filesystem::current_path(GetEnv("JOB_DIR"));
  std::filesystem::create_directories("conf");
  std::ofstream("conf/greeting.txt") << "hello from host 0";
  raio::Init();
  for (const char* host : {"1", "2"}) {
    std::string out;
    try {
      out = raio::Task(WhereIsJobFile)
                .SetSchedulingStrategy(On(GetEnv(("NODE_" + std::string(host)).c_str())))
                .Remote(std::string("conf/greeting.txt"))
                .Get(Scaled(60s));
    } catch (const raio::WorkerCrashedError& e) {
      out = std::string("WorkerCrashedError ") + e.what();
    } catch (const std::exception& e) {
      out = e.what();
    }
    std::replace(out.begin(), out.end(), '\n', ' ');
    std::cout << "host" << host << " " << out << std::endl;
  }
  raio::Shutdown();
  return 0;
}

const std::map<std::string, std::function<int()>> kScenarios = {
    {"where", ScenarioWhere},
    {"spill", ScenarioSpill},
    {"spread", ScenarioSpread},
    {"affinity", ScenarioAffinity},
    {"roundtrip", ScenarioRoundTrip},
    {"share", ScenarioShare},
    {"package", ScenarioPackage},
    {"gib", ScenarioGib},
    {"crash", ScenarioCrash},
    {"actor_owner", ScenarioActorOwner},
    {"actor_caller", ScenarioActorCaller},
    {"long_task", ScenarioLongTask},
    {"on_node", ScenarioOnNode},
};

}  // namespace

int main(int argc, char** argv) {
  auto setup = [] { g_self = std::filesystem::read_symlink("/proc/self/exe").string(); };
  return raio_test::ScenarioOrTestsMain(argc, argv, setup, kScenarios);
}
