// ActorDirectory alone: a fake set of nodes records every PLACE_ACTOR and KILL_LOCAL_ACTOR
// and the test answers them, so that each interleaving (a rejection, a node leaving while
// a placement is unanswered, a kill during a placement) is stepped through by hand.
#include "raio/head/actor_directory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <set>

#include "absl/strings/escaping.h"

namespace raio::head {
namespace {

using ::testing::HasSubstr;

class FakeNodes : public ActorDirectory::Nodes {
 public:
  struct PlaceCall {
    std::string node;
    proto::PlaceActorRequest request;
    std::function<void(absl::StatusOr<proto::PlaceActorReply>)> done;
  };
  struct KillCall {
    std::string node;
    proto::KillActorRequest request;
    std::function<void(absl::Status)> done;
  };
  void Place(const std::string& node_id, const proto::PlaceActorRequest& request,
             std::function<void(absl::StatusOr<proto::PlaceActorReply>)> done) override {
    places.push_back({node_id, request, std::move(done)});
  }
  void Kill(const std::string& node_id, const proto::KillActorRequest& request,
            std::function<void(absl::Status)> done) override {
    kills.push_back({node_id, request, std::move(done)});
  }
  PlaceCall TakePlace() {
    EXPECT_FALSE(places.empty());
    if (places.empty()) return {};
    PlaceCall c = std::move(places.front());
    places.pop_front();
    return c;
  }
  KillCall TakeKill() {
    EXPECT_FALSE(kills.empty());
    if (kills.empty()) return {};
    KillCall c = std::move(kills.front());
    kills.pop_front();
    return c;
  }
  std::deque<PlaceCall> places;
  std::deque<KillCall> kills;
};

proto::PlaceActorReply Accepted(bool waiting = false) {
  proto::PlaceActorReply reply;
  reply.set_result(proto::PlaceActorReply::ACCEPTED);
  reply.set_waiting_for_resources(waiting);
  return reply;
}

proto::PlaceActorReply Rejected() {
  proto::PlaceActorReply reply;
  reply.set_result(proto::PlaceActorReply::REJECTED);
  return reply;
}

proto::NodeInfo Node(const std::string& id, const std::map<std::string, double>& total,
                     const std::map<std::string, std::string>& labels = {}) {
  proto::NodeInfo info;
  info.set_node_id(id);
  info.mutable_address()->set_ip("10.0.0.1");
  info.mutable_address()->set_port(7000);
  for (const auto& [name, amount] : total) {
    (*info.mutable_total()->mutable_amounts())[name] = amount;
    (*info.mutable_available()->mutable_amounts())[name] = amount;
  }
  info.mutable_labels()->insert(labels.begin(), labels.end());
  return info;
}

// Hex node ids, as the head's node table keys them (NodeAffinity takes the bytes).
const std::string kA = "00000000000000aa";
const std::string kB = "00000000000000bb";
const std::string kC = "00000000000000cc";

class ActorDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override { Make({}); }
  void Make(ActorDirectory::Options options) {
    dir_ = std::make_unique<ActorDirectory>(nodes_, options);
    dir_->OnNodeUpdated(Node(kA, {{"CPU", 2}}, {{"zone", "a"}}));
    dir_->OnNodeUpdated(Node(kB, {{"CPU", 2}}, {{"zone", "b"}}));
    dir_->OnNodeUpdated(Node(kC, {{"CPU", 2}, {"special", 1}}, {{"zone", "c"}}));
  }
  proto::ActorSpec Spec(const std::string& name = "", const std::string& ns = "ns",
                        const std::map<std::string, double>& resources = {}) {
    proto::ActorSpec spec;
    ActorId id = RandomId<ActorId>();
    spec.set_actor_id(id.Binary());
    spec.set_class_name("Counter");
    spec.set_factory_name("Counter::Create");
    spec.set_name(name);
    spec.set_namespace_(ns);
    for (const auto& [r, amount] : resources)
      (*spec.mutable_resources()->mutable_amounts())[r] = amount;
    return spec;
  }
  proto::JobConfigInfo Job(uint32_t id = 1) {
    proto::JobConfigInfo job;
    job.set_job_id(id);
    job.set_executable("/bin/app");
    job.set_running(true);
    return job;
  }
  static ActorId IdOf(const proto::ActorSpec& spec) { return ActorId::FromBinary(spec.actor_id()); }
  static proto::ActorInfo Report(const proto::ActorSpec& spec, proto::ActorState state,
                                 uint32_t incarnation = 0, const std::string& cause = "") {
    proto::ActorInfo info;
    info.set_actor_id(spec.actor_id());
    info.set_state(state);
    info.set_incarnation(incarnation);
    info.set_death_cause(cause);
    if (state == proto::ACTOR_ALIVE) {
      info.mutable_address()->set_ip("10.0.0.9");
      info.mutable_address()->set_port(9000 + static_cast<int>(incarnation));
    }
    return info;
  }
  // Creates `spec` from node `creator`, answers its placement with ACCEPTED and reports
  // it ALIVE; returns the node it went to.
  std::string CreateAlive(const proto::ActorSpec& spec, const std::string& creator = kA) {
    auto info = dir_->Create(spec, Job(), creator);
    EXPECT_TRUE(info.ok()) << info.status();
    auto place = nodes_.TakePlace();
    place.done(Accepted());
    dir_->OnReport(place.node, Report(spec, proto::ACTOR_ALIVE));
    return place.node;
  }
  // The outcome of a Wait, "" while unanswered.
  std::shared_ptr<std::string> WaitFor(const proto::ActorSpec& spec, uint32_t min = 0) {
    auto out = std::make_shared<std::string>();
    dir_->Wait(IdOf(spec), min, [out](absl::StatusOr<proto::ActorInfo> info) {
      if (!info.ok()) {
        *out = "error " + std::string(info.status().message());
      } else if (info->state() == proto::ACTOR_DEAD) {
        *out = "dead: " + info->death_cause();
      } else {
        *out = "alive " + std::to_string(info->incarnation()) + " port " +
               std::to_string(info->address().port());
      }
    });
    return out;
  }

