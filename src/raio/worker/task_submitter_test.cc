// TaskSubmitter on a stepped loop against a fake node and fake workers: every lease
// request, push, cancel and return is seen and answered by the test, in the order the test
// chooses, and time moves only when it says (testkit/, docs/design/testing.md). No
// threads, no sleeps: each interleaving below is the one that runs.
#include "raio/worker/task_submitter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "raio/common/config.h"
#include "raio/testkit/fakes.h"
#include "raio/testkit/object_result.h"
#include "raio/testkit/stepped_loop.h"
#include "raio/testkit/temp_dir.h"
#include "raio/testkit/time_scale.h"

namespace raio::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testkit::FakeNode;
using testkit::FakeWorker;
using testkit::Received;

class TaskSubmitterTest : public ::testing::Test {
 protected:
  ~TaskSubmitterTest() override {
    {
      OutboxLock lock(&mu_, &outbox_);
      submitter_.AssertHeld();
      submitter_.Shutdown();
    }
    loop_.RunUntilIdle();
  }

  FakeWorker& AddWorker(const std::string& name) {
    workers_.push_back(std::make_unique<FakeWorker>(loop_.io(), dir_.path(), name, &log_));
    return *workers_.back();
  }

  // Submits a task of function `fn` demanding {CPU: 1}, with `max_retries`, as
  // CoreWorker::SubmitTask does; returns its task id.
  TaskId Submit(const std::string& fn, int max_retries = 0) {
    auto task = std::make_shared<TaskEntry>();
    const TaskId id = MakeTaskId(self_, next_task_++);
    task->task_id = id;
    task->return_id = MakeObjectId(id, 1);
    task->retries_left = max_retries;
    proto::TaskSpec* spec = task->request.mutable_spec();
    spec->set_function_name(fn);
    spec->set_task_id(id.Binary());
    spec->set_owner_worker_id(self_.Binary());
    auto cpu = ResourceSet::FromMap({{"CPU", 1}});
    OutboxLock lock(&mu_, &outbox_);
    objects_.Create(task->return_id, /*local_refs=*/1);
    submitter_.AssertHeld();
    submitter_.Submit(std::move(task), *cpu, {});
    return id;
  }
  void Cancel(const TaskId& id, bool force = false) {
    OutboxLock lock(&mu_, &outbox_);
    submitter_.AssertHeld();
    submitter_.Cancel(MakeObjectId(id, 1), force);
  }
  // The task's result: "pending", its value, or "error <type>: <message>".
  std::string Result(const TaskId& id) {
    OutboxLock lock(&mu_, &outbox_);
    return testkit::DescribeResult(objects_.Find(MakeObjectId(id, 1)));
  }
  std::size_t NumPendingTasks() {
    OutboxLock lock(&mu_, &outbox_);
    submitter_.AssertHeld();
    return submitter_.num_pending_tasks();
  }

  testkit::SteppedLoop loop_;
  testkit::TempDir dir_{"submitter"};
  testkit::CallLog log_;
  FakeNode node_{loop_.io(), &log_};
  std::deque<std::unique_ptr<FakeWorker>> workers_;
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
  uint64_t next_task_ = 1;
  TaskSubmitter submitter_{mu_,      outbox_,   pool_,        ready_cv_,       completions_,
                           objects_, resolver_, loop_.loop(), node_.Connect(), "node-hex",
                           self_};
};

