// Connection and Listener over real sockets (Unix in a temp dir, TCP on 127.0.0.1 port 0).
// Server and client run on separate event loops; the test thread waits on futures and
// notifications with deadlines, never on sleeps.
#include "raio/rpc/connection.h"

#include <malloc.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "raio/common.pb.h"
#include "raio/common/config.h"
#include "raio/common/event_loop.h"
#include "raio/common/mutex.h"
#include "raio/node.pb.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/buffers.h"
#include "raio/rpc/connection_test_util.h"
#include "raio/rpc/listener.h"
#include "raio/rpc/service.h"
#include "raio/rpc/stream.h"

namespace raio::rpc {
namespace {

using namespace std::chrono_literals;
using namespace test;
// Future of one CallInto's outcome: the message before the tail and the tail's length.
struct IntoResult {
  using Value = absl::StatusOr<std::pair<std::string, std::size_t>>;
  std::shared_ptr<std::promise<Value>> promise = std::make_shared<std::promise<Value>>();
  std::future<Value> future = promise->get_future();

  Connection::TailedReplyCallback Callback() {
    return [p = promise](const absl::StatusOr<Connection::TailedReply>& r) {
      if (r.ok()) {
        p->set_value(std::make_pair(std::string(r->message), r->tail_bytes));
      } else {
        p->set_value(r.status());
      }
    };
  }
  Value Get() {
    if (future.wait_for(kWait) != std::future_status::ready) {
      return absl::DeadlineExceededError("test timed out waiting for the callback");
    }
    return future.get();
  }
};

// Future of one call's outcome, with the body copied out of the callback.
struct CallResult {
  std::shared_ptr<std::promise<absl::StatusOr<std::string>>> promise =
      std::make_shared<std::promise<absl::StatusOr<std::string>>>();
  std::future<absl::StatusOr<std::string>> future = promise->get_future();