  FakeNodes nodes_;
  std::unique_ptr<ActorDirectory> dir_;
};

TEST_F(ActorDirectoryTest, AnActorWithRestartsLeftRestartsOnAnotherNodeWhenItsNodeDies) {
  auto spec = Spec("kept", "ns");
  spec.set_max_restarts(1);
  ASSERT_EQ(CreateAlive(spec, kB), kB);
  auto next = WaitFor(spec, 1);
  dir_->OnNodeRemoved(kB, "missed 10 health checks in a row");
  EXPECT_EQ(*next, "");  // restarting, not dead
  auto place = nodes_.TakePlace();
  EXPECT_NE(place.node, kB);
  EXPECT_EQ(place.request.incarnation(), 1u);
  EXPECT_EQ(place.request.num_restarts(), 1u);
  EXPECT_EQ(place.request.restart_reason(),
            "its node " + kB + " left the cluster (missed 10 health checks in a row)");
  // Its name stays taken meanwhile.
  ASSERT_TRUE(dir_->GetNamed("ns", "kept").ok());
  EXPECT_EQ(dir_->GetNamed("ns", "kept")->state(), proto::ACTOR_RESTARTING);
  place.done(Accepted());
  auto alive = Report(spec, proto::ACTOR_ALIVE, 1);
  alive.set_num_restarts(1);
  dir_->OnReport(place.node, alive);
  EXPECT_EQ(*next, "alive 1 port 9001");
  // Its one restart is used: the next node death buries it, saying so.
  auto last = WaitFor(spec, 2);
  dir_->OnNodeRemoved(place.node, "its connection to the head closed");
  EXPECT_EQ(*last, "dead: its node " + place.node +
                       " left the cluster (its connection to the head closed) and it had no "
                       "restarts left (1 of 1 used)");
  EXPECT_TRUE(nodes_.places.empty());
}

TEST_F(ActorDirectoryTest, PlacesOnTheCreatorsNodeWhileItHasRoom) {
  auto spec = Spec("", "ns", {{"CPU", 0.5}});
  auto info = dir_->Create(spec, Job(), kB);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state(), proto::ACTOR_PENDING);
  auto place = nodes_.TakePlace();
  EXPECT_EQ(place.node, kB);
  EXPECT_TRUE(place.request.grant_or_reject());
  EXPECT_EQ(place.request.job_id(), 1u);
  EXPECT_EQ(place.request.job().executable(), "/bin/app");
  EXPECT_EQ(IdOf(place.request.spec()), IdOf(spec));
}

