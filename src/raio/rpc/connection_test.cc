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
#include "raio/rpc/listener.h"
#include "raio/rpc/service.h"
#include "raio/rpc/stream.h"

namespace raio::rpc {
namespace {

using namespace std::chrono_literals;

constexpr auto kWait = 20s;  // generous deadline: only reached when something is broken
constexpr uint32_t kEcho = proto::RETURN_WORKER_LEASE;
constexpr uint32_t kSilent = proto::CANCEL_WORKER_LEASE;
constexpr uint32_t kFail = proto::GET_NODE_STATS;
// Answered with a ReadObjectChunkReply {object_size_bytes: n} whose `data` (n bytes of
// Pattern(n)) goes as a raw tail; n is the request's lease id (a LeaseIdRequest, or a
// ReadObjectChunkRequest: field 1 is a length-delimited string in both).
constexpr uint32_t kTail = proto::READ_OBJECT_CHUNK;
constexpr int kDataField = proto::ReadObjectChunkReply::kDataFieldNumber;

enum class Transport { kUnix, kTcp };

std::string LeaseBody(const std::string& id) {
  proto::LeaseIdRequest r;
  r.set_lease_id(id);
  return r.SerializeAsString();
}

proto::LeaseIdRequest Lease(const std::string& id) {
  proto::LeaseIdRequest r;
  r.set_lease_id(id);
  return r;
}

// `n` bytes that differ from their neighbours, so that a byte out of place shows.
std::string Pattern(std::size_t n, int seed = 7) {
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<char>((i * 131 + seed) % 251);
  return out;
}

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
            : ConnectTcp(client_loop_.io(), "127.0.0.1:" + std::to_string(listener_->port()), 5s);
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
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
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
  absl::StatusOr<std::string> body = CallSync(*c, kEcho, Lease("sync"), 10s);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, LeaseBody("sync"));
  // An empty message travels as an empty body.
  absl::StatusOr<std::string> other = CallSync(*c, kEcho, proto::Empty(), 10s);
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
  ASSERT_EQ(all_done.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready)
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
  absl::StatusOr<std::string> next = CallSync(*c, kEcho, Lease("after"), 10s);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, LeaseBody("after"));
}

