// ActorSubmitter on a stepped loop against a fake node (WAIT_ACTOR) and fake actor
// processes (PUSH_ACTOR_TASK): a stream of calls across a restart of the actor, with the
// test choosing when each reply, crash and restart happens (docs/design/testing.md).
#include "raio/worker/actor_submitter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "raio/testkit/fakes.h"
#include "raio/testkit/object_result.h"
#include "raio/testkit/stepped_loop.h"
#include "raio/testkit/temp_dir.h"
#include "raio/testkit/time_scale.h"

namespace raio::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testkit::FakeNode;
using testkit::FakeWorker;

class ActorSubmitterTest : public ::testing::Test {
 protected:
  ~ActorSubmitterTest() override {
    {
      OutboxLock lock(&mu_, &outbox_);
      actors_.AssertHeld();
      actors_.Shutdown();
      tasks_.AssertHeld();
      tasks_.Shutdown();
    }
    loop_.RunUntilIdle();
  }

  // Calls `method` on the actor, as CoreWorker::SubmitActorTask does; returns the call's
  // task id.
  TaskId Call(const std::string& method) {
    const TaskId id = MakeTaskId(self_, next_task_++);
    proto::PushActorTaskRequest req;
    req.set_actor_id(actor_.Binary());
    req.set_method_name(method);
    req.mutable_spec()->set_function_name(method);
    req.mutable_spec()->set_task_id(id.Binary());
    OutboxLock lock(&mu_, &outbox_);
    objects_.Create(MakeObjectId(id, 1), /*local_refs=*/1);
    actors_.AssertHeld();
    actors_.Submit(actor_, std::move(req), MakeObjectId(id, 1), 1, {}, {});
    return id;
  }
  std::string Result(const TaskId& id) {
    OutboxLock lock(&mu_, &outbox_);
    return testkit::DescribeResult(objects_.Find(MakeObjectId(id, 1)));
  }
  // Takes the PUSH_ACTOR_TASK calls waiting at `worker`, as "<method> seq=<s> attempt=<a>".
  std::vector<std::string> TakePushes(FakeWorker& worker,
                                      std::vector<testkit::Received<proto::PUSH_ACTOR_TASK>>* out) {
    std::vector<std::string> seen;
    while (worker.HasCall()) {
      auto push = worker.Take<proto::PUSH_ACTOR_TASK>();
      if (!push) break;
      seen.push_back(absl::StrCat(push->request.method_name(), " seq=", push->request.sequence(),
                                  " attempt=", push->request.attempt()));
      out->push_back(*push);
    }
    return seen;
  }

  testkit::SteppedLoop loop_;
  testkit::TempDir dir_{"actors"};
  testkit::CallLog log_;
  FakeNode node_{loop_.io(), &log_};
  FakeWorker w1_{loop_.io(), dir_.path(), "w1", &log_};
  FakeWorker w2_{loop_.io(), dir_.path(), "w2", &log_};
  raio::Mutex mu_;
  Outbox outbox_{mu_};
  rpc::ConnectionPool pool_{
      loop_.io(), rpc::MakeSocketConnectionFactory(testkit::kFakeNodeId,
                                                   testkit::Scaled(std::chrono::seconds(5)))};
  raio::CondVar ready_cv_;
  std::atomic<uint64_t> completions_{0};
  ObjectTable objects_{{}};
  DependencyResolver resolver_{objects_};
  const WorkerId self_ = RandomId<WorkerId>();
  const ActorId actor_ = RandomId<ActorId>();
  uint64_t next_task_ = 1;
  std::shared_ptr<rpc::Connection> node_conn_ = node_.Connect();
  TaskSubmitter tasks_{mu_,       outbox_,      pool_,      ready_cv_,  completions_, objects_,
                       resolver_, loop_.loop(), node_conn_, "node-hex", self_};
  ActorSubmitter actors_{mu_,        outbox_, pool_,    loop_.loop(),
                         node_conn_, tasks_,  objects_, resolver_};
};

TEST_F(ActorSubmitterTest, RetryableCallsAreResentInOrderToTheRestartedActor) {
  const TaskId a = Call("A");
  const TaskId b = Call("B");
  const TaskId c = Call("C");
  loop_.RunUntilIdle();
  auto wait0 = node_.Take<proto::WAIT_ACTOR>();
  ASSERT_TRUE(wait0);
  EXPECT_EQ(wait0->request.actor_id(), actor_.Binary());
  EXPECT_EQ(wait0->request.min_incarnation(), 0u);
  wait0->Ok(FakeNode::Alive(w1_, /*incarnation=*/0, /*max_task_retries=*/1));
  loop_.RunUntilIdle();

  std::vector<testkit::Received<proto::PUSH_ACTOR_TASK>> first;
  EXPECT_THAT(TakePushes(w1_, &first),
              ElementsAre("A seq=1 attempt=0", "B seq=2 attempt=0", "C seq=3 attempt=0"));
  first[0].Ok(FakeWorker::Value("a"));
  loop_.RunUntilIdle();
  EXPECT_EQ(Result(a), "a");

  // The process dies with B and C unanswered; D comes while the actor restarts.
  w1_.Crash();
  loop_.RunUntilIdle();
  const TaskId d = Call("D");
  loop_.RunUntilIdle();
  auto wait1 = node_.Take<proto::WAIT_ACTOR>();
  ASSERT_TRUE(wait1);
  EXPECT_EQ(wait1->request.min_incarnation(), 1u);
  EXPECT_EQ(Result(b), "pending");
  wait1->Ok(FakeNode::Alive(w2_, /*incarnation=*/1, /*max_task_retries=*/1));
  loop_.RunUntilIdle();

  // The retried calls first, in their order, then D: submission order is kept.
  std::vector<testkit::Received<proto::PUSH_ACTOR_TASK>> second;
  EXPECT_THAT(TakePushes(w2_, &second),
              ElementsAre("B seq=4 attempt=1", "C seq=5 attempt=1", "D seq=6 attempt=0"));
  for (std::size_t i = 0; i < second.size(); ++i) {
    second[i].Ok(FakeWorker::Value(second[i].request.method_name()));
  }
  loop_.RunUntilIdle();
  EXPECT_EQ(Result(b), "B");
  EXPECT_EQ(Result(c), "C");
  EXPECT_EQ(Result(d), "D");
  EXPECT_THAT(log_.Take(),
              ElementsAre("node WAIT_ACTOR", "w1 PUSH_ACTOR_TASK", "w1 PUSH_ACTOR_TASK",
                          "w1 PUSH_ACTOR_TASK", "node WAIT_ACTOR", "w2 PUSH_ACTOR_TASK",
                          "w2 PUSH_ACTOR_TASK", "w2 PUSH_ACTOR_TASK"));
}

