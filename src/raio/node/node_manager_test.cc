// NodeManager and the cluster's configuration: a node takes the head's config table from
// its registration reply before it starts workers, and refuses one it cannot take. The
// head here holds values that differ from this process's, as a head in another process
// would. Real head and node on port 0 and a temp session directory; no workers start.
#include "raio/node/node_manager.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "raio/common/config.h"
#include "raio/common/process.h"
#include "raio/head/head_service.h"

namespace raio::node {
namespace {

class NodeManagerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* none[] = {nullptr};
    ASSERT_TRUE(config::internal::ResetToEnvironment(none).ok());
    session_dir_ = MakeTempDir("node-config-test");
    ASSERT_FALSE(session_dir_.empty());
  }
  void TearDown() override {
    if (node_) node_->Stop();
    if (head_) head_->Stop();
    RemoveTree(session_dir_);
    const char* none[] = {nullptr};
    ASSERT_TRUE(config::internal::ResetToEnvironment(none).ok());
  }
  void StartHead(std::map<std::string, std::string> system_config) {
    head::HeadService::Options options;
    options.system_config = std::move(system_config);
    auto head = head::HeadService::Create(options);
    ASSERT_TRUE(head.ok()) << head.status();
    head_ = std::move(*head);
  }
  absl::Status StartNode() {
    auto total = ResourceSet::FromMap({{"CPU", 1}});
    if (!total.ok()) return total.status();
    NodeManager::Options options;
    options.session_dir = session_dir_;
    options.head_address = head_->address();
    options.total = *total;
    options.object_store_bytes = 4u << 20;
    auto node = NodeManager::Create(std::move(options));
    if (!node.ok()) return node.status();
    node_ = std::move(*node);
    return absl::OkStatus();
  }

  std::string session_dir_;
  std::unique_ptr<head::HeadService> head_;
  std::unique_ptr<NodeManager> node_;
};

TEST_F(NodeManagerConfigTest, NodeAppliesTheHeadsConfigurationBeforeItStartsWorkers) {
  std::map<std::string, std::string> cluster = config::CurrentValues();
  cluster["max_worker_start_failures"] = "7";
  cluster["memory_monitor_interval_ms"] = "0";
  ASSERT_NO_FATAL_FAILURE(StartHead(cluster));
  ASSERT_EQ(config::max_worker_start_failures(), 3);
  absl::Status s = StartNode();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(config::max_worker_start_failures(), 7);
  EXPECT_EQ(config::memory_monitor_interval_ms(), std::chrono::milliseconds(0));
  // What the node's workers get in their environment.
  std::vector<std::string> env = config::EnvironmentForWorkers();
  EXPECT_NE(std::find(env.begin(), env.end(), "RAIO_MAX_WORKER_START_FAILURES=7"), env.end());
}

TEST_F(NodeManagerConfigTest, NodeRefusesAConfigurationItCannotTake) {
  ASSERT_NO_FATAL_FAILURE(
      StartHead({{"max_worker_start_failures", "7"}, {"entry_of_a_newer_version", "1"}}));
  absl::Status s = StartNode();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("unknown name 'entry_of_a_newer_version'"), std::string_view::npos)
      << s;
  EXPECT_EQ(config::max_worker_start_failures(), 3);  // nothing applied
}

}  // namespace
}  // namespace raio::node
