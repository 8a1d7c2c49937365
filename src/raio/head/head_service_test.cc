#include "raio/head/head_service.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "absl/strings/str_cat.h"
#include "raio/actor.pb.h"
#include "raio/common/config.h"
#include "raio/common/event_loop.h"
#include "raio/head.pb.h"
#include "raio/node.pb.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/listener.h"
#include "raio/rpc/service.h"
#include "raio/testkit/time_scale.h"
#include "raio/testkit/wait.h"

namespace raio::head {
namespace {

using namespace std::chrono_literals;

class HeadServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto head = HeadService::Create({});
    ASSERT_TRUE(head.ok()) << head.status();
    head_ = std::move(*head);
    loop_.Start();
  }
  void TearDown() override {
    head_->Stop();
    loop_.Stop();
  }
  // A client that answers GET_NODE_STATS like a node.
  std::shared_ptr<rpc::Connection> Connect(const std::string& node_id) {
    auto conn = rpc::ConnectTcp(loop_.io(), head_->address(), testkit::Scaled(2s));
    EXPECT_TRUE(conn.ok()) << conn.status();
    (*conn)->Start(
        [node_id](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
                  std::string_view) {
          proto::NodeStats stats;
          stats.set_node_id(node_id);
          c->Reply(h, stats);
        },
        nullptr);
    return *conn;
  }
  absl::Status Register(rpc::Connection& conn, const std::string& node_id, double cpus) {
    proto::RegisterNodeRequest req;
    req.set_node_id(node_id);
    req.mutable_address()->set_unix_socket("/tmp/x.sock");
    req.mutable_address()->set_ip("127.0.0.1");
    req.mutable_address()->set_port(1);
    (*req.mutable_total()->mutable_amounts())["CPU"] = cpus;
    return rpc::CallSync(conn, proto::REGISTER_NODE, req, testkit::Scaled(2s)).status();
  }
  proto::ClusterStatus Status(rpc::Connection& conn) {
    auto r = rpc::CallSync(conn, proto::GET_CLUSTER_STATUS, proto::Empty(), testkit::Scaled(5s));
    proto::ClusterStatus s;
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) s.ParseFromString(*r);
    return s;
  }

  EventLoop loop_{"test-client"};
  std::unique_ptr<HeadService> head_;
};