TEST_F(TaskSubmitterTest, RetriesATaskOnANewLeaseWhenItsWorkerDies) {
  FakeWorker& w1 = AddWorker("w1");
  FakeWorker& w2 = AddWorker("w2");
  const TaskId task = Submit("f", /*max_retries=*/1);
  loop_.RunUntilIdle();

  auto lease1 = node_.Take<proto::REQUEST_WORKER_LEASE>();
  ASSERT_TRUE(lease1);
  EXPECT_EQ(lease1->request.function_name(), "f");
  EXPECT_EQ(lease1->request.backlog(), 1u);
  lease1->Ok(FakeNode::Granted(w1));
  loop_.RunUntilIdle();

  auto push1 = w1.Take<proto::PUSH_TASK>();
  ASSERT_TRUE(push1);
  EXPECT_EQ(push1->request.spec().task_id(), task.Binary());
  EXPECT_EQ(push1->request.attempt(), 0u);
  w1.Crash();  // before it answers
  loop_.RunUntilIdle();

  // The owner asks the node why before it decides: the task is still pending meanwhile.
  auto cause = node_.Take<proto::GET_WORKER_FAILURE_CAUSE>();
  ASSERT_TRUE(cause);
  EXPECT_EQ(cause->request.worker_id(), w1.id().Binary());
  EXPECT_EQ(Result(task), "pending");
  cause->Ok(FakeNode::CrashedRunning(task.Binary()));
  loop_.RunUntilIdle();

  auto lease2 = node_.Take<proto::REQUEST_WORKER_LEASE>();
  ASSERT_TRUE(lease2);
  EXPECT_NE(lease2->request.lease_id(), lease1->request.lease_id());
  lease2->Ok(FakeNode::Granted(w2));
  loop_.RunUntilIdle();

  auto push2 = w2.Take<proto::PUSH_TASK>();
  ASSERT_TRUE(push2);
  EXPECT_EQ(push2->request.attempt(), 1u);
  push2->Ok(FakeWorker::Value("42"));
  loop_.RunUntilIdle();

  EXPECT_EQ(Result(task), "42");
  EXPECT_THAT(log_.Take(), ElementsAre("node REQUEST_WORKER_LEASE", "w1 PUSH_TASK",
                                       "node GET_WORKER_FAILURE_CAUSE", "node REQUEST_WORKER_LEASE",
                                       "w2 PUSH_TASK"));
  EXPECT_FALSE(node_.HasCall());
}

TEST_F(TaskSubmitterTest, FailsWithWorkerCrashedWhenTheRetriesRunOut) {
  FakeWorker& w1 = AddWorker("w1");
  const TaskId task = Submit("f", /*max_retries=*/0);
  loop_.RunUntilIdle();
  node_.Take<proto::REQUEST_WORKER_LEASE>()->Ok(FakeNode::Granted(w1));
  loop_.RunUntilIdle();
  ASSERT_TRUE(w1.Take<proto::PUSH_TASK>());
  w1.Crash();
  loop_.RunUntilIdle();
  node_.Take<proto::GET_WORKER_FAILURE_CAUSE>()->Ok(FakeNode::CrashedRunning(task.Binary()));
  loop_.RunUntilIdle();

  // Named by the node its worker ran on (the fake node's id).
  EXPECT_THAT(Result(task), HasSubstr("error WORKER_CRASHED: the worker process running f on node "
                                      "66616b656e6f6465 died (pid 1234 was killed by signal 9"));
  EXPECT_THAT(Result(task), HasSubstr("and its 0 retries ran out"));
  EXPECT_EQ(NumPendingTasks(), 0u);
  EXPECT_FALSE(node_.HasCall());  // no new lease for it
}

