// The Trainer on the embedded cluster, with real worker processes (this binary re-run by
// raio): data-parallel equivalence with one process, checkpoints and resuming by name, a
// worker killed mid-run, and bad input (a throwing function, an infeasible demand, storage
// that is not writable, bad configs).
//
// Every test trains the same small MLP on synthetic regression data (TrainMlp in
// mlp_training.h), which every process generates alike from a fixed seed.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "mlp_training.h"
#include "raio/raio.h"
#include "raio/testkit/time_scale.h"
#include "raio/train/train.h"

namespace {

namespace fs = std::filesystem;
using raio::testkit::Scaled;
using raio::train::Metrics;
using raio::train::TrainContext;
using raio_train_test::Config;
using raio_train_test::LoadWeights;
using raio_train_test::TrainInOneProcess;
using raio_train_test::TrainMlp;
using raio_train_test::WaitForFile;

// Writes what the context says about this worker to <dir>/rank_<r>, then all-reduces the ranks
// on the raw process group and reports their sum.
void ReportPlacement(TrainContext& ctx) {
  const fs::path dir = ctx.GetConfig().at("dir").get<std::string>();
  std::ofstream(dir / ("rank_" + std::to_string(ctx.GetWorldRank())))
      << ctx.GetLocalRank() << " " << ctx.GetLocalWorldSize() << " " << ctx.GetNodeRank() << " "
      << ctx.GetWorldSize() << " " << at::get_num_threads() << " " << ctx.GetExperimentName() << " "
      << ctx.GetAttempt() << " " << ctx.GetCheckpoint().has_value();
  {
    std::ofstream shard(dir / ("shard_" + std::to_string(ctx.GetWorldRank())));
    for (const std::string& row : ctx.GetDatasetShard("train")) shard << row << "\n";
    try {
      ctx.GetDatasetShard("test");
    } catch (const raio::InvalidUsageError& e) {
      shard << "error: " << e.what() << "\n";
    }
  }
  std::vector<torch::Tensor> t{torch::full({1}, static_cast<float>(ctx.GetWorldRank()))};
  ctx.GetProcessGroup().allreduce(t)->wait();
  ctx.Report({{"rank_sum", t[0].item<double>()}});
}
RAIO_TRAIN_FUNCTION(ReportPlacement);

// Never registered.
void NotRegistered(TrainContext&) {}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/raio_train_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  raio::train::RunConfig Run(const std::string& name) {
    raio::train::RunConfig run;
    run.name = name;
    run.storage_path = (root_ / "storage").string();
    return run;
  }
  static void ExpectWeightsNear(const std::vector<torch::Tensor>& a,
                                const std::vector<torch::Tensor>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::allclose(a[i], b[i], /*rtol=*/1e-4, /*atol=*/1e-5))
          << "tensor " << i << " differs by " << (a[i] - b[i]).abs().max().item<double>();
    }
  }
  static std::vector<int> Epochs(const raio::train::Result& r) {
    std::vector<int> epochs;
    for (const Metrics& m : r.metrics_history) epochs.push_back(static_cast<int>(m.at("epoch")));
    return epochs;
  }
  fs::path root_;
};

TEST_F(TrainerTest, TwoWorkersWithGlobalBatchBMatchOneProcessWithBatchB) {
  raio::train::Trainer trainer(TrainMlp, {.num_workers = 2}, Run("dp"), Config(3));
  raio::train::Result result = trainer.Fit();
  ASSERT_TRUE(result.error.ok()) << result.error;
  EXPECT_EQ(Epochs(result), (std::vector<int>{0, 1, 2}));
  double loss = 0;
  std::vector<torch::Tensor> expected = TrainInOneProcess(3, 32, 0.1, 5, &loss);
  ASSERT_TRUE(result.checkpoint.has_value());
  ExpectWeightsNear(LoadWeights(result.checkpoint->path), expected);
  EXPECT_NEAR(result.metrics.at("loss"), loss, 1e-5);
  EXPECT_EQ(result.num_failures, 0);
}