  Connection::ReplyCallback Callback() {
    return [p = promise](const absl::StatusOr<std::string_view>& r) {
      if (r.ok()) {
        p->set_value(std::string(*r));
      } else {
        p->set_value(r.status());
      }
    };
  }
  // The outcome, or DeadlineExceeded("test timed out") if the callback never ran.
  absl::StatusOr<std::string> Get() {
    if (future.wait_for(kWait) != std::future_status::ready) {
      return absl::DeadlineExceededError("test timed out waiting for the callback");
    }
    return future.get();
  }
};

class ConnectionTest : public ::testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/raio_connection_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr) << std::strerror(errno);
    dir_ = tmpl;
    server_loop_.Start();
    client_loop_.Start();
  }

  void TearDown() override {
    client_loop_.Stop();
    server_loop_.Stop();
    listener_.reset();
    {
      raio::MutexLock lock(&mu_);
      server_conns_.clear();
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // Starts listening. Each accepted connection runs `server_handler_` (or, by default,
  // echoes kEcho requests, never answers kSilent, and fails kFail with NotFound).
  void StartServer() {
    auto on_accept = [this](std::shared_ptr<Connection> conn) {
      conn->Start([this](const std::shared_ptr<Connection>& c, const FrameHeader& h,
                         std::string_view body) { HandleRequest(c, h, body); },
                  [this](const std::shared_ptr<Connection>&, const absl::Status& reason) {
                    raio::MutexLock lock(&mu_);
                    server_close_reasons_.push_back(reason);
                  });
      raio::MutexLock lock(&mu_);
      server_conns_.push_back(std::move(conn));
    };
    absl::StatusOr<std::unique_ptr<Listener>> l;
    if (GetParam() == Transport::kUnix) {
      path_ = dir_ + "/node.sock";
      l = Listener::ListenUnix(server_loop_.io(), path_, on_accept);
    } else {
      l = Listener::ListenTcp(server_loop_.io(), "127.0.0.1", 0, on_accept);
    }
    ASSERT_TRUE(l.ok()) << l.status();
    listener_ = std::move(*l);
    if (GetParam() == Transport::kTcp) {
      ASSERT_GT(listener_->port(), 0);
    }
  }

  void HandleRequest(const std::shared_ptr<Connection>& c, const FrameHeader& h,
                     std::string_view body) {
    {
      raio::MutexLock lock(&mu_);
      ++requests_seen_;
      last_request_ = h;
    }
    if (h.kind == FrameKind::kOneWay) {
      raio::MutexLock lock(&mu_);
      one_way_bodies_.emplace_back(body);
      return;
    }
    switch (h.method) {
      case kEcho: {
        proto::LeaseIdRequest req;
        if (!req.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
          c->ReplyError(h, absl::InvalidArgumentError("unparsable LeaseIdRequest"));
          return;
        }
        c->Reply(h, req);
        return;
      }
      case kSilent: {
        raio::MutexLock lock(&mu_);
        silent_requests_.push_back(h);
        return;
      }
      case kFail:
        c->ReplyError(h, absl::NotFoundError("no lease 'abc' on this node"));
        return;
      case kTail: {
        proto::LeaseIdRequest req;
        req.ParseFromArray(body.data(), static_cast<int>(body.size()));
        const std::size_t n = std::stoull(req.lease_id());
        proto::ReadObjectChunkReply reply;
        reply.set_object_size_bytes(n);
        std::shared_ptr<const std::string> bytes(new std::string(Pattern(n)),
                                                 [this](const std::string* b) {
                                                   delete b;
                                                   tails_released_.fetch_add(1);
                                                 });
        FieldSuffix suffix;
        suffix.AddBytesFieldHeader(kDataField, n);
        c->ReplyWithTail(h, reply, suffix.view(), RawTail{*bytes, bytes});
        return;
      }
      default:
        c->ReplyError(h, absl::UnimplementedError("unknown method"));
    }
  }

  // A started client connection on the client loop.
  std::shared_ptr<Connection> Connect(Connection::CloseHandler on_close = nullptr) {
    absl::StatusOr<std::shared_ptr<Connection>> c =
        GetParam() == Transport::kUnix
            ? ConnectUnix(client_loop_.io(), path_)
            : ConnectTcp(client_loop_.io(), "127.0.0.1:" + std::to_string(listener_->port()),
                         testkit::Scaled(5s));
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    (*c)->Start(nullptr, std::move(on_close));
    return *c;
  }

  // A raw, blocking socket connected to the server (no framing).
  int ConnectRaw() {
    int fd = -1;
    if (GetParam() == Transport::kUnix) {
      fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        ADD_FAILURE() << "connect: " << std::strerror(errno);
      }
    } else {
      fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(listener_->port()));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        ADD_FAILURE() << "connect: " << std::strerror(errno);
      }
    }
    return fd;
  }

  // Waits (with a deadline) until `pred` holds under mu_.
  template <typename Pred>
  bool WaitUntil(Pred pred) {
    auto deadline = std::chrono::steady_clock::now() + kWait;
    while (true) {
      {
        raio::MutexLock lock(&mu_);
        if (pred()) return true;
      }
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // Runs `f` on `loop` and waits for it: everything posted earlier has run by then.
  template <typename F>
  void RunOn(EventLoop& loop, F f) {
    std::promise<void> done;
    loop.Post([&] {
      f();
      done.set_value();
    });
    ASSERT_EQ(done.get_future().wait_for(kWait), std::future_status::ready);
  }

  EventLoop server_loop_{"test-server"};
  EventLoop client_loop_{"test-client"};
  std::string dir_;
  std::string path_;
  std::unique_ptr<Listener> listener_;

  raio::Mutex mu_;
  std::vector<std::shared_ptr<Connection>> server_conns_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> server_close_reasons_ ABSL_GUARDED_BY(mu_);
  std::vector<FrameHeader> silent_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> one_way_bodies_ ABSL_GUARDED_BY(mu_);
  FrameHeader last_request_ ABSL_GUARDED_BY(mu_);
  int requests_seen_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int> tails_released_{0};  // kTail replies whose tail the server let go
};

TEST_P(ConnectionTest, RequestGetsItsReply) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  CallResult r;
  c->Call(kEcho, Lease("lease-1"), r.Callback());
  absl::StatusOr<std::string> body = r.Get();
  ASSERT_TRUE(body.ok()) << body.status();
  proto::LeaseIdRequest reply;
  ASSERT_TRUE(reply.ParseFromString(*body));
  EXPECT_EQ(reply.lease_id(), "lease-1");

  raio::MutexLock lock(&mu_);
  EXPECT_EQ(last_request_.kind, FrameKind::kRequest);
  EXPECT_EQ(last_request_.method, kEcho);
  EXPECT_NE(last_request_.request_id, 0u);
}