TEST_F(TaskSubmitterTest, ATaskPipelinedBehindTheCrashedOneIsRequeuedWithoutUsingARetry) {
  FakeWorker& w1 = AddWorker("w1");
  FakeWorker& w2 = AddWorker("w2");
  const TaskId warmup = Submit("f");
  loop_.RunUntilIdle();
  // Saturated: the node has no room for another worker of this shape, so tasks may be
  // pipelined onto w1 once the function's time is known.
  node_.Take<proto::REQUEST_WORKER_LEASE>()->Ok(FakeNode::Granted(w1, /*saturated=*/true));
  loop_.RunUntilIdle();
  w1.Take<proto::PUSH_TASK>()->Ok(FakeWorker::Value("w"));
  loop_.RunUntilIdle();
  ASSERT_EQ(Result(warmup), "w");
  node_.TakeLog();

  // Ten more: one runs on w1; a busy worker takes only the tasks beyond those that the
  // class's open lease requests (at most 8) will serve, so one more is pipelined.
  std::vector<TaskId> tasks;
  for (int i = 0; i < 10; ++i) tasks.push_back(Submit("f", /*max_retries=*/0));
  loop_.RunUntilIdle();
  auto running = w1.Take<proto::PUSH_TASK>();
  auto queued = w1.Take<proto::PUSH_TASK>();
  ASSERT_TRUE(running && queued);
  EXPECT_EQ(running->request.spec().task_id(), tasks[0].Binary());
  EXPECT_EQ(queued->request.spec().task_id(), tasks[1].Binary());
  std::vector<Received<proto::REQUEST_WORKER_LEASE>> leases;
  while (node_.HasCall()) leases.push_back(*node_.Take<proto::REQUEST_WORKER_LEASE>());
  EXPECT_EQ(leases.size(),
            static_cast<std::size_t>(config::max_pending_lease_requests_per_class()));

  w1.Crash();
  loop_.RunUntilIdle();
  node_.Take<proto::GET_WORKER_FAILURE_CAUSE>()->Ok(FakeNode::CrashedRunning(tasks[0].Binary()));
  loop_.RunUntilIdle();
  // The one it was running used its (zero) retries; the one waiting behind it never ran.
  EXPECT_THAT(Result(tasks[0]), HasSubstr("error WORKER_CRASHED"));
  EXPECT_EQ(Result(tasks[1]), "pending");

  leases[0].Ok(FakeNode::Granted(w2, /*saturated=*/true));
  loop_.RunUntilIdle();
  auto again = w2.Take<proto::PUSH_TASK>();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->request.spec().task_id(), tasks[1].Binary());  // first in line again
  EXPECT_EQ(again->request.attempt(), 1u);
  again->Ok(FakeWorker::Value("1"));
  loop_.RunUntilIdle();
  EXPECT_EQ(Result(tasks[1]), "1");
}

TEST_F(TaskSubmitterTest, EveryPushCarriesTheCallersAddressInItsSpec) {
  proto::Address me;
  me.set_ip("10.0.0.7");
  me.set_port(4321);
  me.set_worker_id(self_.Binary());
  me.set_unix_socket(std::string(100, 's'));  // near the longest a socket path can be
  submitter_.SetCallerAddress(me);
  FakeWorker& w1 = AddWorker("w1");
  FakeWorker& w2 = AddWorker("w2");
  const TaskId task = Submit("f", /*max_retries=*/1);
  loop_.RunUntilIdle();
  node_.Take<proto::REQUEST_WORKER_LEASE>()->Ok(FakeNode::Granted(w1));
  loop_.RunUntilIdle();
  auto first = w1.Take<proto::PUSH_TASK>();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->request.spec().caller_address().SerializeAsString(), me.SerializeAsString());
  EXPECT_EQ(first->request.spec().function_name(), "f");  // merged into the spec, not over it
  EXPECT_EQ(first->request.spec().task_id(), task.Binary());
  EXPECT_EQ(first->request.attempt(), 0u);
  // The retry carries it too, with the next attempt number.
  w1.Crash();
  loop_.RunUntilIdle();
  node_.Take<proto::GET_WORKER_FAILURE_CAUSE>()->Ok(FakeNode::CrashedRunning(task.Binary()));
  loop_.RunUntilIdle();
  node_.Take<proto::REQUEST_WORKER_LEASE>()->Ok(FakeNode::Granted(w2));
  loop_.RunUntilIdle();
  auto second = w2.Take<proto::PUSH_TASK>();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->request.spec().caller_address().SerializeAsString(), me.SerializeAsString());
  EXPECT_EQ(second->request.attempt(), 1u);
  second->Ok(FakeWorker::Value("v"));
  loop_.RunUntilIdle();
  EXPECT_EQ(Result(task), "v");
}