TEST_F(ActorDirectoryTest, ADemandOnlyAnotherNodeMeetsGoesToThatNode) {
  auto info = dir_->Create(Spec("", "ns", {{"special", 1}}), Job(), kA);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(nodes_.TakePlace().node, kC);
}

TEST_F(ActorDirectoryTest, WaitIsAnsweredWhenTheNodeReportsItAliveAndAfterEachRestart) {
  auto spec = Spec("w");
  ASSERT_TRUE(dir_->Create(spec, Job(), kA).ok());
  auto place = nodes_.TakePlace();
  auto first = WaitFor(spec);
  place.done(Accepted());
  EXPECT_EQ(*first, "");
  dir_->OnReport(kA, Report(spec, proto::ACTOR_ALIVE));
  EXPECT_EQ(*first, "alive 0 port 9000");
  // After its process died: a waiter for the next incarnation waits for it.
  auto next = WaitFor(spec, 1);
  dir_->OnReport(kA, Report(spec, proto::ACTOR_RESTARTING, 1));
  EXPECT_EQ(*next, "");
  dir_->OnReport(kA, Report(spec, proto::ACTOR_ALIVE, 1));
  EXPECT_EQ(*next, "alive 1 port 9001");
  auto named = dir_->GetNamed("ns", "w");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->node_id(), kA);
  EXPECT_EQ(named->address().port(), 9001);
}

TEST_F(ActorDirectoryTest, UnknownActorsAreNotFound) {
  auto spec = Spec();
  EXPECT_THAT(*WaitFor(spec), HasSubstr("error no actor " + IdOf(spec).Hex()));
  EXPECT_EQ(dir_->GetNamed("ns", "nobody").status().code(), absl::StatusCode::kNotFound);
  bool done = false;
  dir_->Kill(IdOf(spec), true, [&](absl::Status s) { done = s.ok(); });
  EXPECT_TRUE(done);
}

TEST_F(ActorDirectoryTest, NamesAreUniquePerNamespaceAcrossTheClusterUntilTheActorDies) {
  auto first = Spec("svc", "team");
  EXPECT_EQ(CreateAlive(first, kA), kA);
  // From another node: refused, naming the actor, the namespace and where the other is.
  auto again = dir_->Create(Spec("svc", "team"), Job(2), kB);
  ASSERT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.status().message(), HasSubstr("'svc' already exists in namespace 'team'"));
  EXPECT_THAT(again.status().message(), HasSubstr("on node " + kA));
  EXPECT_TRUE(nodes_.places.empty());
  // Another namespace is fine.
  ASSERT_TRUE(dir_->Create(Spec("svc", "other"), Job(2), kB).ok());
  nodes_.TakePlace();
  // Once dead, the name is free.
  dir_->OnReport(kA, Report(first, proto::ACTOR_DEAD, 0, "its process died"));
  EXPECT_EQ(dir_->GetNamed("team", "svc").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(dir_->Create(Spec("svc", "team"), Job(2), kB).ok());
}

TEST_F(ActorDirectoryTest, ARejectedPlacementIsTriedOnAnotherNode) {
  auto spec = Spec("", "ns", {{"CPU", 2}});
  ASSERT_TRUE(dir_->Create(spec, Job(), kA).ok());
  auto place = nodes_.TakePlace();
  EXPECT_EQ(place.node, kA);
  EXPECT_TRUE(place.request.grant_or_reject());
  place.done(Rejected());  // its resources were taken meanwhile
  auto retry = nodes_.TakePlace();
  EXPECT_NE(retry.node, kA);
  EXPECT_TRUE(retry.request.grant_or_reject());
  retry.done(Accepted());
  dir_->OnReport(retry.node, Report(spec, proto::ACTOR_ALIVE));
  EXPECT_EQ(*WaitFor(spec), "alive 0 port 9000");
  // A report from a node it is not on is not taken.
  dir_->OnReport(kA, Report(spec, proto::ACTOR_DEAD, 0, "bogus"));
  EXPECT_EQ(*WaitFor(spec), "alive 0 port 9000");
}

