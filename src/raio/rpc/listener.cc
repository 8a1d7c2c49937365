#include "raio/rpc/listener.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/udp.hpp>
#include <future>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"
#include "raio/rpc/fd_passing.h"

namespace raio::rpc {

namespace asio = boost::asio;
using GenericProtocol = asio::generic::stream_protocol;

namespace {
// sockaddr_un holds at most 107 bytes of path.
absl::Status CheckUnixPath(const std::string& path) {
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unix socket path is too long (", path.size(), " bytes, limit 107): ", path));
  }
  return absl::OkStatus();
}

Socket ToGeneric(asio::io_context& io, int family, int protocol, int fd) {
  return Socket(io, GenericProtocol(family, protocol), fd);
}
}  // namespace

absl::StatusOr<std::unique_ptr<Listener>> Listener::ListenUnix(asio::io_context& io,
                                                               const std::string& path,
                                                               AcceptHandler on_accept,
                                                               std::optional<int> fd_for_peers) {
  if (absl::Status s = CheckUnixPath(path); !s.ok()) return s;
  auto l = std::unique_ptr<Listener>(new Listener(io, std::move(on_accept)));
  l->fd_for_peers_ = fd_for_peers;
  ::unlink(path.c_str());
  boost::system::error_code ec;
  l->unix_ = std::make_unique<asio::local::stream_protocol::acceptor>(io);
  asio::local::stream_protocol::endpoint ep(path);
  l->unix_->open(ep.protocol(), ec);
  if (!ec) l->unix_->bind(ep, ec);
  if (!ec) l->unix_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot listen on ", path, ": ", ec.message()));
  l->path_ = path;
  asio::post(io, [raw = l.get()] { raw->AcceptUnix(); });
  return l;
}

absl::StatusOr<std::unique_ptr<Listener>> Listener::ListenTcp(asio::io_context& io,
                                                              const std::string& host, int port,
                                                              AcceptHandler on_accept) {
  auto l = std::unique_ptr<Listener>(new Listener(io, std::move(on_accept)));
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad listen address '", host, "'"));
  asio::ip::tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  l->tcp_ = std::make_unique<asio::ip::tcp::acceptor>(io);
  l->tcp_->open(ep.protocol(), ec);
  if (!ec) l->tcp_->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) l->tcp_->bind(ep, ec);
  if (!ec) l->tcp_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", port, ": ", ec.message()));
  }
  l->port_ = l->tcp_->local_endpoint().port();
  asio::post(io, [raw = l.get()] { raw->AcceptTcp(); });
  return l;
}

Listener::~Listener() { Stop(); }

void Listener::Stop() {
  boost::system::error_code ec;
  if (unix_) unix_->close(ec);
  if (tcp_) tcp_->close(ec);
  if (!path_.empty()) ::unlink(path_.c_str());
  path_.clear();
}

void Listener::AcceptUnix() {
  unix_->async_accept([this](const boost::system::error_code& ec,
                             asio::local::stream_protocol::socket s) {
    if (ec == asio::error::operation_aborted || !unix_->is_open()) return;
    if (!ec && fd_for_peers_) {
      // A fresh socket's buffer is empty, so this does not wait in practice; the
      // bound only keeps a broken peer from stalling the loop.
      absl::Status sent =
          SendFd(s.native_handle(), kFdGreeting, *fd_for_peers_, std::chrono::milliseconds(1000));
      if (!sent.ok()) {
        RAIO_LOG_WARN("dropping a peer of {}: cannot pass it a descriptor: {}", path_,
                      sent.message());
        AcceptUnix();
        return;  // `s` closes
      }
    }
    if (!ec) {
      int fd = s.release();
      on_accept_(Connection::Create(ToGeneric(io_, AF_UNIX, 0, fd), "unix peer"));
    }
    AcceptUnix();
  });
}

void Listener::AcceptTcp() {
  tcp_->async_accept([this](const boost::system::error_code& ec, asio::ip::tcp::socket s) {
    if (ec == asio::error::operation_aborted || !tcp_->is_open()) return;
    if (!ec) {
      boost::system::error_code ignored;
      s.set_option(asio::ip::tcp::no_delay(true), ignored);
      std::string peer = "tcp peer";
      auto ep = s.remote_endpoint(ignored);
      if (!ignored) peer = absl::StrCat(ep.address().to_string(), ":", ep.port());
      int family = ep.address().is_v6() ? AF_INET6 : AF_INET;
      int fd = s.release();
      on_accept_(Connection::Create(ToGeneric(io_, family, IPPROTO_TCP, fd), peer));
    }
    AcceptTcp();
  });
}

