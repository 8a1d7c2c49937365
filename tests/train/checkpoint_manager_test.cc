// Checkpoints on storage without a cluster: atomic persistence, metadata, retention (newest
// K, best K by a metric, the latest always kept), leftovers of dead writers, bad input.
#include "raio/train/checkpoint_manager.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace raio::train::internal {
namespace {

namespace fs = std::filesystem;

class CheckpointManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/raio_train_ckpt_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    run_ = (root_ / "storage" / "run").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  // A directory with one file holding `content`, as a training function would report.
  std::string Source(const std::string& content) {
    const fs::path dir = root_ / ("src_" + std::to_string(sources_++));
    fs::create_directories(dir / "sub");
    std::ofstream(dir / "sub" / "weights.bin") << content;
    return dir.string();
  }
  static std::string Read(const fs::path& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path root_;
  std::string run_;
  int sources_ = 0;
};

TEST_F(CheckpointManagerTest, PersistsACopyWithMetadataUnderItsIndex) {
  ASSERT_TRUE(PrepareRunDirectory(run_).ok());
  absl::StatusOr<Checkpoint> c =
      PersistCheckpoint(run_, 7, Source("abc"), {{"epoch", 3}, {"step", 40}, {"loss", 0.5}}, 2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->path, run_ + "/checkpoint_000007");
  EXPECT_EQ(c->index, 7);
  EXPECT_EQ(Read(fs::path(c->path) / "sub" / "weights.bin"), "abc");
  const std::string meta = Read(fs::path(c->path) / ".metadata.json");
  EXPECT_NE(meta.find("\"epoch\": 3"), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"step\": 40"), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"world_size\": 2"), std::string::npos) << meta;
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(c->path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->metrics.at("loss"), 0.5);
  // Nothing temporary left beside it.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(run_)) {
    ++entries;
    EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos) << e.path();
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(CheckpointManagerTest, RefusesATakenIndexAndAMissingSource) {
  ASSERT_TRUE(PrepareRunDirectory(run_).ok());
  ASSERT_TRUE(PersistCheckpoint(run_, 0, Source("a"), {}, 1).ok());
  EXPECT_EQ(PersistCheckpoint(run_, 0, Source("b"), {}, 1).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Read(fs::path(run_) / "checkpoint_000000" / "sub" / "weights.bin"), "a");
  absl::Status missing = PersistCheckpoint(run_, 1, (root_ / "nope").string(), {}, 1).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.message().find("nope"), std::string::npos) << missing;
}