TEST_F(TrainerTest, GangStartsWorkersWithTheirRanksResourcesAndAProcessGroup) {
  raio::train::ScalingConfig scaling{.num_workers = 2, .resources_per_worker = {{"CPU", 2}}};
  raio::train::Result result =
      raio::train::Trainer(ReportPlacement, scaling, Run("placed"), {{"dir", root_.string()}},
                           {{"train", {"a", "b", "c"}}, {"eval", {}}})
          .Fit();
  ASSERT_TRUE(result.error.ok()) << result.error;
  EXPECT_EQ(result.metrics.at("rank_sum"), 1);  // 0 + 1
  EXPECT_FALSE(result.checkpoint.has_value());
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(root_ / ("rank_" + std::to_string(rank)));
    int local_rank = -1, local_size = 0, node_rank = -1, world = 0, threads = 0, attempt = -1;
    bool has_checkpoint = true;
    std::string name;
    in >> local_rank >> local_size >> node_rank >> world >> threads >> name >> attempt >>
        has_checkpoint;
    EXPECT_EQ(local_rank, rank);  // one node: local ranks are the world ranks
    EXPECT_EQ(local_size, 2);
    EXPECT_EQ(node_rank, 0);
    EXPECT_EQ(world, 2);
    EXPECT_EQ(threads, 2);  // the bundle's CPUs
    EXPECT_EQ(name, "placed");
    EXPECT_EQ(attempt, 0);
    EXPECT_FALSE(has_checkpoint);
  }
  // Shards: rows rank, rank + 2, ... of a, b, c padded by its head to a, b, c, a.
  auto lines = [&](int rank) {
    std::ifstream in(root_ / ("shard_" + std::to_string(rank)));
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  const std::string error =
      "error: TrainContext::GetDatasetShard: the Trainer has no dataset \"test\" (it has: "
      "\"eval\", \"train\")";
  EXPECT_EQ(lines(0), (std::vector<std::string>{"a", "c", error}));
  EXPECT_EQ(lines(1), (std::vector<std::string>{"b", "a", error}));
  EXPECT_EQ(result.world_sizes, (std::vector<int>{2}));
  // The group is gone with the run.
  for (const raio::PlacementGroup& pg : raio::GetAllPlacementGroups()) {
    EXPECT_EQ(pg.GetState(), raio::PlacementGroupState::REMOVED) << pg.GetID();
  }
}

TEST_F(TrainerTest, KeepsTheBestCheckpointsAndResumesARunByName) {
  raio::train::RunConfig run = Run("resume");
  run.checkpoint_config = {
      .num_to_keep = 1, .checkpoint_score_attribute = "loss", .checkpoint_score_order = "min"};
  raio::train::Result first =
      raio::train::Trainer(TrainMlp, {.num_workers = 2}, run, Config(2)).Fit();
  ASSERT_TRUE(first.error.ok()) << first.error;
  ASSERT_TRUE(first.checkpoint.has_value());
  EXPECT_EQ(first.checkpoint->path, first.path + "/checkpoint_000001");
  EXPECT_EQ(first.best_checkpoints.size(), 1u);  // the best is also the latest here

  // Same name, more epochs: starts from epoch 2 with the saved weights.
  raio::train::Result second =
      raio::train::Trainer(TrainMlp, {.num_workers = 2}, run, Config(4)).Fit();
  ASSERT_TRUE(second.error.ok()) << second.error;
  EXPECT_EQ(Epochs(second), (std::vector<int>{2, 3}));
  EXPECT_EQ(second.checkpoint->path, second.path + "/checkpoint_000003");
  EXPECT_EQ(second.checkpoint->metrics.at("epoch"), 3);
  double loss = 0;
  ExpectWeightsNear(LoadWeights(second.checkpoint->path), TrainInOneProcess(4, 32, 0.1, 5, &loss));
  EXPECT_NEAR(second.metrics.at("loss"), loss, 1e-5);
  EXPECT_LE(second.best_checkpoints.size(), 2u);  // best 1 + the latest
  EXPECT_FALSE(fs::exists(second.path + "/checkpoint_000000"));
}

// Runs Fit on a thread and SIGKILLs the worker that writes marker_dir/pid.
raio::train::Result FitKillingOnce(raio::train::Trainer& trainer, const fs::path& marker_dir) {
  raio::train::Result result;
  std::thread fit([&] { result = trainer.Fit(); });
  if (WaitForFile(marker_dir / "pid", Scaled(std::chrono::seconds(60)))) {
    int pid = 0;
    std::ifstream(marker_dir / "pid") >> pid;
    if (pid > 0) ::kill(pid, SIGKILL);
  } else {
    ADD_FAILURE() << "no worker wrote " << (marker_dir / "pid");
  }
  fit.join();
  return result;
}

