// Several node daemons on this machine, started with the raio CLI as on several hosts
// (`raio start --head`, then `raio start --address HEAD` twice, each with its own session
// directory and ports): nodes join, work spills between them, scheduling strategies and
// label selectors pick nodes, infeasible work waits for a node that can run it, and a
// driver attaches to the node it names. Drivers are this binary in a scenario mode.
#include <gtest/gtest.h>
#include <raio/raio.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
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

using namespace raio_test;
using namespace std::chrono_literals;
using nlohmann::json;
using raio::testkit::Scaled;
using raio::testkit::ScaledMs;

namespace {

std::string g_self;
std::filesystem::path g_base_tmp;

std::string Cli(const std::string& args) { return std::string(RAIO_CLI_PATH) + " " + args; }

class MultiNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = g_base_tmp / ("raio-multinode-" + std::to_string(getpid()) + "-" +
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    ::setenv("TMPDIR", dir_.c_str(), 1);
    ::unsetenv("RAIO_ADDRESS");
    auto r = RunCommand(Cli("start --head --port 0 --num-cpus 2 --labels '{\"zone\": \"a\"}'"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto pos = r.output.find("started at ");
    ASSERT_NE(pos, std::string::npos) << r.output;
    address_ = r.output.substr(pos + 11, r.output.find('\n', pos) - pos - 11);
    AddNode("--num-cpus 2 --labels '{\"zone\": \"b\"}'");
    AddNode("--num-cpus 2 --resources '{\"special\": 1}' --labels '{\"zone\": \"c\"}'");
    ASSERT_EQ(Nodes().size(), 3u);
  }
  void TearDown() override {
    auto r = RunCommand(Cli("stop"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::filesystem::remove_all(dir_);
  }
  // Starts a node that joins the cluster; returns its id.
  std::string AddNode(const std::string& flags) {
    auto r = RunCommand(Cli("start --address " + address_ + " --node-ip 127.0.0.1 " + flags));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto pos = r.output.find("raio node ");
    if (pos == std::string::npos) return "";
    return r.output.substr(pos + 10, 16);
  }
  // `raio list nodes --json`: zone label -> node id.
  std::map<std::string, std::string> Nodes() {
    auto r = RunCommand(Cli("list nodes --json --address " + address_), false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::map<std::string, std::string> zones;
    json j = json::parse(r.output, nullptr, false);
    for (const auto& n : j.value("nodes", json::array())) {
      if (n.value("state", "") == "dead") continue;
      zones[n["labels"].value("zone", "?")] = n["node_id"].get<std::string>();
    }
    return zones;
  }
  std::string Driver(const std::string& scenario, const std::string& env = "") {
    return env + " RAIO_ADDRESS=" + address_ + " RAIO_TEST_SCENARIO=" + scenario + " " + g_self;
  }
  // The lines "node <id>" a scenario printed, as a multiset of ids.
  static std::multiset<std::string> NodeLines(const std::string& output) {
    std::multiset<std::string> ids;
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("node ", 0) == 0) ids.insert(line.substr(5));
    }
    return ids;
  }
  std::filesystem::path dir_;
  std::string address_;
};

TEST_F(MultiNodeTest, NodesJoinAndShowInListAndStatus) {
  auto zones = Nodes();
  EXPECT_EQ(zones.count("a") + zones.count("b") + zones.count("c"), 3u);
  auto r = RunCommand(Cli("list nodes --address " + address_), false);
  EXPECT_NE(r.output.find("3 nodes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("special 0/1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("zone=b"), std::string::npos) << r.output;
  auto status = RunCommand(Cli("status --address " + address_));
  EXPECT_NE(status.output.find("Nodes: 3"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("CPU: 0 / 6"), std::string::npos) << status.output;
}

TEST_F(MultiNodeTest, ASecondDaemonWithALiveNodesIdIsRefused) {
  std::string id = Nodes()["b"];
  ASSERT_EQ(id.size(), 16u);
  auto r = RunCommand(Cli("start --address " + address_ + " --node-ip 127.0.0.1 --num-cpus 1 " +
                          "--node-id " + id));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("already registered"), std::string::npos) << r.output;
  EXPECT_EQ(Nodes().size(), 3u);
  r = RunCommand(Cli("start --address " + address_ + " --node-id xyz"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("hex digits"), std::string::npos) << r.output;
}

TEST_F(MultiNodeTest, TasksSpillToOtherNodesUnderLoad) {
  // Six one-CPU tasks that each hold their CPU until all six run (a task that does not meet
  // the other five fails the driver), on three nodes of two CPUs: they can only all run at
  // once if the head's node spills four of them, two to each other node. Each reports the
  // node it ran on; no task ends before all six started, so no warm-up or worker start can
  // let one CPU serve two of them.
  std::filesystem::path meet = dir_ / "spill-meet";
  std::filesystem::create_directories(meet);
  auto r = RunCommand(Driver("spill", "MEET_DIR=" + meet.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto ids = NodeLines(r.output);
  EXPECT_EQ(ids.size(), 6u) << r.output;
  auto zones = Nodes();
  for (const auto& [zone, id] : zones) EXPECT_EQ(ids.count(id), 2u) << zone << "\n" << r.output;
}

TEST_F(MultiNodeTest, SpreadAffinityLabelsAndCustomResourcesPickNodes) {
  auto zones = Nodes();
  auto r = RunCommand(Driver("placement", "B_NODE=" + zones["b"] + " C_NODE=" + zones["c"]));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("spread " + std::to_string(3)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("affinity " + zones["c"]), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("label " + zones["b"]), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("special " + zones["c"]), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("soft ok"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hard unknown: UnschedulableError"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bad id: InvalidUsageError"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bad selector: InvalidUsageError"), std::string::npos) << r.output;
}

TEST_F(MultiNodeTest, InfeasibleWorkWaitsVisiblyUntilANodeThatCanRunItJoins) {
  std::string out_file = (dir_ / "late.out").string();
  // The driver submits a task demanding {late: 1}, which no node has; it waits.
  std::string cmd = Driver("late") + " > " + out_file + " 2>&1";
  ASSERT_GT(SpawnCommand(cmd), 0);
  CommandResult status;
  EXPECT_TRUE(WaitFor(
      [&] {
        status = RunCommand(Cli("status --address " + address_));
        return status.output.find("infeasible") != std::string::npos &&
               status.output.find("late: 1") != std::string::npos;
      },
      20s))
      << status.output;
  // The driver's Wait (1 s) saw it pending before any node could run it.
  std::string output;
  EXPECT_TRUE(WaitFor(
      [&] {
        std::ifstream in(out_file);
        output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        return output.find("pending while infeasible") != std::string::npos;
      },
      20s))
      << output;
  std::string late =
      AddNode("--num-cpus 1 --resources '{\"late\": 1}' --labels '{\"zone\": \"d\"}'");
  ASSERT_EQ(late.size(), 16u);
  EXPECT_TRUE(WaitFor(
      [&] {
        std::ifstream in(out_file);
        output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        return output.find("late done") != std::string::npos;
      },
      30s))
      << output;
  EXPECT_NE(output.find("node " + late), std::string::npos) << output;
  EXPECT_NE(output.find("cannot be scheduled"), std::string::npos) << output;  // the warning
}

TEST_F(MultiNodeTest, DriversOnDifferentNodesShareTheCluster) {
  auto zones = Nodes();
  auto b = RunCommand(Driver("where", "RAIO_NODE_ID=" + zones["b"]));
  auto c = RunCommand(Driver("where", "RAIO_NODE_ID=" + zones["c"]));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(b.output.find("driver " + zones["b"]), std::string::npos) << b.output;
  EXPECT_NE(c.output.find("driver " + zones["c"]), std::string::npos) << c.output;
  // Their first task runs on their own node (the hybrid policy packs locally first).
  EXPECT_NE(b.output.find("node " + zones["b"]), std::string::npos) << b.output;
  EXPECT_NE(c.output.find("node " + zones["c"]), std::string::npos) << c.output;
  auto bad = RunCommand(Driver("where", "RAIO_NODE_ID=00000000000000ff"));
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("no node 00000000000000ff"), std::string::npos) << bad.output;
}

TEST_F(MultiNodeTest, ObjectsMoveBetweenNodesAndTheirCopiesGoWithThem) {
  auto zones = Nodes();
  // The driver on node a; tasks on b and c.
  auto r =
      RunCommand(Driver("objects", "RAIO_NODE_ID=" + zones["a"] + " B_NODE=" + zones["b"] +
                                       " C_NODE=" + zones["c"] + " RAIO_CLI=" + RAIO_CLI_PATH));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("driver->b ok"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("b->driver ok"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("borrowed on c ok"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("arg only on b, run on c ok"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("locality " + zones["b"]), std::string::npos) << r.output;
  // Held: the put (primary on a, copy on b), b's result (primary on b, copies on a and
  // c): at least those five copies, on all three nodes.
  EXPECT_NE(r.output.find("nodes holding copies 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("secondary copies yes"), std::string::npos) << r.output;
  // Freed: every copy on every node went.
  EXPECT_NE(r.output.find("after free 0"), std::string::npos) << r.output;
}

TEST_F(MultiNodeTest, AnObjectWhoseOnlyNodeIsGoneAndWhoseTaskIsPinnedThereIsLost) {
  std::string e = AddNode("--num-cpus 1 --labels '{\"zone\": \"e\"}'");
  ASSERT_EQ(e.size(), 16u);
  auto zones = Nodes();
  auto r = RunCommand(Driver("lost", "RAIO_NODE_ID=" + zones["a"] + " E_NODE=" + e));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("made on e"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ObjectLostError"), std::string::npos) << r.output;
  // Its owner (the driver) runs its task again (lineage reconstruction), but the task is
  // pinned to e by a hard node affinity: the object stays lost, saying so.
  EXPECT_NE(r.output.find("could not be made again"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("node " + e + ", where its hard node affinity pins it, died"),
            std::string::npos)
      << r.output;
}

TEST_F(MultiNodeTest, ADriverThatShutsDownHoldingRefsLeavesNoCopyOnAnyNode) {
  auto zones = Nodes();
  auto r =
      RunCommand(Driver("hold_at_shutdown", "RAIO_NODE_ID=" + zones["a"] + " B_NODE=" + zones["b"] +
                                                " RAIO_CLI=" + RAIO_CLI_PATH));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("copies while held 2"), std::string::npos) << r.output;
  // The primary on b (made by a worker there) and the copy on a went with the driver.
  std::size_t left = 1;
  std::string listed;
  WaitFor(
      [&] {
        listed = RunCommand(Cli("list objects --json --address " + address_), false).output;
        left = json::parse(listed, nullptr, false).value("objects", json::array()).size();
        return left == 0;
      },
      10s);
  EXPECT_EQ(left, 0u) << listed;
}

// ---- scenarios (drivers) ----

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

template <typename F>
void Expect(const std::string& what, F f) {
  try {
    f();
    std::cout << what << ": no error\n";
  } catch (const raio::UnschedulableError&) {
    std::cout << what << ": UnschedulableError\n";
  } catch (const raio::InvalidUsageError&) {
    std::cout << what << ": InvalidUsageError\n";
  } catch (const std::exception& e) {
    std::cout << what << ": " << e.what() << "\n";
  }
}

int ScenarioPlacement() {
  raio::Init();
  std::string b = std::getenv("B_NODE"), c = std::getenv("C_NODE");
  // A task on b and c first, so that both have this job's package and a worker before the
  // SPREAD round (a lease serves several tasks: a node still fetching the package when the
  // driver's own lease is free again would leave its task to that lease).
  for (const std::string& node : {b, c}) {
    raio::Task(NodeIdAfterMs)
        .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity(node))
        .Remote(0)
        .Get(Scaled(60s));
  }
  // The three SPREAD tasks meet (each waits until all three run, and throws if they do
  // not), so each holds its own lease: without the meeting a lease freed early could serve
  // a second one. Where the leases went is then the scheduler's decision alone.
  std::string meet = std::filesystem::temp_directory_path() / "spread-meet";
  std::filesystem::create_directories(meet);
  std::vector<raio::ObjectRef<std::string>> spread;
  for (int i = 0; i < 3; ++i) {
    spread.push_back(raio::Task(NodeIdOnceAllMet)
                         .SetSchedulingStrategy(raio::SchedulingStrategy::Spread())
                         .Remote(meet, 3, static_cast<int>(ScaledMs(60s))));
  }
  std::set<std::string> spread_nodes;
  for (auto& r : spread) spread_nodes.insert(r.Get(Scaled(90s)));
  std::cout << "spread " << spread_nodes.size() << "\n";
  std::cout << "affinity "
            << raio::Task(NodeIdAfterMs)
                   .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity(c))
                   .Remote(0)
                   .Get(Scaled(60s))
            << "\n";
  std::cout
      << "label "
      << raio::Task(NodeIdAfterMs).SetLabelSelector({{"zone", "b"}}).Remote(0).Get(Scaled(60s))
      << "\n";
  std::cout << "special "
            << raio::Task(NodeIdAfterMs).SetResource("special", 1).Remote(0).Get(Scaled(60s))
            << "\n";
  raio::Task(NodeIdAfterMs)
      .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity("0000000000000001", true))
      .Remote(0)
      .Get(Scaled(60s));
  std::cout << "soft ok\n";
  Expect("hard unknown", [] {
    raio::Task(NodeIdAfterMs)
        .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity("0000000000000001"))
        .Remote(0)
        .Get(Scaled(60s));
  });
  Expect("bad id", [] {
    raio::Task(NodeIdAfterMs)
        .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity("nope"))
        .Remote(0);
  });
  Expect("bad selector", [] {
    raio::Task(NodeIdAfterMs).SetLabelSelector({{"zone", "in(a"}}).Remote(0);
  });
  raio::Shutdown();
  return 0;
}

int ScenarioLate() {
  raio::Init();
  auto ref = raio::Task(NodeIdAfterMs).SetResource("late", 1).Remote(0);
  auto [ready, pending] = raio::Wait(std::vector<raio::ObjectRef<std::string>>{ref}, 1, Scaled(1s));
  if (ready.empty()) std::cout << "pending while infeasible" << std::endl;
  std::cout << "node " << ref.Get(Scaled(60s)) << std::endl;
  std::cout << "late done" << std::endl;
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

// The node a task with this (large) argument ran on.
std::string NodeOfBytes(std::vector<uint8_t> bytes) {
  return bytes.empty() ? "" : raio::GetNodeId();
}

// `raio list objects --json` of the cluster the driver is attached to.
json ListObjects() {
  std::string cmd = std::string(std::getenv("RAIO_CLI")) + " list objects --json --address " +
                    std::getenv("RAIO_ADDRESS");
  auto r = RunCommand(cmd, false);
  return json::parse(r.output, nullptr, false);
}

int ScenarioObjects() {
  raio::Init();
  std::string b = std::getenv("B_NODE"), c = std::getenv("C_NODE");
  auto on = [](const std::string& node) { return raio::SchedulingStrategy::NodeAffinity(node); };
  const int64_t kSize = 24 << 20;
  {
    // The driver's object, read by a task on node b: b pulls it.
    std::vector<uint8_t> local = MakeBytes(kSize, 3);
    const uint64_t want = ChecksumBytes(local.data(), local.size());
    auto put = raio::Put(local);
    auto got = raio::Task(Checksum).SetSchedulingStrategy(on(b)).Remote(put).Get(Scaled(120s));
    std::cout << "driver->b " << (got == want ? "ok" : "WRONG") << std::endl;
    // A task on b makes one: the driver's Get pulls it from b.
    auto made = raio::Task(MakeBytes).SetSchedulingStrategy(on(b)).Remote(kSize, 5);
    std::vector<uint8_t> bytes = made.Get(Scaled(120s));
    std::vector<uint8_t> expect = MakeBytes(kSize, 5);
    std::cout << "b->driver " << (bytes == expect ? "ok" : "WRONG") << std::endl;
    // Borrowed inside a vector: the task on c reads it with its own Get.
    uint64_t sum = raio::Task(ChecksumAll)
                       .SetSchedulingStrategy(on(c))
                       .Remote(std::vector<BytesRef>{made})
                       .Get(Scaled(120s));
    const uint64_t expect_sum = ChecksumBytes(expect.data(), expect.size());
    std::cout << "borrowed on c " << (sum == expect_sum ? "ok" : "WRONG") << std::endl;
    // An argument that lives only on b (made there, never read elsewhere), run on c.
    auto only_b = raio::Task(MakeBytes).SetSchedulingStrategy(on(b)).Remote(kSize, 9);
    raio::Wait(std::vector<BytesRef>{only_b}, 1, Scaled(120s));
    std::vector<uint8_t> nine = MakeBytes(kSize, 9);
    auto on_c = raio::Task(Checksum).SetSchedulingStrategy(on(c)).Remote(only_b).Get(Scaled(120s));
    std::cout << "arg only on b, run on c "
              << (on_c == ChecksumBytes(nine.data(), nine.size()) ? "ok" : "WRONG") << std::endl;
    // Locality: a DEFAULT task whose large argument is on b runs on b.
    std::cout << "locality " << raio::Task(NodeOfBytes).Remote(only_b).Get(Scaled(120s))
              << std::endl;
    json held = ListObjects();
    std::set<std::string> nodes;
    bool secondary = false;
    for (const auto& o : held.value("objects", json::array())) {
      nodes.insert(o.value("node_id", ""));
      secondary = secondary || o.value("secondary", false);
    }
    std::cout << "nodes holding copies " << nodes.size() << std::endl;
    if (std::getenv("RAIO_TEST_VERBOSE")) std::cout << held.dump() << std::endl;
    std::cout << "secondary copies " << (secondary ? "yes" : "no") << std::endl;
  }
  // Every ref is gone: the owner deletes each copy on every node.
  std::size_t left = 0;
  WaitFor(
      [&] {
        left = ListObjects().value("objects", json::array()).size();
        return left == 0;
      },
      10s);
  std::cout << "after free " << left << std::endl;
  if (left != 0) std::cout << ListObjects().dump() << std::endl;
  raio::Shutdown();
  return 0;
}

// A result made on B_NODE and read here (a copy on this node too), still referenced when
// the driver shuts down.
int ScenarioHoldAtShutdown() {
  raio::Init();
  auto made =
      raio::Task(MakeBytes)
          .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity(std::getenv("B_NODE")))
          .Remote(int64_t{8} << 20, 2);
  if (made.Get(Scaled(120s)).size() != (8u << 20)) return 1;
  std::cout << "copies while held " << ListObjects().value("objects", json::array()).size()
            << std::endl;
  raio::Shutdown();  // `made` is still alive
  return 0;
}

// Makes an object on node E_NODE, SIGKILLs that node's daemon (found by its record in
// $TMPDIR/raio/nodes), then reads the object.
int ScenarioLost() {
  raio::Init();
  std::string e = std::getenv("E_NODE");
  auto made = raio::Task(MakeBytes)
                  .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity(e))
                  .Remote(int64_t{4} << 20, 1);
  raio::Wait(std::vector<BytesRef>{made}, 1, Scaled(120s));
  std::cout << "made on e" << std::endl;
  std::filesystem::path records = std::filesystem::temp_directory_path() / "raio" / "nodes";
  pid_t daemon = 0;
  for (const auto& f : std::filesystem::directory_iterator(records)) {
    std::ifstream in(f.path());
    json j = json::parse(in, nullptr, false);
    if (j.is_object() && j.value("node_id", "") == e) daemon = j.value("pid", 0);
  }
  if (daemon <= 0 || ::kill(daemon, SIGKILL) != 0) {
    std::cout << "no daemon of node e to kill" << std::endl;
    return 1;
  }
  // Read only once it is gone: a pull from a daemon still dying could succeed.
  if (!WaitFor([&] { return ProcessGone(daemon); }, 10s)) {
    std::cout << "the daemon of node e outlived SIGKILL" << std::endl;
    return 1;
  }
  try {
    made.Get(Scaled(60s));
    std::cout << "read it: WRONG" << std::endl;
  } catch (const raio::ObjectLostError& err) {
    std::cout << "ObjectLostError: " << err.what() << std::endl;
  } catch (const std::exception& err) {
    std::cout << "other error: " << err.what() << std::endl;
  }
  raio::Shutdown();
  return 0;
}

}  // namespace

RAIO_REMOTE(NodeOfBytes);

int main(int argc, char** argv) {
  auto setup = [] {
    g_self = std::filesystem::read_symlink("/proc/self/exe").string();
    g_base_tmp = std::filesystem::temp_directory_path();
  };
  return raio_test::ScenarioOrTestsMain(argc, argv, setup,
                                        {
                                            {"spill", ScenarioSpill},
                                            {"placement", ScenarioPlacement},
                                            {"late", ScenarioLate},
                                            {"where", ScenarioWhere},
                                            {"objects", ScenarioObjects},
                                            {"lost", ScenarioLost},
                                            {"hold_at_shutdown", ScenarioHoldAtShutdown},
                                        });
}