TEST_P(ConnectionTest, ReplyBeforeTheDeadlineWins) {
  StartServer();
  std::shared_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  CallResult r;
  c->Call(kEcho, Lease("quick"), r.Callback(), 60s);
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
  EXPECT_EQ(closed.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
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
  ASSERT_TRUE(CallSync(*good, kEcho, Lease("before"), 10s).ok());

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
  absl::StatusOr<std::string> still = CallSync(*good, kEcho, Lease("still"), 10s);
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(*still, LeaseBody("still"));
  std::shared_ptr<Connection> fresh = Connect();
  ASSERT_NE(fresh, nullptr);
  absl::StatusOr<std::string> body = CallSync(*fresh, kEcho, Lease("fresh"), 10s);
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

  absl::StatusOr<std::string> unknown = CallSync(*c, proto::PUSH_TASK, proto::Empty(), 10s);
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
          : ConnectTcp(client_loop_.io(), "127.0.0.1:" + std::to_string(listener_->port()), 5s);
  ASSERT_TRUE(c.ok()) << c.status();
  (*c)->Start(
      [](const std::shared_ptr<Connection>& conn, const FrameHeader& h, std::string_view body) {
        proto::LeaseIdRequest req;
        req.ParseFromArray(body.data(), static_cast<int>(body.size()));
        req.set_lease_id("client saw " + req.lease_id());
        conn->Reply(h, req);
      },
      nullptr);
  ASSERT_TRUE(CallSync(**c, kEcho, Lease("hello"), 10s).ok());  // the server has accepted
  std::shared_ptr<Connection> server_side;
  {
    raio::MutexLock lock(&mu_);
    ASSERT_EQ(server_conns_.size(), 1u);
    server_side = server_conns_[0];
  }
  absl::StatusOr<std::string> body = CallSync(*server_side, kEcho, Lease("ping"), 10s);
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
    absl::StatusOr<std::string> body = CallSync(*c, kTail, Lease(std::to_string(n)), 10s);
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
    absl::StatusOr<std::string> next = CallSync(*c, kEcho, Lease("after"), 10s);
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
  EXPECT_TRUE(CallSync(*c, kEcho, Lease("still"), 10s).ok());
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
class RawPeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0) << std::strerror(errno);
    peer_ = fds[1];
    conn_ = Connection::Create(
        Socket(io_, boost::asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), fds[0]),
        "raw peer");
    conn_->Start(nullptr, [this](const std::shared_ptr<Connection>&, const absl::Status& reason) {
      close_reason_ = reason;
    });
  }
  void TearDown() override {
    if (peer_ >= 0) ::close(peer_);
    RunUntilIdle();
  }
  void SendFrame(FrameKind kind, uint64_t request_id, uint32_t body_bytes, std::string body) {
    std::string bytes(kFrameHeaderBytes, '\0');
    EncodeFrameHeader({kind, kFail, request_id, body_bytes}, bytes.data());
    bytes += body;
    ASSERT_EQ(::send(peer_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  // A version-2 reply frame: `message`, then a tail of `tail_bytes` (Pattern), of which
  // only the first `send_tail` bytes are sent (all by default).
  void SendTailedReply(uint64_t request_id, const std::string& message, std::size_t tail_bytes,
                       std::optional<std::size_t> send_tail = std::nullopt) {
    std::string bytes(kTailFrameHeaderBytes, '\0');
    EncodeFrameHeader(
        {FrameKind::kReply, kTail, request_id, static_cast<uint32_t>(message.size() + tail_bytes),
         static_cast<uint32_t>(tail_bytes)},
        bytes.data());
    bytes += message;
    bytes += Pattern(tail_bytes).substr(0, send_tail.value_or(tail_bytes));
    SendRaw(bytes);
  }
  // Sends `bytes` from a thread of its own while this one runs the loop (the connection
  // must read for a large frame to fit through the socket).
  void SendRaw(const std::string& bytes) {
    std::atomic<bool> sent{false};
    std::thread writer([&] {
      std::size_t at = 0;
      while (at < bytes.size()) {
        ssize_t n = ::send(peer_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
        if (n <= 0) break;
        at += static_cast<std::size_t>(n);
      }
      sent = true;
    });
    RunUntil([&] { return sent.load(); });
    writer.join();
    RunUntilIdle();
  }
  void RunUntilIdle() {
    while (io_.poll() > 0) {
    }
    io_.restart();
  }
  void RunFor(std::chrono::milliseconds d) {
    io_.run_for(d);
    io_.restart();
  }
  // Runs the loop until `done` holds (or the test's deadline passes).
  template <typename Pred>
  bool RunUntil(Pred done) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      RunFor(1ms);
    }
    return true;
  }

  boost::asio::io_context io_;
  int peer_ = -1;
  std::shared_ptr<Connection> conn_;
  std::optional<absl::Status> close_reason_;
};

// Found by fuzz/frame_fuzzer: an error frame whose RpcStatus says OK reached
// StatusOr<string_view>(OkStatus()), which Debian's abseil turns into an abort of the
// whole process.
TEST_F(RawPeerTest, ErrorReplyWithStatusOkFailsTheCallInsteadOfAborting) {
  std::optional<absl::StatusOr<std::string>> result;
  conn_->Call(kFail, proto::Empty(), [&](const absl::StatusOr<std::string_view>& r) {
    result = r.ok() ? absl::StatusOr<std::string>(std::string(*r)) : r.status();
  });
  RunUntilIdle();
  proto::RpcStatus ok_status;
  ok_status.set_message("all fine");
  SendFrame(FrameKind::kError, 1, static_cast<uint32_t>(ok_status.ByteSizeLong()),
            ok_status.SerializeAsString());
  RunUntilIdle();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->status().code(), absl::StatusCode::kInternal) << result->status();
  EXPECT_FALSE(conn_->closed());
}

// Found by fuzz/frame_fuzzer: the connection grew its read buffer to the body length a
// header claimed before any of the body came, so 20 bytes took up to 512 MiB.
TEST_F(RawPeerTest, HeaderClaimingAHugeBodyDoesNotReserveItBeforeTheBytesArrive) {
  RunUntilIdle();
  const struct mallinfo2 before = ::mallinfo2();
  SendFrame(FrameKind::kRequest, 1, 400u << 20, "first bytes of a 400 MiB body");
  RunUntilIdle();
  const struct mallinfo2 after = ::mallinfo2();
  const auto in_use = [](const struct mallinfo2& m) { return m.uordblks + m.hblkhd; };
  EXPECT_LT(in_use(after), in_use(before) + (16u << 20));
  EXPECT_FALSE(conn_->closed());  // still waiting for the rest of the frame
  ::shutdown(peer_, SHUT_WR);
  RunUntilIdle();
  ASSERT_TRUE(close_reason_.has_value());
  EXPECT_EQ(close_reason_->code(), absl::StatusCode::kUnavailable) << *close_reason_;
}

