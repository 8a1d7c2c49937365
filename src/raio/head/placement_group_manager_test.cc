// PlacementGroupManager alone: a fake set of nodes records every PREPARE / COMMIT /
// CANCEL_BUNDLES and the test answers them, so that each step of the two-phase reservation
// (a refused prepare, a node dying mid-way, a removal during an attempt) is taken by hand.
#include "raio/head/placement_group_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <set>

#include "raio/rpc.pb.h"

namespace raio::head {
namespace {

using ::testing::HasSubstr;

class FakeNodes : public PlacementGroupManager::Nodes {
 public:
  struct Call {
    proto::Method method;
    std::string node;
    proto::BundlesRequest request;
    std::function<void(absl::Status)> done;
  };
  void Send(proto::Method method, const std::string& node_id, const proto::BundlesRequest& request,
            std::function<void(absl::Status)> done) override {
    calls.push_back({method, node_id, request, std::move(done)});
  }
  void RunAfter(std::chrono::milliseconds, std::function<void()> fn) override {
    timers.push_back(std::move(fn));
  }
  int64_t NowMs() override { return 1000; }
  Call Take(proto::Method method) {
    EXPECT_FALSE(calls.empty());
    if (calls.empty()) return {};
    Call c = std::move(calls.front());
    calls.pop_front();
    EXPECT_EQ(c.method, method) << c.node;
    return c;
  }
  // Answers every queued call of `method` with OK; returns the nodes.
  std::multiset<std::string> AnswerAll(proto::Method method) {
    std::multiset<std::string> nodes;
    while (!calls.empty() && calls.front().method == method) {
      Call c = Take(method);
      nodes.insert(c.node);
      c.done(absl::OkStatus());
    }
    return nodes;
  }
  void FireTimers() {
    auto t = std::move(timers);
    timers.clear();
    for (auto& f : t) f();
  }
  std::deque<Call> calls;
  std::vector<std::function<void()>> timers;
};

proto::NodeInfo Node(const std::string& id, double cpus, double gpus = 0) {
  proto::NodeInfo n;
  n.set_node_id(id);
  (*n.mutable_total()->mutable_amounts())["CPU"] = cpus;
  (*n.mutable_available()->mutable_amounts())["CPU"] = cpus;
  if (gpus > 0) {
    (*n.mutable_total()->mutable_amounts())["GPU"] = gpus;
    (*n.mutable_available()->mutable_amounts())["GPU"] = gpus;
  }
  return n;
}

proto::PlacementGroupSpec Spec(std::vector<double> cpus, proto::PlacementStrategy strategy,
                               uint8_t id = 1, std::string name = "") {
  proto::PlacementGroupSpec spec;
  std::string bytes(8, '\0');
  bytes[7] = static_cast<char>(id);
  spec.set_placement_group_id(bytes);
  spec.set_strategy(strategy);
  spec.set_name(std::move(name));
  spec.set_job_id(1);
  for (double c : cpus) (*spec.add_bundles()->mutable_amounts())["CPU"] = c;
  return spec;
}

PlacementGroupId Id(uint8_t id) {
  std::string bytes(8, '\0');
  bytes[7] = static_cast<char>(id);
  return PlacementGroupId::FromBinary(bytes);
}

class PlacementGroupManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* id : {"a", "b", "c"}) pgs_.OnNodeUpdated(Node(id, 2));
  }
  // Runs the whole two-phase protocol with every node saying yes; returns the nodes that
  // got bundles (one entry per node).
  std::multiset<std::string> Reserve() {
    auto prepared = nodes_.AnswerAll(proto::PREPARE_BUNDLES);
    auto committed = nodes_.AnswerAll(proto::COMMIT_BUNDLES);
    EXPECT_EQ(prepared, committed);
    return committed;
  }
  proto::PlacementGroupState State(uint8_t id) { return pgs_.Get(Id(id))->state(); }
  std::vector<std::string> BundleNodes(uint8_t id) {
    std::vector<std::string> out;
    absl::StatusOr<proto::PlacementGroupInfo> info = pgs_.Get(Id(id));
    if (!info.ok()) return out;
    for (const auto& b : info->bundles()) out.push_back(b.node_id());
    return out;
  }
  FakeNodes nodes_;
  PlacementGroupManager pgs_{nodes_};
};

