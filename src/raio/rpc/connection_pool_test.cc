// ConnectionPool, the socket factory's choice of Unix socket or TCP, and FieldSuffix, over
// real sockets (a Unix listener in a temp dir, TCP on 127.0.0.1 port 0).
#include "raio/rpc/connection_pool.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "raio/actor.pb.h"
#include "raio/common/event_loop.h"
#include "raio/common/process.h"
#include "raio/node.pb.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/listener.h"
#include "raio/testkit/time_scale.h"

namespace raio::rpc {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kEcho = proto::RETURN_WORKER_LEASE;
const std::string kLocalNode = std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8);
const std::string kOtherNode = std::string("\x09\x09\x09\x09\x09\x09\x09\x09", 8);

// A peer answering kEcho with its request, on Unix and TCP at once.
class EchoPeer {
 public:
  EchoPeer() : loop_("peer", std::chrono::microseconds(0)) {
    dir_ = MakeTempDir("pool-test");
    auto serve = [this](std::shared_ptr<Connection> c) {
      accepted_.fetch_add(1);
      c->Start(
          [](const std::shared_ptr<Connection>& conn, const FrameHeader& h, std::string_view body) {
            proto::LeaseIdRequest r;
            r.ParseFromArray(body.data(), static_cast<int>(body.size()));
            conn->Reply(h, r);
          },
          nullptr);
      raio::MutexLock lock(&mu_);
      conns_.push_back(c);
    };
    unix_ = *Listener::ListenUnix(loop_.io(), dir_ + "/peer.sock", serve);
    tcp_ = *Listener::ListenTcp(loop_.io(), "127.0.0.1", 0, serve);
    loop_.Start();
  }
  ~EchoPeer() {
    loop_.Post([this] {
      unix_->Stop();
      tcp_->Stop();
    });
    DropAll();
    loop_.Stop();
    RemoveTree(dir_);
  }
  // Closes every accepted connection (the peer "dies").
  void DropAll() {
    raio::MutexLock lock(&mu_);
    for (auto& c : conns_) c->Close(absl::UnavailableError("peer dropped it"));
    conns_.clear();
  }
  proto::Address Address(const std::string& node) const {
    proto::Address a;
    a.set_ip("127.0.0.1");
    a.set_port(tcp_->port());
    a.set_node_id(node);
    a.set_worker_id("wwwwwwww");
    a.set_unix_socket(dir_ + "/peer.sock");
    return a;
  }
  int accepted() const { return accepted_.load(); }

 private:
  EventLoop loop_;
  std::string dir_;
  std::unique_ptr<Listener> unix_;
  std::unique_ptr<Listener> tcp_;
  std::atomic<int> accepted_{0};
  raio::Mutex mu_;
  std::vector<std::shared_ptr<Connection>> conns_ ABSL_GUARDED_BY(mu_);
};

std::string Echo(Connection& conn, const std::string& id) {
  proto::LeaseIdRequest r;
  r.set_lease_id(id);
  auto reply = CallSync(conn, kEcho, r, testkit::Scaled(10s));
  if (!reply.ok()) return "error: " + std::string(reply.status().message());
  proto::LeaseIdRequest back;
  back.ParseFromString(*reply);
  return back.lease_id();
}

class ConnectionPoolTest : public ::testing::Test {
 protected:
  ConnectionPoolTest() : loop_("client", std::chrono::microseconds(0)) { loop_.Start(); }
  ~ConnectionPoolTest() override { loop_.Stop(); }
  EventLoop loop_;
  EchoPeer peer_;
};

TEST_F(ConnectionPoolTest, SameNodePeersAreReachedOverTheUnixSocketAndOthersOverTcp) {
  ConnectionPool pool(loop_.io(), MakeSocketConnectionFactory(kLocalNode, testkit::Scaled(5s)));
  auto local = pool.Get(peer_.Address(kLocalNode));
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ((*local)->peer_name(), peer_.Address(kLocalNode).unix_socket());
  auto remote = pool.Get(peer_.Address(kOtherNode));
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ((*remote)->peer_name(), absl::StrCat("127.0.0.1:", peer_.Address(kOtherNode).port()));
  EXPECT_EQ(Echo(**local, "a"), "a");
  EXPECT_EQ(Echo(**remote, "b"), "b");
}

