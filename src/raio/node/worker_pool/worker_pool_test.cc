// WorkerPool keying by (job, device set) and CUDA_VISIBLE_DEVICES at spawn. The
// "workers" are a shell script that records the CUDA_VISIBLE_DEVICES it was started with
// and then waits to be killed; they are registered by hand (no node, no connection).
#include "raio/node/worker_pool/worker_pool.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "raio/node/worker_pool/device_set.h"
#include "raio/testkit/time_scale.h"

namespace raio::node {
namespace {

using namespace std::chrono_literals;

TEST(DeviceSetTest, ParsesTheNodesMask) {
  EXPECT_TRUE(ParseDeviceMask(nullptr).empty());
  EXPECT_TRUE(ParseDeviceMask("").empty());
  EXPECT_EQ(ParseDeviceMask("5,6"), (std::vector<std::string>{"5", "6"}));
}

TEST(DeviceSetTest, MapsIdsThroughTheNodesMask) {
  EXPECT_EQ(VisibleDevices({}, {}), "");
  EXPECT_EQ(VisibleDevices({0, 2}, {}), "0,2");
  EXPECT_EQ(VisibleDevices({1}, {"5", "6"}), "6");
  EXPECT_EQ(VisibleDevices({0, 1}, {"5", "6"}), "5,6");
  EXPECT_EQ(VisibleDevices({}, {"5", "6"}), "");
  // An id past the mask's end (more GPUs declared than the node sees) is used as is.
  EXPECT_EQ(VisibleDevices({2}, {"5", "6"}), "2");
}

class WorkerPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/raio-worker-pool-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    script_ = dir_ + "/worker.sh";
    std::ofstream(script_) << "#!/bin/sh\n"
                              "out=\"$RAIO_SESSION_DIR/$RAIO_WORKER_ID\"\n"
                              "printf '%s' \"${CUDA_VISIBLE_DEVICES-<unset>}\" > \"$out.tmp\"\n"
                              "mv \"$out.tmp\" \"$out.env\"\n"
                              "exec sleep "
                           << testkit::Scaled(60s).count() << "\n";
    ASSERT_EQ(::chmod(script_.c_str(), 0700), 0);
  }
  void TearDown() override {
    pool_.reset();  // kills and reaps the workers
    std::filesystem::remove_all(dir_);
  }

  void MakePool(bool node_has_gpus, std::vector<std::string> node_mask = {}) {
    pool_ = std::make_unique<WorkerPool>(
        io_, WorkerPool::Options{dir_, dir_ + "/node.sock", node_has_gpus, std::move(node_mask)});
    pool_->AddJob(1, JobConfig{script_, dir_, "", "", {}});
    pool_->AddJob(2, JobConfig{script_, dir_, "", "", {}});
  }

  // Starts a worker for `key` and registers it by hand; returns it (idle).
  WorkerProcess* StartAndRegister(const WorkerKey& key) {
    std::set<WorkerId> before;
    for (const auto& [id, w] : pool_->workers()) before.insert(id);
    EXPECT_TRUE(pool_->StartWorker(key).ok());
    for (const auto& [id, w] : pool_->workers()) {
      if (before.count(id)) continue;
      auto registered = pool_->OnRegistered(id, w.pid, nullptr, proto::Address());
      EXPECT_TRUE(registered.ok()) << registered.status();
      return registered.ok() ? *registered : nullptr;
    }
    ADD_FAILURE() << "no worker was started";
    return nullptr;
  }

  // The CUDA_VISIBLE_DEVICES a worker process started with, once its script recorded it.
  std::optional<std::string> SpawnEnv(const WorkerProcess& w) {
    const std::string path = dir_ + "/" + w.id.Hex() + ".env";
    for (auto deadline = std::chrono::steady_clock::now() + testkit::Scaled(10s);
         std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(5ms)) {
      std::ifstream in(path);
      if (!in) continue;
      std::stringstream s;
      s << in.rdbuf();
      return s.str();
    }
    return std::nullopt;
  }

  boost::asio::io_context io_;
  std::string dir_;
  std::string script_;
  std::unique_ptr<WorkerPool> pool_;
};