TEST_P(ConnectionTest, CallSyncReturnsTheReplyBody) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  absl::StatusOr<std::string> body = CallSync(*c, kEcho, Lease("sync"), testkit::Scaled(10s));
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, LeaseBody("sync"));
  // An empty message travels as an empty body.
  absl::StatusOr<std::string> other = CallSync(*c, kEcho, proto::Empty(), testkit::Scaled(10s));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(*other, "");
}

TEST_P(ConnectionTest, OneWayFrameReachesTheHandlerWithoutARequestId) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  c->SendOneWay(proto::NOTIFY_BLOCKED, Lease("blocked"));
  ASSERT_TRUE(
      WaitUntil([this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !one_way_bodies_.empty(); }));
  raio::MutexLock lock(&mu_);
  EXPECT_EQ(one_way_bodies_[0], LeaseBody("blocked"));
  EXPECT_EQ(last_request_.kind, FrameKind::kOneWay);
  EXPECT_EQ(last_request_.method, static_cast<uint32_t>(proto::NOTIFY_BLOCKED));
  EXPECT_EQ(last_request_.request_id, 0u);
}

// Issues `n` calls through `issue` and checks that every reply matches its request.
void ExpectPipelinedCallsMatch(int n, const std::function<void(std::function<void()>)>& run,
                               Connection& c) {
  std::atomic<int> done{0};
  std::atomic<int> mismatched{0};
  std::atomic<int> failed{0};
  std::promise<void> all_done;
  run([&] {
    for (int i = 0; i < n; ++i) {
      std::string id = "lease-" + std::to_string(i);
      c.Call(kEcho, Lease(id), [&, id, n](const absl::StatusOr<std::string_view>& r) {
        if (!r.ok()) {
          failed.fetch_add(1);
        } else {
          proto::LeaseIdRequest reply;
          if (!reply.ParseFromArray(r->data(), static_cast<int>(r->size())) ||
              reply.lease_id() != id) {
            mismatched.fetch_add(1);
          }
        }
        if (done.fetch_add(1) + 1 == n) all_done.set_value();
      });
    }
  });
  ASSERT_EQ(all_done.get_future().wait_for(testkit::Scaled(60s)), std::future_status::ready)
      << done.load() << " of " << n << " answered";
  EXPECT_EQ(done.load(), n);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(mismatched.load(), 0);
}

TEST_P(ConnectionTest, ManyPipelinedCallsFromAnotherThreadAreAllAnswered) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  ExpectPipelinedCallsMatch(
      10000, [](const std::function<void()>& f) { f(); }, *c);
  raio::MutexLock lock(&mu_);
  EXPECT_EQ(requests_seen_, 10000);
}

TEST_P(ConnectionTest, ManyPipelinedCallsFromTheLoopThreadAreAllAnswered) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  ExpectPipelinedCallsMatch(
      10000, [this](std::function<void()> f) { client_loop_.Post(std::move(f)); }, *c);
}

TEST_P(ConnectionTest, CallWithoutReplyFailsWithDeadlineExceeded) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  CallResult r;
  c->Call(kSilent, Lease("never"), r.Callback(), 50ms);
  absl::StatusOr<std::string> body = r.Get();
  EXPECT_EQ(body.status().code(), absl::StatusCode::kDeadlineExceeded) << body.status();
  EXPECT_FALSE(IsPeerError(body.status()));
  EXPECT_FALSE(c->closed());

  // A reply that comes after the deadline is dropped; the connection keeps working.
  ASSERT_TRUE(
      WaitUntil([this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return silent_requests_.size() == 1; }));
  RunOn(server_loop_, [this] {
    raio::MutexLock lock(&mu_);
    server_conns_.at(0)->Reply(silent_requests_[0], Lease("late"));
  });
  absl::StatusOr<std::string> next = CallSync(*c, kEcho, Lease("after"), testkit::Scaled(10s));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, LeaseBody("after"));
}

TEST_P(ConnectionTest, ReplyBeforeTheDeadlineWins) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  CallResult r;
  c->Call(kEcho, Lease("quick"), r.Callback(), testkit::Scaled(60s));
  absl::StatusOr<std::string> body = r.Get();
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, LeaseBody("quick"));
}

