#include "raio/rpc/stream.h"

#include <sys/socket.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <utility>

namespace raio::rpc {

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

ssize_t SocketStream::TryWrite(const char* data, std::size_t size) {
  ssize_t n = ::send(socket_.native_handle(), data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
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
