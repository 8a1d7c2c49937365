// Placement groups, end to end: on the embedded cluster (reservation, tasks and actors in
// bundles, GPUs, pending and infeasible groups, removal, bad input, captured children) and
// on three node daemons started with the CLI (cli_cluster.h: where each strategy puts its
// bundles, a node's death with its bundles rescheduled and the actor restarted into them,
// many groups created at once from several drivers, `raio list placement-groups`).
#include <gtest/gtest.h>
#include <raio/raio.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <iostream>
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
using raio::testkit::Scaled;
using raio::testkit::ScaledMs;

namespace raio_test {
// An actor that says where it runs.
class Where {
 public:
  static Where* Create() { return new Where(); }
  std::string Node() { return raio::GetNodeId(); }
  std::string Gpus() {
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    return v == nullptr ? "<unset>" : v;
  }
};

// Submits a child demanding {CPU: 1, special: 1} and returns the node it ran on (`wait_ms`
// at most).
std::string ChildOnSpecial(int wait_ms) {
  return raio::Task(NodeIdAfterMs)
      .SetResources({{"CPU", 1}, {"special", 1}})
      .Remote(0)
      .Get(std::chrono::milliseconds(wait_ms));
}
}  // namespace raio_test

RAIO_REMOTE(Where::Create, &Where::Node, &Where::Gpus, ChildOnSpecial);

namespace {

// PlacementGroup::Wait's bound (whole seconds), scaled.
int ScaledSeconds(int seconds) {
  return static_cast<int>(
      std::chrono::ceil<std::chrono::seconds>(Scaled(std::chrono::seconds(seconds))).count());
}

// The entries in directory `dir` (0 when it is not there).
int Entries(const std::filesystem::path& dir) {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

raio::PlacementGroup Create(std::vector<std::map<std::string, double>> bundles,
                            raio::PlacementStrategy strategy, std::string name = "") {
  return raio::CreatePlacementGroup({std::move(name), std::move(bundles), strategy});
}

double AvailableCpus() {
  auto stats = raio::internal::GetNodeResourceStats();
  return stats.available.count("CPU") ? stats.available.at("CPU") : 0;
}

class EmbeddedPlacementGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    raio::InitOptions options;
    options.num_cpus = 4;
    options.num_gpus = 2;
    options.resources = {{"special", 1}};
    raio::Init(options);
  }
  void TearDown() override { raio::Shutdown(); }
};

TEST_F(EmbeddedPlacementGroupTest, ABundleHoldsItsResourcesAndItsTasksUseThem) {
  auto pg = Create({{{"CPU", 2}}}, raio::PlacementStrategy::STRICT_PACK);
  ASSERT_EQ(pg.GetID().size(), 16u);
  ASSERT_TRUE(pg.Wait(ScaledSeconds(30)));
  EXPECT_EQ(pg.GetState(), raio::PlacementGroupState::CREATED);
  EXPECT_EQ(pg.GetBundleNodes(), std::vector<std::string>{raio::GetNodeId()});
  EXPECT_TRUE(pg.Ready().Get(Scaled(30s)));
  // The node's own CPUs: 2 of 4 are the bundle's now.
  EXPECT_TRUE(WaitFor([] { return AvailableCpus() == 2; }, 10s)) << AvailableCpus();
  // Two one-CPU tasks in the bundle run together, out of its two CPUs: while both wait at
  // the meeting (this test is its third party), the node's own CPUs are still free.
  std::string meet =
      std::filesystem::temp_directory_path() / ("raio-pg-meet-" + std::to_string(getpid()));
  std::filesystem::create_directories(meet);
  std::vector<raio::ObjectRef<int>> refs;
  for (int i = 0; i < 2; ++i) {
    refs.push_back(raio::Task(MeetIn).SetPlacementGroup(pg, 0).Remote(
        meet, 3, static_cast<int>(ScaledMs(60s))));
  }
  EXPECT_TRUE(WaitFor([&] { return Entries(meet) == 2; }, 30s)) << Entries(meet);
  EXPECT_EQ(AvailableCpus(), 2);  // both run, on the bundle's CPUs
  std::ofstream(std::filesystem::path(meet) / "test").put('x');
  for (int seen : raio::Get(refs)) EXPECT_EQ(seen, 3);
  std::filesystem::remove_all(meet);
  EXPECT_EQ(AvailableCpus(), 2);  // the tasks took the bundle's CPUs, not the node's
  raio::RemovePlacementGroup(pg.GetID());
  EXPECT_EQ(pg.GetState(), raio::PlacementGroupState::REMOVED);
  EXPECT_TRUE(WaitFor([] { return AvailableCpus() == 4; }, 10s)) << AvailableCpus();
  raio::RemovePlacementGroup(pg.GetID());  // again: nothing to do
}

