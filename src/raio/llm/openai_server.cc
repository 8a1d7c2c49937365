#include "raio/llm/openai_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "raio/llm/openai_protocol.h"

namespace raio::llm {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

// Whether the peer closed its side (EOF or an error), without consuming pipelined data.
bool ClientGone(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  char c;
  return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

// After an error response to a request whose body was not read (too large, malformed):
// closes the sending side, then reads and drops what the client still sends, for up to
// 5 s and 64 MiB. Closing with unread data would reset the connection, and a client still
// sending its body (python-requests does not wait for a response first) would see the
// reset instead of the response.
void DrainAndClose(int fd) {
  ::shutdown(fd, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  size_t drained = 0;
  char scratch[65536];
  while (drained < (size_t{64} << 20) && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;  // nothing yet (or EINTR): check the deadline
    const ssize_t n = ::recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;  // EOF or reset
    if (n > 0) drained += static_cast<size_t>(n);
  }
}

// Waits up to 100 ms for outputs and takes them all; an error (the engine lost the
// request) comes back as a finished output carrying it.
std::vector<RequestOutput> TakeOutputs(EngineClient* engine, const std::string& id) {
  absl::StatusOr<std::vector<RequestOutput>> outs = engine->Poll(id, absl::Milliseconds(100));
  if (outs.ok()) return *std::move(outs);
  RequestOutput o;
  o.finished = true;
  o.finish_reason = FinishReason::kAbort;
  o.error = outs.status();
  return {o};
}

}  // namespace

struct OpenAiServer::Impl {
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
};

struct OpenAiServer::Connection {
  explicit Connection(tcp::socket s) : socket(std::move(s)) {}
  tcp::socket socket;
  std::thread thread;
  std::atomic<bool> done{false};
};

OpenAiServer::OpenAiServer(EngineClient* engine, ServerOptions options)
    : engine_(engine), options_(std::move(options)), impl_(std::make_unique<Impl>()) {}

OpenAiServer::~OpenAiServer() { Stop(); }

absl::StatusOr<int> OpenAiServer::Start() {
  beast::error_code ec;
  tcp::endpoint ep(asio::ip::make_address(options_.host, ec), static_cast<uint16_t>(options_.port));
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad host ", options_.host));
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

void OpenAiServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (accept_thread_.joinable()) {
    ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
    accept_thread_.join();
  }
  beast::error_code ec;
  impl_->acceptor.close(ec);
  std::list<std::unique_ptr<Connection>> conns;
  {
    absl::MutexLock l(&mu_);
    for (auto& c : connections_) ::shutdown(c->socket.native_handle(), SHUT_RDWR);
    conns.swap(connections_);
  }
  for (auto& c : conns) c->thread.join();
}

void OpenAiServer::ReapFinished() {
  std::list<std::unique_ptr<Connection>> finished;
  {
    absl::MutexLock l(&mu_);
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

void OpenAiServer::AcceptLoop() {
  while (!stopping_) {
    tcp::socket s(impl_->ioc);
    beast::error_code ec;
    impl_->acceptor.accept(s, ec);
    if (stopping_) break;
    if (ec) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // e.g. out of descriptors
      continue;
    }
    // A stream is many small writes (headers, then one chunk per delta): without
    // TCP_NODELAY, Nagle's algorithm holds each until the peer acknowledges the last.
    s.set_option(tcp::no_delay(true), ec);
    ReapFinished();
    auto c = std::make_unique<Connection>(std::move(s));
    Connection* raw = c.get();
    absl::MutexLock l(&mu_);
    if (stopping_) break;
    connections_.push_back(std::move(c));
    raw->thread = std::thread([this, raw] {
      Serve(raw);
      raw->done = true;
    });
  }
}

namespace {

using Request = http::request<http::string_body>;

class Exchange {
 public:
  Exchange(tcp::socket& s, EngineClient* engine) : socket_(s), engine_(engine) {}

  // Answers one request; returns whether the connection may serve another.
  bool Handle(const Request& req) {
    std::string target(req.target());
    target = target.substr(0, target.find('?'));
    keep_alive_ = req.keep_alive();
    version_ = req.version();
    const bool get = req.method() == http::verb::get;
    const bool post = req.method() == http::verb::post;
    if (target == "/health" && get) {
      // As vLLM's: 200 with an empty body while the engine serves, else an error (here 503,
      // so that a load balancer takes this server out while its engine restarts).
      absl::Status health = engine_->Health();
      if (health.ok()) return Send(http::status::ok, "text/plain", "");
      return SendError({503, std::string(health.message()), "ServiceUnavailableError", ""});
    }
    if (target == "/metrics" && get) {
      return Send(http::status::ok, "text/plain; version=0.0.4", engine_->Metrics());
    }
    if (target == "/v1/models" && get) {
      const std::string& id = engine_->model_name();
      json m = {{"id", id},
                {"object", "model"},
                {"created", std::time(nullptr)},
                {"owned_by", "raio"},
                {"root", id},
                {"parent", nullptr},
                {"max_model_len", engine_->max_model_len()}};
      return SendJson(200, {{"object", "list"}, {"data", json::array({m})}});
    }
    if ((target == "/v1/completions" || target == "/v1/chat/completions") && post) {
      return Generate(req.body(), target == "/v1/chat/completions");
    }
    if (target == "/health" || target == "/metrics" || target == "/v1/models" ||
        target == "/v1/completions" || target == "/v1/chat/completions") {
      return SendError({405, "method not allowed", "BadRequestError", ""});
    }
    return SendError({404, absl::StrCat("no route ", target), "NotFoundError", ""});
  }

  // Whether the next response offers to keep the connection.
  void set_keep_alive(bool keep_alive) { keep_alive_ = keep_alive; }

  bool SendError(const ApiError& e, bool retry_after = false) {
    return SendJson(e.status, ErrorJson(e), retry_after);
  }

 private:
  bool Send(http::status status, const char* type, std::string body, bool retry_after = false) {
    http::response<http::string_body> res{status, version_};
    res.set(http::field::server, "raio-llm");
    res.set(http::field::content_type, type);
    if (retry_after) res.set(http::field::retry_after, "1");
    res.keep_alive(keep_alive_);
    res.body() = std::move(body);
    res.prepare_payload();
    beast::error_code ec;
    http::write(socket_, res, ec);
    return !ec && keep_alive_;
  }
  bool SendJson(int status, const json& j, bool retry_after = false) {
    return Send(static_cast<http::status>(status), "application/json", Dump(j), retry_after);
  }
  bool Write(const std::string& s) {
    beast::error_code ec;
    asio::write(socket_, asio::buffer(s), ec);
    return !ec;
  }

  bool Generate(const std::string& body, bool chat) {
    ApiRequest ar;
    ApiError err;
    if (!ParseApiRequest(body, chat, engine_->model_name(), engine_->tokenizer(),
                         engine_->max_model_len(), &ar, &err)) {
      return SendError(err);
    }
    absl::StatusOr<std::string> id = engine_->Submit(ar.prompt, ar.params);
    if (!id.ok()) {
      const bool busy = id.status().code() == absl::StatusCode::kResourceExhausted;
      const bool bad = id.status().code() == absl::StatusCode::kInvalidArgument;
      return SendError({busy  ? 503
                        : bad ? 400
                              : 500,
                        std::string(id.status().message()),
                        busy  ? "ServiceUnavailableError"
                        : bad ? "BadRequestError"
                              : "InternalServerError",
                        ""},
                       busy);
    }
    const std::string rid = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", *id);
    const int64_t created = std::time(nullptr);
    const std::string& model = engine_->model_name();
    const int fd = socket_.native_handle();
    if (!ar.stream) {
      ApiResult res;
      for (;;) {
        std::vector<RequestOutput> outs = TakeOutputs(engine_, *id);
        if (outs.empty() && ClientGone(fd)) {
          engine_->Abort(*id);
          return false;
        }
        for (const RequestOutput& o : outs) {
          res.text += o.text;
          res.token_ids.insert(res.token_ids.end(), o.token_ids.begin(), o.token_ids.end());
          res.logprobs.insert(res.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
          res.prompt_tokens = o.prompt_tokens;
          res.completion_tokens = o.completion_tokens;
          if (!o.finished) continue;
          if (!o.error.ok()) {
            return SendError({500, std::string(o.error.message()), "InternalServerError", ""});
          }
          res.finish_reason = o.finish_reason;
          return SendJson(200, ResponseJson(ar, rid, created, model, res, engine_->tokenizer()));
        }
      }
    }
    keep_alive_ = false;  // the stream ends when the connection closes
    if (!Write("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
               "Cache-Control: no-cache\r\nConnection: close\r\n\r\n")) {
      engine_->Abort(*id);
      return false;
    }
    bool first = true;
    for (;;) {
      std::vector<RequestOutput> outs = TakeOutputs(engine_, *id);
      if (outs.empty() && ClientGone(fd)) {
        engine_->Abort(*id);
        return false;
      }
      for (const RequestOutput& o : outs) {
        if (o.finished && !o.error.ok()) {
          ApiError e{500, std::string(o.error.message()), "InternalServerError", ""};
          // As vLLM: the error event, then the end of the stream.
          Write(absl::StrCat("data: ", Dump(StreamErrorJson(e)), "\n\ndata: [DONE]\n\n"));
          return false;
        }
        if (o.text.empty() && !o.finished && !first) continue;
        json chunk = ChunkJson(ar, rid, created, model, o, first, engine_->tokenizer());
        first = false;
        if (!Write(absl::StrCat("data: ", Dump(chunk), "\n\n"))) {
          engine_->Abort(*id);
          return false;
        }
        if (!o.finished) continue;
        if (ar.include_usage) {
          json usage = {{"id", rid},
                        {"object", chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", created},
                        {"model", model},
                        {"choices", json::array()},
                        {"usage", UsageJson(o.prompt_tokens, o.completion_tokens)}};
          Write(absl::StrCat("data: ", Dump(usage), "\n\n"));
        }
        Write("data: [DONE]\n\n");
        return false;
      }
    }
  }

  tcp::socket& socket_;
  EngineClient* engine_;
  bool keep_alive_ = true;
  unsigned version_ = 11;
};

}  // namespace

void OpenAiServer::Serve(Connection* c) {
  Exchange ex(c->socket, engine_);
  beast::flat_buffer buffer;
  const int fd = c->socket.native_handle();
  const int idle_ms = static_cast<int>(absl::ToInt64Milliseconds(options_.keep_alive_timeout));
  for (;;) {
    // Between requests: wait for the next one's first bytes at most keep_alive_timeout
    // (Stop's shutdown wakes this too).
    pollfd p{fd, POLLIN, 0};
    if (buffer.size() == 0 && ::poll(&p, 1, idle_ms) == 0) break;
    http::request_parser<http::string_body> parser;
    parser.body_limit(options_.max_body_bytes);
    beast::error_code ec;
    // A Content-Length over the limit fails here, before the body is read.
    http::read_header(c->socket, buffer, parser, ec);
    if (!ec && !parser.is_done()) {
      // curl sends `Expect: 100-continue` with bodies over 1 MiB and waits a second for
      // this interim response before sending the body.
      if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        http::response<http::empty_body> go_on{http::status::continue_, parser.get().version()};
        http::write(c->socket, go_on, ec);
      }
      if (!ec) http::read(c->socket, buffer, parser, ec);
    }
    if (ec == http::error::body_limit) {
      ex.set_keep_alive(false);
      ex.SendError({413, "the request body is too large", "BadRequestError", ""});
      DrainAndClose(c->socket.native_handle());
      break;
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset || stopping_) {
      break;
    }
    if (ec) {
      ex.set_keep_alive(false);
      ex.SendError(
          {400, absl::StrCat("malformed HTTP request: ", ec.message()), "BadRequestError", ""});
      DrainAndClose(c->socket.native_handle());
      break;
    }
    if (!ex.Handle(parser.get())) break;
  }
  beast::error_code ec;
  c->socket.shutdown(tcp::socket::shutdown_both, ec);
}

}  // namespace raio::llm
