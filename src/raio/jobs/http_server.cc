#include "raio/jobs/http_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace raio::jobs {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using Request = http::request<http::string_body>;

// Reads what the peer still sends for a while, then closes: a response sent while a large
// body is still arriving would otherwise be lost to a connection reset.
void DrainAndClose(tcp::socket& socket) {
  beast::error_code ec;
  socket.shutdown(tcp::socket::shutdown_send, ec);
  char buf[4096];
  pollfd p{socket.native_handle(), POLLIN, 0};
  for (int i = 0; i < 50 && ::poll(&p, 1, 20) > 0; ++i) {
    if (::recv(socket.native_handle(), buf, sizeof(buf), 0) <= 0) break;
  }
}

// The socket as Beast's SyncReadStream, with a read deadline: each read waits for data
// until `deadline` (the header) or for `gap` (the body), then fails with
// beast::error::timeout.
class DeadlineStream {
 public:
  using executor_type = tcp::socket::executor_type;
  explicit DeadlineStream(tcp::socket& socket) : socket_(socket) {}
  executor_type get_executor() { return socket_.get_executor(); }
  void SetDeadline(std::chrono::steady_clock::time_point deadline) { deadline_ = deadline; }
  void SetGap(std::chrono::milliseconds gap) { deadline_.reset(), gap_ = gap; }

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, beast::error_code& ec) {
    std::chrono::milliseconds wait = gap_;
    if (deadline_) {
      wait = std::max(std::chrono::milliseconds(0),
                      std::chrono::duration_cast<std::chrono::milliseconds>(
                          *deadline_ - std::chrono::steady_clock::now()));
    }
    pollfd p{socket_.native_handle(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) == 0) {
      ec = beast::error::timeout;
      return 0;
    }
    return socket_.read_some(buffers, ec);
  }
  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    beast::error_code ec;
    size_t n = read_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }

 private:
  tcp::socket& socket_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::chrono::milliseconds gap_{0};
};

bool WriteResponse(tcp::socket& socket, const HttpResponse& r, unsigned version, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), version};
  res.set(http::field::server, "raio-jobs");
  res.set(http::field::content_type, r.content_type);
  res.keep_alive(keep_alive);
  res.body() = r.body;
  res.prepare_payload();
  beast::error_code ec;
  http::write(socket, res, ec);
  return !ec;
}

bool IsPackagePut(const http::request_parser<http::string_body>& parser) {
  const auto& req = parser.get();
  return req.method() == http::verb::put && req.target().starts_with("/api/packages/");
}

}  // namespace

struct HttpServer::Impl {
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
};

struct HttpServer::Connection {
  explicit Connection(tcp::socket s) : socket(std::move(s)) {}
  tcp::socket socket;
  std::thread thread;
  std::atomic<bool> done{false};
};

HttpServer::HttpServer(JobBackend* backend, HttpServerOptions options)
    : backend_(backend), options_(std::move(options)), impl_(std::make_unique<Impl>()) {}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<int> HttpServer::Start() {
  beast::error_code ec;
  auto ip = asio::ip::make_address(options_.host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad host ", options_.host));
  tcp::endpoint ep(ip, static_cast<uint16_t>(options_.port));
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.host, ":", options_.port, ": ", ec.message()));
  }
  const int port = impl_->acceptor.local_endpoint().port();
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return port;
}

void HttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (accept_thread_.joinable()) {
    ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
    accept_thread_.join();
  }
  beast::error_code ec;
  impl_->acceptor.close(ec);
  std::list<std::unique_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& c : connections_) ::shutdown(c->socket.native_handle(), SHUT_RDWR);
    conns.swap(connections_);
  }
  for (auto& c : conns) c->thread.join();
}

void HttpServer::ReapFinished() {
  std::list<std::unique_ptr<Connection>> finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->done) {
        finished.push_back(std::move(*it));
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : finished) c->thread.join();
}

void HttpServer::AcceptLoop() {
  while (!stopping_) {
    tcp::socket s(impl_->ioc);
    beast::error_code ec;
    impl_->acceptor.accept(s, ec);
    if (ec) {
      if (stopping_) break;
      spdlog::warn("jobs API: accept failed: {}", ec.message());
      continue;
    }
    ReapFinished();
    auto conn = std::make_unique<Connection>(std::move(s));
    Connection* c = conn.get();
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) break;
    connections_.push_back(std::move(conn));
    c->thread = std::thread([this, c] {
      Serve(c);
      c->done = true;
    });
  }
}

