#include "raio/rpc/stream.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <climits>
#include <utility>

namespace raio::rpc {

namespace {

// Writes buffers [next, end) one after the other through Stream::AsyncWrite.
struct SequentialWrite {
  Stream* stream;
  Stream::ConstBuffers buffers;
  std::size_t next = 0;
  std::size_t written = 0;
  Stream::Handler handler;

  static void Step(std::shared_ptr<SequentialWrite> w) {
    while (w->next < w->buffers.size() && w->buffers[w->next].size() == 0) ++w->next;
    if (w->next == w->buffers.size()) {
      Stream::Handler handler = std::move(w->handler);
      handler(boost::system::error_code(), w->written);
      return;
    }
    const boost::asio::const_buffer& b = w->buffers[w->next++];
    Stream* stream = w->stream;
    stream->AsyncWrite(static_cast<const char*>(b.data()), b.size(),
                       [w = std::move(w)](const boost::system::error_code& ec, std::size_t n) {
                         w->written += n;
                         if (ec) {
                           Stream::Handler handler = std::move(w->handler);
                           handler(ec, w->written);
                           return;
                         }
                         Step(w);
                       });
  }
};

}  // namespace

void Stream::AsyncWriteV(ConstBuffers buffers, Handler handler) {
  auto w = std::make_shared<SequentialWrite>();
  w->stream = this;
  w->buffers = buffers;
  w->handler = std::move(handler);
  SequentialWrite::Step(std::move(w));
}

ssize_t Stream::TryWriteV(ConstBuffers buffers) {
  ssize_t total = 0;
  for (const boost::asio::const_buffer& b : buffers) {
    if (b.size() == 0) continue;
    ssize_t n = TryWrite(static_cast<const char*>(b.data()), b.size());
    if (n < 0) return total > 0 ? total : -1;
    total += n;
    if (static_cast<std::size_t>(n) < b.size()) break;
  }
  return total;
}

SocketStream::SocketStream(Socket socket) : socket_(std::move(socket)) {}

boost::asio::io_context& SocketStream::io() {
  return static_cast<boost::asio::io_context&>(socket_.get_executor().context());
}

void SocketStream::AsyncReadSome(char* data, std::size_t size, Handler handler) {
  socket_.async_read_some(boost::asio::buffer(data, size), std::move(handler));
}

void SocketStream::AsyncWrite(const char* data, std::size_t size, Handler handler) {
  boost::asio::async_write(socket_, boost::asio::buffer(data, size), std::move(handler));
}

void SocketStream::AsyncWriteV(ConstBuffers buffers, Handler handler) {
  // asio's composed write sends the sequence with sendmsg, a batch of buffers per call,
  // until every byte is out.
  boost::asio::async_write(socket_, buffers, std::move(handler));
}

ssize_t SocketStream::TryWrite(const char* data, std::size_t size) {
  ssize_t n = ::send(socket_.native_handle(), data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n >= 0) return n;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
}

ssize_t SocketStream::TryWriteV(ConstBuffers buffers) {
  constexpr std::size_t kMaxIov = 64;
  iovec iov[kMaxIov];
  std::size_t count = 0;
  for (const boost::asio::const_buffer& b : buffers) {
    if (count == kMaxIov) break;
    if (b.size() == 0) continue;
    iov[count].iov_base = const_cast<void*>(b.data());
    iov[count].iov_len = b.size();
    ++count;
  }
  if (count == 0) return 0;
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = count;
  ssize_t n = ::sendmsg(socket_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n >= 0) return n;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
}

void SocketStream::Shutdown() {
  boost::system::error_code ignored;
  socket_.shutdown(boost::asio::socket_base::shutdown_both, ignored);
}

void SocketStream::Close() {
  boost::system::error_code ignored;
  socket_.close(ignored);
}

}  // namespace raio::rpc
