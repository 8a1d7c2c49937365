// Outbox: sends queued under the mutex leave after it is released, in order, from one
// draining thread at a time. Over a real socketpair connection.
#include "raio/worker/outbox.h"

#include <sys/socket.h>

#include <atomic>
#include <boost/asio/generic/stream_protocol.hpp>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "raio/common/event_loop.h"
#include "raio/node.pb.h"
#include "raio/rpc.pb.h"
#include "raio/testkit/time_scale.h"

namespace raio::worker {
namespace {

using namespace std::chrono_literals;

class OutboxTest : public ::testing::Test {
 protected:
  OutboxTest() : loop_("outbox", std::chrono::microseconds(0)) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    using Proto = boost::asio::generic::stream_protocol;
    client_ = rpc::Connection::Create(rpc::Socket(loop_.io(), Proto(AF_UNIX, 0), fds[0]), "client");
    server_ = rpc::Connection::Create(rpc::Socket(loop_.io(), Proto(AF_UNIX, 0), fds[1]), "server");
    // The server records the lease ids in arrival order and echoes them.
    server_->Start(
        [this](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
               std::string_view body) {
          proto::LeaseIdRequest r;
          r.ParseFromArray(body.data(), static_cast<int>(body.size()));
          {
            raio::MutexLock lock(&seen_mu_);
            seen_.push_back(r.lease_id());
          }
          if (h.kind == rpc::FrameKind::kRequest) c->Reply(h, r);
        },
        nullptr);
    client_->Start(nullptr, nullptr);
    loop_.Start();
  }
  ~OutboxTest() override {
    client_->Close(absl::CancelledError("done"));
    server_->Close(absl::CancelledError("done"));
    loop_.Stop();
  }
  static std::shared_ptr<proto::LeaseIdRequest> Lease(const std::string& id) {
    auto r = std::make_shared<proto::LeaseIdRequest>();
    r->set_lease_id(id);
    return r;
  }
  std::vector<std::string> Seen(std::size_t n) {
    auto until = std::chrono::steady_clock::now() + testkit::Scaled(10s);
    while (std::chrono::steady_clock::now() < until) {
      {
        raio::MutexLock lock(&seen_mu_);
        if (seen_.size() >= n) return seen_;
      }
      std::this_thread::sleep_for(1ms);
    }
    raio::MutexLock lock(&seen_mu_);
    return seen_;
  }

  EventLoop loop_;
  std::shared_ptr<rpc::Connection> client_;
  std::shared_ptr<rpc::Connection> server_;
  raio::Mutex mu_;
  Outbox outbox_{mu_};
  raio::Mutex seen_mu_;
  std::vector<std::string> seen_ ABSL_GUARDED_BY(seen_mu_);
};

TEST_F(OutboxTest, NothingLeavesWhileTheMutexIsHeldAndAllLeavesInOrderAfter) {
  {
    OutboxLock lock(&mu_, &outbox_);
    outbox_.AssertHeld();
    outbox_.Send(client_, proto::CANCEL_WORKER_LEASE, Lease("1"));
    outbox_.Call(client_, proto::RETURN_WORKER_LEASE, Lease("2"),
                 [](const absl::StatusOr<std::string_view>&) {});
    outbox_.Send(client_, proto::CANCEL_WORKER_LEASE, Lease("3"));
    // A marker sent on the connection itself, not through the outbox: a send made under
    // the mutex would be on the wire before it, so once the server has the marker, it
    // would have had such a send too.
    client_->SendOneWay(proto::CANCEL_WORKER_LEASE, *Lease("marker"));
    EXPECT_EQ(Seen(1), (std::vector<std::string>{"marker"}));
  }
  EXPECT_EQ(Seen(4), (std::vector<std::string>{"marker", "1", "2", "3"}));
}

TEST_F(OutboxTest, ARunItemRunsWithoutTheMutexAndItsOwnSendsGoInTheSameDrain) {
  bool ran_unlocked = false;
  {
    OutboxLock lock(&mu_, &outbox_);
    outbox_.AssertHeld();
    outbox_.Send(client_, proto::CANCEL_WORKER_LEASE, Lease("a"));
    outbox_.Run([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (mu_.TryLock()) {
        ran_unlocked = true;
        mu_.Unlock();
      }
      OutboxLock inner(&mu_, &outbox_);  // queues from inside the drain
      outbox_.AssertHeld();
      outbox_.Send(client_, proto::CANCEL_WORKER_LEASE, Lease("c"));
    });
    outbox_.Send(client_, proto::CANCEL_WORKER_LEASE, Lease("b"));
  }
  EXPECT_TRUE(ran_unlocked);
  EXPECT_EQ(Seen(3), (std::vector<std::string>{"a", "b", "c"}));
  OutboxLock lock(&mu_, &outbox_);
  outbox_.AssertHeld();
  EXPECT_TRUE(outbox_.empty());
}

TEST_F(OutboxTest, ConcurrentThreadsKeepEachThreadsOrder) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      for (int i = 0; i < kPerThread; ++i) {
        OutboxLock lock(&mu_, &outbox_);
        outbox_.AssertHeld();
        outbox_.Send(client_, proto::CANCEL_WORKER_LEASE,
                     Lease(std::to_string(t) + ":" + std::to_string(i)));
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<std::string> seen = Seen(kThreads * kPerThread);
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kThreads * kPerThread));
  std::vector<int> next(kThreads, 0);
  for (const auto& s : seen) {
    int t = std::stoi(s.substr(0, s.find(':')));
    int i = std::stoi(s.substr(s.find(':') + 1));
    EXPECT_EQ(i, next[t]) << s;
    next[t] = i + 1;
  }
}

TEST_F(OutboxTest, DrainLockedSaysWhetherItReleasedTheMutex) {
  OutboxLock lock(&mu_, &outbox_);
  outbox_.AssertHeld();
  EXPECT_FALSE(outbox_.DrainLocked());
  outbox_.Send(client_, proto::CANCEL_WORKER_LEASE, Lease("z"));
  EXPECT_TRUE(outbox_.DrainLocked());
  EXPECT_TRUE(outbox_.empty());
}

}  // namespace
}  // namespace raio::worker