// A CallInto on the raw peer's connection: its outcome, and the buffer it was given.
struct RawInto {
  std::string buffer;
  std::optional<absl::StatusOr<std::pair<std::string, std::size_t>>> result;
  explicit RawInto(std::size_t size) : buffer(size, '\x55') {}
  Connection::TailedReplyCallback Callback() {
    return [this](const absl::StatusOr<Connection::TailedReply>& r) {
      if (r.ok()) {
        result = std::make_pair(std::string(r->message), r->tail_bytes);
      } else {
        result = r.status();
      }
    };
  }
};

TEST_F(RawPeerTest, TailSentInPiecesLandsInTheBufferWhole) {
  RawInto into(200000);
  conn_->CallInto(kTail, proto::Empty(), std::span<char>(into.buffer), into.Callback());
  RunUntilIdle();
  // The header and message alone, then the tail in two writes.
  std::string bytes(kTailFrameHeaderBytes, '\0');
  EncodeFrameHeader({FrameKind::kReply, kTail, 1, 3 + 200000, 200000}, bytes.data());
  SendRaw(bytes + "msg");
  EXPECT_FALSE(into.result.has_value());
  const std::string tail = Pattern(200000);
  SendRaw(tail.substr(0, 70000));
  EXPECT_FALSE(into.result.has_value());
  SendRaw(tail.substr(70000));
  ASSERT_TRUE(into.result.has_value());
  ASSERT_TRUE(into.result->ok()) << into.result->status();
  EXPECT_EQ((*into.result)->first, "msg");
  EXPECT_EQ((*into.result)->second, 200000u);
  EXPECT_TRUE(into.buffer == tail);
  EXPECT_FALSE(conn_->closed());
}

TEST_F(RawPeerTest, PeerDyingMidTailFailsTheCall) {
  RawInto into(1 << 20);
  conn_->CallInto(kTail, proto::Empty(), std::span<char>(into.buffer), into.Callback());
  RunUntilIdle();
  SendTailedReply(1, "m", 1 << 20, /*send_tail=*/100000);
  EXPECT_FALSE(into.result.has_value());
  ::close(peer_);
  peer_ = -1;
  ASSERT_TRUE(RunUntil([&] { return into.result.has_value(); }));
  EXPECT_EQ(into.result->status().code(), absl::StatusCode::kUnavailable) << into.result->status();
  EXPECT_FALSE(IsPeerError(into.result->status()));
  ASSERT_TRUE(close_reason_.has_value());
  EXPECT_EQ(close_reason_->code(), absl::StatusCode::kUnavailable) << *close_reason_;
}

TEST_F(RawPeerTest, TailLongerThanItsBodyClosesTheConnectionAndFailsTheCall) {
  RawInto into(100);
  conn_->CallInto(kTail, proto::Empty(), std::span<char>(into.buffer), into.Callback());
  RunUntilIdle();
  std::string bytes(kTailFrameHeaderBytes, '\0');
  EncodeFrameHeader({FrameKind::kReply, kTail, 1, 10, 10}, bytes.data());
  const uint32_t longer = 11;
  std::memcpy(bytes.data() + 20, &longer, sizeof(longer));
  SendRaw(bytes + std::string(10, 'x'));
  ASSERT_TRUE(close_reason_.has_value());
  EXPECT_EQ(close_reason_->code(), absl::StatusCode::kInvalidArgument) << *close_reason_;
  ASSERT_TRUE(into.result.has_value());
  EXPECT_EQ(into.result->status().code(), absl::StatusCode::kUnavailable) << into.result->status();
  EXPECT_EQ(into.buffer, std::string(100, '\x55'));
}