TEST_F(TrainerTest, AKilledWorkerRestartsTheGroupFromTheLatestCheckpoint) {
  const fs::path markers = root_ / "markers";
  fs::create_directories(markers);
  nlohmann::json config = Config(4);
  config["kill_epoch"] = 2;
  config["kill_rank"] = 1;
  config["marker_dir"] = markers.string();
  raio::train::RunConfig run = Run("killed");
  run.failure_config.max_failures = 2;
  raio::train::Trainer trainer(TrainMlp, {.num_workers = 2}, run, config);
  raio::train::Result result = FitKillingOnce(trainer, markers);
  ASSERT_TRUE(result.error.ok()) << result.error;
  EXPECT_EQ(result.num_failures, 1);
  // Epochs 0 and 1 were checkpointed before the kill; 2 and 3 ran once, after it.
  EXPECT_EQ(Epochs(result), (std::vector<int>{0, 1, 2, 3}));
  double loss = 0;
  ExpectWeightsNear(LoadWeights(result.checkpoint->path), TrainInOneProcess(4, 32, 0.1, 5, &loss));
  EXPECT_NEAR(result.metrics.at("loss"), loss, 1e-5);
}

TEST_F(TrainerTest, AKilledRankZeroRestartsTheGroupToo) {
  // Rank 0 holds the rendezvous store and writes the checkpoints.
  const fs::path markers = root_ / "markers";
  fs::create_directories(markers);
  nlohmann::json config = Config(3);
  config["kill_epoch"] = 1;
  config["kill_rank"] = 0;
  config["marker_dir"] = markers.string();
  raio::train::RunConfig run = Run("killed0");
  run.failure_config.max_failures = -1;
  raio::train::Trainer trainer(TrainMlp, {.num_workers = 2}, run, config);
  raio::train::Result result = FitKillingOnce(trainer, markers);
  ASSERT_TRUE(result.error.ok()) << result.error;
  EXPECT_EQ(result.num_failures, 1);
  EXPECT_EQ(Epochs(result), (std::vector<int>{0, 1, 2}));
  double loss = 0;
  ExpectWeightsNear(LoadWeights(result.checkpoint->path), TrainInOneProcess(3, 32, 0.1, 5, &loss));
  EXPECT_NEAR(result.metrics.at("loss"), loss, 1e-5);
}

TEST_F(TrainerTest, AKilledWorkerFailsTheRunWhenNoFailuresAreAllowed) {
  const fs::path markers = root_ / "markers";
  fs::create_directories(markers);
  nlohmann::json config = Config(3);
  config["kill_epoch"] = 1;
  config["kill_rank"] = 1;
  config["marker_dir"] = markers.string();
  raio::train::Trainer trainer(TrainMlp, {.num_workers = 2}, Run("fails"), config);
  raio::train::Result result = FitKillingOnce(trainer, markers);
  EXPECT_EQ(result.error.code(), absl::StatusCode::kUnavailable) << result.error;
  EXPECT_NE(result.error.message().find("worker rank 1"), std::string::npos) << result.error;
  EXPECT_NE(result.error.message().find("died"), std::string::npos) << result.error;
  EXPECT_EQ(result.num_failures, 0);
  EXPECT_EQ(Epochs(result), (std::vector<int>{0}));
}

// Elastic training on the test cluster's 3 "slot"s (each worker takes one). The trainer
// starts with what is free, grows at a checkpoint once a slot frees up, and continues with
// fewer after a loss it cannot replace; whatever the sizes, the run computes what one
// process with the global batch computes (data parallel, resumed from checkpoints).
raio::PlacementGroup HoldSlot() {
  return raio::CreatePlacementGroup({"", {{{"slot", 1}}}, raio::PlacementStrategy::PACK});
}

std::vector<int> WorldSizes(const raio::train::Result& r) {
  std::vector<int> sizes;
  for (const Metrics& m : r.metrics_history) sizes.push_back(static_cast<int>(m.at("world_size")));
  return sizes;
}