TEST_F(ActorDirectoryTest, WithNoRoomAnywhereItWaitsOnTheCreatorsNode) {
  // Every node's CPUs are taken (their reports say so).
  for (const auto& id : {kA, kB, kC}) {
    proto::NodeInfo n = Node(id, {{"CPU", 2}});
    (*n.mutable_available()->mutable_amounts())["CPU"] = 0;
    n.set_resource_version(5);
    dir_->OnNodeUpdated(n);
  }
  auto spec = Spec("", "ns", {{"CPU", 1}});
  ASSERT_TRUE(dir_->Create(spec, Job(), kB).ok());
  auto place = nodes_.TakePlace();
  EXPECT_EQ(place.node, kB);
  EXPECT_FALSE(place.request.grant_or_reject());
  place.done(Accepted(/*waiting=*/true));
  auto list = dir_->List();
  ASSERT_EQ(list.actors_size(), 1);
  EXPECT_TRUE(list.actors(0).waiting_for_resources());
  EXPECT_FALSE(list.actors(0).infeasible());
  EXPECT_EQ(list.actors(0).node_id(), kB);
}

TEST_F(ActorDirectoryTest, InAnEmbeddedClusterADemandNoNodeMeetsFailsAtCreation) {
  Make({.fail_infeasible = true});
  auto info = dir_->Create(Spec("big", "ns", {{"GPU", 8}}), Job(), kA);
  ASSERT_EQ(info.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(info.status().message(), HasSubstr("actor Counter"));
  EXPECT_THAT(info.status().message(), HasSubstr("GPU: 8"));
  EXPECT_THAT(info.status().message(), HasSubstr("node " + kC + " {CPU: 2, special: 1}"));
  EXPECT_TRUE(nodes_.places.empty());
  // The name was not taken.
  EXPECT_TRUE(dir_->Create(Spec("big"), Job(), kA).ok());
  // A GPU demand above 1 must be whole, on any node.
  auto odd = dir_->Create(Spec("", "ns", {{"GPU", 1.5}}), Job(), kA);
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(odd.status().message(), HasSubstr("whole number"));
}

TEST_F(ActorDirectoryTest, InAStandaloneClusterItWaitsVisiblyForANodeThatCanHoldIt) {
  auto spec = Spec("late", "ns", {{"late", 1}});
  auto info = dir_->Create(spec, Job(), kA);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->infeasible());
  EXPECT_THAT(info->pending_reason(), HasSubstr("late: 1"));
  EXPECT_THAT(info->pending_reason(), HasSubstr("waits until a node that can joins"));
  EXPECT_TRUE(nodes_.places.empty());
  auto waiter = WaitFor(spec);
  // A report from an existing node changes nothing; a node that can hold it joining does.
  dir_->OnNodeUpdated(Node(kB, {{"CPU", 2}}));
  EXPECT_TRUE(nodes_.places.empty());
  const std::string kD = "00000000000000dd";
  dir_->OnNodeUpdated(Node(kD, {{"late", 1}}));
  auto place = nodes_.TakePlace();
  EXPECT_EQ(place.node, kD);
  place.done(Accepted());
  dir_->OnReport(kD, Report(spec, proto::ACTOR_ALIVE));
  EXPECT_EQ(*waiter, "alive 0 port 9000");
  EXPECT_FALSE(dir_->GetNamed("ns", "late")->infeasible());
}