TEST_P(ConnectionTest, PeerCloseFailsPendingCallsAndRunsCloseHandler) {
  StartServer();
  std::promise<absl::Status> closed;
  std::atomic<int> close_calls{0};
  std::shared_ptr<Connection> c =
      Connect([&](const std::shared_ptr<Connection>&, const absl::Status& reason) {
        if (close_calls.fetch_add(1) == 0) closed.set_value(reason);
      });
  ASSERT_NE(c, nullptr);
  std::vector<CallResult> calls(3);
  for (auto& r : calls) c->Call(kSilent, Lease("pending"), r.Callback());
  ASSERT_TRUE(
      WaitUntil([this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return silent_requests_.size() == 3; }));

  RunOn(server_loop_, [this] {
    raio::MutexLock lock(&mu_);
    server_conns_.at(0)->Close(absl::CancelledError("server going away"));
  });

  for (auto& r : calls) {
    absl::StatusOr<std::string> body = r.Get();
    EXPECT_EQ(body.status().code(), absl::StatusCode::kUnavailable) << body.status();
    EXPECT_FALSE(IsPeerError(body.status()));
  }
  std::future<absl::Status> reason = closed.get_future();
  ASSERT_EQ(reason.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(reason.get().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(c->closed());

  // A call on the closed connection fails asynchronously with Unavailable.
  CallResult late;
  c->Call(kEcho, Lease("late"), late.Callback());
  EXPECT_EQ(late.Get().status().code(), absl::StatusCode::kUnavailable);
  c->Close(absl::CancelledError("again"));  // idempotent
  RunOn(client_loop_, [] {});
  EXPECT_EQ(close_calls.load(), 1);

  // The server saw its own close reason.
  ASSERT_TRUE(WaitUntil(
      [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return server_close_reasons_.size() == 1; }));
  raio::MutexLock lock(&mu_);
  EXPECT_EQ(server_close_reasons_[0].code(), absl::StatusCode::kCancelled);
}

TEST_P(ConnectionTest, LocalCloseFailsPendingCallsWithUnavailable) {
  StartServer();
  std::promise<void> closed;
  std::shared_ptr<Connection> c =
      Connect([&](const std::shared_ptr<Connection>&, const absl::Status&) { closed.set_value(); });
  ASSERT_NE(c, nullptr);
  CallResult r;
  c->Call(kSilent, Lease("pending"), r.Callback());
  c->Close(absl::CancelledError("client shutting down"));
  absl::StatusOr<std::string> body = r.Get();
  EXPECT_EQ(body.status().code(), absl::StatusCode::kUnavailable) << body.status();
  EXPECT_EQ(closed.get_future().wait_for(kWait), std::future_status::ready);
}

TEST_P(ConnectionTest, LocalCloseReasonReachesPendingCallsAndCloseHandler) {
  // Regression: OnRead used to replace the reason given to Close() with "peer closed".
  StartServer();
  std::promise<absl::Status> closed;
  std::shared_ptr<Connection> c =
      Connect([&](const std::shared_ptr<Connection>&, const absl::Status& reason) {
        closed.set_value(reason);
      });
  ASSERT_NE(c, nullptr);
  CallResult r;
  c->Call(kSilent, Lease("pending"), r.Callback());
  c->Close(absl::CancelledError("client shutting down"));
  absl::StatusOr<std::string> body = r.Get();
  EXPECT_EQ(body.status().code(), absl::StatusCode::kUnavailable) << body.status();
  EXPECT_NE(body.status().message().find("client shutting down"), absl::string_view::npos)
      << body.status();
  std::future<absl::Status> reason = closed.get_future();
  ASSERT_EQ(reason.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(reason.get(), absl::CancelledError("client shutting down"));
}

TEST_P(ConnectionTest, MalformedFrameClosesOnlyThatConnection) {
  StartServer();
  std::shared_ptr<Connection> good = Connect();
  ASSERT_NE(good, nullptr);
  ASSERT_TRUE(CallSync(*good, kEcho, Lease("before"), testkit::Scaled(10s)).ok());

  int fd = ConnectRaw();
  ASSERT_GE(fd, 0);
  std::string garbage(32, '\x5a');
  ASSERT_EQ(::write(fd, garbage.data(), garbage.size()), static_cast<ssize_t>(garbage.size()));
  // The server hangs up on the raw socket: read sees EOF (or a reset).
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 20000), 1);
  char buf[16];
  EXPECT_LE(::read(fd, buf, sizeof(buf)), 0);
  ::close(fd);

  ASSERT_TRUE(WaitUntil(
      [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return server_close_reasons_.size() == 1; }));
  {
    raio::MutexLock lock(&mu_);
    EXPECT_EQ(server_close_reasons_[0].code(), absl::StatusCode::kInvalidArgument)
        << server_close_reasons_[0];
    EXPECT_EQ(requests_seen_, 1);  // the garbage never reached the handler
  }

  // The earlier connection is untouched and the listener still accepts.
  absl::StatusOr<std::string> still = CallSync(*good, kEcho, Lease("still"), testkit::Scaled(10s));
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(*still, LeaseBody("still"));
  std::shared_ptr<Connection> fresh = Connect();
  ASSERT_NE(fresh, nullptr);
  absl::StatusOr<std::string> body = CallSync(*fresh, kEcho, Lease("fresh"), testkit::Scaled(10s));
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, LeaseBody("fresh"));
}