TEST_F(TrainerTest, ElasticStartsWithWhatIsFreeAndGrowsAtACheckpoint) {
  raio::PlacementGroup held = HoldSlot();  // 2 of the 3 slots stay free
  ASSERT_TRUE(held.Wait(static_cast<int>(Scaled(std::chrono::seconds(30)).count())));
  nlohmann::json config = Config(2);
  config["until_world_size"] = 3;
  config["global_batch"] = 48;  // local batches of 48, 24 or 16 cover the same samples
  raio::train::RunConfig run = Run("grows");
  run.checkpoint_config.num_to_keep = 2;
  bool released = false;
  run.on_report = [&](const Metrics& m) {
    // The group of 2 has checkpointed: give the third slot back.
    if (!released && m.at("world_size") == 2 && m.at("epoch") >= 1) {
      raio::RemovePlacementGroup(held.GetID());
      released = true;
    }
  };
  raio::train::ScalingConfig scaling{
      .num_workers = 3, .min_workers = 1, .resources_per_worker = {{"CPU", 1}, {"slot", 1}}};
  raio::train::Result result = raio::train::Trainer(TrainMlp, scaling, run, config).Fit();
  ASSERT_TRUE(result.error.ok()) << result.error;
  EXPECT_TRUE(released);
  EXPECT_EQ(result.world_sizes, (std::vector<int>{2, 3}));
  EXPECT_EQ(result.num_failures, 0);  // growing is not a failure
  // Every epoch once, in order: the group of 3 resumed after the last checkpoint of the 2.
  const std::vector<int> epochs = Epochs(result);
  ASSERT_GE(epochs.size(), 4u);
  for (size_t i = 0; i < epochs.size(); ++i) EXPECT_EQ(epochs[i], static_cast<int>(i));
  const std::vector<int> sizes = WorldSizes(result);
  EXPECT_EQ(sizes.front(), 2);
  EXPECT_EQ(sizes.back(), 3);
  EXPECT_TRUE(std::is_sorted(sizes.begin(), sizes.end()));
  double loss = 0;
  std::vector<torch::Tensor> expected =
      TrainInOneProcess(static_cast<int>(epochs.size()), 48, 0.1, 5, &loss);
  // Tens of epochs over three world sizes: rounding differs more than in the short runs.
  std::vector<torch::Tensor> got = LoadWeights(result.checkpoint->path);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::allclose(got[i], expected[i], /*rtol=*/1e-3, /*atol=*/1e-4)) << i;
  }
  EXPECT_NEAR(result.metrics.at("loss"), loss, 1e-4);
}