TEST_F(ActorDirectoryTest, StrategiesAndLabelSelectorsPickTheNode) {
  // Hard affinity: that node, even from another creator.
  auto spec = Spec();
  spec.mutable_scheduling_strategy()->set_kind(proto::SchedulingStrategy::NODE_AFFINITY);
  spec.mutable_scheduling_strategy()->set_node_id(absl::HexStringToBytes(kB));
  ASSERT_TRUE(dir_->Create(spec, Job(), kA).ok());
  EXPECT_EQ(nodes_.TakePlace().node, kB);
  // Hard affinity to a node that is not in the cluster fails at once, even standalone.
  auto gone = Spec();
  gone.mutable_scheduling_strategy()->set_kind(proto::SchedulingStrategy::NODE_AFFINITY);
  gone.mutable_scheduling_strategy()->set_node_id(absl::HexStringToBytes("0000000000000001"));
  auto refused = dir_->Create(gone, Job(), kA);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("is not in the cluster"));
  // Soft: elsewhere.
  gone.set_actor_id(RandomId<ActorId>().Binary());
  gone.mutable_scheduling_strategy()->set_soft(true);
  ASSERT_TRUE(dir_->Create(gone, Job(), kA).ok());
  EXPECT_EQ(nodes_.TakePlace().node, kA);
  // Label selector.
  auto labelled = Spec();
  (*labelled.mutable_label_selector())["zone"] = "c";
  ASSERT_TRUE(dir_->Create(labelled, Job(), kA).ok());
  EXPECT_EQ(nodes_.TakePlace().node, kC);
  // SPREAD: three actors, three nodes.
  std::set<std::string> spread;
  for (int i = 0; i < 3; ++i) {
    auto s = Spec();
    s.mutable_scheduling_strategy()->set_kind(proto::SchedulingStrategy::SPREAD);
    ASSERT_TRUE(dir_->Create(s, Job(), kA).ok());
    spread.insert(nodes_.TakePlace().node);
  }
  EXPECT_EQ(spread, (std::set<std::string>{kA, kB, kC}));
}

TEST_F(ActorDirectoryTest, HardAffinityToAFullNodeWaitsThere) {
  proto::NodeInfo full = Node(kB, {{"CPU", 2}});
  (*full.mutable_available()->mutable_amounts())["CPU"] = 0;
  full.set_resource_version(3);
  dir_->OnNodeUpdated(full);
  auto spec = Spec("", "ns", {{"CPU", 1}});
  spec.mutable_scheduling_strategy()->set_kind(proto::SchedulingStrategy::NODE_AFFINITY);
  spec.mutable_scheduling_strategy()->set_node_id(absl::HexStringToBytes(kB));
  ASSERT_TRUE(dir_->Create(spec, Job(), kA).ok());
  auto place = nodes_.TakePlace();
  EXPECT_EQ(place.node, kB);
  EXPECT_FALSE(place.request.grant_or_reject());
}

