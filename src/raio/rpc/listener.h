// Listener: accepts connections on a Unix socket path or a TCP endpoint and hands each
// one, as a started-later Connection, to the owner's accept handler. A Unix listener may
// first hand every peer a file descriptor (fd_passing.h), before any frame.
// Also: blocking connect helpers and a blocking call for non-loop threads.
// Threading: accepts run on the given io_context's loop thread; Stop() from that thread
// or after the loop stopped.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "raio/common/unique_fd.h"
#include "raio/rpc/connection.h"

namespace raio::rpc {

class Listener {
 public:
  using AcceptHandler = std::function<void(std::shared_ptr<Connection>)>;

  // Binds a Unix socket at `path` (an old file there is removed). With `fd_for_peers`,
  // every accepted peer first receives kFdGreeting with a copy of that descriptor
  // attached (SendFd), before the Connection exists; such peers must connect with
  // ConnectUnixReceivingFd. The descriptor stays the caller's and must stay open while
  // the listener lives. A peer the descriptor cannot be sent to is logged and dropped.
  static absl::StatusOr<std::unique_ptr<Listener>> ListenUnix(
      boost::asio::io_context& io, const std::string& path, AcceptHandler on_accept,
      std::optional<int> fd_for_peers = std::nullopt);
  // Binds TCP on host:port (port 0 picks a free one; see port()).
  static absl::StatusOr<std::unique_ptr<Listener>> ListenTcp(boost::asio::io_context& io,
                                                             const std::string& host, int port,
                                                             AcceptHandler on_accept);
  ~Listener();
  void Stop();
  int port() const { return port_; }

 private:
  Listener(boost::asio::io_context& io, AcceptHandler on_accept) : io_(io), on_accept_(on_accept) {}
  void AcceptUnix();
  void AcceptTcp();

  boost::asio::io_context& io_;
  AcceptHandler on_accept_;
  std::unique_ptr<boost::asio::local::stream_protocol::acceptor> unix_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> tcp_;
  std::string path_;
  std::optional<int> fd_for_peers_;
  int port_ = 0;
};

// Connects to a Unix socket; the connection's callbacks run on `io`'s loop.
absl::StatusOr<std::shared_ptr<Connection>> ConnectUnix(boost::asio::io_context& io,
                                                        const std::string& path);
// A connection whose listener handed it a descriptor on connect.
struct ConnectionWithFd {
  std::shared_ptr<Connection> connection;
  UniqueFd fd;
};
// Connects to a Unix socket whose listener has `fd_for_peers` and receives that
// descriptor, waiting at most `timeout` for it; blocks. Errors: as ConnectUnix;
// DeadlineExceeded (nothing came), DataLoss (no descriptor came, or the greeting was not
// kFdGreeting: the listener is not one that passes descriptors), Unavailable (the
// listener closed the connection first).
absl::StatusOr<ConnectionWithFd> ConnectUnixReceivingFd(boost::asio::io_context& io,
                                                        const std::string& path,
                                                        std::chrono::milliseconds timeout);
// Connects to "host:port" over TCP within `timeout`.
absl::StatusOr<std::shared_ptr<Connection>> ConnectTcp(boost::asio::io_context& io,
                                                       const std::string& address,
                                                       std::chrono::milliseconds timeout);

// Sends a request and blocks the calling thread for the reply body. Must not be called
// on the connection's loop thread. `timeout` nullopt: for as long as the connection lives.
absl::StatusOr<std::string> CallSync(Connection& conn, uint32_t method,
                                     const google::protobuf::MessageLite& request,
                                     std::optional<std::chrono::milliseconds> timeout);

// The local IP that packets to `address` ("host:port" with an IP literal host, IPv6 in
// brackets or not) leave from, as a UDP socket connected there (nothing is sent) says: the
// address this host is reached at from there. "" when it cannot tell.
std::string LocalIpToward(const std::string& address);

// An IPv4 address other hosts can reach this one at, for a daemon listening on every
// address (0.0.0.0): the one the default route leaves from, else the first address of an
// interface that is up and not loopback, else "127.0.0.1" (a host with no network).
std::string RoutableLocalIp();

}  // namespace raio::rpc
