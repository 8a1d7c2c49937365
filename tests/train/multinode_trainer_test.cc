// The Trainer on node daemons started with the raio CLI (tests/integration/cli_cluster.h:
// a head and two nodes on this machine, each node with one "slot"), elastic from 1 to 2
// workers of {CPU: 1, slot: 1}: a node lost mid-run (its daemon and its worker SIGKILLed)
// shrinks the run to the one worker the cluster can still hold, resumed from the latest
// checkpoint; a node that joins later with a slot grows it back to 2 at the next
// checkpoint. Every epoch runs once, in order, and the result is what one process with the
// global batch computes. And a driver whose own node dies ends Fit with that cause rather
// than restarting the group forever. The driver is this binary in a scenario mode, attached to the
// head's node; the workers are this binary too, started by the node daemons.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "cli_cluster.h"
#include "mlp_training.h"
#include "raio/raio.h"
#include "raio/train/train.h"
#include "scenario_main.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using raio_test::CliClusterTest;
using raio_test::ReadWholeFile;

// A driver's run named `name` under STORAGE, restarted up to `max_failures` times.
raio::train::RunConfig StoredRun(const std::string& name, int max_failures) {
  raio::train::RunConfig run;
  run.name = name;
  run.storage_path = std::getenv("STORAGE");
  run.failure_config.max_failures = max_failures;
  return run;
}

// The elastic run (driver side). MARKERS: the training function's marker directory;
// STORAGE: the run's storage path. Prints the run's world sizes, epochs, failures and whether
// its final weights match one process's, then "elastic done".
int ScenarioElastic() {
  raio::Init();
  at::set_num_threads(1);
  const std::string markers = std::getenv("MARKERS");
  nlohmann::json config = raio_train_test::Config(4);
  config["kill_epoch"] = 2;  // rank 1 waits there to be killed with its node
  config["kill_rank"] = 1;
  config["marker_dir"] = markers;
  config["world_marker_dir"] = markers;
  config["until_world_size"] = 2;  // with 1 worker, go on until the group is back to 2
  const raio::train::RunConfig run = StoredRun("multinode", 1);
  raio::train::ScalingConfig scaling{
      .num_workers = 2, .min_workers = 1, .resources_per_worker = {{"CPU", 1}, {"slot", 1}}};
  raio::train::Result result =
      raio::train::Trainer(raio_train_test::TrainMlp, scaling, run, config).Fit();
  std::cout << "error: " << result.error << "\n";
  std::cout << "failures: " << result.num_failures << "\n";
  std::cout << "world sizes:";
  for (int n : result.world_sizes) std::cout << " " << n;
  std::cout << "\nepochs:";
  int epochs = 0;
  bool in_order = true;
  for (const raio::train::Metrics& m : result.metrics_history) {
    in_order = in_order && static_cast<int>(m.at("epoch")) == epochs++;
    std::cout << " " << m.at("epoch") << "@" << m.at("world_size");
  }
  std::cout << "\nepochs once and in order: " << (in_order ? "yes" : "no") << "\n";
  if (result.error.ok() && result.checkpoint.has_value()) {
    double loss = 0;
    std::vector<torch::Tensor> expected =
        raio_train_test::TrainInOneProcess(epochs, 32, 0.1, 5, &loss);
    std::vector<torch::Tensor> got = raio_train_test::LoadWeights(result.checkpoint->path);
    bool same = got.size() == expected.size();
    for (size_t i = 0; same && i < got.size(); ++i) {
      same = torch::allclose(got[i], expected[i], /*rtol=*/1e-3, /*atol=*/1e-4);
    }
    std::cout << "weights as one process: " << (same ? "yes" : "no") << "\n";
    std::cout << "loss " << result.metrics.at("loss") << " one process " << loss << "\n";
  }
  std::cout << "elastic done" << std::endl;
  raio::Shutdown();
  return 0;
}

// A run whose driver loses its own node (LOST_MARKERS: the marker directory): prints Fit's
// error, then "lost done". Restarts are unlimited, so only the trainer's telling the
// driver's loss of the cluster apart from a worker's death ends it.
int ScenarioLost() {
  raio::Init();
  at::set_num_threads(1);
  nlohmann::json config = raio_train_test::Config(2);
  config["world_marker_dir"] = std::getenv("MARKERS");
  config["until_world_size"] = 99;  // goes on, one epoch per 250 ms, until the node is lost
  const raio::train::RunConfig run = StoredRun("lost", -1);
  // On node b, the driver's: the worker dies with it, and the restart finds no cluster.
  raio::train::ScalingConfig scaling{.num_workers = 1,
                                     .resources_per_worker = {{"CPU", 1}, {"b_only", 1}}};
  raio::train::Result result =
      raio::train::Trainer(raio_train_test::TrainMlp, scaling, run, config).Fit();
  std::cout << "error: " << result.error << "\nfailures: " << result.num_failures << "\n";
  std::cout << "lost done" << std::endl;
  std::_Exit(0);  // its node is gone: nothing to shut down
}

