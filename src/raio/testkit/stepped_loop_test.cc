// SteppedLoop and raio::Clock: timers fire only when the test moves time to them, in
// expiry order, synchronously; posted work and socket I/O run on the test thread; an RPC
// deadline is one of those timers.
#include "raio/testkit/stepped_loop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/post.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "raio/common/timer.h"
#include "raio/testkit/fake_peer.h"

namespace raio::testkit {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(SteppedLoopTest, TheClockIsFrozenWhileASteppedLoopLives) {
  {
    SteppedLoop loop;
    EXPECT_TRUE(Clock::frozen());
    const Clock::time_point t0 = Clock::now();
    EXPECT_EQ(Clock::now(), t0);
    loop.AdvanceTime(5s);
    EXPECT_EQ(Clock::now() - t0, 5s);
  }
  EXPECT_FALSE(Clock::frozen());
}

TEST(SteppedLoopTest, ATimerFiresOnlyOnceTimeReachesItsExpiry) {
  SteppedLoop loop;
  Timer timer(loop.io());
  bool fired = false;
  timer.expires_after(100ms);
  timer.async_wait([&](const boost::system::error_code& ec) { fired = !ec; });
  loop.RunUntilIdle();
  EXPECT_FALSE(fired);
  loop.AdvanceTime(99ms);
  EXPECT_FALSE(fired);
  loop.AdvanceTime(1ms);
  EXPECT_TRUE(fired);
}

TEST(SteppedLoopTest, TimersDueWithinOneAdvanceFireInExpiryOrder) {
  SteppedLoop loop;
  std::vector<std::string> fired;
  Timer late(loop.io()), early(loop.io()), never(loop.io());
  late.expires_after(30ms);
  late.async_wait([&](const boost::system::error_code&) { fired.push_back("late"); });
  early.expires_after(10ms);
  early.async_wait([&](const boost::system::error_code&) { fired.push_back("early"); });
  never.expires_after(31ms);
  never.async_wait([&](const boost::system::error_code& ec) {
    if (!ec) fired.push_back("never");
  });
  loop.AdvanceTime(30ms);
  EXPECT_THAT(fired, ElementsAre("early", "late"));
  never.cancel();
  loop.RunUntilIdle();
  EXPECT_THAT(fired, ElementsAre("early", "late"));
}

TEST(SteppedLoopTest, ATimerArmedByAHandlerFiresWithinTheSameAdvance) {
  SteppedLoop loop;
  Timer timer(loop.io());
  std::vector<Clock::duration> at;
  const Clock::time_point t0 = Clock::now();
  std::function<void()> arm = [&] {
    timer.expires_after(10ms);
    timer.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      at.push_back(Clock::now() - t0);  // each sees the clock at its own expiry
      arm();
    });
  };
  arm();
  loop.AdvanceTime(35ms);
  EXPECT_THAT(at, ElementsAre(10ms, 20ms, 30ms));
  EXPECT_EQ(Clock::now() - t0, 35ms);
  EXPECT_EQ(loop.num_timers(), 1u);
  timer.cancel();
  loop.RunUntilIdle();
  EXPECT_EQ(loop.num_timers(), 0u);
}

TEST(SteppedLoopTest, CancellingOrReArmingATimerAbortsItsWait) {
  SteppedLoop loop;
  Timer timer(loop.io());
  std::vector<std::string> outcomes;
  auto record = [&](const boost::system::error_code& ec) {
    outcomes.push_back(ec ? "aborted" : "fired");
  };
  timer.expires_after(10ms);
  timer.async_wait(record);
  EXPECT_EQ(timer.expires_after(20ms), 1u);  // the first wait is aborted
  timer.async_wait(record);
  loop.AdvanceTime(10ms);
  EXPECT_THAT(outcomes, ElementsAre("aborted"));
  loop.AdvanceTime(10ms);
  EXPECT_THAT(outcomes, ElementsAre("aborted", "fired"));
  {
    Timer doomed(loop.io());
    doomed.expires_after(5ms);
    doomed.async_wait(record);
  }  // destroyed: aborted, as asio's
  loop.RunUntilIdle();
  EXPECT_THAT(outcomes, ElementsAre("aborted", "fired", "aborted"));
}

TEST(SteppedLoopTest, RunUntilIdleRunsWhatHandlersPostOnTheTestThread) {
  SteppedLoop loop;
  std::vector<int> ran;
  boost::asio::post(loop.io(), [&] {
    ran.push_back(1);
    boost::asio::post(loop.io(), [&] { ran.push_back(3); });
    ran.push_back(2);
  });
  EXPECT_THAT(ran, IsEmpty());  // nothing runs by itself
  EXPECT_EQ(loop.RunUntilIdle(), 2u);
  EXPECT_THAT(ran, ElementsAre(1, 2, 3));
  EXPECT_EQ(loop.RunUntilIdle(), 0u);
}

TEST(SteppedLoopTest, InLoopThreadHoldsOnlyInsideTheSteps) {
  SteppedLoop loop;
  EXPECT_FALSE(loop.loop().InLoopThread());
  bool inside = false;
  loop.loop().Post([&] { inside = loop.loop().InLoopThread(); });
  loop.RunUntilIdle();
  EXPECT_TRUE(inside);
}