TEST_F(ActorDirectoryTest, KillIsAnsweredOnceTheActorsNodeHasEndedIt) {
  auto spec = Spec("victim");
  EXPECT_EQ(CreateAlive(spec, kB), kB);
  auto waiter = WaitFor(spec, 1);
  bool done = false;
  dir_->Kill(IdOf(spec), /*no_restart=*/true, [&](absl::Status s) { done = s.ok(); });
  auto kill = nodes_.TakeKill();
  EXPECT_EQ(kill.node, kB);
  EXPECT_TRUE(kill.request.no_restart());
  EXPECT_FALSE(done);
  // The node reports the death before it answers (one connection, in order).
  dir_->OnReport(kB, Report(spec, proto::ACTOR_DEAD, 0, "it was killed with Kill()"));
  kill.done(absl::OkStatus());
  EXPECT_TRUE(done);
  EXPECT_EQ(*waiter, "dead: it was killed with Kill()");
  EXPECT_EQ(dir_->GetNamed("ns", "victim").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ActorDirectoryTest, AKillDuringItsPlacementFollowsItToTheNodeOrEndsItAtTheHead) {
  // The node took it: the kill went after the placement, on the same connection.
  auto taken = Spec();
  ASSERT_TRUE(dir_->Create(taken, Job(), kA).ok());
  auto place = nodes_.TakePlace();
  dir_->Kill(IdOf(taken), true, [](absl::Status) {});
  EXPECT_EQ(nodes_.TakeKill().node, kA);
  place.done(Accepted());
  // The node turned it down: it is dead, not placed again.
  auto refused = Spec();
  ASSERT_TRUE(dir_->Create(refused, Job(), kA).ok());
  place = nodes_.TakePlace();
  dir_->Kill(IdOf(refused), true, [](absl::Status) {});
  nodes_.TakeKill().done(absl::OkStatus());
  place.done(Rejected());
  EXPECT_TRUE(nodes_.places.empty());
  EXPECT_EQ(*WaitFor(refused), "dead: it was killed with Kill()");
}

TEST_F(ActorDirectoryTest, AKillOfAnActorWaitingAtTheHeadEndsItThere) {
  auto spec = Spec("waits", "ns", {{"TPU", 1}});
  ASSERT_TRUE(dir_->Create(spec, Job(), kA).ok());
  bool done = false;
  dir_->Kill(IdOf(spec), true, [&](absl::Status s) { done = s.ok(); });
  EXPECT_TRUE(done);
  EXPECT_TRUE(nodes_.kills.empty());
  EXPECT_EQ(*WaitFor(spec), "dead: it was killed with Kill()");
}

TEST_F(ActorDirectoryTest, ANodeLeavingKillsItsActorsNamingItAndPlacesUnansweredOnesElsewhere) {
  auto alive = Spec("on-b");
  EXPECT_EQ(CreateAlive(alive, kB), kB);
  auto waiter = WaitFor(alive, 1);
  auto placing = Spec("", "ns", {{"CPU", 1}});
  ASSERT_TRUE(dir_->Create(placing, Job(), kB).ok());
  auto first = nodes_.TakePlace();
  EXPECT_EQ(first.node, kB);
  dir_->OnNodeRemoved(kB);
  EXPECT_EQ(*waiter,
            "dead: its node " + kB + " left the cluster (its connection to the head closed)");
  EXPECT_EQ(dir_->GetNamed("ns", "on-b").status().code(), absl::StatusCode::kNotFound);
  auto second = nodes_.TakePlace();
  EXPECT_NE(second.node, kB);
  // The lost placement's late answer is not taken.
  first.done(absl::UnavailableError("connection closed"));
  second.done(Accepted());
  dir_->OnReport(second.node, Report(placing, proto::ACTOR_ALIVE));
  EXPECT_EQ(*WaitFor(placing), "alive 0 port 9000");
}

TEST_F(ActorDirectoryTest, AJobsEndKillsItsActorsButNotDetachedOnes) {
  auto plain = Spec("plain");
  auto detached = Spec("kept");
  detached.set_detached(true);
  CreateAlive(plain);
  CreateAlive(detached);
  auto waiter = WaitFor(plain, 1);
  dir_->OnJobFinished(1);
  EXPECT_EQ(*waiter, "dead: its job ended");
  EXPECT_EQ(dir_->GetNamed("ns", "plain").status().code(), absl::StatusCode::kNotFound);
  auto kept = dir_->GetNamed("ns", "kept");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->state(), proto::ACTOR_ALIVE);
  // The node's report of the death it caused changes nothing.
  dir_->OnReport(kA, Report(plain, proto::ACTOR_DEAD, 0, "its job ended"));
  // A job that ended creates no more actors, but a detached actor it made may.
  proto::JobConfigInfo ended = Job();
  ended.set_running(false);
  EXPECT_EQ(dir_->Create(Spec(), ended, kA).status().code(), absl::StatusCode::kFailedPrecondition);
  auto late = Spec();
  late.set_detached(true);
  ASSERT_TRUE(dir_->Create(late, ended, kA).ok());
  EXPECT_FALSE(nodes_.TakePlace().request.job().running());
}

TEST_F(ActorDirectoryTest, ListShowsEveryActorWithItsNodeAndState) {
  auto spec = Spec("listed");
  CreateAlive(spec, kC);
  auto list = dir_->List();
  ASSERT_EQ(list.actors_size(), 1);
  EXPECT_EQ(list.actors(0).node_id(), kC);
  EXPECT_EQ(list.actors(0).state(), proto::ACTOR_ALIVE);
  EXPECT_EQ(list.actors(0).name(), "listed");
  EXPECT_EQ(list.actors(0).job_id(), 1u);
  EXPECT_FALSE(list.actors(0).waiting_for_resources());
}

TEST_F(ActorDirectoryTest, StopAnswersEveryWaiter) {
  auto spec = Spec();
  ASSERT_TRUE(dir_->Create(spec, Job(), kA).ok());
  auto waiter = WaitFor(spec);
  dir_->Stop();
  EXPECT_EQ(*waiter, "error the head is stopping");
}

}  // namespace
}  // namespace raio::head