TEST_F(PlacementGroupManagerTest, StrictPackPutsEveryBundleOnOneNode) {
  ASSERT_TRUE(pgs_.Create(Spec({1, 1}, proto::STRICT_PACK)).ok());
  EXPECT_EQ(Reserve().size(), 1u);
  EXPECT_EQ(State(1), proto::PG_CREATED);
  auto where = BundleNodes(1);
  EXPECT_EQ(where[0], where[1]);
}

TEST_F(PlacementGroupManagerTest, StrictSpreadPutsEachBundleOnItsOwnNode) {
  ASSERT_TRUE(pgs_.Create(Spec({1, 1, 1}, proto::STRICT_SPREAD)).ok());
  EXPECT_EQ(Reserve(), (std::multiset<std::string>{"a", "b", "c"}));
  auto where = BundleNodes(1);
  EXPECT_EQ(std::set<std::string>(where.begin(), where.end()).size(), 3u);
}

TEST_F(PlacementGroupManagerTest, PackUsesSeveralNodesOnlyWhenOneCannotHoldAll) {
  ASSERT_TRUE(pgs_.Create(Spec({1, 1}, proto::PACK, 1)).ok());
  EXPECT_EQ(Reserve().size(), 1u);
  ASSERT_TRUE(pgs_.Create(Spec({2, 2}, proto::PACK, 2)).ok());
  EXPECT_EQ(Reserve().size(), 2u);
}

TEST_F(PlacementGroupManagerTest, SpreadReusesNodesWhenThereAreMoreBundlesThanNodes) {
  ASSERT_TRUE(pgs_.Create(Spec({0.5, 0.5, 0.5, 0.5}, proto::SPREAD)).ok());
  EXPECT_EQ(Reserve().size(), 3u);
  ASSERT_TRUE(pgs_.Create(Spec({0.5, 0.5, 0.5, 0.5}, proto::STRICT_SPREAD, 2)).ok());
  auto info = pgs_.Get(Id(2));
  EXPECT_TRUE(info->infeasible());
  EXPECT_THAT(info->message(), HasSubstr("no set of the cluster's nodes can ever hold"));
  EXPECT_THAT(info->message(), HasSubstr("STRICT_SPREAD"));
  EXPECT_THAT(info->message(), HasSubstr("node a {CPU: 2}"));
}

TEST_F(PlacementGroupManagerTest, ARefusedPrepareGivesBackTheOthersAndRetries) {
  ASSERT_TRUE(pgs_.Create(Spec({1, 1}, proto::STRICT_SPREAD)).ok());
  auto first = nodes_.Take(proto::PREPARE_BUNDLES);
  auto second = nodes_.Take(proto::PREPARE_BUNDLES);
  first.done(absl::OkStatus());
  second.done(absl::ResourceExhaustedError("busy"));
  // Only the node that prepared is told to cancel, and only this group's bundle there.
  auto cancel = nodes_.Take(proto::CANCEL_BUNDLES);
  EXPECT_EQ(cancel.node, first.node);
  ASSERT_EQ(cancel.request.bundles_size(), 1);
  cancel.done(absl::OkStatus());
  EXPECT_EQ(State(1), proto::PG_PENDING);
  EXPECT_THAT(pgs_.Get(Id(1))->message(), HasSubstr("busy"));
  EXPECT_TRUE(nodes_.calls.empty());
  nodes_.FireTimers();  // the backoff
  Reserve();
  EXPECT_EQ(State(1), proto::PG_CREATED);
}