TEST_F(ActorSubmitterTest, CallsLostInARestartFailOnceTheActorIsBackWhenNotRetryable) {
  const TaskId a = Call("A");
  loop_.RunUntilIdle();
  node_.Take<proto::WAIT_ACTOR>()->Ok(FakeNode::Alive(w1_, 0, /*max_task_retries=*/0));
  loop_.RunUntilIdle();
  ASSERT_TRUE(w1_.Take<proto::PUSH_ACTOR_TASK>());
  w1_.Crash();
  loop_.RunUntilIdle();
  // Not failed yet: whether the actor is dead or restarted decides the error.
  EXPECT_EQ(Result(a), "pending");
  auto info = FakeNode::Alive(w2_, 1, 0);
  info.set_restart_cause("pid 7 was killed by signal 9");
  node_.Take<proto::WAIT_ACTOR>()->Ok(info);
  loop_.RunUntilIdle();
  EXPECT_THAT(Result(a), HasSubstr("error ACTOR_DIED: actor "));
  EXPECT_THAT(Result(a), HasSubstr("died while running A (pid 7 was killed by signal 9) and was "
                                   "restarted; the call was not retried"));
  EXPECT_FALSE(w2_.HasCall());
}

TEST_F(ActorSubmitterTest, CallsFailWithTheDeathCauseWhenTheActorDoesNotComeBack) {
  const TaskId a = Call("A");
  loop_.RunUntilIdle();
  node_.Take<proto::WAIT_ACTOR>()->Ok(FakeNode::Alive(w1_, 0, /*max_task_retries=*/-1));
  loop_.RunUntilIdle();
  ASSERT_TRUE(w1_.Take<proto::PUSH_ACTOR_TASK>());
  w1_.Crash();
  loop_.RunUntilIdle();
  node_.Take<proto::WAIT_ACTOR>()->Ok(FakeNode::Dead("its restarts ran out"));
  loop_.RunUntilIdle();
  EXPECT_THAT(Result(a), HasSubstr("is dead: its restarts ran out"));
  // Later calls fail at once, without asking the node again.
  const TaskId b = Call("B");
  EXPECT_THAT(Result(b), HasSubstr("is dead: its restarts ran out"));
  loop_.RunUntilIdle();
  EXPECT_FALSE(node_.HasCall());
}

TEST_F(ActorSubmitterTest, AnErrorAnswerFailsThatCallOnlyAndTheActorGoesOn) {
  const TaskId a = Call("A");
  const TaskId b = Call("B");
  loop_.RunUntilIdle();
  node_.Take<proto::WAIT_ACTOR>()->Ok(FakeNode::Alive(w1_, 0, /*max_task_retries=*/-1));
  loop_.RunUntilIdle();
  auto push_a = w1_.Take<proto::PUSH_ACTOR_TASK>();
  auto push_b = w1_.Take<proto::PUSH_ACTOR_TASK>();
  ASSERT_TRUE(push_a && push_b);
  // The process is alive and refuses A (as its service answers a request it cannot parse):
  // A fails with that error, not retried, and nothing waits for a restart.
  push_a->Error(absl::InvalidArgumentError("malformed PUSH_ACTOR_TASK request"));
  loop_.RunUntilIdle();
  EXPECT_EQ(Result(a),
            "error SERIALIZATION: the actor could not run A: malformed PUSH_ACTOR_TASK request");
  EXPECT_FALSE(node_.HasCall());
  EXPECT_FALSE(w1_.HasCall());
  push_b->Ok(FakeWorker::Value("b"));
  loop_.RunUntilIdle();
  EXPECT_EQ(Result(b), "b");
  // The same connection takes the next call.
  const TaskId c = Call("C");
  loop_.RunUntilIdle();
  auto push_c = w1_.Take<proto::PUSH_ACTOR_TASK>();
  ASSERT_TRUE(push_c);
  EXPECT_EQ(push_c->request.sequence(), push_b->request.sequence() + 1);
  push_c->Ok(FakeWorker::Value("c"));
  loop_.RunUntilIdle();
  EXPECT_EQ(Result(c), "c");
  EXPECT_FALSE(node_.HasCall());
}

}  // namespace
}  // namespace raio::worker