class MultiNodeTrainerTest : public CliClusterTest {
 protected:
  // Starts `scenario` as a driver on the node of `zone` with MARKERS (markers_) and STORAGE
  // under the test's directory; returns the file that collects its output.
  fs::path SpawnTraining(const std::string& scenario, const std::string& zone) {
    markers_ = dir_ / "markers";
    fs::create_directories(markers_);
    const fs::path out = dir_ / (scenario + ".out");
    SpawnDriver(scenario, zone,
                "MARKERS=" + markers_.string() + " STORAGE=" + (dir_ / "storage").string(), out);
    return out;
  }
  fs::path markers_;
  // One slot per node; node b also has "b_only", for a worker that must run there.
  std::string NodeFlags(const std::string& zone) const override {
    return zone == "b" ? "--resources '{\"slot\": 1, \"b_only\": 1}'"
                       : "--resources '{\"slot\": 1}'";
  }
};

TEST_F(MultiNodeTrainerTest, ALostNodeShrinksTheRunAndANewNodeGrowsItBack) {
  const fs::path out = SpawnTraining("elastic", "a");
  const fs::path& markers = markers_;
  // Epochs 0 and 1 ran on 2 workers, one per node; rank 1 waits at epoch 2.
  ASSERT_TRUE(raio_test::WaitFor([&] { return fs::exists(markers / "pid"); }, 120s))
      << ReadWholeFile(out);
  EXPECT_TRUE(fs::exists(markers / "world_2"));
  pid_t worker = 0;
  std::ifstream(markers / "pid") >> worker;
  ASSERT_GT(worker, 0);
  std::string lost;
  for (const std::string zone : {"b", "c"}) {
    for (pid_t child : raio_test::ChildPids(DaemonPid(zones_[zone]))) {
      if (child == worker) lost = zone;
    }
  }
  ASSERT_FALSE(lost.empty()) << "worker " << worker << " is not a child of node b's or c's daemon";
  // The node is lost: its daemon and its worker.
  ASSERT_EQ(::kill(DaemonPid(zones_[lost]), SIGKILL), 0);
  ::kill(worker, SIGKILL);
  // The one slot left holds one worker: the run goes on with it.
  ASSERT_TRUE(raio_test::WaitFor([&] { return fs::exists(markers / "world_1"); }, 120s))
      << ReadWholeFile(out);
  EXPECT_TRUE(Nodes().count(lost) == 0) << "node " << lost << " still listed alive";
  // A new node with a slot: the run grows back at its next checkpoint.
  AddNode("--num-cpus 2 --resources '{\"slot\": 1}' --labels '{\"zone\": \"d\"}'");
  std::string output;
  ASSERT_TRUE(WaitForOutput(out, {"elastic done", "scenario failed"}, 240s, &output)) << output;
  EXPECT_TRUE(Has(output, "error: OK")) << output;
  EXPECT_TRUE(Has(output, "failures: 1\n")) << output;  // the lost node; growing is not one
  EXPECT_TRUE(Has(output, "world sizes: 2 1 2\n")) << output;
  EXPECT_TRUE(Has(output, "epochs: 0@2 1@2 2@1 ")) << output;  // resumed after epoch 1
  EXPECT_TRUE(Has(output, "epochs once and in order: yes")) << output;
  EXPECT_TRUE(Has(output, "weights as one process: yes")) << output;
}

TEST_F(MultiNodeTrainerTest, ADriverThatLosesItsNodeEndsFitInsteadOfRestartingForever) {
  const fs::path out = SpawnTraining("lost", "b");
  const fs::path& markers = markers_;
  ASSERT_TRUE(raio_test::WaitFor([&] { return fs::exists(markers / "world_1"); }, 120s))
      << ReadWholeFile(out);
  ASSERT_EQ(::kill(DaemonPid(zones_["b"]), SIGKILL), 0);  // the driver's node
  std::string output;
  ASSERT_TRUE(WaitForOutput(out, {"lost done", "scenario failed"}, 120s, &output)) << output;
  EXPECT_TRUE(Has(output, "error: UNAVAILABLE: the driver lost the cluster")) << output;
  // The worker's death was one failure; the driver's own loss ended the run.
  EXPECT_TRUE(Has(output, "failures: 1\n")) << output;
}

}  // namespace

int main(int argc, char** argv) {
  auto setup = [] {
    CliClusterTest::Self() = fs::read_symlink("/proc/self/exe").string();
    CliClusterTest::BaseTmp() = fs::temp_directory_path();
  };
  return raio_test::ScenarioOrTestsMain(argc, argv, setup,
                                        {{"elastic", ScenarioElastic}, {"lost", ScenarioLost}});
}
