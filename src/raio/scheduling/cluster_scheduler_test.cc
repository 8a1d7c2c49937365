#include "raio/scheduling/cluster_scheduler.h"

#include <gtest/gtest.h>

#include <set>

#include "absl/strings/escaping.h"

namespace raio::scheduling {
namespace {

using Kind = ClusterScheduler::Decision::Kind;

ResourceSet Res(std::map<std::string, double> m) { return *ResourceSet::FromMap(m); }

proto::NodeInfo Info(const std::string& id, std::map<std::string, double> total,
                     std::map<std::string, double> available, uint64_t version = 1,
                     std::map<std::string, std::string> labels = {}) {
  proto::NodeInfo n;
  n.set_node_id(id);
  n.mutable_address()->set_ip("10.0.0." + std::to_string(id.size()));
  n.mutable_address()->set_port(1000);
  Res(total).ToProto(n.mutable_total());
  Res(available).ToProto(n.mutable_available());
  n.set_resource_version(version);
  n.mutable_labels()->insert(labels.begin(), labels.end());
  return n;
}

class ClusterSchedulerTest : public ::testing::Test {
 protected:
  void SetLocal(std::map<std::string, double> total, std::map<std::string, double> available,
                std::map<std::string, std::string> labels = {}) {
    NodeView v;
    v.node_id = "local";
    v.total = Res(total);
    v.available = Res(available);
    v.labels = std::move(labels);
    view_.SetLocal(std::move(v));
  }
  void Add(const proto::NodeInfo& info) {
    proto::ClusterViewUpdate u;
    *u.add_nodes() = info;
    view_.Apply(u);
  }
  ClusterScheduler::Decision Decide(std::map<std::string, double> demand, bool local_has_room,
                                    proto::SchedulingStrategy strategy = {},
                                    std::map<std::string, std::string> selector = {}) {
    return scheduler_.Decide(Res(demand), strategy, selector, local_has_room);
  }