TEST(SteppedLoopTest, ARequestToAFakeIsAnsweredWhenTheTestSays) {
  SteppedLoop loop;
  CallLog log;
  FakePeer peer("peer", loop.io(), &log);
  auto conn = peer.Connect();
  std::vector<std::string> replies;
  rpc::Call<proto::GET_NODE_STATS>(
      *conn, proto::Empty(), [&](absl::StatusOr<proto::NodeStats> stats) {
        replies.push_back(stats.ok() ? stats->node_id() : stats.status().ToString());
      });
  loop.RunUntilIdle();
  auto call = peer.Take<proto::GET_NODE_STATS>();
  ASSERT_TRUE(call);
  EXPECT_THAT(replies, IsEmpty());
  proto::NodeStats stats;
  stats.set_node_id("n1");
  call->Ok(stats);
  loop.RunUntilIdle();
  EXPECT_THAT(replies, ElementsAre("n1"));
  EXPECT_THAT(log.Take(), ElementsAre("peer GET_NODE_STATS"));
  conn->Close(absl::CancelledError("done"));
  loop.RunUntilIdle();
}

TEST(SteppedLoopTest, AnUnansweredCallFailsAtItsDeadlineAndNotBefore) {
  SteppedLoop loop;
  FakePeer peer("peer", loop.io());
  auto conn = peer.Connect();
  std::vector<std::string> outcomes;
  rpc::Call<proto::GET_NODE_STATS>(
      *conn, proto::Empty(),
      [&](absl::StatusOr<proto::NodeStats> s) { outcomes.push_back(s.status().ToString()); },
      std::chrono::milliseconds(2000));
  loop.RunUntilIdle();
  ASSERT_TRUE(peer.HasCall());
  loop.AdvanceTime(1999ms);
  EXPECT_THAT(outcomes, IsEmpty());
  loop.AdvanceTime(1ms);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_THAT(outcomes[0], ::testing::HasSubstr("DEADLINE_EXCEEDED"));
  // A late reply finds no call waiting for it.
  peer.Take<proto::GET_NODE_STATS>()->Ok(proto::NodeStats());
  loop.RunUntilIdle();
  EXPECT_EQ(outcomes.size(), 1u);
  conn->Close(absl::CancelledError("done"));
  loop.RunUntilIdle();
}

TEST(SteppedLoopTest, AutoRepliesAnswerAtOnceAndAreStillLogged) {
  SteppedLoop loop;
  FakePeer peer("peer", loop.io());
  proto::NodeStats canned;
  canned.set_node_id("canned");
  peer.AutoReply<proto::GET_NODE_STATS>(canned);
  peer.AutoReplyError<proto::RETURN_WORKER_LEASE>(absl::NotFoundError("no such lease"));
  peer.AutoReply<proto::CANCEL_WORKER_LEASE>([](const proto::LeaseIdRequest& req) {
    return req.lease_id() == "ok" ? absl::StatusOr<proto::Empty>(proto::Empty())
                                  : absl::StatusOr<proto::Empty>(absl::AbortedError("no"));
  });
  auto conn = peer.Connect();
  std::vector<std::string> got;
  rpc::Call<proto::GET_NODE_STATS>(*conn, proto::Empty(), [&](absl::StatusOr<proto::NodeStats> s) {
    got.push_back(s.ok() ? s->node_id() : s.status().ToString());
  });
  proto::LeaseIdRequest lease;
  lease.set_lease_id("x");
  auto record = [&](absl::StatusOr<proto::Empty> s) {
    got.push_back(s.ok() ? "ok" : std::string(absl::StatusCodeToString(s.status().code())));
  };
  rpc::Call<proto::RETURN_WORKER_LEASE>(*conn, lease, record);
  rpc::Call<proto::CANCEL_WORKER_LEASE>(*conn, lease, record);
  lease.set_lease_id("ok");
  rpc::Call<proto::CANCEL_WORKER_LEASE>(*conn, lease, record);
  loop.RunUntilIdle();
  EXPECT_THAT(got, ElementsAre("canned", "NOT_FOUND", "ABORTED", "ok"));
  EXPECT_FALSE(peer.HasCall());
  EXPECT_THAT(peer.TakeLog(), ElementsAre("GET_NODE_STATS", "RETURN_WORKER_LEASE",
                                          "CANCEL_WORKER_LEASE", "CANCEL_WORKER_LEASE"));
  conn->Close(absl::CancelledError("done"));
  loop.RunUntilIdle();
}

TEST(SteppedLoopTest, DroppingTheConnectionFailsTheCallsOnIt) {
  SteppedLoop loop;
  FakePeer peer("peer", loop.io());
  bool closed = false;
  auto conn = peer.Connect(nullptr, [&](const auto&, const absl::Status&) { closed = true; });
  std::vector<absl::StatusCode> codes;
  rpc::Call<proto::GET_NODE_STATS>(*conn, proto::Empty(), [&](absl::StatusOr<proto::NodeStats> s) {
    codes.push_back(s.status().code());
  });
  loop.RunUntilIdle();
  EXPECT_EQ(peer.num_connections(), 1);
  peer.Take<proto::GET_NODE_STATS>()->Drop();
  loop.RunUntilIdle();
  EXPECT_THAT(codes, ElementsAre(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(closed);
  EXPECT_EQ(peer.num_connections(), 0);
}

}  // namespace
}  // namespace raio::testkit