TEST_F(TaskSubmitterTest, AnErrorAnswerFromTheWorkerFailsThatTaskAndKeepsTheLease) {
  FakeWorker& w1 = AddWorker("w1");
  const TaskId t1 = Submit("f", /*max_retries=*/3);
  loop_.RunUntilIdle();
  node_.Take<proto::REQUEST_WORKER_LEASE>()->Ok(FakeNode::Granted(w1));
  loop_.RunUntilIdle();
  // The worker is alive and refuses the request (as its service answers one it cannot
  // parse): the task fails with that error, without a retry or a question to the node.
  w1.Take<proto::PUSH_TASK>()->Error(absl::InvalidArgumentError("malformed PUSH_TASK request"));
  loop_.RunUntilIdle();
  EXPECT_EQ(Result(t1),
            "error SERIALIZATION: the worker could not run f: malformed PUSH_TASK "
            "request");
  EXPECT_FALSE(node_.HasCall());
  // The lease is still good: the next task goes to the same worker.
  const TaskId t2 = Submit("f");
  loop_.RunUntilIdle();
  auto push = w1.Take<proto::PUSH_TASK>();
  ASSERT_TRUE(push);
  EXPECT_EQ(push->request.spec().task_id(), t2.Binary());
  push->Ok(FakeWorker::Value("2"));
  loop_.RunUntilIdle();
  EXPECT_EQ(Result(t2), "2");
  EXPECT_THAT(log_.Take(),
              ElementsAre("node REQUEST_WORKER_LEASE", "w1 PUSH_TASK", "w1 PUSH_TASK"));
  EXPECT_EQ(NumPendingTasks(), 0u);
}

TEST_F(TaskSubmitterTest, CancelWhileTheLeaseIsRequestedCancelsTheRequest) {
  const TaskId task = Submit("f");
  loop_.RunUntilIdle();
  auto lease = node_.Take<proto::REQUEST_WORKER_LEASE>();
  ASSERT_TRUE(lease);

  Cancel(task);
  EXPECT_EQ(Result(task), "error TASK_CANCELLED: f was cancelled");
  loop_.RunUntilIdle();
  // Nothing is queued any more: the node must not keep a request for a task that is gone
  // (it would hold the next free CPU for it, ahead of other owners' requests).
  auto cancel = node_.Take<proto::CANCEL_WORKER_LEASE>();
  ASSERT_TRUE(cancel);
  EXPECT_EQ(cancel->request.lease_id(), lease->request.lease_id());
  cancel->Ok();
  lease->Ok(FakeNode::Cancelled());
  loop_.RunUntilIdle();

  EXPECT_THAT(log_.Take(), ElementsAre("node REQUEST_WORKER_LEASE", "node CANCEL_WORKER_LEASE"));
  EXPECT_FALSE(node_.HasCall());
  EXPECT_EQ(NumPendingTasks(), 0u);
}

TEST_F(TaskSubmitterTest, AGrantThatCrossesTheCancelRunsNothingAndIsReturnedWhenIdle) {
  FakeWorker& w1 = AddWorker("w1");
  const TaskId task = Submit("f");
  loop_.RunUntilIdle();
  auto lease = node_.Take<proto::REQUEST_WORKER_LEASE>();
  ASSERT_TRUE(lease);
  Cancel(task);
  loop_.RunUntilIdle();
  auto cancel = node_.Take<proto::CANCEL_WORKER_LEASE>();
  ASSERT_TRUE(cancel);
  // The node had granted the lease before the cancel came.
  lease->Ok(FakeNode::Granted(w1));
  cancel->Ok();
  loop_.RunUntilIdle();
  EXPECT_THAT(w1.PendingMethods(), IsEmpty());
  EXPECT_FALSE(node_.HasCall());

  // Kept for kLeaseIdleTimeout in case more tasks come, then returned.
  loop_.AdvanceTime(config::lease_idle_timeout_ms() - std::chrono::milliseconds(1));
  EXPECT_FALSE(node_.HasCall());
  loop_.AdvanceTime(std::chrono::milliseconds(1));
  auto ret = node_.Take<proto::RETURN_WORKER_LEASE>();
  ASSERT_TRUE(ret);
  EXPECT_EQ(ret->request.lease_id(), lease->request.lease_id());
  ret->Ok();
  loop_.RunUntilIdle();

  EXPECT_THAT(log_.Take(), ElementsAre("node REQUEST_WORKER_LEASE", "node CANCEL_WORKER_LEASE",
                                       "node RETURN_WORKER_LEASE"));
  EXPECT_EQ(Result(task), "error TASK_CANCELLED: f was cancelled");
}

