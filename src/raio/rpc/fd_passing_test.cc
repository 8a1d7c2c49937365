// Passing descriptors over Unix sockets: SendFd/ReceiveFd on socketpairs, and a Listener
// that hands each peer a descriptor before the framed stream, over a real socket in a
// temp dir. Waits have deadlines; no sleeps.
#include "raio/rpc/fd_passing.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "raio/common/event_loop.h"
#include "raio/common/process.h"
#include "raio/node.pb.h"
#include "raio/rpc/listener.h"
#include "raio/testkit/time_scale.h"

namespace raio::rpc {
namespace {

using namespace std::chrono_literals;

// Generous, only reached when something is broken; scaled (testkit/time_scale.h).
const std::chrono::seconds kWait = testkit::Scaled(20s);

// A connected pair of Unix stream sockets, closed at the end of the test.
struct SocketPair {
  SocketPair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0) << std::strerror(errno);
    a.reset(fds[0]);
    b.reset(fds[1]);
  }
  UniqueFd a;
  UniqueFd b;
};

// A memory file holding `text`.
UniqueFd MemoryFile(const std::string& text) {
  UniqueFd fd(::memfd_create("fd-passing-test", MFD_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(::write(fd.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  return fd;
}

std::string ReadAll(int fd) {
  std::string out(64, '\0');
  ssize_t n = ::pread(fd, out.data(), out.size(), 0);
  out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return out;
}

int OpenFdCount() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST(FdPassingTest, ThePeerReceivesADescriptorForTheSameFile) {
  SocketPair p;
  UniqueFd file = MemoryFile("the store");
  ASSERT_TRUE(SendFd(p.a.get(), "hello", file.get(), kWait).ok());
  absl::StatusOr<ReceivedFd> got = ReceiveFd(p.b.get(), 5, kWait);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->message, "hello");
  ASSERT_TRUE(got->fd.valid());
  EXPECT_NE(got->fd.get(), file.get());
  EXPECT_EQ(ReadAll(got->fd.get()), "the store");
  EXPECT_TRUE(::fcntl(got->fd.get(), F_GETFD) & FD_CLOEXEC);
}

TEST(FdPassingTest, BytesAfterTheMessageStayForTheStreamThatFollows) {
  SocketPair p;
  UniqueFd file = MemoryFile("x");
  ASSERT_TRUE(SendFd(p.a.get(), kFdGreeting, file.get(), kWait).ok());
  ASSERT_EQ(::write(p.a.get(), "frames", 6), 6);
  absl::StatusOr<ReceivedFd> got = ReceiveFd(p.b.get(), kFdGreeting.size(), kWait);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->message, kFdGreeting);
  char rest[16] = {};
  EXPECT_EQ(::read(p.b.get(), rest, sizeof(rest)), 6);
  EXPECT_EQ(std::string(rest), "frames");
}

TEST(FdPassingTest, BytesWithoutADescriptorAreDataLoss) {
  SocketPair p;
  ASSERT_EQ(::write(p.a.get(), "RAIO-FD1", 8), 8);
  absl::StatusOr<ReceivedFd> got = ReceiveFd(p.b.get(), 8, kWait);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_NE(got.status().message().find("no file descriptor"), std::string::npos) << got.status();
}

TEST(FdPassingTest, SeveralDescriptorsAreDataLossAndAllAreClosed) {
  SocketPair p;
  UniqueFd one = MemoryFile("1");
  UniqueFd two = MemoryFile("2");
  const int before = OpenFdCount();
  // Sent by hand: SendFd attaches exactly one.
  char byte = 'x';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(2 * sizeof(int));
  int fds[2] = {one.get(), two.get()};
  std::memcpy(CMSG_DATA(c), fds, sizeof(fds));
  ASSERT_EQ(::sendmsg(p.a.get(), &msg, 0), 1);
  absl::StatusOr<ReceivedFd> got = ReceiveFd(p.b.get(), 1, kWait);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_EQ(OpenFdCount(), before);
}

TEST(FdPassingTest, APeerThatClosesFirstIsUnavailable) {
  SocketPair p;
  ASSERT_EQ(::write(p.a.get(), "RAI", 3), 3);  // part of a greeting, then gone
  p.a.reset();
  absl::StatusOr<ReceivedFd> got = ReceiveFd(p.b.get(), 8, kWait);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
}

TEST(FdPassingTest, NothingArrivingIsDeadlineExceeded) {
  SocketPair p;
  absl::StatusOr<ReceivedFd> got = ReceiveFd(p.b.get(), 8, 50ms);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
}

TEST(FdPassingTest, TcpSocketsAreRefusedWithAClearError) {
  UniqueFd tcp(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_TRUE(tcp.valid());
  UniqueFd file = MemoryFile("x");
  absl::Status sent = SendFd(tcp.get(), "hello", file.get(), kWait);
  EXPECT_EQ(sent.code(), absl::StatusCode::kInvalidArgument) << sent;
  EXPECT_NE(sent.message().find("only over Unix sockets"), std::string::npos) << sent;
  absl::StatusOr<ReceivedFd> got = ReceiveFd(tcp.get(), 8, kWait);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_NE(got.status().message().find("TCP"), std::string::npos) << got.status();
}

TEST(FdPassingTest, SendFdRefusesDescriptorsThatAreNotOpen) {
  SocketPair p;
  UniqueFd file = MemoryFile("x");
  const int closed = file.get();
  file.reset();
  EXPECT_EQ(SendFd(p.a.get(), "hello", closed, kWait).code(), absl::StatusCode::kInvalidArgument);
  UniqueFd other = MemoryFile("y");
  EXPECT_EQ(SendFd(closed, "hello", other.get(), kWait).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SendFd(p.a.get(), "", other.get(), kWait).code(), absl::StatusCode::kInvalidArgument);
}

// A Unix listener on its own loop that answers every request with its body.
class ListenerFdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("fdtest");
    ASSERT_FALSE(dir_.empty());
    server_loop_.Start();
    client_loop_.Start();
  }
  void TearDown() override {
    server_loop_.Stop();
    client_loop_.Stop();
    listener_.reset();
    RemoveTree(dir_);
  }
  void Listen(std::optional<int> fd_for_peers) {
    auto on_accept = [](std::shared_ptr<Connection> conn) {
      conn->Start(
          [](const std::shared_ptr<Connection>& c, const FrameHeader& h, std::string_view body) {
            proto::LeaseIdRequest echo;
            echo.ParseFromArray(body.data(), static_cast<int>(body.size()));
            c->Reply(h, echo);
          },
          nullptr);
      // The connection keeps itself alive while it reads.
    };
    path_ = dir_ + "/node.sock";
    auto l = Listener::ListenUnix(server_loop_.io(), path_, on_accept, fd_for_peers);
    ASSERT_TRUE(l.ok()) << l.status();
    listener_ = std::move(*l);
  }

  std::string dir_;
  std::string path_;
  EventLoop server_loop_{"fd-server"};
  EventLoop client_loop_{"fd-client"};
  std::unique_ptr<Listener> listener_;
};

TEST_F(ListenerFdTest, APeerGetsTheDescriptorAndThenAWorkingRpcStream) {
  UniqueFd file = MemoryFile("shared memory");
  Listen(file.get());
  absl::StatusOr<ConnectionWithFd> c = ConnectUnixReceivingFd(client_loop_.io(), path_, kWait);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ReadAll(c->fd.get()), "shared memory");
  c->connection->Start(nullptr, nullptr);
  proto::LeaseIdRequest req;
  req.set_lease_id("after the greeting");
  absl::StatusOr<std::string> reply = CallSync(*c->connection, 1, req, kWait);
  ASSERT_TRUE(reply.ok()) << reply.status();
  proto::LeaseIdRequest echoed;
  ASSERT_TRUE(echoed.ParseFromString(*reply));
  EXPECT_EQ(echoed.lease_id(), "after the greeting");
  c->connection->Close(absl::CancelledError("test over"));
}

TEST_F(ListenerFdTest, AListenerThatPassesNothingGivesAClearErrorNotAHang) {
  Listen(std::nullopt);
  absl::StatusOr<ConnectionWithFd> c = ConnectUnixReceivingFd(client_loop_.io(), path_, 100ms);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_NE(c.status().message().find(path_), std::string::npos) << c.status();
}

}  // namespace
}  // namespace raio::rpc