void HttpServer::Serve(Connection* c) {
  beast::flat_buffer buffer;
  const int fd = c->socket.native_handle();
  const int idle_ms = static_cast<int>(options_.keep_alive_timeout.count());
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (buffer.size() == 0 && ::poll(&p, 1, idle_ms) == 0) break;
    http::request_parser<http::string_body> parser;
    parser.header_limit(64 << 10);
    // Beast checks a Content-Length against the limit as it parses the header, before the
    // route is known: the larger limit first (one byte over the store's, so that the
    // backend names its limit in the 413), the route's own once the header is in.
    const uint64_t package_limit = backend_->MaxPackageBytes() + 1;
    parser.body_limit(std::max<uint64_t>(package_limit, options_.max_body_bytes));
    beast::error_code ec;
    DeadlineStream stream(c->socket);
    stream.SetDeadline(std::chrono::steady_clock::now() + options_.request_read_timeout);
    http::read_header(stream, buffer, parser, ec);
    if (!ec && !IsPackagePut(parser)) {
      if (parser.content_length() && *parser.content_length() > options_.max_body_bytes) {
        ec = http::error::body_limit;
      } else {
        parser.body_limit(options_.max_body_bytes);
      }
    }
    if (!ec && !parser.is_done()) {
      if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        http::response<http::empty_body> go_on{http::status::continue_, parser.get().version()};
        http::write(c->socket, go_on, ec);
      }
      stream.SetGap(options_.request_read_timeout);
      if (!ec) http::read(stream, buffer, parser, ec);
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset || stopping_) {
      break;
    }
    if (ec == beast::error::timeout) {
      WriteResponse(c->socket,
                    ErrorResponse(408, absl::StrCat("the request did not arrive within ",
                                                    options_.request_read_timeout.count(), " ms")),
                    11, false);
      break;
    }
    if (ec == http::error::body_limit) {
      std::string what =
          IsPackagePut(parser)
              ? absl::StrCat(
                    "the package is larger than the limit of ", backend_->MaxPackageBytes(),
                    " bytes (RAIO_JOBS_MAX_PACKAGE_BYTES in the environment of raio start --head, "
                    "or raio-jobs --max-package-bytes)")
              : absl::StrCat("the request body is larger than the limit of ",
                             options_.max_body_bytes, " bytes");
      WriteResponse(c->socket, ErrorResponse(413, what), 11, false);
      DrainAndClose(c->socket);
      break;
    }
    if (ec) {
      WriteResponse(c->socket,
                    ErrorResponse(400, absl::StrCat("malformed HTTP request: ", ec.message())), 11,
                    false);
      DrainAndClose(c->socket);
      break;
    }
    Request req = parser.release();
    if (websocket::is_upgrade(req)) {
      if (std::optional<std::string> id = TailTarget(std::string(req.target()))) {
        Tail(c, *id, &req);
        break;
      }
    }
    HttpRequest r{std::string(req.method_string()), std::string(req.target()),
                  std::move(req.body())};
    HttpResponse res = Route(r, *backend_);
    if (!WriteResponse(c->socket, res, req.version(), req.keep_alive()) || !req.keep_alive()) {
      break;
    }
  }
  beast::error_code ec;
  c->socket.shutdown(tcp::socket::shutdown_both, ec);
}

void HttpServer::Tail(Connection* c, const std::string& id, void* request) {
  Request& req = *static_cast<Request*>(request);
  if (auto job = backend_->Get(id); !job.ok()) {
    WriteResponse(c->socket,
                  ErrorResponse(StatusToHttp(job.status()), std::string(job.status().message())),
                  req.version(), false);
    return;
  }
  websocket::stream<tcp::socket&> ws(c->socket);
  beast::error_code ec;
  ws.accept(req, ec);
  if (ec) return;
  ws.text(true);
  uint64_t offset = 0;
  std::string pending;  // the start of a UTF-8 sequence the last chunk cut short
  const int fd = c->socket.native_handle();
  while (!stopping_) {
    auto chunk = backend_->ReadLogs(id, offset, 256 << 10);
    if (!chunk.ok()) {  // deleted meanwhile, or the store cannot be reached
      // A close reason is at most 123 bytes.
      std::string why(chunk.status().message().substr(0, 120));
      while (!why.empty() && (static_cast<unsigned char>(why.back()) & 0xC0) == 0x80) {
        why.pop_back();  // no UTF-8 sequence cut in two
      }
      if (!why.empty() && static_cast<unsigned char>(why.back()) >= 0xC0) why.pop_back();
      ws.close(websocket::close_reason(websocket::close_code::going_away, why), ec);
      return;
    }
    if (chunk->skipped > 0) {
      // The reader fell behind the store's cut: say so on a line of its own, and go on from
      // the next whole line (no spliced half line).
      uint64_t skipped = chunk->skipped + pending.size();
      pending.clear();
      const size_t newline = chunk->data.find('\n');
      const size_t cut = newline == std::string::npos ? chunk->data.size() : newline + 1;
      skipped += cut;
      chunk->data.erase(0, cut);
      const std::string marker = absl::StrCat(
          "\n[raio: ", skipped,
          " bytes of this log were dropped before they could be sent: the jobs storage keeps "
          "the last part of each log]\n");
      ws.write(asio::buffer(marker), ec);
      if (ec) return;
    }
    if (!chunk->data.empty() || (chunk->complete && !pending.empty())) {
      // Text frames must be UTF-8: a character split between chunks waits for its end,
      // bytes that are not UTF-8 become U+FFFD.
      pending += chunk->data;
      offset = chunk->next_offset;
      std::string text = TakeUtf8Text(pending, chunk->complete);
      if (!text.empty()) {
        ws.write(asio::buffer(text), ec);
        if (ec) return;
      }
    }
    if (chunk->complete) {
      ws.close(websocket::close_reason(websocket::close_code::normal), ec);
      return;
    }
    if (!chunk->data.empty()) continue;  // more may be there already
    // Wait for the next poll, or for the client: a close frame (or anything it sends, which
    // is read and dropped) or a closed socket.
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(options_.tail_poll_interval.count())) > 0) {
      beast::flat_buffer in;
      ws.read(in, ec);
      if (ec) return;
    }
  }
}

}  // namespace raio::jobs