TEST_F(TaskSubmitterTest, AGrantArrivingAfterTheQueueDrainedIsHeldIdleThenReturned) {
  FakeWorker& w1 = AddWorker("w1");
  FakeWorker& w2 = AddWorker("w2");
  const TaskId t1 = Submit("f");
  const TaskId t2 = Submit("f");
  loop_.RunUntilIdle();
  auto lease1 = node_.Take<proto::REQUEST_WORKER_LEASE>();
  auto lease2 = node_.Take<proto::REQUEST_WORKER_LEASE>();
  ASSERT_TRUE(lease1 && lease2);
  EXPECT_EQ(lease2->request.backlog(), 2u);

  lease1->Ok(FakeNode::Granted(w1));
  loop_.RunUntilIdle();
  w1.Take<proto::PUSH_TASK>()->Ok(FakeWorker::Value("1"));
  loop_.RunUntilIdle();
  // t2 went to w1 as it came free; the second request is no longer needed.
  auto push2 = w1.Take<proto::PUSH_TASK>();
  ASSERT_TRUE(push2);
  EXPECT_EQ(push2->request.spec().task_id(), t2.Binary());
  auto cancel = node_.Take<proto::CANCEL_WORKER_LEASE>();
  ASSERT_TRUE(cancel);
  EXPECT_EQ(cancel->request.lease_id(), lease2->request.lease_id());

  // The node granted the second lease before the cancel reached it.
  lease2->Ok(FakeNode::Granted(w2));
  cancel->Ok();
  loop_.RunUntilIdle();
  loop_.AdvanceTime(std::chrono::milliseconds(1));
  push2->Ok(FakeWorker::Value("2"));
  loop_.RunUntilIdle();
  EXPECT_EQ(Result(t1), "1");
  EXPECT_EQ(Result(t2), "2");

  // Both leases are idle now, the second since 1 ms longer: it goes first.
  loop_.AdvanceTime(config::lease_idle_timeout_ms());
  auto ret2 = node_.Take<proto::RETURN_WORKER_LEASE>();
  auto ret1 = node_.Take<proto::RETURN_WORKER_LEASE>();
  ASSERT_TRUE(ret1 && ret2);
  EXPECT_EQ(ret2->request.lease_id(), lease2->request.lease_id());
  EXPECT_EQ(ret1->request.lease_id(), lease1->request.lease_id());

  EXPECT_THAT(w1.TakeLog(), ElementsAre("PUSH_TASK", "PUSH_TASK"));
  EXPECT_THAT(w2.TakeLog(), IsEmpty());
  EXPECT_THAT(node_.TakeLog(),
              ElementsAre("REQUEST_WORKER_LEASE", "REQUEST_WORKER_LEASE", "CANCEL_WORKER_LEASE",
                          "RETURN_WORKER_LEASE", "RETURN_WORKER_LEASE"));
}

TEST_F(TaskSubmitterTest, AnIdleLeaseIsReusedAndReturnedATimeoutAfterItsLastUse) {
  FakeWorker& w1 = AddWorker("w1");
  const TaskId t1 = Submit("f");
  loop_.RunUntilIdle();
  auto lease = node_.Take<proto::REQUEST_WORKER_LEASE>();
  ASSERT_TRUE(lease);
  lease->Ok(FakeNode::Granted(w1));
  loop_.RunUntilIdle();
  w1.Take<proto::PUSH_TASK>()->Ok(FakeWorker::Value("1"));
  loop_.RunUntilIdle();
  ASSERT_EQ(Result(t1), "1");

  // Within the idle period the next task takes the same worker, without a new lease.
  loop_.AdvanceTime(config::lease_idle_timeout_ms() / 2);
  const TaskId t2 = Submit("f");
  loop_.RunUntilIdle();
  w1.Take<proto::PUSH_TASK>()->Ok(FakeWorker::Value("2"));
  loop_.RunUntilIdle();
  ASSERT_EQ(Result(t2), "2");

  // Idle again from now: returned a full timeout after this last use, not before.
  loop_.AdvanceTime(config::lease_idle_timeout_ms() - std::chrono::milliseconds(1));
  EXPECT_FALSE(node_.HasCall());
  loop_.AdvanceTime(std::chrono::milliseconds(1));
  auto ret = node_.Take<proto::RETURN_WORKER_LEASE>();
  ASSERT_TRUE(ret);
  EXPECT_EQ(ret->request.lease_id(), lease->request.lease_id());
  EXPECT_THAT(node_.TakeLog(), ElementsAre("REQUEST_WORKER_LEASE", "RETURN_WORKER_LEASE"));
}