TEST_P(ConnectionTest, ReplyErrorDeliversCodeAndMessage) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  CallResult r;
  c->Call(kFail, proto::Empty(), r.Callback());
  absl::StatusOr<std::string> body = r.Get();
  EXPECT_EQ(body.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(body.status().message(), "no lease 'abc' on this node");
  EXPECT_TRUE(IsPeerError(body.status()));  // the peer answered: it is not gone
  EXPECT_FALSE(c->closed());

  absl::StatusOr<std::string> unknown =
      CallSync(*c, proto::PUSH_TASK, proto::Empty(), testkit::Scaled(10s));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kUnimplemented);
}

TEST_P(ConnectionTest, FrameLargerThanTheReadBufferArrivesIntact) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  std::string big(1 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 131 + 7) % 251);
  // Queue small calls around the big one so it starts and ends mid-buffer.
  CallResult before, large, after;
  c->Call(kEcho, Lease("small-before"), before.Callback());
  c->Call(kEcho, Lease(big), large.Callback());
  c->Call(kEcho, Lease("small-after"), after.Callback());

  absl::StatusOr<std::string> b = before.Get();
  absl::StatusOr<std::string> l = large.Get();
  absl::StatusOr<std::string> a = after.Get();
  ASSERT_TRUE(b.ok() && l.ok() && a.ok()) << b.status() << l.status() << a.status();
  EXPECT_EQ(*b, LeaseBody("small-before"));
  EXPECT_EQ(*a, LeaseBody("small-after"));
  proto::LeaseIdRequest reply;
  ASSERT_TRUE(reply.ParseFromString(*l));
  ASSERT_EQ(reply.lease_id().size(), big.size());
  EXPECT_TRUE(reply.lease_id() == big) << "1 MiB body came back altered";
}

TEST_P(ConnectionTest, EitherSideMayCall) {
  StartServer();
  absl::StatusOr<std::shared_ptr<Connection>> c =
      GetParam() == Transport::kUnix
          ? ConnectUnix(client_loop_.io(), path_)
          : ConnectTcp(client_loop_.io(), "127.0.0.1:" + std::to_string(listener_->port()),
                       testkit::Scaled(5s));
  ASSERT_TRUE(c.ok()) << c.status();
  (*c)->Start(
      [](const std::shared_ptr<Connection>& conn, const FrameHeader& h, std::string_view body) {
        proto::LeaseIdRequest req;
        req.ParseFromArray(body.data(), static_cast<int>(body.size()));
        req.set_lease_id("client saw " + req.lease_id());
        conn->Reply(h, req);
      },
      nullptr);
  ASSERT_TRUE(
      CallSync(**c, kEcho, Lease("hello"), testkit::Scaled(10s)).ok());  // the server has accepted
  std::shared_ptr<Connection> server_side;
  {
    raio::MutexLock lock(&mu_);
    ASSERT_EQ(server_conns_.size(), 1u);
    server_side = server_conns_[0];
  }
  absl::StatusOr<std::string> body =
      CallSync(*server_side, kEcho, Lease("ping"), testkit::Scaled(10s));
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, LeaseBody("client saw ping"));
}