namespace {
// A connected Unix stream socket to `path`.
absl::StatusOr<asio::local::stream_protocol::socket> ConnectUnixSocket(asio::io_context& io,
                                                                       const std::string& path) {
  if (absl::Status st = CheckUnixPath(path); !st.ok()) return st;
  asio::local::stream_protocol::socket s(io);
  boost::system::error_code ec;
  s.connect(asio::local::stream_protocol::endpoint(path), ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot connect to ", path, ": ", ec.message()));
  return s;
}
}  // namespace

absl::StatusOr<std::shared_ptr<Connection>> ConnectUnix(asio::io_context& io,
                                                        const std::string& path) {
  auto connected = ConnectUnixSocket(io, path);
  if (!connected.ok()) return connected.status();
  asio::local::stream_protocol::socket& s = *connected;
  int fd = s.release();
  return Connection::Create(ToGeneric(io, AF_UNIX, 0, fd), path);
}

absl::StatusOr<ConnectionWithFd> ConnectUnixReceivingFd(asio::io_context& io,
                                                        const std::string& path,
                                                        std::chrono::milliseconds timeout) {
  auto connected = ConnectUnixSocket(io, path);
  if (!connected.ok()) return connected.status();
  asio::local::stream_protocol::socket& s = *connected;
  absl::StatusOr<ReceivedFd> got = ReceiveFd(s.native_handle(), kFdGreeting.size(), timeout);
  if (!got.ok()) {
    return absl::Status(got.status().code(), absl::StrCat("no file descriptor from ", path, ": ",
                                                          got.status().message()));
  }
  if (got->message != kFdGreeting) {
    return absl::DataLossError(absl::StrCat(
        path, " did not greet with a file descriptor as a raio node of this version does"));
  }
  int fd = s.release();
  return ConnectionWithFd{Connection::Create(ToGeneric(io, AF_UNIX, 0, fd), path),
                          std::move(got->fd)};
}

absl::StatusOr<std::shared_ptr<Connection>> ConnectTcp(asio::io_context& io,
                                                       const std::string& address,
                                                       std::chrono::milliseconds timeout) {
  auto colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad cluster address '", address, "': expected host:port"));
  }
  std::string host = address.substr(0, colon);
  boost::system::error_code ec;
  asio::ip::tcp::resolver resolver(io);
  auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot resolve '", host, "': ", ec.message()));
  asio::ip::tcp::socket s(io);
  for (const auto& r : results) {
    s.open(r.endpoint().protocol(), ec);
    if (ec) continue;
    // SO_SNDTIMEO bounds a blocking connect() on Linux.
    timeval tv{static_cast<time_t>(timeout.count() / 1000),
               static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    s.connect(r.endpoint(), ec);
    if (!ec) break;
    s.close();
  }
  if (ec || !s.is_open()) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", address, ": ", ec ? ec.message() : "no address"));
  }
  timeval zero{0, 0};
  ::setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &zero, sizeof(zero));
  s.set_option(asio::ip::tcp::no_delay(true), ec);
  int family = s.local_endpoint(ec).address().is_v6() ? AF_INET6 : AF_INET;
  int fd = s.release();
  return Connection::Create(ToGeneric(io, family, IPPROTO_TCP, fd), address);
}

absl::StatusOr<std::string> CallSync(Connection& conn, uint32_t method,
                                     const google::protobuf::MessageLite& request,
                                     std::optional<std::chrono::milliseconds> timeout) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<std::string>>>();
  auto future = promise->get_future();
  conn.Call(
      method, request,
      [promise](const absl::StatusOr<std::string_view>& r) {
        if (r.ok()) {
          promise->set_value(std::string(*r));
        } else {
          promise->set_value(r.status());
        }
      },
      timeout);
  return future.get();
}

std::string LocalIpToward(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) return "";
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  boost::system::error_code ec;
  auto ip = asio::ip::make_address(host, ec);
  if (ec) return "";
  asio::io_context io;
  asio::ip::udp::socket sock(io);
  sock.connect(asio::ip::udp::endpoint(ip, 9), ec);
  if (ec) return "";
  auto local = sock.local_endpoint(ec);
  return ec ? "" : local.address().to_string();
}

std::string RoutableLocalIp() {
  // Any public address will do: a connected UDP socket sends nothing.
  std::string ip = LocalIpToward("192.0.2.1:9");  // TEST-NET-1 (RFC 5737)
  if (!ip.empty() && ip != "0.0.0.0" && ip.rfind("127.", 0) != 0) return ip;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "127.0.0.1";
  std::string found = "127.0.0.1";
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET ||
        (a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) {
      continue;
    }
    char text[INET_ADDRSTRLEN];
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) {
      found = text;
      break;
    }
  }
  ::freeifaddrs(list);
  return found;
}

}  // namespace raio::rpc