TEST_F(ConnectionPoolTest, APeerOnAnotherNodeWithoutTcpIsAClearError) {
  ConnectionPool pool(loop_.io(), MakeSocketConnectionFactory(kLocalNode, testkit::Scaled(5s)));
  proto::Address a = peer_.Address(kOtherNode);
  a.set_port(0);
  auto conn = pool.Get(a);
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(conn.status().message().find("another node"), std::string::npos) << conn.status();
  EXPECT_EQ(pool.size(), 0u);
}

TEST_F(ConnectionPoolTest, OneConnectionPerPeerReusedUntilItClosesThenReconnected) {
  ConnectionPool pool(loop_.io(), MakeSocketConnectionFactory(kLocalNode, testkit::Scaled(5s)));
  std::promise<const Connection*> closed;
  pool.OnClose([&](const std::shared_ptr<Connection>& c, const absl::Status&) {
    closed.set_value(c.get());
  });
  auto first = pool.Get(peer_.Address(kLocalNode));
  ASSERT_TRUE(first.ok());
  auto again = pool.Get(peer_.Address(kLocalNode));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(first->get(), again->get());
  EXPECT_EQ(Echo(**first, "x"), "x");
  EXPECT_EQ(peer_.accepted(), 1);
  EXPECT_EQ(pool.Find(peer_.Address(kLocalNode)).get(), first->get());

  peer_.DropAll();
  auto fut = closed.get_future();
  ASSERT_EQ(fut.wait_for(testkit::Scaled(10s)), std::future_status::ready);
  EXPECT_EQ(fut.get(), first->get());
  EXPECT_EQ(pool.Find(peer_.Address(kLocalNode)), nullptr);
  auto fresh = pool.Get(peer_.Address(kLocalNode));
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(fresh->get(), first->get());
  EXPECT_EQ(Echo(**fresh, "y"), "y");
  EXPECT_EQ(peer_.accepted(), 2);
}

// A factory that counts connects and can refuse: the seam tests and TLS plug into.
class CountingFactory : public ConnectionFactory {
 public:
  explicit CountingFactory(std::shared_ptr<ConnectionFactory> inner) : inner_(std::move(inner)) {}
  absl::StatusOr<std::shared_ptr<Connection>> Connect(boost::asio::io_context& io,
                                                      const proto::Address& to) override {
    connects_.fetch_add(1);
    if (refuse_.load()) return absl::UnavailableError("refused by the test");
    return inner_->Connect(io, to);
  }
  std::atomic<int> connects_{0};
  std::atomic<bool> refuse_{false};

 private:
  std::shared_ptr<ConnectionFactory> inner_;
};

TEST_F(ConnectionPoolTest, EveryConnectGoesThroughTheInjectedFactory) {
  auto factory = std::make_shared<CountingFactory>(
      MakeSocketConnectionFactory(kLocalNode, testkit::Scaled(5s)));
  ConnectionPool pool(loop_.io(), factory);
  factory->refuse_ = true;
  auto refused = pool.Get(peer_.Address(kLocalNode));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "refused by the test");
  factory->refuse_ = false;
  ASSERT_TRUE(pool.Get(peer_.Address(kLocalNode)).ok());
  ASSERT_TRUE(pool.Get(peer_.Address(kLocalNode)).ok());
  EXPECT_EQ(factory->connects_.load(), 2);
  pool.CloseAll(absl::CancelledError("done"));
  EXPECT_EQ(pool.size(), 0u);
}

TEST(FieldSuffixTest, AppendedFieldsOverrideTheMessagesScalars) {
  proto::PushActorTaskRequest req;
  req.set_method_name("Counter::Incr");
  req.set_sequence(1);
  std::string wire = req.SerializeAsString();
  FieldSuffix suffix;
  suffix.Add(proto::PushActorTaskRequest::kSequenceFieldNumber, 123456789012345ull)
      .Add(proto::PushActorTaskRequest::kAttemptFieldNumber, 3);
  wire.append(suffix.view());
  proto::PushActorTaskRequest back;
  ASSERT_TRUE(back.ParseFromString(wire));
  EXPECT_EQ(back.method_name(), "Counter::Incr");
  EXPECT_EQ(back.sequence(), 123456789012345ull);
  EXPECT_EQ(back.attempt(), 3u);
}

}  // namespace
}  // namespace raio::rpc
