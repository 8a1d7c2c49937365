// NodeManager against a fake head (testkit::FakeHead on its own thread): what it registers,
// that the head reaches it over the same connection, and that a refused registration
// fails Create and leaves nothing behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "raio/common/resources.h"
#include "raio/node/node_manager.h"
#include "raio/rpc/service.h"
#include "raio/testkit/fakes.h"
#include "raio/testkit/temp_dir.h"
#include "raio/testkit/wait.h"

namespace raio::node {
namespace {

using namespace std::chrono_literals;

NodeManager::Options NodeOptions(const std::string& dir, const std::string& head) {
  NodeManager::Options options;
  options.session_dir = dir;
  options.head_address = head;
  options.total = *ResourceSet::FromMap({{"CPU", 2}, {"memory", 1e9}, {"disk", 5}});
  options.object_store_bytes = 8 << 20;
  MemoryMonitorOptions no_monitor = MemoryMonitorOptions::FromConfig();
  no_monitor.interval = std::chrono::milliseconds(0);  // off
  options.memory_monitor = no_monitor;
  return options;
}

TEST(NodeManagerTest, RegistersWithTheHeadAndAnswersItOverThatConnection) {
  testkit::TempDir dir("node");
  testkit::FakeHead head;
  auto node = NodeManager::Create(NodeOptions(dir.path(), head.address()));
  ASSERT_TRUE(node.ok()) << node.status();

  auto registrations = head.registrations();
  ASSERT_EQ(registrations.size(), 1u);
  EXPECT_EQ(registrations[0].node_id(), (*node)->id().Hex());
  EXPECT_EQ(registrations[0].address().unix_socket(), dir.Path("node.sock"));
  auto total = ResourceSet::FromProto(registrations[0].total());
  ASSERT_TRUE(total.ok());
  EXPECT_EQ(total->Get("CPU"), 2);
  EXPECT_EQ(total->Get("disk"), 5);

  auto conns = head.peer().connections();
  ASSERT_EQ(conns.size(), 1u);
  auto stats = rpc::CallSync<proto::GET_NODE_STATS>(*conns[0], proto::Empty());
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->node_id(), (*node)->id().Hex());
  EXPECT_EQ(stats->address(), absl::StrCat("127.0.0.1:", (*node)->port()));

  // Stopping closes the head's connection, as the head's node table relies on.
  (*node)->Stop();
  EXPECT_TRUE(testkit::WaitFor([&] { return head.peer().num_connections() == 0; }, 10s));
  EXPECT_EQ(::access(dir.Path("node.sock").c_str(), F_OK), -1);
}

TEST(NodeManagerTest, ARefusedRegistrationFailsCreateAndRemovesTheSocket) {
  testkit::TempDir dir("node");
  testkit::FakeHead head(absl::AlreadyExistsError("node x is already registered"));
  auto node = NodeManager::Create(NodeOptions(dir.path(), head.address()));
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(node.status().message(), ::testing::HasSubstr("already registered"));
  EXPECT_EQ(head.registrations().size(), 1u);
  EXPECT_EQ(::access(dir.Path("node.sock").c_str(), F_OK), -1);
}

TEST(NodeManagerTest, CreateFailsWhenNoHeadListens) {
  testkit::TempDir dir("node");
  std::string address;
  {
    testkit::FakeHead head;  // a port that was free a moment ago and is closed now
    address = head.address();
  }
  auto node = NodeManager::Create(NodeOptions(dir.path(), address));
  EXPECT_FALSE(node.ok());
}

}  // namespace
}  // namespace raio::node
