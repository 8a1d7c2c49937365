// Objects lost with a node (cli_cluster.h: head + 2 node daemons, as on several hosts):
// results whose only copies were on a SIGKILLed daemon are made again by re-running the
// tasks that made them, recursively for arguments that were freed or lost too (lineage
// reconstruction); objects that cannot be made again (a task without retries, lineage
// evicted by max_lineage_bytes) fail with ObjectLostError saying why; objects owned by a
// process on the dead node fail their borrowers' Get with OwnerDiedError, on other nodes.
#include <raio/raio.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cli_cluster.h"
#include "raio/testkit/time_scale.h"
#include "scenario_main.h"
#include "test_functions.h"

using namespace raio_test;
using namespace std::chrono_literals;
using raio::testkit::Scaled;

namespace {

constexpr int64_t kBlobBytes = 1 << 20;  // in the store (above 100 KiB)

// Appends `what` and this process's node to file `runs` (every run of a stage is counted).
void Record(const std::string& runs, const std::string& what) {
  std::ofstream(runs, std::ios::app) << what << " " << NodeIdAfterMs(0) << "\n";
}

std::vector<uint8_t> Source(int seed, std::string runs) {
  Record(runs, "source");
  return MakeBytes(kBlobBytes, seed);
}
RAIO_REMOTE(Source);

// Each byte plus `add`.
std::vector<uint8_t> Stage(std::vector<uint8_t> in, int add, std::string runs) {
  Record(runs, "stage" + std::to_string(add));
  for (auto& b : in) b = static_cast<uint8_t>(b + add);
  return in;
}
RAIO_REMOTE(Stage);

pid_t EnvPid(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? 0 : static_cast<pid_t>(std::atoi(v));
}

// SIGKILLs node b's daemon (B_PID) and waits until it and its workers are gone: a read
// before that could still reach a copy there, or its owner. False when one outlives it.
bool KillNodeB() {
  const pid_t b = EnvPid("B_PID");
  if (b <= 0) return false;
  std::vector<pid_t> processes = ChildPids(b);
  processes.push_back(b);
  if (::kill(b, SIGKILL) != 0) return false;
  for (pid_t p : processes) {
    if (!WaitFor([&] { return !ProcessRuns(p); }, 30s)) return false;
  }
  return true;
}

raio::SchedulingStrategy OnB() {
  return raio::SchedulingStrategy::NodeAffinity(std::getenv("B_NODE"), /*soft=*/true);
}

uint64_t Expected(int seed, int add) {
  std::vector<uint8_t> v = MakeBytes(kBlobBytes, seed);
  for (auto& b : v) b = static_cast<uint8_t>(b + add);
  return Checksum(v);
}

// source -> stage1 -> stage2, all on node b (soft affinity: a re-run may go elsewhere).
// The driver keeps only the last ref (the others are freed once their consumers ran), waits
// without pulling a copy, SIGKILLs b, then reads the result: every stage runs again.
int ScenarioChain() {
  raio::Init();
  const std::string runs = std::getenv("RUNS");
  auto last = [&] {
    auto src = raio::Task(Source).SetSchedulingStrategy(OnB()).Remote(7, runs);
    auto one = raio::Task(Stage).SetSchedulingStrategy(OnB()).Remote(src, 1, runs);
    return raio::Task(Stage).SetSchedulingStrategy(OnB()).Remote(one, 2, runs);
  }();
  std::vector<raio::ObjectRef<std::vector<uint8_t>>> wait{last};
  raio::Wait(wait, 1, Scaled(60s));
  if (!KillNodeB()) return 1;
  std::cout << "killed b" << std::endl;
  try {
    uint64_t sum = Checksum(last.Get(Scaled(120s)));
    std::cout << (sum == Expected(7, 3) ? "checksum right" : "checksum WRONG") << std::endl;
  } catch (const raio::ObjectLostError& e) {
    std::cout << "ObjectLostError: " << e.what() << std::endl;
  }
  raio::Shutdown();
  return 0;
}

// A result on node b whose task has no retries: it is not made again.
int ScenarioNoRetries() {
  raio::Init();
  auto ref = raio::Task(Source).SetSchedulingStrategy(OnB()).SetMaxRetries(0).Remote(
      3, std::string(std::getenv("RUNS")));
  std::vector<raio::ObjectRef<std::vector<uint8_t>>> wait{ref};
  raio::Wait(wait, 1, Scaled(60s));
  if (!KillNodeB()) return 1;
  try {
    ref.Get(Scaled(120s));
    std::cout << "returned: WRONG" << std::endl;
  } catch (const raio::OwnerDiedError& e) {
    std::cout << "OwnerDiedError: WRONG " << e.what() << std::endl;
  } catch (const raio::ObjectLostError& e) {
    std::cout << "ObjectLostError: " << e.what() << std::endl;
  }
  raio::Shutdown();
  return 0;
}

// Objects put by a worker on node b (which owns them), borrowed by this driver on node a
// and by a task on node c: once b is killed, both Gets fail with OwnerDiedError.
int ScenarioOwnerDied() {
  raio::Init();
  auto refs = raio::Task(MakeRefs)
                  .SetSchedulingStrategy(
                      raio::SchedulingStrategy::NodeAffinity(std::getenv("B_NODE"), false))
                  .Remote(2, kBlobBytes)
                  .Get(Scaled(60s));
  if (!KillNodeB()) return 1;
  try {
    refs[0].Get(Scaled(120s));
    std::cout << "driver read it: WRONG" << std::endl;
  } catch (const raio::OwnerDiedError& e) {
    std::cout << "driver OwnerDiedError: " << e.what() << std::endl;
  }
  try {
    raio::Task(ChecksumAll)
        .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity(std::getenv("C_NODE")))
        .Remote(refs)
        .Get(Scaled(120s));
    std::cout << "task read it: WRONG" << std::endl;
  } catch (const std::exception& e) {
    std::cout << "task on c: " << e.what() << std::endl;
  }
  raio::Shutdown();
  return 0;
}

