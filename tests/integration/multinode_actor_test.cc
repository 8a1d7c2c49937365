// Actors across nodes: a head and two nodes started with the raio CLI as on several hosts
// (cli_cluster.h), drivers attached to different nodes (RAIO_NODE_ID). The head
// keeps the actor directory: an actor created from one node is named, found, called and
// killed from another; its node follows its demand, strategy and label selector; names
// are unique cluster-wide; a detached actor outlives its job; the actors of a node that
// leaves die naming it. Drivers are this binary in a scenario mode; a scenario that needs a
// second driver on another node runs it itself (RunCommand), while its own actor lives.
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

#include "cli_cluster.h"
#include "harness.h"
#include "raio/testkit/time_scale.h"
#include "scenario_main.h"
#include "test_functions.h"

using namespace raio_test;
using namespace std::chrono_literals;
using nlohmann::json;
using raio::testkit::Scaled;

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// Node c also offers {"special": 1}.
class MultiNodeActorTest : public CliClusterTest {
 protected:
  std::string NodeFlags(const std::string& zone) const override {
    return zone == "c" ? "--resources '{\"special\": 1}'" : "";
  }
  // `raio list actors --json`: name -> that actor's entry (unnamed ones left out).
  std::map<std::string, json> Actors() {
    auto r = RunCommand(Cli("list actors --json --address " + address_), false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::map<std::string, json> actors;
    json j = json::parse(r.output, nullptr, false);
    for (const auto& a : j.value("actors", json::array())) {
      if (a.contains("name")) actors[a["name"].get<std::string>()] = a;
    }
    return actors;
  }
};

TEST_F(MultiNodeActorTest, ANamedActorCreatedFromOneNodeIsCalledByNameFromAnother) {
  auto r = RunCommand(Driver("create_then_call_from_b", "a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Created by a driver on node a, with no demand: placed on its creator's node.
  EXPECT_TRUE(Has(r.output, "actor on " + zones_["a"])) << r.output;
  // A driver on node b found it by name and called it there.
  EXPECT_TRUE(Has(r.output, "child: driver on " + zones_["b"])) << r.output;
  EXPECT_TRUE(Has(r.output, "child: called 16 on " + zones_["a"])) << r.output;
  EXPECT_TRUE(Has(r.output, "after child 16")) << r.output;
}

TEST_F(MultiNodeActorTest, AnActorWhoseDemandOnlyOneNodeMeetsIsPlacedThere) {
  auto r = RunCommand(Driver("special", "a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, "special on " + zones_["c"])) << r.output;
  // `raio list actors` names its node.
  EXPECT_TRUE(Has(r.output, "listed on " + zones_["c"])) << r.output;
}

TEST_F(MultiNodeActorTest, ANameTakenOnOneNodeIsRefusedOnAnother) {
  auto r = RunCommand(Driver("name_conflict", "a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, "child: refused: InvalidUsageError")) << r.output;
  EXPECT_TRUE(Has(r.output, "an actor named 'dup' already exists in namespace 'shared'"))
      << r.output;
  EXPECT_TRUE(Has(r.output, "child: other namespace ok")) << r.output;
}

TEST_F(MultiNodeActorTest, NodeAffinitySpreadAndLabelSelectorsPlaceActors) {
  auto r = RunCommand(Driver("placement", "a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, "affinity on " + zones_["c"])) << r.output;
  EXPECT_TRUE(Has(r.output, "soft ok")) << r.output;
  EXPECT_TRUE(Has(r.output, "hard unknown: UnschedulableError")) << r.output;
  EXPECT_TRUE(Has(r.output, "spread 3")) << r.output;
  EXPECT_TRUE(Has(r.output, "label on " + zones_["b"])) << r.output;
  EXPECT_TRUE(Has(r.output, "bad selector: InvalidUsageError")) << r.output;
}

TEST_F(MultiNodeActorTest, AnActorKilledByNameFromAnotherNodeIsDeadEverywhere) {
  auto r = RunCommand(Driver("kill_from_b", "a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, "victim on " + zones_["c"])) << r.output;
  EXPECT_TRUE(Has(r.output, "child: killed")) << r.output;
  EXPECT_TRUE(Has(r.output, "parent: ActorDiedError")) << r.output;
  EXPECT_TRUE(Has(r.output, "killed with Kill()")) << r.output;
  EXPECT_TRUE(Has(r.output, "name free")) << r.output;
}

TEST_F(MultiNodeActorTest, ADetachedActorOutlivesItsJobAndALaterDriverFindsIt) {
  auto first = RunCommand(Driver("detached_create", "b"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // The first job is over: its plain actor died with it, the detached one lives on.
  std::map<std::string, json> actors;
  EXPECT_TRUE(WaitFor(
      [&] {
        actors = Actors();
        return actors.count("temp") && actors["temp"].value("state", "") == "ACTOR_DEAD";
      },
      20s));
  EXPECT_EQ(actors["temp"].value("death_cause", ""), "its job ended");
  ASSERT_TRUE(actors.count("keeper"));
  EXPECT_EQ(actors["keeper"].value("state", ""), "ACTOR_ALIVE");
  EXPECT_TRUE(actors["keeper"].value("detached", false));
  // A later driver, on another node, finds it by name with its state.
  auto later = RunCommand(Driver("detached_use", "c"));
  ASSERT_EQ(later.exit_code, 0) << later.output;
  EXPECT_TRUE(Has(later.output, "keeper total 7")) << later.output;
  EXPECT_TRUE(Has(later.output, "temp gone")) << later.output;
  EXPECT_TRUE(WaitFor([&] { return Actors()["keeper"].value("state", "") == "ACTOR_DEAD"; }, 20s));
}

TEST_F(MultiNodeActorTest, TheActorsOfANodeThatLeavesDieNamingIt) {
  std::string out_file = (dir_ / "leaves.out").string();
  std::string cmd = Driver("outlive_node", "a") + " > " + out_file + " 2>&1";
  ASSERT_GT(SpawnCommand(cmd), 0);
  auto read = [&] {
    std::ifstream in(out_file);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  std::string output;
  ASSERT_TRUE(WaitFor(
      [&] {
        output = read();
        return Has(output, "ready");
      },
      30s))
      << output;
  // End node c's daemon (its record names its node id).
  pid_t pid = DaemonPid(zones_["c"]);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_TRUE(WaitFor(
      [&] {
        output = read();
        return Has(output, "done");
      },
      30s))
      << output;
  EXPECT_TRUE(Has(output, "ActorDiedError")) << output;
  EXPECT_TRUE(Has(output, "its node " + zones_["c"] + " left the cluster")) << output;
  auto actors = Actors();
  ASSERT_TRUE(actors.count("on-c"));
  EXPECT_EQ(actors["on-c"].value("state", ""), "ACTOR_DEAD");
  EXPECT_TRUE(Has(actors["on-c"].value("death_cause", ""), zones_["c"]));
}

TEST_F(MultiNodeActorTest, AnActorNoNodeCanHoldWaitsVisiblyUntilANodeThatCanJoins) {
  std::string out_file = (dir_ / "late.out").string();
  std::string cmd = Driver("late_actor", "a") + " > " + out_file + " 2>&1";
  ASSERT_GT(SpawnCommand(cmd), 0);
  auto read = [&] {
    std::ifstream in(out_file);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  // Listed as infeasible, by `raio status` and `raio list actors`, with no node.
  CommandResult status;
  EXPECT_TRUE(WaitFor(
      [&] {
        status = RunCommand(Cli("status --address " + address_));
        return Has(status.output, "infeasible (no node can meet it; waits for one to join)") &&
               Has(status.output, "late: 1");
      },
      20s))
      << status.output;
  auto actors = Actors();
  ASSERT_TRUE(actors.count("late"));
  EXPECT_TRUE(actors["late"].value("infeasible", false));
  EXPECT_EQ(actors["late"].value("node_id", "?"), "");
  // The creator was told once; its first call waits.
  std::string output;
  EXPECT_TRUE(WaitFor(
      [&] {
        output = read();
        return Has(output, "pending while infeasible");
      },
      20s))
      << output;
  EXPECT_TRUE(Has(output, "cannot be scheduled")) << output;
  AddNode("--num-cpus 1 --resources '{\"late\": 1}' --labels '{\"zone\": \"d\"}'");
  std::string late = Nodes()["d"];
  ASSERT_EQ(late.size(), 16u);
  EXPECT_TRUE(WaitFor(
      [&] {
        output = read();
        return Has(output, "late done");
      },
      30s))
      << output;
  EXPECT_TRUE(Has(output, "late on " + late)) << output;
}

// ---- scenarios (drivers) ----

// Runs a driver of `scenario` on the node of B_NODE (or `node`) and prints its output
// lines prefixed with "child: ".
void RunChild(const std::string& scenario, const std::string& node = Env("B_NODE")) {
  auto r = RunCommand("RAIO_NODE_ID=" + node + " RAIO_TEST_SCENARIO=" + scenario + " " +
                      CliClusterTest::Self());
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) std::cout << "child: " << line << "\n";
  std::cout << "child exit " << r.exit_code << std::endl;
}

void InitShared() {
  raio::InitOptions options;
  options.ns = "shared";
  raio::Init(options);
}

int ScenarioCreateThenCallFromB() {
  InitShared();
  auto counter = raio::Actor(Tally::Create).SetName("counter").Remote(10);
  std::cout << "actor on " << counter.Task(&Tally::Node).Remote().Get(Scaled(60s)) << std::endl;
  if (counter.Task(&Tally::Add).Remote(1).Get(Scaled(60s)) != 11) return 1;
  RunChild("call_by_name");
  std::cout << "after child " << counter.Task(&Tally::Add).Remote(0).Get(Scaled(60s)) << std::endl;
  raio::Shutdown();
  return 0;
}

int ScenarioCallByName() {
  InitShared();
  std::cout << "driver on " << raio::GetNodeId() << std::endl;
  auto counter = raio::GetActor<Tally>("counter");
  if (!counter) return 3;
  int total = counter->Task(&Tally::Add).Remote(5).Get(Scaled(60s));
  std::cout << "called " << total << " on " << counter->Task(&Tally::Node).Remote().Get(Scaled(60s))
            << std::endl;
  raio::Shutdown();
  return 0;
}

int ScenarioSpecial() {
  InitShared();
  auto special = raio::Actor(Tally::Create).SetName("special").SetResource("special", 1).Remote(0);
  std::cout << "special on " << special.Task(&Tally::Node).Remote().Get(Scaled(60s)) << std::endl;
  auto list = RunCommand(Cli("list actors --json --address " + Env("RAIO_ADDRESS")), false);
  json j = json::parse(list.output, nullptr, false);
  for (const auto& a : j.value("actors", json::array())) {
    if (a.value("name", "") == "special") {
      std::cout << "listed on " << a.value("node_id", "?") << std::endl;
    }
  }
  raio::Shutdown();
  return 0;
}

int ScenarioNameConflict() {
  InitShared();
  auto dup = raio::Actor(Tally::Create).SetName("dup").Remote(0);
  dup.Task(&Tally::Add).Remote(0).Get(Scaled(60s));
  RunChild("create_dup");
  raio::Shutdown();
  return 0;
}

int ScenarioCreateDup() {
  InitShared();
  try {
    raio::Actor(Tally::Create).SetName("dup").Remote(1);
    std::cout << "not refused" << std::endl;
  } catch (const raio::InvalidUsageError& e) {
    std::cout << "refused: InvalidUsageError: " << e.what() << std::endl;
  }
  auto other = raio::Actor(Tally::Create).SetName("dup").SetNamespace("other").Remote(1);
  if (other.Task(&Tally::Add).Remote(1).Get(Scaled(60s)) == 2) std::cout << "other namespace ok\n";
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
  InitShared();
  auto on_c = raio::Actor(Tally::Create)
                  .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity(Env("C_NODE")))
                  .Remote(0);
  std::cout << "affinity on " << on_c.Task(&Tally::Node).Remote().Get(Scaled(60s)) << "\n";
  auto soft = raio::Actor(Tally::Create)
                  .SetSchedulingStrategy(
                      raio::SchedulingStrategy::NodeAffinity("0000000000000001", /*soft=*/true))
                  .Remote(0);
  soft.Task(&Tally::Node).Remote().Get(Scaled(60s));
  std::cout << "soft ok\n";
  Expect("hard unknown", [] {
    raio::Actor(Tally::Create)
        .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity("0000000000000001"))
        .Remote(0);
  });
  std::vector<raio::ActorHandle<Tally>> spread;
  for (int i = 0; i < 3; ++i) {
    spread.push_back(raio::Actor(Tally::Create)
                         .SetSchedulingStrategy(raio::SchedulingStrategy::Spread())
                         .Remote(0));
  }
  std::set<std::string> spread_nodes;
  for (auto& a : spread) spread_nodes.insert(a.Task(&Tally::Node).Remote().Get(Scaled(60s)));
  std::cout << "spread " << spread_nodes.size() << "\n";
  auto labelled = raio::Actor(Tally::Create).SetLabelSelector({{"zone", "b"}}).Remote(0);
  std::cout << "label on " << labelled.Task(&Tally::Node).Remote().Get(Scaled(60s)) << "\n";
  Expect("bad selector", [] {
    raio::Actor(Tally::Create).SetLabelSelector({{"zone", "in(a"}}).Remote(0);
  });
  raio::Shutdown();
  return 0;
}

int ScenarioKillFromB() {
  InitShared();
  auto victim = raio::Actor(Tally::Create).SetName("victim").SetResource("special", 1).Remote(0);
  std::cout << "victim on " << victim.Task(&Tally::Node).Remote().Get(Scaled(60s)) << std::endl;
  RunChild("kill_by_name");
  try {
    victim.Task(&Tally::Add).Remote(1).Get(Scaled(60s));
    std::cout << "parent: still alive\n";
  } catch (const raio::ActorDiedError& e) {
    std::cout << "parent: ActorDiedError: " << e.what() << "\n";
  }
  if (!raio::GetActor<Tally>("victim")) std::cout << "name free\n";
  raio::Shutdown();
  return 0;
}

int ScenarioKillByName() {
  InitShared();
  auto victim = raio::GetActor<Tally>("victim");
  if (!victim) return 3;
  victim->Kill();
  std::cout << "killed" << std::endl;
  raio::Shutdown();
  return 0;
}

int ScenarioDetachedCreate() {
  InitShared();
  auto keeper = raio::Actor(Tally::Create).SetName("keeper").SetDetached().Remote(5);
  auto temp = raio::Actor(Tally::Create).SetName("temp").Remote(0);
  if (keeper.Task(&Tally::Add).Remote(1).Get(Scaled(60s)) != 6) return 1;
  if (temp.Task(&Tally::Add).Remote(1).Get(Scaled(60s)) != 1) return 2;
  raio::Shutdown();
  return 0;
}

int ScenarioDetachedUse() {
  InitShared();
  auto keeper = raio::GetActor<Tally>("keeper");
  if (!keeper) return 1;
  std::cout << "keeper total " << keeper->Task(&Tally::Add).Remote(1).Get(Scaled(60s)) << std::endl;
  if (!raio::GetActor<Tally>("temp")) std::cout << "temp gone" << std::endl;
  keeper->Kill();
  raio::Shutdown();
  return 0;
}

int ScenarioOutliveNode() {
  InitShared();
  auto on_c = raio::Actor(Tally::Create).SetName("on-c").SetResource("special", 1).Remote(0);
  if (on_c.Task(&Tally::Node).Remote().Get(Scaled(60s)) != Env("C_NODE")) return 1;
  std::cout << "ready" << std::endl;
  // Calls until one fails: node c is ended meanwhile (the test waits for "done").
  const auto give_up = std::chrono::steady_clock::now() + Scaled(60s);
  while (std::chrono::steady_clock::now() < give_up) {
    try {
      on_c.Task(&Tally::Add).Remote(1).Get(Scaled(60s));
    } catch (const raio::ActorDiedError& e) {
      std::cout << "ActorDiedError: " << e.what() << std::endl;
      break;
    }
    std::this_thread::sleep_for(10ms);  // the pace of the calls, not a wait for anything
  }
  // A later call gets the head's answer: dead, naming the node.
  try {
    on_c.Task(&Tally::Add).Remote(1).Get(Scaled(60s));
  } catch (const raio::ActorDiedError& e) {
    std::cout << "ActorDiedError: " << e.what() << std::endl;
  }
  std::cout << "done" << std::endl;
  raio::Shutdown();
  return 0;
}

int ScenarioLateActor() {
  InitShared();
  auto late = raio::Actor(Tally::Create).SetName("late").SetResource("late", 1).Remote(0);
  auto where = late.Task(&Tally::Node).Remote();
  auto [ready, pending] =
      raio::Wait(std::vector<raio::ObjectRef<std::string>>{where}, 1, Scaled(1s));
  if (ready.empty()) std::cout << "pending while infeasible" << std::endl;
  std::cout << "late on " << where.Get(Scaled(60s)) << std::endl;
  std::cout << "late done" << std::endl;
  raio::Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto setup = [] {
    CliClusterTest::Self() = std::filesystem::read_symlink("/proc/self/exe").string();
    CliClusterTest::BaseTmp() = std::filesystem::temp_directory_path();
  };
  return raio_test::ScenarioOrTestsMain(
      argc, argv, setup,
      {
          {"create_then_call_from_b", ScenarioCreateThenCallFromB},
          {"call_by_name", ScenarioCallByName},
          {"special", ScenarioSpecial},
          {"name_conflict", ScenarioNameConflict},
          {"create_dup", ScenarioCreateDup},
          {"placement", ScenarioPlacement},
          {"kill_from_b", ScenarioKillFromB},
          {"kill_by_name", ScenarioKillByName},
          {"detached_create", ScenarioDetachedCreate},
          {"detached_use", ScenarioDetachedUse},
          {"outlive_node", ScenarioOutliveNode},
          {"late_actor", ScenarioLateActor},
      });
}