TEST_F(EmbeddedPlacementGroupTest, AGpuBundlesTasksAndActorsSeeItsDevice) {
  auto a = Create({{{"GPU", 1}}}, raio::PlacementStrategy::PACK);
  auto b = Create({{{"GPU", 1}}}, raio::PlacementStrategy::PACK);
  ASSERT_TRUE(a.Wait(ScaledSeconds(30)));
  ASSERT_TRUE(b.Wait(ScaledSeconds(30)));
  auto in = [](const raio::PlacementGroup& pg) {
    return raio::Task(VisibleDevices)
        .SetResources({{"CPU", 0}, {"GPU", 1}})
        .SetPlacementGroup(pg, 0)
        .Remote()
        .Get(Scaled(30s));
  };
  std::string da = in(a), db = in(b);
  EXPECT_TRUE(da == "0" || da == "1") << da;
  EXPECT_TRUE(db == "0" || db == "1") << db;
  EXPECT_NE(da, db);
  EXPECT_EQ(in(a), da);  // the same device each time
  auto actor = raio::Actor(Where::Create).SetResource("GPU", 1).SetPlacementGroup(b, 0).Remote();
  EXPECT_EQ(actor.Task(&Where::Gpus).Remote().Get(Scaled(30s)), db);
  // No GPU is left outside the bundles: the node has none available, and a task demanding
  // one outside them does not run.
  const std::map<std::string, double> available = raio::internal::GetNodeResourceStats().available;
  EXPECT_EQ(available.count("GPU") ? available.at("GPU") : 0.0, 0.0);
  EXPECT_THROW(
      raio::Task(VisibleDevices).SetResources({{"CPU", 0}, {"GPU", 1}}).Remote().Get(Scaled(2s)),
      raio::GetTimeoutError);
}

TEST_F(EmbeddedPlacementGroupTest, AGroupThatCannotFitNowWaitsAndIsCreatedWhenResourcesFree) {
  auto big = Create({{{"CPU", 4}}}, raio::PlacementStrategy::PACK);
  ASSERT_TRUE(big.Wait(ScaledSeconds(30)));
  auto next = Create({{{"CPU", 1}}}, raio::PlacementStrategy::PACK);
  EXPECT_FALSE(next.Wait(ScaledSeconds(1)));
  EXPECT_EQ(next.GetState(), raio::PlacementGroupState::PENDING);
  auto ready = next.Ready();
  // A task of the pending group waits too (it is not refused as infeasible).
  auto task = raio::Task(Add).SetPlacementGroup(next, 0).Remote(2, 3);
  raio::RemovePlacementGroup(big.GetID());
  EXPECT_TRUE(ready.Get(Scaled(30s)));
  EXPECT_EQ(next.GetState(), raio::PlacementGroupState::CREATED);
  EXPECT_EQ(task.Get(Scaled(30s)), 5);
}

