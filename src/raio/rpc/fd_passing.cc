#include "raio/rpc/fd_passing.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace raio::rpc {

namespace {

using Clock = std::chrono::steady_clock;

// Descriptors a peer might attach to one message; room for more than one lets a
// receiver see (and close) extras rather than have the kernel truncate silently.
constexpr int kMaxReceivedFds = 4;

absl::Status ErrnoError(absl::string_view what, int err) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(err)));
}

absl::Status CheckUnixSocket(int socket) {
  int domain = 0;
  socklen_t len = sizeof(domain);
  if (::getsockopt(socket, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("descriptor ", socket, " is not a socket: ", std::strerror(errno)));
  }
  if (domain != AF_UNIX) {
    return absl::InvalidArgumentError(
        "file descriptors pass only over Unix sockets, between processes on one host; this "
        "is a network (TCP) connection");
  }
  return absl::OkStatus();
}

// Waits until `socket` is ready for `events` or `deadline` passes.
absl::Status WaitReady(int socket, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return absl::DeadlineExceededError("timed out");
    pollfd p{socket, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), INT32_MAX)));
    if (n > 0) return absl::OkStatus();  // ready, or an error that the next call reports
    if (n < 0 && errno != EINTR) return ErrnoError("poll", errno);
  }
}

}  // namespace

absl::Status SendFd(int socket, std::string_view message, int fd,
                    std::chrono::milliseconds timeout) {
  if (message.empty()) return absl::InvalidArgumentError("SendFd needs a non-empty message");
  if (::fcntl(fd, F_GETFD) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("descriptor ", fd, " to send is not open"));
  }
  if (absl::Status s = CheckUnixSocket(socket); !s.ok()) return s;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::size_t sent = 0;
  while (sent < message.size()) {
    iovec iov{const_cast<char*>(message.data() + sent), message.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (sent == 0) {  // the descriptor rides on the first byte only
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (absl::Status s = WaitReady(socket, POLLOUT, deadline); !s.ok()) {
        return s.code() == absl::StatusCode::kDeadlineExceeded
                   ? absl::DeadlineExceededError("timed out sending a file descriptor")
                   : s;
      }
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      return absl::UnavailableError("the peer closed before the file descriptor was sent");
    }
    return ErrnoError("sendmsg", n < 0 ? errno : EIO);
  }
  return absl::OkStatus();
}

absl::StatusOr<ReceivedFd> ReceiveFd(int socket, std::size_t message_bytes,
                                     std::chrono::milliseconds timeout) {
  if (message_bytes == 0) return absl::InvalidArgumentError("ReceiveFd needs message_bytes > 0");
  if (absl::Status s = CheckUnixSocket(socket); !s.ok()) return s;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::string buf(message_bytes, '\0');
  std::vector<UniqueFd> fds;  // all received, so that every one is closed on error
  bool truncated = false;
  std::size_t got = 0;
  while (got < message_bytes) {
    iovec iov{buf.data() + got, message_bytes - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxReceivedFds)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (absl::Status s = WaitReady(socket, POLLIN, deadline); !s.ok()) {
        return s.code() == absl::StatusCode::kDeadlineExceeded
                   ? absl::DeadlineExceededError(
                         absl::StrCat("timed out after ", timeout.count(),
                                      " ms waiting for a file descriptor from the peer (got ", got,
                                      " of ", message_bytes, " bytes)"))
                   : s;
      }
      continue;
    }
    if (n < 0 && errno == ECONNRESET) n = 0;
    if (n < 0) return ErrnoError("recvmsg", errno);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.emplace_back(fd);
      }
    }
    if (msg.msg_flags & MSG_CTRUNC) truncated = true;
    if (n == 0) {
      return absl::UnavailableError(absl::StrCat("the peer closed after ", got, " of ",
                                                 message_bytes,
                                                 " bytes, before passing a file descriptor"));
    }
    got += static_cast<std::size_t>(n);
  }
  if (truncated || fds.size() > 1) {
    return absl::DataLossError(absl::StrCat("the peer passed ", fds.size(),
                                            truncated ? " or more" : "",
                                            " file descriptors where one was expected"));
  }
  if (fds.empty()) {
    return absl::DataLossError(
        absl::StrCat("the peer sent ", message_bytes, " bytes but no file descriptor with them"));
  }
  return ReceivedFd{std::move(buf), std::move(fds.front())};
}

}  // namespace raio::rpc
