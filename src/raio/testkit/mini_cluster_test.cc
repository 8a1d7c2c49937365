// MiniCluster: one head and three node daemons in this process over 127.0.0.1 TCP; the
// head's node table (GET_CLUSTER_STATUS) lists each with what it offers, forgets a node
// that stops, and teardown leaves no file behind.
#include "raio/testkit/mini_cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "raio/common/resources.h"
#include "raio/testkit/wait.h"

namespace raio::testkit {
namespace {

using namespace std::chrono_literals;

// Node id -> CPUs, as the head reports them.
std::map<std::string, double> CpusByNode(const proto::ClusterStatus& status) {
  std::map<std::string, double> cpus;
  for (const auto& node : status.nodes()) {
    auto total = ResourceSet::FromProto(node.total());
    cpus[node.node_id()] = total.ok() ? total->Get("CPU") : -1;
  }
  return cpus;
}

TEST(MiniClusterTest, TheHeadListsEveryNodeWithWhatItOffers) {
  auto cluster = MiniCluster::Create();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  MiniCluster& c = **cluster;
  for (int i = 0; i < 3; ++i) {
    auto index = c.AddNode({{"CPU", i + 1.0}, {"memory", 1e9}, {"slot_" + std::to_string(i), 2}});
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(*index, i);
  }
  EXPECT_THAT(c.head_address(), ::testing::StartsWith("127.0.0.1:"));

  auto status = c.ClusterStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(CpusByNode(*status),
            (std::map<std::string, double>{
                {c.node(0).id().Hex(), 1}, {c.node(1).id().Hex(), 2}, {c.node(2).id().Hex(), 3}}));
  std::set<std::string> addresses;
  for (const auto& node : status->nodes()) {
    addresses.insert(node.address());
    auto total = ResourceSet::FromProto(node.total());
    ASSERT_TRUE(total.ok());
    // Each node's own custom resource, and only its own.
    for (int i = 0; i < 3; ++i) {
      const bool own = node.node_id() == c.node(i).id().Hex();
      EXPECT_EQ(total->Get("slot_" + std::to_string(i)), own ? 2 : 0) << node.node_id();
    }
  }
  // Each node has its own TCP endpoint (and directory and socket).
  std::set<std::string> expected;
  for (int i = 0; i < 3; ++i) expected.insert(absl::StrCat("127.0.0.1:", c.node(i).port()));
  EXPECT_EQ(addresses, expected);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.node(i).socket_path(), c.node_dir(i) + "/node.sock");
    EXPECT_EQ(::access(c.node(i).socket_path().c_str(), F_OK), 0);
  }
}

TEST(MiniClusterTest, AStoppedNodeLeavesTheHeadsTable) {
  auto cluster = MiniCluster::Create();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  MiniCluster& c = **cluster;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.AddNode({{"CPU", 1}}).ok());
  const std::string gone = c.node(1).id().Hex();
  c.StopNode(1);
  EXPECT_EQ(::access(c.node_dir(1).c_str(), F_OK), -1);
  // The head learns it when the node's connection closes, on its own loop.
  std::map<std::string, double> cpus;
  EXPECT_TRUE(WaitFor(
      [&] {
        auto status = c.ClusterStatus();
        cpus = status.ok() ? CpusByNode(*status) : std::map<std::string, double>{};
        return cpus.size() == 2;
      },
      10s));
  EXPECT_EQ(cpus.count(gone), 0u);
  EXPECT_EQ(cpus.count(c.node(0).id().Hex()), 1u);
  EXPECT_EQ(cpus.count(c.node(2).id().Hex()), 1u);
}

TEST(MiniClusterTest, StopRemovesEverythingItMade) {
  auto cluster = MiniCluster::Create();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->AddNode({{"CPU", 1}}).ok());
  ASSERT_TRUE((*cluster)->AddNode({{"CPU", 1}}).ok());
  const std::string dir = (*cluster)->dir();
  EXPECT_EQ(::access(dir.c_str(), F_OK), 0);
  (*cluster)->Stop();
  EXPECT_EQ(::access(dir.c_str(), F_OK), -1);
}

TEST(MiniClusterTest, ANodeWithBadResourcesIsRefused) {
  auto cluster = MiniCluster::Create();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto index = (*cluster)->AddNode({{"CPU", -1}});
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*cluster)->num_nodes(), 0);
}

}  // namespace
}  // namespace raio::testkit