TEST_F(RawPeerTest, TailFrameOverTheFrameLimitClosesTheConnection) {
  RawInto into(100);
  conn_->CallInto(kTail, proto::Empty(), std::span<char>(into.buffer), into.Callback());
  RunUntilIdle();
  std::string bytes(kTailFrameHeaderBytes, '\0');
  EncodeFrameHeader({FrameKind::kReply, kTail, 1, config::kMaxFrameBytes + 1, 50}, bytes.data());
  SendRaw(bytes);
  ASSERT_TRUE(close_reason_.has_value());
  EXPECT_EQ(close_reason_->code(), absl::StatusCode::kInvalidArgument) << *close_reason_;
  ASSERT_TRUE(into.result.has_value());
  EXPECT_EQ(into.result->status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(RawPeerTest, TailStalledPastTheDeadlineFailsTheCallAndClosesTheConnection) {
  RawInto into(1 << 20);
  conn_->CallInto(kTail, proto::Empty(), std::span<char>(into.buffer), into.Callback(), 50ms);
  RunUntilIdle();
  SendTailedReply(1, "m", 1 << 20, /*send_tail=*/1000);
  ASSERT_TRUE(RunUntil([&] { return into.result.has_value(); }));
  EXPECT_EQ(into.result->status().code(), absl::StatusCode::kDeadlineExceeded)
      << into.result->status();
  EXPECT_NE(into.result->status().message().find("mid-tail"), std::string::npos)
      << into.result->status();
  EXPECT_TRUE(conn_->closed());
  ASSERT_TRUE(close_reason_.has_value());
  EXPECT_EQ(close_reason_->code(), absl::StatusCode::kDeadlineExceeded) << *close_reason_;
}

TEST_F(RawPeerTest, TailedReplyAfterTheDeadlineIsSkippedAndTheBufferLeftAlone) {
  RawInto late(300000);
  conn_->CallInto(kTail, proto::Empty(), std::span<char>(late.buffer), late.Callback(), 10ms);
  ASSERT_TRUE(RunUntil([&] { return late.result.has_value(); }));
  EXPECT_EQ(late.result->status().code(), absl::StatusCode::kDeadlineExceeded);
  std::optional<absl::StatusOr<std::string>> next;
  conn_->Call(kEcho, proto::Empty(), [&](const absl::StatusOr<std::string_view>& r) {
    next = r.ok() ? absl::StatusOr<std::string>(std::string(*r)) : r.status();
  });
  RunUntilIdle();
  // The reply to the call that timed out comes after all, then the next one's.
  SendTailedReply(1, "late", 300000);
  std::string bytes(kFrameHeaderBytes, '\0');
  EncodeFrameHeader({FrameKind::kReply, kEcho, 2, 4}, bytes.data());
  SendRaw(bytes + "next");
  ASSERT_TRUE(next.has_value());
  ASSERT_TRUE(next->ok()) << next->status();
  EXPECT_EQ(**next, "next");
  EXPECT_EQ(late.buffer, std::string(300000, '\x55'));  // nothing written after the failure
  EXPECT_FALSE(conn_->closed());
}

// A Stream over a real socket that counts the bytes it moves and, once told, fails its
// writes as a broken peer would: the shape of a metrics or fault-injection layer, which
// goes under a Connection without the Connection knowing.
class FaultyStream : public Stream {
 public:
  explicit FaultyStream(Socket socket) : inner_(std::move(socket)) {}
  boost::asio::io_context& io() override { return inner_.io(); }
  void AsyncReadSome(char* data, std::size_t size, Handler handler) override {
    inner_.AsyncReadSome(data, size,
                         [this, handler = std::move(handler)](const auto& ec, std::size_t n) {
                           bytes_read += n;
                           handler(ec, n);
                         });
  }
  void AsyncWrite(const char* data, std::size_t size, Handler handler) override {
    if (fail_writes) {
      boost::asio::post(
          io(), [handler = std::move(handler)] { handler(boost::asio::error::broken_pipe, 0); });
      return;
    }
    inner_.AsyncWrite(data, size,
                      [this, handler = std::move(handler)](const auto& ec, std::size_t n) {
                        bytes_written += n;
                        handler(ec, n);
                      });
  }
  ssize_t TryWrite(const char* data, std::size_t size) override {
    if (fail_writes) return 0;  // left to AsyncWrite
    ssize_t n = inner_.TryWrite(data, size);
    if (n > 0) bytes_written += static_cast<std::size_t>(n);
    return n;
  }
  void Shutdown() override { inner_.Shutdown(); }
  void Close() override { inner_.Close(); }

  std::size_t bytes_read = 0;
  std::size_t bytes_written = 0;
  bool fail_writes = false;

 private:
  SocketStream inner_;
};

TEST(StreamTest, AConnectionRunsOverAnyStreamAndItsWriteFailuresCloseIt) {
  boost::asio::io_context io;
  auto run = [&io] {
    while (io.poll() > 0) {
    }
    io.restart();
  };
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0) << std::strerror(errno);
  const boost::asio::generic::stream_protocol unix_stream(AF_UNIX, 0);
  auto server = Connection::Create(Socket(io, unix_stream, fds[1]), "client");
  server->Start(
      [](const std::shared_ptr<Connection>& c, const FrameHeader& h, std::string_view body) {
        proto::LeaseIdRequest req;
        ASSERT_TRUE(req.ParseFromArray(body.data(), static_cast<int>(body.size())));
        c->Reply(h, req);
      },
      nullptr);
  auto owned = std::make_unique<FaultyStream>(Socket(io, unix_stream, fds[0]));
  FaultyStream* stream = owned.get();
  auto client = Connection::Create(std::move(owned), "server");
  std::optional<absl::Status> closed;
  client->Start(nullptr, [&](const std::shared_ptr<Connection>&, const absl::Status& reason) {
    closed = reason;
  });

  std::optional<absl::StatusOr<std::string>> reply;
  auto callback = [&](const absl::StatusOr<std::string_view>& r) {
    reply = r.ok() ? absl::StatusOr<std::string>(std::string(*r)) : r.status();
  };
  client->Call(kEcho, Lease("one"), callback);
  run();
  ASSERT_TRUE(reply.has_value());
  ASSERT_TRUE(reply->ok()) << reply->status();
  EXPECT_EQ(**reply, LeaseBody("one"));
  // Every byte went through the stream: one frame each way.
  const std::size_t frame = kFrameHeaderBytes + LeaseBody("one").size();
  EXPECT_EQ(stream->bytes_written, frame);
  EXPECT_EQ(stream->bytes_read, frame);

  // A frame with a raw tail goes through the wrapper's own writes (Stream's default
  // AsyncWriteV / TryWriteV write one buffer after another), from the loop and from here.
  for (bool from_loop : {true, false}) {
    const std::string tail = Pattern(3000);
    FieldSuffix suffix;
    suffix.AddBytesFieldHeader(1, tail.size());
    const std::size_t before = stream->bytes_written;
    reply.reset();
    auto send = [&] {
      client->Call(kEcho, proto::LeaseIdRequest(), callback, std::nullopt, suffix.view(),
                   RawTail{tail, nullptr});
    };
    if (from_loop) {
      boost::asio::post(io, send);
    } else {
      send();
    }
    run();
    ASSERT_TRUE(reply.has_value());
    ASSERT_TRUE(reply->ok()) << reply->status();
    proto::LeaseIdRequest echoed;
    ASSERT_TRUE(echoed.ParseFromString(**reply));
    EXPECT_TRUE(echoed.lease_id() == tail);
    EXPECT_EQ(stream->bytes_written - before,
              kTailFrameHeaderBytes + suffix.view().size() + tail.size());
  }

  stream->fail_writes = true;
  reply.reset();
  client->Call(kEcho, Lease("two"), callback);
  run();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status().code(), absl::StatusCode::kUnavailable) << reply->status();
  EXPECT_NE(reply->status().message().find("write failed"), std::string::npos) << reply->status();
  EXPECT_FALSE(IsPeerError(reply->status()));
  EXPECT_TRUE(client->closed());
  ASSERT_TRUE(closed.has_value());
  run();
  EXPECT_TRUE(server->closed());  // the stream's shutdown reached the peer
  client.reset();
  server.reset();
  run();
}