TEST_F(CheckpointManagerTest, StoragePathThatIsNotWritableFailsNamingIt) {
  // Under a regular file: no directory can be made there, not even by root.
  std::ofstream(root_ / "a_file") << "x";
  const std::string bad = (root_ / "a_file" / "run").string();
  absl::Status s = PrepareRunDirectory(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(bad), std::string::npos) << s;
  EXPECT_EQ(CheckpointManager::Create(bad, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CheckpointManagerTest, KeepsTheNewestKByDefault) {
  auto manager = CheckpointManager::Create(run_, {.num_to_keep = 2});
  ASSERT_TRUE(manager.ok()) << manager.status();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(
        PersistCheckpoint(run_, manager->next_index(), Source("x"), {{"epoch", i}}, 1).ok());
    auto fresh = manager->Rescan();
    ASSERT_TRUE(fresh.ok());
    ASSERT_EQ(fresh->size(), 1u);
    EXPECT_EQ(fresh->front().index, i);
  }
  ASSERT_EQ(manager->kept().size(), 2u);
  EXPECT_EQ(manager->kept()[0].index, 4);
  EXPECT_EQ(manager->kept()[1].index, 3);
  EXPECT_FALSE(fs::exists(fs::path(run_) / "checkpoint_000002"));
  EXPECT_EQ(manager->latest()->index, 4);
  EXPECT_EQ(manager->next_index(), 5);
}

TEST_F(CheckpointManagerTest, KeepsTheBestKByAMetricAndAlwaysTheLatest) {
  CheckpointConfig config{
      .num_to_keep = 2, .checkpoint_score_attribute = "loss", .checkpoint_score_order = "min"};
  auto manager = CheckpointManager::Create(run_, config);
  ASSERT_TRUE(manager.ok());
  const double losses[] = {0.9, 0.2, 0.5, 0.1, 0.7};
  for (double loss : losses) {
    ASSERT_TRUE(
        PersistCheckpoint(run_, manager->next_index(), Source("x"), {{"loss", loss}}, 1).ok());
    ASSERT_TRUE(manager->Rescan().ok());
  }
  // Best two: 3 (0.1), 1 (0.2); and the latest, 4, kept for resuming.
  ASSERT_EQ(manager->kept().size(), 3u);
  EXPECT_EQ(manager->kept()[0].index, 3);
  EXPECT_EQ(manager->kept()[1].index, 1);
  EXPECT_EQ(manager->kept()[2].index, 4);
  EXPECT_EQ(manager->best()->index, 3);
  EXPECT_EQ(manager->latest()->index, 4);
  EXPECT_FALSE(fs::exists(fs::path(run_) / "checkpoint_000000"));
  EXPECT_FALSE(fs::exists(fs::path(run_) / "checkpoint_000002"));
}

TEST_F(CheckpointManagerTest, ANewManagerFindsTheRunsCheckpointsAndDropsDeadWritersLeftovers) {
  ASSERT_TRUE(PrepareRunDirectory(run_).ok());
  ASSERT_TRUE(PersistCheckpoint(run_, 0, Source("a"), {{"epoch", 0}}, 1).ok());
  ASSERT_TRUE(PersistCheckpoint(run_, 1, Source("b"), {{"epoch", 1}}, 1).ok());
  // A writer that died before its rename, and a directory without metadata.
  fs::create_directories(fs::path(run_) / ".tmp_checkpoint_2_123_abc" / "sub");
  fs::create_directories(fs::path(run_) / "checkpoint_000009");
  auto manager = CheckpointManager::Create(run_, {});
  ASSERT_TRUE(manager.ok());
  EXPECT_FALSE(fs::exists(fs::path(run_) / ".tmp_checkpoint_2_123_abc"));
  ASSERT_TRUE(manager->latest().has_value());
  EXPECT_EQ(manager->latest()->index, 1);
  EXPECT_EQ(manager->latest()->metrics.at("epoch"), 1);
  // Not ours: left alone, and its index is never given out (a persist there would fail).
  EXPECT_EQ(manager->next_index(), 10);
  EXPECT_TRUE(fs::exists(fs::path(run_) / "checkpoint_000009"));
}

TEST_F(CheckpointManagerTest, OneLiveManagerPerRun) {
  auto first = CheckpointManager::Create(run_, {});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = CheckpointManager::Create(run_, {});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("is in use by another Trainer::Fit (pid " +
                                           std::to_string(::getpid()) + ")"),
            std::string::npos)
      << second.status();
  auto moved = std::move(*first);  // the lock goes with the manager
  EXPECT_FALSE(CheckpointManager::Create(run_, {}).ok());
  { auto gone = std::move(moved); }
  EXPECT_TRUE(CheckpointManager::Create(run_, {}).ok());
}

TEST_F(CheckpointManagerTest, NonFiniteMetricsAndOddNamesRoundTrip) {
  ASSERT_TRUE(PrepareRunDirectory(run_).ok());
  const Metrics metrics{{"loss", std::nan("")},
                        {"grad_norm", HUGE_VAL},
                        {"margin", -HUGE_VAL},
                        {"epoch", 2},
                        {std::string("bad\xff name"), 1}};
  absl::StatusOr<Checkpoint> c = PersistCheckpoint(run_, 0, Source("a"), metrics, 1);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(c->path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(std::isnan(read->metrics.at("loss")));
  EXPECT_EQ(read->metrics.at("grad_norm"), HUGE_VAL);
  EXPECT_EQ(read->metrics.at("margin"), -HUGE_VAL);
  EXPECT_EQ(read->metrics.at("epoch"), 2);
  EXPECT_EQ(read->metrics.size(), 5u);  // the name that is not UTF-8 kept, its bytes replaced
}

TEST_F(CheckpointManagerTest, RefusesACheckpointHoldingTheRunAndNamesABrokenLink) {
  ASSERT_TRUE(PrepareRunDirectory(run_).ok());
  for (const std::string& source : {run_, (root_ / "storage").string()}) {
    absl::Status s = PersistCheckpoint(run_, 0, source, {}, 1).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << source;
    EXPECT_NE(s.message().find("contains the run's directory"), std::string::npos) << s;
  }
  const std::string source = Source("a");
  fs::create_symlink(root_ / "nowhere", fs::path(source) / "sub" / "dangling");
  absl::Status s = PersistCheckpoint(run_, 0, source, {}, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find((fs::path(source) / "sub" / "dangling").string() +
                             " is a symbolic link to nothing"),
            std::string::npos)
      << s;
  EXPECT_FALSE(fs::exists(fs::path(run_) / "checkpoint_000000"));
}

TEST_F(CheckpointManagerTest, RefusesABadConfig) {
  EXPECT_EQ(CheckpointManager::Create(run_, {.num_to_keep = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status s = CheckpointManager::Create(run_, {.checkpoint_score_order = "largest"}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("largest"), std::string::npos);
}

}  // namespace
}  // namespace raio::train::internal