TEST_P(ConnectionTest, ReplyTailIsReadStraightIntoTheCallersBuffer) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  // Tails that come whole with their header, that straddle the read buffer, and that are
  // far larger than it; all in flight at once, with ordinary calls between them.
  const std::vector<std::size_t> sizes = {
      1, 100, 64 * 1024 - 100, 64 * 1024 + 1, 3 << 20, 5 * 1000 * 1000 + 17};
  constexpr char kUntouched = '\x55';
  std::vector<std::string> buffers;
  for (std::size_t n : sizes) buffers.emplace_back(n + 64, kUntouched);
  std::vector<IntoResult> results(sizes.size());
  std::vector<CallResult> echoes(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    c->CallInto(kTail, Lease(std::to_string(sizes[i])), std::span<char>(buffers[i]),
                results[i].Callback());
    c->Call(kEcho, Lease("between-" + std::to_string(i)), echoes[i].Callback());
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::size_t n = sizes[i];
    IntoResult::Value r = results[i].Get();
    ASSERT_TRUE(r.ok()) << n << ": " << r.status();
    EXPECT_EQ(r->second, n);
    EXPECT_TRUE(buffers[i].compare(0, n, Pattern(n)) == 0) << n << " tail bytes came altered";
    EXPECT_EQ(buffers[i].find_first_not_of(kUntouched, n), std::string::npos)
        << "bytes past the tail of " << n << " were written";
    // The message is the reply up to its tail: ReadObjectChunkReply and the header of
    // `data`.
    proto::ReadObjectChunkReply reply;
    ASSERT_TRUE(internal::ParseBeforeTail(r->first, kDataField, n, &reply));
    EXPECT_EQ(reply.object_size_bytes(), n);
    EXPECT_TRUE(reply.data().empty());
    absl::StatusOr<std::string> echo = echoes[i].Get();
    ASSERT_TRUE(echo.ok()) << echo.status();
    EXPECT_EQ(*echo, LeaseBody("between-" + std::to_string(i)));
  }
  // Every tail was let go by the server once written.
  ASSERT_TRUE(WaitUntil([&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return tails_released_.load() == static_cast<int>(sizes.size());
  }));
}

TEST_P(ConnectionTest, ReplyWithAnEmptyTailReachesCallIntoAsAWholeMessage) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  std::string buffer(16, 'x');
  IntoResult empty, plain;
  c->CallInto(kTail, Lease("0"), std::span<char>(buffer), empty.Callback());
  c->CallInto(kEcho, Lease("no tail"), std::span<char>(buffer), plain.Callback());
  IntoResult::Value e = empty.Get();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->second, 0u);
  proto::ReadObjectChunkReply reply;
  ASSERT_TRUE(internal::ParseBeforeTail(e->first, kDataField, 0, &reply));
  EXPECT_EQ(reply.object_size_bytes(), 0u);
  IntoResult::Value p = plain.Get();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->first, LeaseBody("no tail"));
  EXPECT_EQ(p->second, 0u);
  EXPECT_EQ(buffer, std::string(16, 'x'));
}

TEST_P(ConnectionTest, ReplyWithTailReachesAPlainCallWholeAsOneMessage) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  for (std::size_t n : {std::size_t{10}, std::size_t{(1 << 20) + 3}}) {
    absl::StatusOr<std::string> body =
        CallSync(*c, kTail, Lease(std::to_string(n)), testkit::Scaled(10s));
    ASSERT_TRUE(body.ok()) << body.status();
    proto::ReadObjectChunkReply reply;
    ASSERT_TRUE(reply.ParseFromString(*body));
    EXPECT_EQ(reply.object_size_bytes(), n);
    EXPECT_TRUE(reply.data() == Pattern(n));
  }
}

TEST_P(ConnectionTest, TypedCallIntoPutsTheFieldInTheBufferAndParsesTheRest) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  proto::ReadObjectChunkRequest req;
  req.set_object_id("300000");  // the server reads field 1 as the tail's length
  std::string buffer(300000, '\0');
  std::promise<absl::StatusOr<IntoReply<proto::ReadObjectChunkReply>>> done;
  CallInto<proto::READ_OBJECT_CHUNK>(
      *c, req, kDataField, std::span<char>(buffer),
      [&done](absl::StatusOr<IntoReply<proto::ReadObjectChunkReply>> r) {
        done.set_value(std::move(r));
      });
  auto future = done.get_future();
  ASSERT_EQ(future.wait_for(kWait), std::future_status::ready);
  absl::StatusOr<IntoReply<proto::ReadObjectChunkReply>> r = future.get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->bytes, 300000u);
  EXPECT_EQ(r->reply.object_size_bytes(), 300000u);
  EXPECT_TRUE(r->reply.data().empty());
  EXPECT_TRUE(buffer == Pattern(300000));
}