TEST_F(WorkerPoolTest, ReusesAnIdleWorkerOnlyForItsJobAndDeviceSet) {
  MakePool(/*node_has_gpus=*/true);
  WorkerProcess* gpu0 = StartAndRegister({1, {0}});
  WorkerProcess* cpu = StartAndRegister({1, {}});
  WorkerProcess* other_job = StartAndRegister({2, {0}});
  ASSERT_TRUE(gpu0 && cpu && other_job);

  EXPECT_EQ(pool_->PopIdle({1, {1}}), nullptr);
  EXPECT_EQ(pool_->PopIdle({1, {0, 1}}), nullptr);
  EXPECT_EQ(pool_->PopIdle({3, {0}}), nullptr);
  EXPECT_EQ(pool_->PopIdle({1, {0}}), gpu0);
  EXPECT_EQ(pool_->PopIdle({1, {0}}), nullptr);  // leased now
  EXPECT_EQ(pool_->PopIdle({1, {}}), cpu);
  EXPECT_EQ(pool_->PopIdle({2, {0}}), other_job);

  // Back to idle, it serves the same device set again, and no other.
  pool_->MakeIdle(gpu0);
  EXPECT_EQ(pool_->PopIdle({1, {1}}), nullptr);
  EXPECT_EQ(pool_->PopIdle({1, {}}), nullptr);
  EXPECT_EQ(pool_->PopIdle({1, {0}}), gpu0);
}

TEST_F(WorkerPoolTest, CountsStartingWorkersPerDeviceSet) {
  MakePool(/*node_has_gpus=*/true);
  ASSERT_TRUE(pool_->StartWorker({1, {0}}).ok());
  ASSERT_TRUE(pool_->StartWorker({1, {0}}).ok());
  ASSERT_TRUE(pool_->StartWorker({1, {1}}).ok());
  EXPECT_EQ(pool_->NumStarting({1, {0}}), 2);
  EXPECT_EQ(pool_->NumStarting({1, {1}}), 1);
  EXPECT_EQ(pool_->NumStarting({1, {}}), 0);
  EXPECT_EQ(pool_->NumStarting(), 3);
  EXPECT_EQ(pool_->NumStarting({2, {0}}), 0);
}

TEST_F(WorkerPoolTest, ActorsGetOnlyWorkersThatNeverRanTasks) {
  MakePool(/*node_has_gpus=*/true);
  WorkerProcess* w = StartAndRegister({1, {0}});
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(pool_->PopIdle({1, {0}}), w);
  pool_->MakeIdle(w);
  EXPECT_EQ(pool_->PopIdle({1, {0}}, /*for_actor=*/true), nullptr);
}

TEST_F(WorkerPoolTest, WorkersSeeExactlyTheirDevicesFromSpawn) {
  MakePool(/*node_has_gpus=*/true);
  WorkerProcess* one = StartAndRegister({1, {1}});
  WorkerProcess* both = StartAndRegister({1, {0, 1}});
  WorkerProcess* none = StartAndRegister({1, {}});
  ASSERT_TRUE(one && both && none);
  EXPECT_EQ(SpawnEnv(*one), "1");
  EXPECT_EQ(SpawnEnv(*both), "0,1");
  EXPECT_EQ(SpawnEnv(*none), "");  // a GPU node's CPU-only worker sees no device
}

TEST_F(WorkerPoolTest, MapsDeviceIdsThroughTheNodesOwnMask) {
  MakePool(/*node_has_gpus=*/true, {"5", "6"});
  WorkerProcess* w = StartAndRegister({1, {1}});
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(SpawnEnv(*w), "6");
}

TEST_F(WorkerPoolTest, WorkersOfANodeWithoutGpusKeepTheNodesValue) {
  const char* saved = std::getenv("CUDA_VISIBLE_DEVICES");
  std::optional<std::string> restore = saved ? std::optional<std::string>(saved) : std::nullopt;
  ::setenv("CUDA_VISIBLE_DEVICES", "7", 1);
  MakePool(/*node_has_gpus=*/false);
  WorkerProcess* w = StartAndRegister({1, {}});  // the spawn copies the environment
  if (restore) {
    ::setenv("CUDA_VISIBLE_DEVICES", restore->c_str(), 1);
  } else {
    ::unsetenv("CUDA_VISIBLE_DEVICES");
  }
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(SpawnEnv(*w), "7");
}

}  // namespace
}  // namespace raio::node