TEST_F(TaskSubmitterTest, AnIdleLeaseIsReturnedOnTimeWhileASiblingLeaseKeepsWorking) {
  FakeWorker& w1 = AddWorker("w1");
  FakeWorker& w2 = AddWorker("w2");
  Submit("f");
  Submit("f");
  loop_.RunUntilIdle();
  auto lease1 = node_.Take<proto::REQUEST_WORKER_LEASE>();
  auto lease2 = node_.Take<proto::REQUEST_WORKER_LEASE>();
  ASSERT_TRUE(lease1 && lease2);
  lease1->Ok(FakeNode::Granted(w1));
  lease2->Ok(FakeNode::Granted(w2));
  loop_.RunUntilIdle();
  w1.Take<proto::PUSH_TASK>()->Ok(FakeWorker::Value("1"));
  w2.Take<proto::PUSH_TASK>()->Ok(FakeWorker::Value("2"));
  loop_.RunUntilIdle();  // both idle from now (t0)

  // At t0 + 10 ms one more task: it takes one of the two; the other stays idle.
  loop_.AdvanceTime(config::lease_idle_timeout_ms() / 2);
  const TaskId t3 = Submit("f");
  loop_.RunUntilIdle();
  FakeWorker& busy = w1.HasCall() ? w1 : w2;
  const std::string idle_lease = (&busy == &w1 ? lease2 : lease1)->request.lease_id();
  busy.Take<proto::PUSH_TASK>()->Ok(FakeWorker::Value("3"));
  loop_.RunUntilIdle();
  ASSERT_EQ(Result(t3), "3");

  // The other has been idle since t0: returned at t0 + kLeaseIdleTimeout, although its
  // sibling finished work meanwhile; the sibling waits a full period from its own use.
  loop_.AdvanceTime(config::lease_idle_timeout_ms() / 2);
  auto ret = node_.Take<proto::RETURN_WORKER_LEASE>();
  ASSERT_TRUE(ret);
  EXPECT_EQ(ret->request.lease_id(), idle_lease);
  EXPECT_FALSE(node_.HasCall());
  loop_.AdvanceTime(config::lease_idle_timeout_ms() / 2);
  auto ret_busy = node_.Take<proto::RETURN_WORKER_LEASE>();
  ASSERT_TRUE(ret_busy);
  EXPECT_NE(ret_busy->request.lease_id(), idle_lease);
}

TEST_F(TaskSubmitterTest, ALostNodeConnectionFailsTheQueuedTasksWithClusterUnavailable) {
  const TaskId task = Submit("f");
  loop_.RunUntilIdle();
  auto lease = node_.Take<proto::REQUEST_WORKER_LEASE>();
  ASSERT_TRUE(lease);
  lease->Drop();
  loop_.RunUntilIdle();
  EXPECT_THAT(Result(task),
              HasSubstr("error CLUSTER_UNAVAILABLE: cannot lease a worker from the node daemon"));
}

TEST_F(TaskSubmitterTest, ForceCancelOfARunningTaskKillsItsWorkerAndChargesNoRetry) {
  FakeWorker& w1 = AddWorker("w1");
  const TaskId task = Submit("f", /*max_retries=*/3);
  loop_.RunUntilIdle();
  auto lease = node_.Take<proto::REQUEST_WORKER_LEASE>();
  ASSERT_TRUE(lease);
  lease->Ok(FakeNode::Granted(w1));
  loop_.RunUntilIdle();
  ASSERT_TRUE(w1.Take<proto::PUSH_TASK>());

  Cancel(task, /*force=*/true);
  loop_.RunUntilIdle();
  auto kill = node_.Take<proto::KILL_LEASED_WORKER>();
  ASSERT_TRUE(kill);
  EXPECT_EQ(kill->request.lease_id(), lease->request.lease_id());
  kill->Ok();
  w1.Crash();  // the node ends it
  loop_.RunUntilIdle();
  // Cancelled, not retried: no failure cause asked, no new lease.
  EXPECT_EQ(Result(task), "error TASK_CANCELLED: f was cancelled");
  EXPECT_THAT(node_.TakeLog(), ElementsAre("REQUEST_WORKER_LEASE", "KILL_LEASED_WORKER"));
}