TEST_F(EmbeddedPlacementGroupTest, AGroupNoNodeCanHoldFailsWaitNamingBundlesAndCluster) {
  auto pg = Create({{{"CPU", 100}}}, raio::PlacementStrategy::PACK);
  try {
    pg.Wait(ScaledSeconds(10));
    FAIL() << "expected UnschedulableError";
  } catch (const raio::UnschedulableError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("#0 {CPU: 100}"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cluster resources"), std::string::npos) << msg;
  }
  // Two bundles on different nodes, with one node.
  auto spread = Create({{{"CPU", 1}}, {{"CPU", 1}}}, raio::PlacementStrategy::STRICT_SPREAD);
  EXPECT_THROW(spread.Wait(ScaledSeconds(10)), raio::UnschedulableError);
  // They do not hold back a group that fits.
  auto fits = Create({{{"CPU", 1}}}, raio::PlacementStrategy::PACK);
  EXPECT_TRUE(fits.Wait(ScaledSeconds(30)));
}

TEST_F(EmbeddedPlacementGroupTest, RemovingAGroupEndsItsTasksAndActorsAndFreesItsResources) {
  auto pg = Create({{{"CPU", 1}}, {{"CPU", 1}}}, raio::PlacementStrategy::PACK);
  ASSERT_TRUE(pg.Wait(ScaledSeconds(30)));
  // A task that has started (its entry in `gate`) and waits for a `go` that never comes:
  // only the removal can end it before its Get's deadline (its own wait is 20 times that).
  const std::filesystem::path gate =
      std::filesystem::temp_directory_path() / ("raio-pg-gate-" + std::to_string(getpid()));
  std::filesystem::create_directories(gate);
  auto sleeper = raio::Task(NodeIdOnceGo)
                     .SetPlacementGroup(pg, 0)
                     .Remote(gate.string(), static_cast<int>(ScaledMs(600s)));
  auto actor =
      raio::Actor(Accumulator::Create).SetResource("CPU", 1).SetPlacementGroup(pg, 1).Remote(5);
  EXPECT_EQ(actor.Task(&Accumulator::Add).Remote(1).Get(Scaled(30s)), 6);
  ASSERT_TRUE(WaitFor([&] { return Entries(gate) == 1; }, 30s)) << "the task never started";
  EXPECT_EQ(
      raio::Wait(std::vector<raio::ObjectRef<std::string>>{sleeper}, 1, Scaled(500ms)).ready.size(),
      0u);
  raio::RemovePlacementGroup(pg.GetID());
  try {
    sleeper.Get(Scaled(30s));
    ADD_FAILURE() << "the task in the removed group returned";
  } catch (const raio::GetTimeoutError& e) {
    ADD_FAILURE() << "the task in the removed group kept running: " << e.what();
  } catch (const raio::RaioException&) {
    // Ended by the removal.
  }
  try {
    actor.Task(&Accumulator::Add).Remote(1).Get(Scaled(30s));
    FAIL() << "expected ActorDiedError";
  } catch (const raio::ActorDiedError& e) {
    EXPECT_NE(std::string(e.what()).find("placement group"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(gate);
  EXPECT_TRUE(WaitFor([] { return AvailableCpus() == 4; }, 10s)) << AvailableCpus();
}

TEST_F(EmbeddedPlacementGroupTest, BadInputGetsClearErrors) {
  auto expect_usage = [](const std::function<void()>& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "expected InvalidUsageError with " << what;
    } catch (const raio::InvalidUsageError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_usage([] { Create({}, raio::PlacementStrategy::PACK); }, "at least one bundle");
  expect_usage([] { Create({{}}, raio::PlacementStrategy::PACK); }, "bundle 0 has no resources");
  expect_usage([] { Create({{{"CPU", 0}}}, raio::PlacementStrategy::PACK); }, "above 0");
  expect_usage([] { Create({{{"CPU", -1}}}, raio::PlacementStrategy::PACK); }, "above 0");
  expect_usage([] { Create({{{"CPU", std::nan("")}}}, raio::PlacementStrategy::PACK); }, "finite");
  auto pg = Create({{{"CPU", 1}}}, raio::PlacementStrategy::PACK, "named");
  expect_usage(
      [] {
        Create({{{"CPU", 1}}}, raio::PlacementStrategy::PACK, "named");
      },
      "a placement group named 'named' exists");
  EXPECT_EQ(raio::GetPlacementGroup("named").GetID(), pg.GetID());
  EXPECT_EQ(raio::GetPlacementGroupById(pg.GetID()).GetName(), "named");
  expect_usage([] { raio::GetPlacementGroup("nope"); }, "no placement group named 'nope'");
  expect_usage([&] { raio::Task(Add).SetPlacementGroup(pg, 1); }, "bundle index 1");
  expect_usage([&] { raio::Task(Add).SetPlacementGroup(pg, -2); }, "bundle index -2");
  expect_usage([] { raio::Task(Add).SetPlacementGroup(raio::PlacementGroup(), 0); }, "empty");
  expect_usage([] { raio::RemovePlacementGroup("xyz"); }, "not a placement group id");
  expect_usage([] { raio::RemovePlacementGroup("00000000000000aa"); }, "no placement group");
  bool listed = false;
  for (const auto& g : raio::GetAllPlacementGroups()) listed |= g.GetID() == pg.GetID();
  EXPECT_TRUE(listed);
  // A demand no bundle of the group can meet is refused at submission.
  expect_usage([&] { raio::Task(Add).SetResource("CPU", 2).SetPlacementGroup(pg, 0).Remote(1, 2); },
               "demands {CPU: 2}, which its bundle #0 {");
  expect_usage([&] { raio::Task(Add).SetResource("CPU", 2).SetPlacementGroup(pg, 0).Remote(1, 2); },
               " of placement group " + pg.GetID() + " cannot hold; work in a group");
  expect_usage(
      [&] {
        raio::Actor(Accumulator::Create).SetResource("GPU", 1).SetPlacementGroup(pg).Remote(0);
      },
      "work in a group takes its resources from its bundle only");
  expect_usage([] { Create({{{"GPU", 1.5}}}, raio::PlacementStrategy::PACK); }, "whole number");
  // A group and another placement at once (they waited forever: the bundle decides the node).
  expect_usage(
      [&] {
        raio::Task(Add)
            .SetPlacementGroup(pg, 0)
            .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity(raio::GetNodeId()))
            .Remote(1, 2);
      },
      "SetPlacementGroup cannot be combined with SetSchedulingStrategy");
  expect_usage(
      [&] {
        raio::Task(Add)
            .SetSchedulingStrategy(raio::SchedulingStrategy::Spread())
            .SetPlacementGroup(pg, 0)
            .Remote(1, 2);
      },
      "the bundle decides the node");
  expect_usage(
      [&] {
        raio::Actor(Accumulator::Create)
            .SetPlacementGroup(pg, 0)
            .SetLabelSelector({{"zone", "nope"}})
            .Remote(0);
      },
      "or SetLabelSelector");
  std::string upper = pg.GetID();
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(raio::GetPlacementGroupById(upper).GetID(), pg.GetID());
  // A removed group: Wait says so, and work placed in it fails at Get.
  raio::RemovePlacementGroup(pg.GetID());
  expect_usage([&] { pg.Wait(ScaledSeconds(5)); }, "was removed");
  try {
    raio::Task(Add).SetPlacementGroup(pg, 0).Remote(1, 2).Get(Scaled(30s));
    FAIL() << "expected UnschedulableError";
  } catch (const raio::UnschedulableError& e) {
    EXPECT_NE(std::string(e.what()).find("was removed"), std::string::npos) << e.what();
  }
  // An actor placed in it is refused at creation (it would wait for the bundle forever).
  try {
    raio::Actor(Accumulator::Create).SetPlacementGroup(pg, 0).Remote(0);
    FAIL() << "expected UnschedulableError";
  } catch (const raio::UnschedulableError& e) {  // was ClusterUnavailableError
    EXPECT_NE(std::string(e.what()).find("was removed"), std::string::npos) << e.what();
  }
  // Its name is free again.
  EXPECT_TRUE(
      Create({{{"CPU", 1}}}, raio::PlacementStrategy::PACK, "named").Wait(ScaledSeconds(30)));
}

TEST_F(EmbeddedPlacementGroupTest, ATaskThatCapturesItsChildrenRunsThemInItsGroup) {
  // The bundle takes the node's only `special`: a child demanding it can only run there.
  auto pg = Create({{{"CPU", 1}, {"special", 1}}}, raio::PlacementStrategy::PACK);
  ASSERT_TRUE(pg.Wait(ScaledSeconds(30)));
  std::string node = raio::Task(ChildOnSpecial)
                         .SetResource("CPU", 0)
                         .SetPlacementGroup(pg, 0, /*capture_child_tasks=*/true)
                         .Remote(static_cast<int>(ScaledMs(30s)))
                         .Get(Scaled(60s));
  EXPECT_EQ(node, raio::GetNodeId());
  // Without capture the child waits for a `special` outside the group, which there is not.
  EXPECT_THROW(raio::Task(ChildOnSpecial)
                   .SetResource("CPU", 0)
                   .SetPlacementGroup(pg, 0)
                   .SetMaxRetries(0)
                   .Remote(static_cast<int>(ScaledMs(1s)))
                   .Get(Scaled(60s)),
               raio::TaskError);
}

// Three node daemons (cli_cluster.h); node c has {special: 1}.
class ClusterPlacementGroupTest : public CliClusterTest {
 protected:
  std::string NodeFlags(const std::string& zone) const override {
    return zone == "c" ? "--resources '{\"special\": 1}'" : "";
  }
  // The "<label> <node> <node> ..." line of a scenario's output, as node ids.
  static std::vector<std::string> Line(const std::string& output, const std::string& label) {
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(label + " ", 0) != 0) continue;
      std::istringstream words(line.substr(label.size() + 1));
      std::vector<std::string> out;
      for (std::string w; words >> w;) out.push_back(w);
      return out;
    }
    return {};
  }
};

TEST_F(ClusterPlacementGroupTest, EachStrategyPlacesBundlesAsItSaysAndTasksRunThere) {
  auto r = RunCommand(Driver("strategies", "a"), /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string s : {"STRICT_PACK", "PACK", "SPREAD", "STRICT_SPREAD", "SPECIAL"}) {
    auto bundles = Line(r.output, s + " bundles");
    auto tasks = Line(r.output, s + " tasks");
    ASSERT_FALSE(bundles.empty()) << s << "\n" << r.output;
    EXPECT_EQ(bundles, tasks) << s << ": each bundle's task runs on its node\n" << r.output;
    std::set<std::string> distinct(bundles.begin(), bundles.end());
    if (s == "STRICT_PACK" || s == "PACK") {
      EXPECT_EQ(distinct.size(), 1u) << s << r.output;
    }
    if (s == "SPREAD" || s == "STRICT_SPREAD") {
      EXPECT_EQ(distinct.size(), 3u) << s << r.output;
    }
    if (s == "SPECIAL") {
      EXPECT_EQ(bundles[0], zones_["c"]) << r.output;
    }
  }
  EXPECT_TRUE(Has(r.output, "4 bundles STRICT_SPREAD: UnschedulableError")) << r.output;
}

TEST_F(ClusterPlacementGroupTest, ANodesBundlesAreRescheduledAndItsActorRestartsInThem) {
  std::filesystem::path out = dir_ / "death.out";
  SpawnDriver("death", "a", "", out);
  std::string output;
  ASSERT_TRUE(WaitForOutput(out, {"ready", "failed"}, 60s, &output)) << output;
  ASSERT_TRUE(Has(output, "actor on " + zones_["c"])) << output;
  // The group is listed with a bundle on each node.
  auto list = RunCommand(Cli("list placement-groups --address " + address_), false);
  EXPECT_TRUE(Has(list.output, "STRICT_SPREAD")) << list.output;
  EXPECT_TRUE(Has(list.output, "CREATED")) << list.output;
  EXPECT_TRUE(Has(list.output, "@ " + zones_["c"])) << list.output;
  pid_t c = DaemonPid(zones_["c"]);
  ASSERT_GT(c, 0);
  ASSERT_EQ(::kill(c, SIGKILL), 0);
  ASSERT_TRUE(WaitForOutput(out, {"rescheduling", "failed"}, 60s, &output)) << output;
  ASSERT_TRUE(Has(output, "rescheduling")) << output;
  // Strict spread: the bundle waits for a third node.
  list = RunCommand(Cli("list placement-groups --address " + address_), false);
  EXPECT_TRUE(Has(list.output, "RESCHEDULING")) << list.output;
  AddNode("--num-cpus 2 --resources '{\"special\": 1}' --labels '{\"zone\": \"d\"}'");
  std::string d = Nodes()["d"];
  ASSERT_EQ(d.size(), 16u);
  ASSERT_TRUE(WaitForOutput(out, {"restarted on", "failed"}, 90s, &output)) << output;
  EXPECT_TRUE(Has(output, "created again")) << output;
  EXPECT_TRUE(Has(output, "restarted on " + d)) << output;
  ASSERT_TRUE(WaitForOutput(out, {"death done", "failed"}, 30s, &output)) << output;
  EXPECT_TRUE(Has(output, "total 7")) << output;  // a new incarnation: its state started again
}

TEST_F(ClusterPlacementGroupTest, ManyGroupsCreatedAtOnceFromSeveralDriversAllGetCreated) {
  // 4 drivers x 5 groups of 2 one-CPU bundles on 6 CPUs: at most 3 groups fit at once;
  // each driver creates its groups together, then uses and removes each once created.
  std::vector<std::filesystem::path> outs;
  for (int i = 0; i < 4; ++i) {
    outs.push_back(dir_ / ("many" + std::to_string(i) + ".out"));
    SpawnDriver("many", i % 2 == 0 ? "a" : "b", "", outs.back());
  }
  for (const auto& out : outs) {
    std::string output;
    EXPECT_TRUE(WaitForOutput(out, {"many done", "failed"}, 180s, &output)) << output;
    EXPECT_TRUE(Has(output, "created 5 of 5")) << output;
  }
  auto list = RunCommand(Cli("list placement-groups --address " + address_), false);
  EXPECT_TRUE(Has(list.output, "0 pending or rescheduling")) << list.output;
}

TEST_F(ClusterPlacementGroupTest, ADetachedGroupOutlivesItsJobAndTheOthersEndWithIt) {
  auto made = RunCommand(Driver("detached_make", "b"));
  ASSERT_EQ(made.exit_code, 0) << made.output;
  auto check = RunCommand(Driver("detached_check", "c"));
  ASSERT_EQ(check.exit_code, 0) << check.output;
  EXPECT_TRUE(Has(check.output, "kept CREATED")) << check.output;
  EXPECT_TRUE(Has(check.output, "ended REMOVED")) << check.output;
  auto list = RunCommand(Cli("list placement-groups --address " + address_), false);
  EXPECT_TRUE(Has(list.output, "kept")) << list.output;
  EXPECT_TRUE(Has(list.output, "removed: its job")) << list.output;
}

int ScenarioDetachedMake() {
  raio::Init();
  raio::CreatePlacementGroup({"kept", {{{"CPU", 1}}}, raio::PlacementStrategy::PACK, true})
      .Wait(ScaledSeconds(60));
  raio::CreatePlacementGroup({"ended", {{{"CPU", 1}}}, raio::PlacementStrategy::PACK})
      .Wait(ScaledSeconds(60));
  // Names are per namespace: the other driver looks them up by id.
  for (const auto& g : raio::GetAllPlacementGroups()) {
    std::cout << "id " << g.GetName() << " " << g.GetID() << "\n";
  }
  raio::Shutdown();
  return 0;
}

int ScenarioDetachedCheck() {
  raio::Init();
  // The first driver's job ends when its connection closes: wait for the head to see it.
  WaitFor(
      [] {
        bool ended = false;
        for (const auto& g : raio::GetAllPlacementGroups()) {
          ended |= g.GetName() == "ended" && g.GetState() == raio::PlacementGroupState::REMOVED;
        }
        return ended;
      },
      10s);
  for (const auto& g : raio::GetAllPlacementGroups()) {
    if (g.GetName() != "kept" && g.GetName() != "ended") continue;
    auto state = g.GetState();
    std::cout << g.GetName() << " "
              << (state == raio::PlacementGroupState::CREATED   ? "CREATED"
                  : state == raio::PlacementGroupState::REMOVED ? "REMOVED"
                                                                : "other")
              << "\n";
  }
  raio::Shutdown();
  return 0;
}

int ScenarioStrategies() {
  raio::Init();
  auto run = [](const std::string& label, std::vector<std::map<std::string, double>> bundles,
                raio::PlacementStrategy strategy) {
    auto pg = Create(bundles, strategy);
    if (!pg.Wait(ScaledSeconds(60))) throw std::runtime_error(label + " not created");
    std::cout << label << " bundles";
    for (const auto& n : pg.GetBundleNodes()) std::cout << " " << n;
    std::cout << "\n" << label << " tasks";
    std::vector<raio::ObjectRef<std::string>> refs;
    for (int i = 0; i < static_cast<int>(bundles.size()); ++i) {
      refs.push_back(
          raio::Task(NodeIdAfterMs).SetResource("CPU", 0.5).SetPlacementGroup(pg, i).Remote(0));
    }
    for (auto& ref : refs) std::cout << " " << ref.Get(Scaled(60s));
    std::cout << std::endl;
    raio::RemovePlacementGroup(pg.GetID());
  };
  run("STRICT_PACK", {{{"CPU", 1}}, {{"CPU", 1}}}, raio::PlacementStrategy::STRICT_PACK);
  run("PACK", {{{"CPU", 0.5}}, {{"CPU", 0.5}}}, raio::PlacementStrategy::PACK);
  run("SPREAD", {{{"CPU", 0.5}}, {{"CPU", 0.5}}, {{"CPU", 0.5}}}, raio::PlacementStrategy::SPREAD);
  run("STRICT_SPREAD", {{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}},
      raio::PlacementStrategy::STRICT_SPREAD);
  run("SPECIAL", {{{"CPU", 1}, {"special", 1}}}, raio::PlacementStrategy::PACK);
  try {
    Create({{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}},
           raio::PlacementStrategy::STRICT_SPREAD)
        .Wait(ScaledSeconds(30));
    std::cout << "4 bundles STRICT_SPREAD: created?!\n";
  } catch (const raio::UnschedulableError& e) {
    std::cout << "4 bundles STRICT_SPREAD: UnschedulableError " << e.what() << "\n";
  }
  raio::Shutdown();
  return 0;
}

int ScenarioDeath() {
  raio::Init();
  const std::string c = std::getenv("C_NODE");
  auto pg =
      Create({{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}}, raio::PlacementStrategy::STRICT_SPREAD);
  if (!pg.Wait(ScaledSeconds(60))) throw std::runtime_error("not created");
  auto nodes = pg.GetBundleNodes();
  int on_c = static_cast<int>(std::find(nodes.begin(), nodes.end(), c) - nodes.begin());
  auto actor = raio::Actor(Accumulator::Create)
                   .SetResource("CPU", 1)
                   .SetMaxRestarts(1)
                   .SetPlacementGroup(pg, on_c)
                   .Remote(5);
  auto where = raio::Actor(Where::Create).SetPlacementGroup(pg, on_c).SetMaxRestarts(1).Remote();
  std::cout << "total " << actor.Task(&Accumulator::Add).Remote(1).Get(Scaled(60s)) << "\n";
  std::cout << "actor on " << where.Task(&Where::Node).Remote().Get(Scaled(60s)) << "\n";
  std::cout << "ready" << std::endl;
  if (!WaitFor([&] { return pg.GetState() == raio::PlacementGroupState::RESCHEDULING; }, 60s)) {
    std::cout << "failed: the group never went RESCHEDULING" << std::endl;
    return 1;
  }
  std::cout << "rescheduling" << std::endl;
  if (!WaitFor([&] { return pg.GetState() == raio::PlacementGroupState::CREATED; }, 90s)) {
    std::cout << "failed: the group was never CREATED again" << std::endl;
    return 1;
  }
  std::cout << "created again " << pg.GetBundleNodes()[on_c] << std::endl;
  std::cout << "restarted on " << where.Task(&Where::Node).Remote().Get(Scaled(60s)) << std::endl;
  std::cout << "total " << actor.Task(&Accumulator::Add).Remote(2).Get(Scaled(60s)) << std::endl;
  std::cout << "death done" << std::endl;
  raio::Shutdown();
  return 0;
}

int ScenarioMany() {
  raio::Init();
  std::vector<raio::PlacementGroup> groups;
  for (int i = 0; i < 5; ++i) {
    groups.push_back(Create({{{"CPU", 1}}, {{"CPU", 1}}}, raio::PlacementStrategy::SPREAD));
  }
  int created = 0;
  for (auto& pg : groups) {
    if (!pg.Wait(ScaledSeconds(150))) break;
    raio::Task(Add).SetPlacementGroup(pg, 1).Remote(1, 1).Get(Scaled(60s));
    raio::RemovePlacementGroup(pg.GetID());
    ++created;
  }
  std::cout << "created " << created << " of 5" << std::endl;
  std::cout << "many done" << std::endl;
  raio::Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto setup = [] {
    CliClusterTest::Self() = std::filesystem::read_symlink("/proc/self/exe").string();
    CliClusterTest::BaseTmp() = std::filesystem::temp_directory_path();
  };
  return raio_test::ScenarioOrTestsMain(argc, argv, setup,
                                        {
                                            {"strategies", ScenarioStrategies},
                                            {"death", ScenarioDeath},
                                            {"many", ScenarioMany},
                                            {"detached_make", ScenarioDetachedMake},
                                            {"detached_check", ScenarioDetachedCheck},
                                        });
}