class LineageTest : public CliClusterTest {
 protected:
  std::string Runs() const { return "RUNS=" + (dir_ / "runs").string(); }
  // How often `what` ran, and on which nodes.
  std::vector<std::string> RunsOf(const std::string& what) {
    std::vector<std::string> nodes;
    std::istringstream in(ReadWholeFile(dir_ / "runs"));
    for (std::string stage, node; in >> stage >> node;) {
      if (stage == what) nodes.push_back(node);
    }
    return nodes;
  }
};

TEST_F(LineageTest, AChainWhoseCopiesWereOnAKilledNodeIsMadeAgainRecursively) {
  auto r = RunCommand(Driver("chain", "a", Runs()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, "killed b")) << r.output;
  EXPECT_TRUE(Has(r.output, "checksum right")) << r.output;
  // Each stage ran twice: first on b, then again elsewhere (b is dead).
  for (const std::string stage : {"source", "stage1", "stage2"}) {
    auto nodes = RunsOf(stage);
    ASSERT_EQ(nodes.size(), 2u) << stage << "\n" << ReadWholeFile(dir_ / "runs") << r.output;
    EXPECT_EQ(nodes[0], zones_["b"]) << stage;
    EXPECT_NE(nodes[1], zones_["b"]) << stage;
  }
}

TEST_F(LineageTest, AResultWithoutRetriesIsLostSayingWhy) {
  auto r = RunCommand(Driver("no_retries", "a", Runs()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, "ObjectLostError: ")) << r.output;
  EXPECT_TRUE(Has(r.output, "only copies were on node " + zones_["b"])) << r.output;
  EXPECT_TRUE(Has(r.output, "max_retries")) << r.output;
  EXPECT_EQ(RunsOf("source").size(), 1u);
}

// A cluster whose owners keep no lineage at all.
class NoLineageTest : public LineageTest {
 protected:
  std::string HeadFlags() const override { return "--system-config '{\"max_lineage_bytes\": 0}'"; }
};

TEST_F(NoLineageTest, EvictedLineageIsLostSayingWhy) {
  auto r = RunCommand(Driver("chain", "a", Runs()));
  EXPECT_TRUE(Has(r.output, "ObjectLostError")) << r.output;
  EXPECT_TRUE(Has(r.output, "lineage was evicted")) << r.output;
  EXPECT_TRUE(Has(r.output, "max_lineage_bytes = 0")) << r.output;
  EXPECT_EQ(RunsOf("stage2").size(), 1u);
}

TEST_F(LineageTest, BorrowersOnOtherNodesGetOwnerDiedErrorWhenTheOwnersNodeDies) {
  auto r = RunCommand(Driver("owner_died", "a", Runs()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, "driver OwnerDiedError: ")) << r.output;
  auto task = r.output.find("task on c: ");
  ASSERT_NE(task, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("OwnerDied", task), std::string::npos) << r.output;
  EXPECT_FALSE(Has(r.output, "WRONG")) << r.output;
}

}  // namespace

int main(int argc, char** argv) {
  auto setup = [] {
    CliClusterTest::Self() = std::filesystem::read_symlink("/proc/self/exe").string();
    CliClusterTest::BaseTmp() = std::filesystem::temp_directory_path();
  };
  return raio_test::ScenarioOrTestsMain(argc, argv, setup,
                                        {
                                            {"chain", ScenarioChain},
                                            {"no_retries", ScenarioNoRetries},
                                            {"owner_died", ScenarioOwnerDied},
                                        });
}