// What a WriteQueue would write, in order.
std::string Contents(const internal::WriteQueue& q) {
  std::vector<boost::asio::const_buffer> buffers;
  q.Buffers(&buffers);
  std::string out;
  for (const auto& b : buffers) out.append(static_cast<const char*>(b.data()), b.size());
  return out;
}

TEST(WriteQueueTest, TailsGoBetweenOwnBytesAndAreLetGoOnceWrittenWhole) {
  internal::WriteQueue q;
  auto first = std::make_shared<int>(1), second = std::make_shared<int>(2);
  std::memcpy(q.Extend(3), "abc", 3);
  q.AppendTail({"TAIL1", first});
  std::memcpy(q.Extend(2), "de", 2);
  q.AppendTail({"T2", second});
  q.AppendTail({"", std::make_shared<int>(3)});  // empty: not queued, let go at once
  EXPECT_EQ(Contents(q), "abcTAIL1deT2");
  EXPECT_EQ(first.use_count(), 2);

  std::vector<std::shared_ptr<const void>> released;
  q.Consume(4, &released);  // "abc" and a byte of the first tail
  EXPECT_EQ(Contents(q), "AIL1deT2");
  EXPECT_TRUE(released.empty());
  q.Consume(4, &released);  // the rest of it
  EXPECT_EQ(Contents(q), "deT2");
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0], first);
  q.Consume(3, &released);
  EXPECT_EQ(Contents(q), "2");
  q.Consume(1, &released);
  EXPECT_TRUE(q.empty());
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(released[1], second);
}

TEST(WriteQueueTest, ClearLetsEveryTailGo) {
  internal::WriteQueue q;
  auto keep = std::make_shared<int>(1);
  std::memcpy(q.Extend(1), "a", 1);
  q.AppendTail({"tail", keep});
  std::vector<std::shared_ptr<const void>> released;
  q.Clear(&released);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(released.size(), 1u);
  released.clear();
  EXPECT_EQ(keep.use_count(), 1);
}

}  // namespace
}  // namespace raio::rpc