TEST_F(PlacementGroupManagerTest, GroupsAreCreatedInCreationOrder) {
  // Group 1 fills a, b and c.
  ASSERT_TRUE(pgs_.Create(Spec({2, 2, 2}, proto::STRICT_SPREAD, 1)).ok());
  Reserve();
  for (const char* id : {"a", "b", "c"}) {
    auto n = Node(id, 2);
    (*n.mutable_available()->mutable_amounts())["CPU"] = 0;
    pgs_.OnNodeUpdated(n);
  }
  ASSERT_TRUE(pgs_.Create(Spec({2}, proto::PACK, 2)).ok());
  ASSERT_TRUE(pgs_.Create(Spec({1}, proto::PACK, 3)).ok());
  EXPECT_TRUE(nodes_.calls.empty());
  EXPECT_EQ(State(2), proto::PG_PENDING);
  // One CPU frees up: group 3 would fit, but group 2 is first and holds it back.
  auto n = Node("a", 2);
  (*n.mutable_available()->mutable_amounts())["CPU"] = 1;
  pgs_.OnNodeUpdated(n);
  EXPECT_TRUE(nodes_.calls.empty());
  // Removing group 1 frees everything: 2, then 3.
  bool removed = false;
  pgs_.Remove(Id(1), "test", [&](absl::Status s) { removed = s.ok(); });
  nodes_.AnswerAll(proto::CANCEL_BUNDLES);
  EXPECT_TRUE(removed);
  for (const char* id : {"a", "b", "c"}) pgs_.OnNodeUpdated(Node(id, 2));
  Reserve();
  EXPECT_EQ(State(2), proto::PG_CREATED);
  EXPECT_EQ(State(3), proto::PG_PENDING);
  Reserve();
  EXPECT_EQ(State(3), proto::PG_CREATED);
}

TEST_F(PlacementGroupManagerTest, AWaitingGroupHoldsBackOnlyTheGroupsThatWantItsResources) {
  auto n = Node("a", 2);
  (*n.mutable_total()->mutable_amounts())["special"] = 1;  // in use: available has none
  pgs_.OnNodeUpdated(n);
  auto special = Spec({}, proto::PACK, 1);
  (*special.add_bundles()->mutable_amounts())["special"] = 1;
  ASSERT_TRUE(pgs_.Create(special).ok());
  EXPECT_TRUE(nodes_.calls.empty());
  // Wants other resources: goes ahead.
  ASSERT_TRUE(pgs_.Create(Spec({1}, proto::PACK, 2)).ok());
  Reserve();
  EXPECT_EQ(State(2), proto::PG_CREATED);
  // Wants `special` too: waits behind group 1.
  auto both = Spec({1}, proto::PACK, 3);
  (*both.mutable_bundles(0)->mutable_amounts())["special"] = 1;
  ASSERT_TRUE(pgs_.Create(both).ok());
  EXPECT_TRUE(nodes_.calls.empty());
  EXPECT_THAT(pgs_.Get(Id(3))->message(), HasSubstr("waiting behind placement group"));
  // GPU amounts above 1 are whole devices.
  auto gpus = Spec({}, proto::PACK, 4);
  (*gpus.add_bundles()->mutable_amounts())["GPU"] = 1.5;
  EXPECT_THAT(pgs_.Create(gpus).status().message(), HasSubstr("whole number"));
}

TEST_F(PlacementGroupManagerTest, ANodeDeathReschedulesOnlyItsBundles) {
  ASSERT_TRUE(pgs_.Create(Spec({1, 1}, proto::STRICT_SPREAD)).ok());
  Reserve();
  auto where = BundleNodes(1);
  pgs_.OnNodeRemoved(where[0]);
  EXPECT_EQ(State(1), proto::PG_RESCHEDULING);
  auto prepare = nodes_.Take(proto::PREPARE_BUNDLES);
  EXPECT_NE(prepare.node, where[0]);
  EXPECT_NE(prepare.node, where[1]);  // strict spread: not beside the other bundle
  ASSERT_EQ(prepare.request.bundles_size(), 1);
  EXPECT_EQ(prepare.request.bundles(0).index(), 0u);
  prepare.done(absl::OkStatus());
  nodes_.AnswerAll(proto::COMMIT_BUNDLES);
  EXPECT_EQ(State(1), proto::PG_CREATED);
  EXPECT_EQ(BundleNodes(1)[1], where[1]);
}