// A reply whose value the worker put in the store of node `node` (8 bytes).
proto::PushTaskReply StoredOn(const std::string& node) {
  proto::PushTaskReply reply;
  reply.set_in_store(true);
  reply.mutable_stored_at()->set_node_id(node);
  return reply;
}

// The node whose store held the result's only copy dies: the owner runs the task again
// (next attempt, same id); Get waiters see it pending meanwhile, then the new copy.
TEST_F(TaskSubmitterTest, AResultLostWithItsNodeIsMadeAgainByRerunningItsTask) {
  FakeWorker& w1 = AddWorker("w1");
  const TaskId task = Submit("f", /*max_retries=*/1);
  loop_.RunUntilIdle();
  node_.Take<proto::REQUEST_WORKER_LEASE>()->Ok(FakeNode::Granted(w1));
  loop_.RunUntilIdle();
  w1.Take<proto::PUSH_TASK>()->Ok(StoredOn("deadnode"));
  loop_.RunUntilIdle();
  {
    OutboxLock lock(&mu_, &outbox_);
    ASSERT_TRUE(objects_.Find(MakeObjectId(task, 1))->in_store);
    submitter_.AssertHeld();
    EXPECT_EQ(submitter_.DescribeLineage(MakeObjectId(task, 1)), "");
    EXPECT_GT(submitter_.lineage_bytes(), 0u);
    proto::NodeRemovedNotice notice;
    notice.set_node_id(NodeId::FromBinary("deadnode").Hex());
    notice.set_cause("killed");
    submitter_.OnNodeRemoved(notice);
  }
  EXPECT_EQ(Result(task), "pending");
  loop_.RunUntilIdle();
  auto again = w1.Take<proto::PUSH_TASK>();  // its lease is still held
  ASSERT_TRUE(again);
  EXPECT_EQ(again->request.spec().task_id(), task.Binary());
  EXPECT_EQ(again->request.attempt(), 1u);
  again->Ok(StoredOn("livenode"));
  loop_.RunUntilIdle();
  OutboxLock lock(&mu_, &outbox_);
  const ObjectEntry* e = objects_.Find(MakeObjectId(task, 1));
  ASSERT_TRUE(e->ready && e->in_store && !e->error);
  ASSERT_EQ(e->locations.size(), 1u);
  EXPECT_EQ(e->locations[0].node_id(), "livenode");
  // The re-run used the task's one retry: a second loss cannot be made good.
  submitter_.AssertHeld();
  EXPECT_THAT(submitter_.DescribeLineage(MakeObjectId(task, 1)), HasSubstr("used up its retries"));
}

TEST_F(TaskSubmitterTest, AResultLostWithItsNodeWithoutRetriesFailsSayingWhy) {
  FakeWorker& w1 = AddWorker("w1");
  const TaskId task = Submit("f", /*max_retries=*/0);
  loop_.RunUntilIdle();
  node_.Take<proto::REQUEST_WORKER_LEASE>()->Ok(FakeNode::Granted(w1));
  loop_.RunUntilIdle();
  w1.Take<proto::PUSH_TASK>()->Ok(StoredOn("deadnode"));
  loop_.RunUntilIdle();
  {
    OutboxLock lock(&mu_, &outbox_);
    submitter_.AssertHeld();
    EXPECT_EQ(submitter_.lineage_bytes(), 0u);
    proto::NodeRemovedNotice notice;
    notice.set_node_id(NodeId::FromBinary("deadnode").Hex());
    notice.set_cause("killed");
    submitter_.OnNodeRemoved(notice);
  }
  loop_.RunUntilIdle();
  EXPECT_THAT(Result(task), HasSubstr("error OBJECT_LOST: object "));
  EXPECT_THAT(Result(task), HasSubstr("its only copies were on node 646561646e6f6465, which died "
                                      "(killed); it cannot be made again: its task had no "
                                      "retries left (max_retries)"));
  EXPECT_FALSE(w1.HasCall());
}

}  // namespace
}  // namespace raio::worker
