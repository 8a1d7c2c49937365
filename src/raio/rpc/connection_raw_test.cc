// Connection against a hand-written peer on a raw socket (error replies, bodies and raw
// tails sent in pieces, stalled or cut short, over the frame limit), over a faulty Stream,
// and the WriteQueue alone. The well-behaved peer cases are in connection_test.cc.
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
#include "raio/rpc/connection.h"
#include "raio/rpc/connection_test_util.h"
#include "raio/rpc/listener.h"
#include "raio/rpc/service.h"
#include "raio/rpc/stream.h"

namespace raio::rpc {
namespace {

using namespace std::chrono_literals;
using namespace test;

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
  // Scaled: the reply's header must arrive before the deadline, so that it expires mid-tail.
  conn_->CallInto(kTail, proto::Empty(), std::span<char>(into.buffer), into.Callback(),
                  testkit::Scaled(50ms));
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