TEST_P(ConnectionTest, RequestWithTailReachesTheHandlerWholeAndIsLetGoOnTheLoop) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  for (std::size_t n : {std::size_t{100}, std::size_t{2 << 20}}) {
    std::atomic<int> released{0};
    std::atomic<bool> on_loop{false};
    std::shared_ptr<const std::string> bytes(
        new std::string(Pattern(n, 3)), [&](const std::string* b) {
          delete b;
          on_loop = client_loop_.io().get_executor().running_in_this_thread();
          released.fetch_add(1);
        });
    FieldSuffix suffix;
    suffix.AddBytesFieldHeader(1, n);  // LeaseIdRequest.lease_id
    CallResult r;
    // The connection holds the only reference: the test's own must not be the last one.
    const std::string_view view = *bytes;
    c->Call(kEcho, proto::LeaseIdRequest(), r.Callback(), std::nullopt, suffix.view(),
            RawTail{view, std::move(bytes)});
    absl::StatusOr<std::string> body = r.Get();
    ASSERT_TRUE(body.ok()) << body.status();
    proto::LeaseIdRequest echoed;
    ASSERT_TRUE(echoed.ParseFromString(*body));
    EXPECT_TRUE(echoed.lease_id() == Pattern(n, 3)) << n << " bytes came back altered";
    RunOn(client_loop_, [] {});
    ASSERT_TRUE(WaitUntil([&] { return released.load() == 1; }));
    EXPECT_TRUE(on_loop.load()) << "a tail of " << n << " bytes was let go off the loop";
  }
}

TEST_P(ConnectionTest, ReplyTailLongerThanTheBufferFailsOnlyThatCall) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  for (std::size_t n : {std::size_t{50}, std::size_t{300000}}) {
    std::string buffer(10, 'x');
    IntoResult r;
    c->CallInto(kTail, Lease(std::to_string(n)), std::span<char>(buffer), r.Callback());
    IntoResult::Value v = r.Get();
    EXPECT_EQ(v.status().code(), absl::StatusCode::kOutOfRange) << v.status();
    EXPECT_TRUE(IsPeerError(v.status()));
    EXPECT_EQ(buffer, std::string(10, 'x'));
    // The tail was skipped: the next frames read as they should.
    absl::StatusOr<std::string> next = CallSync(*c, kEcho, Lease("after"), testkit::Scaled(10s));
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(*next, LeaseBody("after"));
  }
  EXPECT_FALSE(c->closed());
}

TEST_P(ConnectionTest, CallOverTheFrameLimitFailsWithoutBeingSent) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  // Address space for a tail over the limit; never touched, so it takes no memory.
  const std::size_t huge = std::size_t{config::kMaxFrameBytes} + 1;
  void* mem = ::mmap(nullptr, huge, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto keep = std::make_shared<int>(0);
  CallResult r;
  c->Call(kEcho, proto::LeaseIdRequest(), r.Callback(), std::nullopt, {},
          RawTail{std::string_view(static_cast<const char*>(mem), huge), keep});
  absl::StatusOr<std::string> body = r.Get();
  EXPECT_EQ(body.status().code(), absl::StatusCode::kInvalidArgument) << body.status();
  EXPECT_NE(body.status().message().find("over the limit"), std::string::npos) << body.status();
  RunOn(client_loop_, [] {});
  EXPECT_EQ(keep.use_count(), 1);  // the connection let it go
  ::munmap(mem, huge);
  EXPECT_TRUE(CallSync(*c, kEcho, Lease("still"), testkit::Scaled(10s)).ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, ConnectionTest,
                         ::testing::Values(Transport::kUnix, Transport::kTcp),
                         [](const ::testing::TestParamInfo<Transport>& info) {
                           return info.param == Transport::kUnix ? "Unix" : "Tcp";
                         });

TEST(ConnectTest, BadAddressesAreRejected) {
  EventLoop loop("test-connect");
  EXPECT_EQ(ConnectTcp(loop.io(), "no-port", 1s).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConnectTcp(loop.io(), "127.0.0.1:70000", 1s).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConnectUnix(loop.io(), "/nonexistent/raio/socket").status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(Listener::ListenTcp(loop.io(), "not an address", 0, [](std::shared_ptr<Connection>) {})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// A Connection on a manual io_context over one end of a socketpair; the test writes raw
// bytes into the other end, as a misbehaving peer would, and runs the loop itself.
}  // namespace
}  // namespace raio::rpc
