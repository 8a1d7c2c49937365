// Stream: the byte stream under an rpc::Connection. The connection does the framing,
// request ids, coalescing and deadlines; a Stream only moves bytes. What changes how bytes
// travel (TLS, an authenticating handshake, byte counters, fault injection in tests) is a
// Stream of its own, or one that wraps another, handed to Connection::Create; nothing
// above the connection changes. SocketStream is the plain one over a Unix or TCP socket.
//
// Threading: AsyncReadSome, AsyncWrite(V) and Close run on the loop thread of io(), at most
// one read and one write outstanding at a time, and their handlers run there. TryWrite(V)
// and Shutdown may be called from any thread; the connection serializes them (and Close)
// with its own mutex.
//
// Buffers: a read or write touches its buffers only until its handler runs, and never once
// Close has returned (its handler still runs, with an error): a connection relies on this
// to hand a caller's buffer back (Connection::CallInto) when it closes.
#pragma once

#include <sys/types.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>

namespace raio::rpc {

using Socket = boost::asio::generic::stream_protocol::socket;

class Stream {
 public:
  // The outcome of a read or write: an error (boost::asio::error::eof when the peer closed
  // its end) or the number of bytes moved.
  using Handler = std::function<void(const boost::system::error_code&, std::size_t)>;
  // Buffers to write one after the other (scatter-gather).
  using ConstBuffers = std::span<const boost::asio::const_buffer>;

  virtual ~Stream() = default;

  virtual boost::asio::io_context& io() = 0;
  // Reads at least one byte and at most `size` into `data` (kept alive by the caller
  // until `handler` runs).
  virtual void AsyncReadSome(char* data, std::size_t size, Handler handler) = 0;
  // Writes all `size` bytes of `data` (kept alive until `handler` runs).
  virtual void AsyncWrite(const char* data, std::size_t size, Handler handler) = 0;
  // Writes what it can of `data` at once without blocking, from any thread: the bytes
  // written (0 when the stream would block, or cannot write outside its loop, as TLS
  // cannot), or -1 on an error (the next AsyncWrite reports it).
  virtual ssize_t TryWrite(const char* data, std::size_t size) = 0;
  // Writes all the bytes of `buffers` in order; the span and the bytes stay alive until
  // `handler` runs (with the total written). The default writes one buffer after another
  // with AsyncWrite; a stream over a socket sends them with gathering writes (sendmsg).
  virtual void AsyncWriteV(ConstBuffers buffers, Handler handler);
  // TryWrite over several buffers in order: the bytes written in all (0 when it would
  // block), or -1 on an error. The default calls TryWrite on each until one falls short.
  virtual ssize_t TryWriteV(ConstBuffers buffers);
  // Ends both directions: a pending read completes with an error. Idempotent.
  virtual void Shutdown() = 0;
  // Releases the stream's descriptor. Idempotent.
  virtual void Close() = 0;
};

// A Stream over a connected stream socket (AF_UNIX or TCP), which it owns.
class SocketStream final : public Stream {
 public:
  explicit SocketStream(Socket socket);

  boost::asio::io_context& io() override;
  void AsyncReadSome(char* data, std::size_t size, Handler handler) override;
  void AsyncWrite(const char* data, std::size_t size, Handler handler) override;
  ssize_t TryWrite(const char* data, std::size_t size) override;
  void AsyncWriteV(ConstBuffers buffers, Handler handler) override;
  ssize_t TryWriteV(ConstBuffers buffers) override;
  void Shutdown() override;
  void Close() override;

 private:
  Socket socket_;
};

}  // namespace raio::rpc