  ClusterView view_{"local"};
  ClusterScheduler scheduler_{view_, 0.5, 0.2, 7};
};

TEST_F(ClusterSchedulerTest, PacksOntoTheLocalNodeWhileItIsUnderTheThreshold) {
  SetLocal({{"CPU", 4}}, {{"CPU", 4}});
  Add(Info("b", {{"CPU", 4}}, {{"CPU", 4}}));
  EXPECT_EQ(Decide({{"CPU", 1}}, true).kind, Kind::kLocal);
}

TEST_F(ClusterSchedulerTest, SpillsToTheNodeWithRoomWhenTheLocalNodeIsFull) {
  SetLocal({{"CPU", 2}}, {});
  Add(Info("b", {{"CPU", 2}}, {}));
  Add(Info("c", {{"CPU", 2}}, {{"CPU", 2}}));
  auto d = Decide({{"CPU", 1}}, false);
  EXPECT_EQ(d.kind, Kind::kSpill);
  EXPECT_EQ(d.node_id, "c");
  EXPECT_TRUE(d.grant_or_reject);
}

TEST_F(ClusterSchedulerTest, QueuesLocallyWhenNoNodeHasRoomAndThisOneCouldRunIt) {
  SetLocal({{"CPU", 2}}, {});
  Add(Info("b", {{"CPU", 2}}, {}));
  EXPECT_EQ(Decide({{"CPU", 1}}, false).kind, Kind::kLocal);
}

TEST_F(ClusterSchedulerTest, ADemandOnlyAnotherNodeCanMeetGoesThereAtOnce) {
  SetLocal({{"CPU", 2}}, {{"CPU", 2}});
  Add(Info("gpu", {{"CPU", 2}, {"GPU", 1}}, {{"CPU", 2}}));  // its GPU is busy now
  auto d = Decide({{"GPU", 1}}, false);
  EXPECT_EQ(d.kind, Kind::kSpill);
  EXPECT_EQ(d.node_id, "gpu");
  EXPECT_FALSE(d.grant_or_reject);  // waits there
}

TEST_F(ClusterSchedulerTest, ADemandNoNodeCanMeetIsInfeasibleAndSaysWhy) {
  SetLocal({{"CPU", 2}}, {{"CPU", 2}});
  Add(Info("b", {{"CPU", 4}}, {{"CPU", 4}}));
  auto d = Decide({{"CPU", 8}}, false);
  EXPECT_EQ(d.kind, Kind::kInfeasible);
  EXPECT_FALSE(d.permanent);
  EXPECT_NE(d.message.find("CPU"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("no node of the cluster can ever meet it"), std::string::npos);
}

TEST_F(ClusterSchedulerTest, AboveTheThresholdSpreadsToTheLeastUsedNode) {
  SetLocal({{"CPU", 4}}, {{"CPU", 1}});        // 75% used before, 100% after
  Add(Info("b", {{"CPU", 4}}, {{"CPU", 2}}));  // 75% after
  Add(Info("c", {{"CPU", 4}}, {{"CPU", 4}}));  // 25% after: counts as 0
  for (int i = 0; i < 10; ++i) {
    auto d = Decide({{"CPU", 1}}, true);
    EXPECT_EQ(d.kind, Kind::kSpill);
    EXPECT_EQ(d.node_id, "c");
  }
}

TEST_F(ClusterSchedulerTest, SpreadRotatesOverNodesWithRoom) {
  SetLocal({{"CPU", 4}}, {{"CPU", 4}});
  Add(Info("b", {{"CPU", 4}}, {{"CPU", 4}}));
  Add(Info("c", {{"CPU", 4}}, {{"CPU", 4}}));
  proto::SchedulingStrategy spread;
  spread.set_kind(proto::SchedulingStrategy::SPREAD);
  std::map<std::string, int> counts;
  for (int i = 0; i < 9; ++i) {
    auto d = Decide({{"CPU", 1}}, true, spread);
    counts[d.kind == Kind::kLocal ? "local" : d.node_id]++;
  }
  EXPECT_EQ(counts["local"], 3);
  EXPECT_EQ(counts["b"], 3);
  EXPECT_EQ(counts["c"], 3);
}

TEST_F(ClusterSchedulerTest, HardAffinityGoesToItsNodeEvenWhenFullAndFailsForAnUnknownNode) {
  SetLocal({{"CPU", 4}}, {{"CPU", 4}});
  std::string b_id = absl::HexStringToBytes("0102030405060708");
  Add(Info("0102030405060708", {{"CPU", 1}}, {}));
  proto::SchedulingStrategy affinity;
  affinity.set_kind(proto::SchedulingStrategy::NODE_AFFINITY);
  affinity.set_node_id(b_id);
  auto d = Decide({{"CPU", 1}}, true, affinity);
  EXPECT_EQ(d.kind, Kind::kSpill);
  EXPECT_EQ(d.node_id, "0102030405060708");
  EXPECT_FALSE(d.grant_or_reject);
  affinity.set_node_id(absl::HexStringToBytes("ffffffffffffffff"));
  d = Decide({{"CPU", 1}}, true, affinity);
  EXPECT_EQ(d.kind, Kind::kInfeasible);
  EXPECT_TRUE(d.permanent);
  EXPECT_NE(d.message.find("ffffffffffffffff is not in the cluster"), std::string::npos)
      << d.message;
}

TEST_F(ClusterSchedulerTest, SoftAffinityFallsBackWhenItsNodeIsFullOrGone) {
  SetLocal({{"CPU", 4}}, {{"CPU", 4}});
  Add(Info("0102030405060708", {{"CPU", 1}}, {}));
  proto::SchedulingStrategy affinity;
  affinity.set_kind(proto::SchedulingStrategy::NODE_AFFINITY);
  affinity.set_node_id(absl::HexStringToBytes("0102030405060708"));
  affinity.set_soft(true);
  EXPECT_EQ(Decide({{"CPU", 1}}, true, affinity).kind, Kind::kLocal);
  affinity.set_node_id(absl::HexStringToBytes("ffffffffffffffff"));
  EXPECT_EQ(Decide({{"CPU", 1}}, true, affinity).kind, Kind::kLocal);
}

TEST_F(ClusterSchedulerTest, LabelSelectorsFilterNodes) {
  SetLocal({{"CPU", 4}}, {{"CPU", 4}}, {{"zone", "a"}});
  Add(Info("b", {{"CPU", 4}}, {{"CPU", 4}}, 1, {{"zone", "b"}, {"disk", "ssd"}}));
  Add(Info("c", {{"CPU", 4}}, {{"CPU", 4}}, 1, {{"zone", "c"}}));
  auto d = Decide({{"CPU", 1}}, true, {}, {{"zone", "b"}});
  EXPECT_EQ(d.node_id, "b");
  d = Decide({{"CPU", 1}}, true, {}, {{"zone", "in(c, d)"}});
  EXPECT_EQ(d.node_id, "c");
  d = Decide({{"CPU", 1}}, true, {}, {{"zone", "!a"}, {"disk", "!ssd"}});
  EXPECT_EQ(d.node_id, "c");
  d = Decide({{"CPU", 1}}, true, {}, {{"zone", "!in(a,b,c)"}});
  EXPECT_EQ(d.kind, Kind::kInfeasible);
  EXPECT_NE(d.message.find("label selector"), std::string::npos) << d.message;
}

TEST_F(ClusterSchedulerTest, OlderViewEntriesAreIgnoredAndRemovedNodesGo) {
  SetLocal({{"CPU", 1}}, {});
  Add(Info("b", {{"CPU", 4}}, {{"CPU", 4}}, /*version=*/5));
  Add(Info("b", {{"CPU", 4}}, {}, /*version=*/3));  // stale: ignored
  EXPECT_EQ(view_.Find("b")->available.Get("CPU"), 4);
  proto::ClusterViewUpdate u;
  u.add_removed_node_ids("b");
  u.add_removed_node_ids("local");  // never removes itself
  view_.Apply(u);
  EXPECT_EQ(view_.Find("b"), nullptr);
  EXPECT_NE(view_.Find("local"), nullptr);
}

TEST(LabelsTest, MalformedSelectorsAreRefused) {
  EXPECT_FALSE(ValidateLabelSelector({{"", "x"}}).ok());
  EXPECT_FALSE(ValidateLabelSelector({{"zone", "in(a,b"}}).ok());
  EXPECT_TRUE(ValidateLabelSelector({{"zone", "!in(a,b)"}}).ok());
  EXPECT_FALSE(*MatchLabels({}, {{"zone", "a"}}));
  EXPECT_TRUE(*MatchLabels({}, {{"zone", "!a"}}));
}

TEST(UtilisationTest, IsTheLargestShareOfAnyDemandedResource) {
  NodeView n;
  n.total = Res({{"CPU", 4}, {"GPU", 2}});
  n.available = Res({{"CPU", 4}, {"GPU", 1}});
  EXPECT_DOUBLE_EQ(ClusterScheduler::Utilisation(n, Res({{"CPU", 1}})), 0.25);
  EXPECT_DOUBLE_EQ(ClusterScheduler::Utilisation(n, Res({{"CPU", 1}, {"GPU", 1}})), 1.0);
}

}  // namespace
}  // namespace raio::scheduling