TEST_F(TrainerTest, ElasticContinuesWithFewerWorkersWhenALostOneCannotBeReplaced) {
  raio::PlacementGroup held = HoldSlot();  // 2 of the 3 slots stay free
  ASSERT_TRUE(held.Wait(static_cast<int>(Scaled(std::chrono::seconds(30)).count())));
  const fs::path markers = root_ / "markers";
  fs::create_directories(markers);
  nlohmann::json config = Config(4);
  config["kill_epoch"] = 2;
  config["kill_rank"] = 1;
  config["marker_dir"] = markers.string();
  raio::train::RunConfig run = Run("shrinks");
  run.failure_config.max_failures = 1;
  raio::train::ScalingConfig scaling{
      .num_workers = 2, .min_workers = 1, .resources_per_worker = {{"CPU", 1}, {"slot", 1}}};
  raio::train::Trainer trainer(TrainMlp, scaling, run, config);
  raio::train::Result result;
  std::thread fit([&] { result = trainer.Fit(); });
  raio::PlacementGroup taker;
  if (WaitForFile(markers / "pid", Scaled(std::chrono::seconds(60)))) {
    // A group created now waits at the head for a slot; it is first in line for the one the
    // killed worker's group frees, so the trainer cannot replace the worker.
    taker = HoldSlot();
    int pid = 0;
    std::ifstream(markers / "pid") >> pid;
    if (pid > 0) ::kill(pid, SIGKILL);
  } else {
    ADD_FAILURE() << "no worker wrote " << (markers / "pid");
  }
  fit.join();
  ASSERT_TRUE(result.error.ok()) << result.error;
  EXPECT_EQ(result.world_sizes, (std::vector<int>{2, 1}));
  EXPECT_EQ(result.num_failures, 1);
  // Epochs 0 and 1 with 2 workers, checkpointed before the kill; 2 and 3 once, with 1.
  EXPECT_EQ(Epochs(result), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(WorldSizes(result), (std::vector<int>{2, 2, 1, 1}));
  double loss = 0;
  ExpectWeightsNear(LoadWeights(result.checkpoint->path), TrainInOneProcess(4, 32, 0.1, 5, &loss));
  EXPECT_NEAR(result.metrics.at("loss"), loss, 1e-5);
  if (!taker.Empty()) raio::RemovePlacementGroup(taker.GetID());
  raio::RemovePlacementGroup(held.GetID());
}

TEST_F(TrainerTest, ATrainingFunctionThatThrowsFailsFitWithItsRankAndMessage) {
  nlohmann::json config = Config(3);
  config["throw_epoch"] = 1;
  config["throw_rank"] = 1;
  raio::train::RunConfig run = Run("throws");
  run.failure_config.max_failures = 3;  // not retried: the function's own error
  raio::train::Result result =
      raio::train::Trainer(TrainMlp, {.num_workers = 2}, run, config).Fit();
  EXPECT_EQ(result.error.code(), absl::StatusCode::kUnknown) << result.error;
  EXPECT_NE(result.error.message().find("worker rank 1 raised std::runtime_error: bad batch in "
                                        "epoch 1"),
            std::string::npos)
      << result.error;
  EXPECT_EQ(result.num_failures, 0);
}

TEST_F(TrainerTest, ADemandNoClusterCanMeetFailsNamingIt) {
  raio::train::ScalingConfig scaling{.num_workers = 3, .resources_per_worker = {{"CPU", 1000}}};
  raio::train::Result result =
      raio::train::Trainer(TrainMlp, scaling, Run("huge"), Config(1)).Fit();
  EXPECT_EQ(result.error.code(), absl::StatusCode::kFailedPrecondition) << result.error;
  EXPECT_NE(result.error.message().find("3 workers x {CPU: 1000} (PACK)"), std::string::npos)
      << result.error;
  // Elastic: the minimum is what no cluster can meet.
  scaling.min_workers = 2;
  scaling.num_workers = 4;
  result = raio::train::Trainer(TrainMlp, scaling, Run("huge2"), Config(1)).Fit();
  EXPECT_EQ(result.error.code(), absl::StatusCode::kFailedPrecondition) << result.error;
  EXPECT_NE(result.error.message().find("2 workers x {CPU: 1000} (PACK)"), std::string::npos)
      << result.error;
}

TEST_F(TrainerTest, StorageThatIsNotWritableFailsBeforeAnyWorkerStarts) {
  std::ofstream(root_ / "a_file") << "x";
  nlohmann::json config = Config(1);
  config["started_marker"] = (root_ / "started").string();
  raio::train::RunConfig run = Run("x");
  run.storage_path = (root_ / "a_file" / "storage").string();
  raio::train::Result result =
      raio::train::Trainer(TrainMlp, {.num_workers = 2}, run, config).Fit();
  EXPECT_EQ(result.error.code(), absl::StatusCode::kFailedPrecondition) << result.error;
  EXPECT_NE(result.error.message().find(run.storage_path), std::string::npos) << result.error;
  EXPECT_FALSE(fs::exists(root_ / "started"));
}

TEST_F(TrainerTest, RefusesBadConfigsAndUnregisteredFunctions) {
  auto code = [&](raio::train::TrainFunction fn, raio::train::ScalingConfig s,
                  raio::train::RunConfig r) {
    return raio::train::Trainer(fn, s, r, Config(1)).Fit().error;
  };
  absl::Status s = code(NotRegistered, {.num_workers = 1}, Run("a"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("RAIO_TRAIN_FUNCTION"), std::string::npos) << s;
  EXPECT_EQ(code(TrainMlp, {.num_workers = 0}, Run("a")).code(),
            absl::StatusCode::kInvalidArgument);
  s = code(TrainMlp, {.num_workers = 2, .min_workers = 3}, Run("a"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("min_workers must be in [1, num_workers = 2], got 3"),
            std::string::npos)
      << s;
  EXPECT_EQ(code(TrainMlp, {.num_workers = 2, .min_workers = 0}, Run("a")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      code(TrainMlp, {.num_workers = 1, .resources_per_worker = {{"CPU", -1}}}, Run("a")).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(TrainMlp, {.num_workers = 1}, Run("../escape")).code(),
            absl::StatusCode::kInvalidArgument);
  raio::train::RunConfig bad_keep = Run("a");
  bad_keep.checkpoint_config.num_to_keep = 0;
  EXPECT_EQ(code(TrainMlp, {.num_workers = 1}, bad_keep).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);  // never returns
  ::testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(1);
  raio::InitOptions options;
  options.num_cpus = 4;
  options.resources = {{"slot", 3}};  // the elastic tests' capacity
  raio::Init(options);
  const int rc = RUN_ALL_TESTS();
  raio::Shutdown();
  return rc;
}