TEST_F(HeadServiceTest, SecondRegistrationOfALiveNodeIdIsRefusedAndKeepsTheNode) {
  auto real = Connect("n1");
  ASSERT_TRUE(Register(*real, "n1", 4).ok());
  auto fake = Connect("n1");
  absl::Status s = Register(*fake, "n1", 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  // The refused connection registers a node of its own, so that the head's handling of its
  // close shows: that node is listed dead once the head has handled it.
  ASSERT_TRUE(Register(*fake, "n2", 1).ok());
  fake->Close(absl::CancelledError("gone"));
  auto probe = Connect("probe");
  EXPECT_TRUE(testkit::WaitFor([&] { return Status(*probe).dead_nodes_size() > 0; }, 5s));
  // The real node is still listed.
  proto::ClusterStatus status = Status(*probe);
  ASSERT_EQ(status.nodes_size(), 1);
  EXPECT_EQ(status.nodes(0).node_id(), "n1");
  ASSERT_EQ(status.dead_nodes_size(), 1);
  EXPECT_EQ(status.dead_nodes(0).node_id(), "n2");
}

TEST_F(HeadServiceTest, InvalidNodeRegistrationsAreRefused) {
  auto conn = Connect("x");
  EXPECT_EQ(Register(*conn, "", 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Register(*conn, "n2", -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Register(*conn, "n2", std::nan("")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Status(*conn).nodes_size(), 0);
}

TEST_F(HeadServiceTest, RegisterJobWithoutNodesFailsClearly) {
  auto conn = Connect("x");
  proto::RegisterJobRequest req;
  auto r = rpc::CallSync(*conn, proto::REGISTER_JOB, req, testkit::Scaled(2s));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(HeadServiceTest, ShutdownRequestsNeedTheHeadsToken) {
  std::atomic<int> shutdowns{0};
  head_->Stop();
  HeadService::Options options;
  options.shutdown_token = "s3cret-token";
  options.on_shutdown_request = [&shutdowns] { ++shutdowns; };
  auto head = HeadService::Create(options);
  ASSERT_TRUE(head.ok()) << head.status();
  head_ = std::move(*head);
  auto conn = Connect("x");
  proto::ShutdownClusterRequest req;
  EXPECT_EQ(rpc::CallSync<proto::SHUTDOWN_CLUSTER>(*conn, req).status().code(),
            absl::StatusCode::kPermissionDenied);
  req.set_token("s3cret-tokeN");
  EXPECT_EQ(rpc::CallSync<proto::SHUTDOWN_CLUSTER>(*conn, req).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(shutdowns.load(), 0);
  req.set_token("s3cret-token");
  EXPECT_TRUE(rpc::CallSync<proto::SHUTDOWN_CLUSTER>(*conn, req).ok());
  EXPECT_EQ(shutdowns.load(), 1);
  // A head started without a token refuses them all.
  head_->Stop();
  HeadService::Options no_token;
  no_token.on_shutdown_request = [&shutdowns] { ++shutdowns; };
  head = HeadService::Create(no_token);
  ASSERT_TRUE(head.ok());
  head_ = std::move(*head);
  auto other = Connect("y");
  req.set_token("");
  EXPECT_EQ(rpc::CallSync<proto::SHUTDOWN_CLUSTER>(*other, req).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(shutdowns.load(), 1);
}

TEST_F(HeadServiceTest, NodesDriversAndStatusGetTheClustersConfiguration) {
  head_->Stop();
  HeadService::Options options;
  options.system_config = {{"lease_idle_timeout_ms", "50"}, {"prestart_worker", "false"}};
  auto head = HeadService::Create(options);
  ASSERT_TRUE(head.ok()) << head.status();
  head_ = std::move(*head);
  auto conn = Connect("n1");
  proto::RegisterNodeRequest node;
  node.set_node_id("n1");
  node.mutable_address()->set_unix_socket("/tmp/x.sock");
  node.mutable_address()->set_ip("127.0.0.1");
  node.mutable_address()->set_port(1);
  auto registered = rpc::CallSync<proto::REGISTER_NODE>(*conn, node);
  ASSERT_TRUE(registered.ok()) << registered.status();
  std::map<std::string, std::string> sent(registered->system_config().begin(),
                                          registered->system_config().end());
  EXPECT_EQ(sent, options.system_config);
  auto job = rpc::CallSync<proto::REGISTER_JOB>(*conn, proto::RegisterJobRequest());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->system_config().at("prestart_worker"), "false");
  EXPECT_EQ(Status(*conn).system_config().at("lease_idle_timeout_ms"), "50");
}

TEST_F(HeadServiceTest, MalformedAndUnservedRequestsGetClearErrorsAndTheHeadGoesOn) {
  auto conn = Connect("x");
  // Not a RegisterNodeRequest: field 1 (node_id, a proto3 string) is not UTF-8.
  proto::ObjectIdRequest junk;
  junk.set_object_id("\xff\xfe");
  auto r = rpc::CallSync(*conn, proto::REGISTER_NODE, junk, testkit::Scaled(2s));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("malformed REGISTER_NODE"), std::string::npos) << r.status();
  // A node method sent to the head.
  auto u = rpc::CallSync(*conn, proto::PUSH_TASK, proto::Empty(), testkit::Scaled(2s));
  EXPECT_EQ(u.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(u.status().message().find("PUSH_TASK"), std::string::npos) << u.status();
  EXPECT_TRUE(Register(*conn, "n9", 2).ok());
}

TEST_F(HeadServiceTest, ActorsCreatedThroughANodeArePlacedFoundAndDieWithTheirNode) {
  // A node that accepts every placement and hands it to the test.
  auto placed = std::make_shared<std::promise<proto::PlaceActorRequest>>();
  auto node = rpc::ConnectTcp(loop_.io(), head_->address(), testkit::Scaled(2s));
  ASSERT_TRUE(node.ok()) << node.status();
  (*node)->Start(
      [placed](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
               std::string_view body) {
        if (h.method == proto::PLACE_ACTOR) {
          proto::PlaceActorRequest req;
          req.ParseFromArray(body.data(), static_cast<int>(body.size()));
          placed->set_value(req);
          c->Reply(h, proto::PlaceActorReply());  // ACCEPTED
        } else {
          c->Reply(h, proto::NodeStats());
        }
      },
      nullptr);
  ASSERT_TRUE(Register(**node, "n1", 4).ok());
  auto driver = Connect("driver");
  proto::RegisterJobRequest job_req;
  job_req.set_executable("/bin/true");
  auto job = rpc::CallSync<proto::REGISTER_JOB>(*driver, job_req);
  ASSERT_TRUE(job.ok()) << job.status();

  proto::CreateActorRequest create;
  ActorId id = RandomId<ActorId>();
  create.mutable_spec()->set_actor_id(id.Binary());
  create.mutable_spec()->set_class_name("Counter");
  create.mutable_spec()->set_name("c");
  create.mutable_spec()->set_namespace_("ns");
  create.set_job_id(job->job_id());
  // Only through a node.
  EXPECT_EQ(rpc::CallSync<proto::CREATE_ACTOR>(*driver, create).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto created = rpc::CallSync<proto::CREATE_ACTOR>(**node, create);
  ASSERT_TRUE(created.ok()) << created.status();
  auto placement = placed->get_future();
  ASSERT_EQ(placement.wait_for(testkit::Scaled(5s)), std::future_status::ready);
  proto::PlaceActorRequest req = placement.get();
  EXPECT_EQ(req.spec().actor_id(), id.Binary());
  EXPECT_EQ(req.job().executable(), "/bin/true");

  // The node reports it alive: any client finds it by name and learns where it is.
  proto::ActorInfo alive;
  alive.set_actor_id(id.Binary());
  alive.set_state(proto::ACTOR_ALIVE);
  alive.mutable_address()->set_ip("127.0.0.1");
  alive.mutable_address()->set_port(4242);
  rpc::Notify<proto::REPORT_ACTOR_STATE>(**node, alive);
  proto::WaitActorRequest wait;
  wait.set_actor_id(id.Binary());
  auto info = rpc::CallSync<proto::WAIT_ACTOR>(*driver, wait, testkit::Scaled(5s));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state(), proto::ACTOR_ALIVE);
  EXPECT_EQ(info->address().port(), 4242);
  EXPECT_EQ(info->node_id(), "n1");
  proto::GetNamedActorRequest named;
  named.set_name("c");
  named.set_namespace_("ns");
  EXPECT_TRUE(rpc::CallSync<proto::GET_NAMED_ACTOR>(*driver, named).ok());
  auto list = rpc::CallSync<proto::LIST_CLUSTER_ACTORS>(*driver, proto::Empty());
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->actors_size(), 1);
  EXPECT_EQ(list->actors(0).node_id(), "n1");

  // The node's connection closes: a waiter for its next incarnation hears it is dead.
  auto waiter = std::async(std::launch::async, [&] {
    proto::WaitActorRequest next = wait;
    next.set_min_incarnation(1);
    return rpc::CallSync<proto::WAIT_ACTOR>(*driver, next, testkit::Scaled(10s));
  });
  (*node)->Close(absl::CancelledError("the node dies"));
  auto dead = waiter.get();
  ASSERT_TRUE(dead.ok()) << dead.status();
  EXPECT_EQ(dead->state(), proto::ACTOR_DEAD);
  EXPECT_NE(dead->death_cause().find("its node n1 left the cluster"), std::string::npos)
      << dead->death_cause();
  EXPECT_EQ(rpc::CallSync<proto::GET_NAMED_ACTOR>(*driver, named).status().code(),
            absl::StatusCode::kNotFound);
}

// A "node" that answers nothing at all (a paused daemon): its connection stays open.
std::shared_ptr<rpc::Connection> ConnectSilent(EventLoop& loop, const std::string& address) {
  auto conn = rpc::ConnectTcp(loop.io(), address, testkit::Scaled(2s));
  EXPECT_TRUE(conn.ok()) << conn.status();
  (*conn)->Start(
      [](const std::shared_ptr<rpc::Connection>&, const rpc::FrameHeader&, std::string_view) {},
      nullptr);
  return *conn;
}

proto::NodeList ListNodes(rpc::Connection& conn) {
  auto r = rpc::CallSync(conn, proto::LIST_NODES, proto::Empty(), testkit::Scaled(5s));
  proto::NodeList list;
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) list.ParseFromString(*r);
  return list;
}

TEST_F(HeadServiceTest, ANodeThatStopsAnsweringHealthChecksIsDeclaredDeadAndItsIdRefused) {
  // Checks every 50 ms (scaled: the healthy node must answer in time), dead after 3
  // failures: about 150 ms. The head reads these as it goes.
  const long long period_ms = testkit::ScaledMs(50ms);
  ASSERT_TRUE(config::ApplyOverrides({{"health_check_period_ms", absl::StrCat(period_ms)},
                                      {"health_check_timeout_ms", absl::StrCat(period_ms)},
                                      {"health_check_failure_threshold", "3"}})
                  .ok());
  auto healthy = Connect("n1");
  ASSERT_TRUE(Register(*healthy, "n1", 2).ok());
  auto paused = ConnectSilent(loop_, head_->address());
  // Registration is a call the silent node makes; its replies to the head never come.
  ASSERT_TRUE(Register(*paused, "n2", 2).ok());
  auto probe = Connect("probe");
  proto::NodeList list;
  bool dead = false;
  testkit::WaitFor(
      [&] {
        list = ListNodes(*probe);
        for (const auto& n : list.nodes()) dead |= n.node_id() == "n2" && n.state() == "dead";
        return dead;
      },
      5s);
  ASSERT_TRUE(dead) << list.DebugString();
  ASSERT_EQ(list.nodes_size(), 2);
  EXPECT_EQ(list.nodes(0).node_id(), "n1");
  EXPECT_EQ(list.nodes(0).state(), "alive");  // it answers
  EXPECT_EQ(list.nodes(1).death_cause(),
            absl::StrCat("missed 3 health checks in a row (no answer for about ",
                         absl::SixDigits(3 * static_cast<double>(period_ms) / 1000.0), " s)"));
  EXPECT_GT(list.nodes(1).death_time_ms(), 1'700'000'000'000);
  // The head closed its connection, and will not take its id again.
  EXPECT_TRUE(testkit::WaitFor([&] { return paused->closed(); }, 2s));
  auto back = Connect("n2");
  absl::Status s = Register(*back, "n2", 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("was declared dead (missed 3 health checks"), std::string::npos) << s;
  EXPECT_TRUE(Register(*back, "n3", 2).ok());
  proto::ClusterStatus status = Status(*probe);
  EXPECT_EQ(status.nodes_size(), 2);
  ASSERT_EQ(status.dead_nodes_size(), 1);
  EXPECT_EQ(status.dead_nodes(0).node_id(), "n2");
  ASSERT_TRUE(config::ResetToEnvironment().ok());
}

TEST_F(HeadServiceTest, ANodeWhoseConnectionClosesIsListedDeadWithThatCause) {
  auto node = Connect("n1");
  ASSERT_TRUE(Register(*node, "n1", 2).ok());
  node->Close(absl::CancelledError("the daemon was killed"));
  auto probe = Connect("probe");
  proto::NodeList list;
  testkit::WaitFor(
      [&] {
        list = ListNodes(*probe);
        return list.nodes_size() == 1 && list.nodes(0).state() == "dead";
      },
      2s);
  ASSERT_EQ(list.nodes_size(), 1);
  EXPECT_EQ(list.nodes(0).state(), "dead");
  EXPECT_EQ(list.nodes(0).death_cause(), "its connection to the head closed");
}

}  // namespace
}  // namespace raio::head