TEST_F(PlacementGroupManagerTest, RemovalDuringAnAttemptCancelsWhatWasPrepared) {
  ASSERT_TRUE(pgs_.Create(Spec({1}, proto::PACK)).ok());
  auto prepare = nodes_.Take(proto::PREPARE_BUNDLES);
  bool removed = false;
  pgs_.Remove(Id(1), "by the user", [&](absl::Status s) { removed = s.ok(); });
  EXPECT_FALSE(removed);
  prepare.done(absl::OkStatus());
  auto cancel = nodes_.Take(proto::CANCEL_BUNDLES);
  EXPECT_EQ(cancel.node, prepare.node);
  cancel.done(absl::OkStatus());
  EXPECT_TRUE(removed);
  EXPECT_EQ(State(1), proto::PG_REMOVED);
  EXPECT_EQ(pgs_.TakeRemoved(), std::vector<std::string>{Id(1).Binary()});
}

TEST_F(PlacementGroupManagerTest, WaitAnswersWhenCreatedOrAfterItsTimeout) {
  ASSERT_TRUE(pgs_.Create(Spec({1}, proto::PACK)).ok());
  std::optional<proto::PlacementGroupState> seen;
  pgs_.Wait(Id(1), std::chrono::milliseconds(5000),
            [&](absl::StatusOr<proto::PlacementGroupInfo> i) { seen = i->state(); });
  EXPECT_FALSE(seen);
  Reserve();
  EXPECT_EQ(seen, proto::PG_CREATED);
  ASSERT_TRUE(pgs_.Create(Spec({100}, proto::PACK, 2)).ok());
  std::optional<proto::PlacementGroupInfo> infeasible;
  pgs_.Wait(Id(2), std::chrono::milliseconds(5000),
            [&](absl::StatusOr<proto::PlacementGroupInfo> i) { infeasible = *i; });
  ASSERT_TRUE(infeasible);
  EXPECT_TRUE(infeasible->infeasible());
  bool not_found = false;
  pgs_.Wait(Id(9), std::chrono::milliseconds(1), [&](absl::StatusOr<proto::PlacementGroupInfo> i) {
    not_found = i.status().code() == absl::StatusCode::kNotFound;
  });
  EXPECT_TRUE(not_found);
}

TEST_F(PlacementGroupManagerTest, BadSpecsAreRefusedNamingTheProblem) {
  auto empty = Spec({}, proto::PACK);
  EXPECT_THAT(pgs_.Create(empty).status().message(), HasSubstr("at least one bundle"));
  auto zero = Spec({0}, proto::PACK);
  EXPECT_THAT(pgs_.Create(zero).status().message(), HasSubstr("bundle 0: CPU: 0"));
  auto negative = Spec({-1}, proto::PACK);
  EXPECT_EQ(pgs_.Create(negative).status().code(), absl::StatusCode::kInvalidArgument);
  auto no_resources = Spec({1}, proto::PACK);
  no_resources.mutable_bundles(0)->clear_amounts();
  EXPECT_THAT(pgs_.Create(no_resources).status().message(), HasSubstr("has no resources"));
  ASSERT_TRUE(pgs_.Create(Spec({1}, proto::PACK, 1, "g")).ok());
  EXPECT_EQ(pgs_.Create(Spec({1}, proto::PACK, 2, "g")).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(pgs_.Create(Spec({1}, proto::PACK, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);  // id reused
  EXPECT_TRUE(pgs_.GetNamed("", "g").ok());
}

// A group of 100,000 bundles kept the head's loop busy past the nodes' health-check limit:
// every node took itself for cut off, again and again.
TEST_F(PlacementGroupManagerTest, AGroupOfMoreBundlesThanTheLimitIsRefusedNamingIt) {
  const int most = PlacementGroupManager::kMaxBundles;
  auto huge = Spec(std::vector<double>(most + 1, 0.001), proto::SPREAD);
  EXPECT_EQ(pgs_.Create(huge).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pgs_.Create(huge).status().message(), HasSubstr("of 10001 bundles: at most 10000"));
  EXPECT_TRUE(pgs_.Create(Spec(std::vector<double>(most, 0.001), proto::SPREAD, 2)).ok());
}

}  // namespace
}  // namespace raio::head
