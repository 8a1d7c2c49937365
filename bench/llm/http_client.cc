#include "http_client.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace raio::llm::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

http::request<http::string_body> MakeRequest(const std::string& target, const std::string& body) {
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();
  return req;
}

}  // namespace

struct HttpClient::Impl {
  asio::io_context ioc;
  tcp::socket socket{ioc};
  beast::flat_buffer buffer;
};

HttpClient::HttpClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpClient::~HttpClient() {
  beast::error_code ec;
  impl_->socket.shutdown(tcp::socket::shutdown_both, ec);
}

absl::StatusOr<std::unique_ptr<HttpClient>> HttpClient::Connect(const std::string& host, int port) {
  auto impl = std::make_unique<Impl>();
  beast::error_code ec;
  impl->socket.connect({asio::ip::make_address(host, ec), static_cast<uint16_t>(port)}, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("connect: ", ec.message()));
  impl->socket.set_option(tcp::no_delay(true), ec);
  return std::unique_ptr<HttpClient>(new HttpClient(std::move(impl)));
}

absl::StatusOr<std::string> HttpClient::Post(const std::string& target,
                                             const std::string& json_body) {
  beast::error_code ec;
  http::write(impl_->socket, MakeRequest(target, json_body), ec);
  if (ec) return absl::UnavailableError(absl::StrCat("write: ", ec.message()));
  http::response<http::string_body> res;
  http::read(impl_->socket, impl_->buffer, res, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("read: ", ec.message()));
  if (res.result() != http::status::ok) {
    return absl::InternalError(absl::StrCat("HTTP ", res.result_int(), ": ", res.body()));
  }
  return std::move(res.body());
}

absl::StatusOr<StreamTiming> HttpClient::PostStream(const std::string& target,
                                                    const std::string& json_body,
                                                    Clock::time_point t0) {
  beast::error_code ec;
  http::write(impl_->socket, MakeRequest(target, json_body), ec);
  if (ec) return absl::UnavailableError(absl::StrCat("write: ", ec.message()));
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  http::read_header(impl_->socket, impl_->buffer, parser, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("read header: ", ec.message()));
  if (parser.get().result() != http::status::ok) {
    return absl::InternalError(absl::StrCat("HTTP ", parser.get().result_int()));
  }
  StreamTiming timing;
  std::string pending;
  char chunk[16384];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    // read_some: returns with what one socket read delivered, so that events are timed
    // when they arrive rather than when a buffer fills.
    http::read_some(impl_->socket, impl_->buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return absl::UnavailableError(absl::StrCat("read body: ", ec.message()));
    pending.append(chunk, sizeof(chunk) - parser.get().body().size);
    const double now_s = std::chrono::duration<double>(Clock::now() - t0).count();
    // Server-sent events end with a blank line; each of the server's is one `data:` line.
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      nlohmann::json j = nlohmann::json::parse(event.substr(6), nullptr, false);
      if (j.is_discarded()) return absl::InternalError("an event is not JSON: " + event);
      if (j.contains("usage") && j["usage"].is_object()) {
        timing.completion_tokens = j["usage"].value("completion_tokens", 0);
      }
      if (j.contains("choices") && !j["choices"].empty()) timing.event_s.push_back(now_s);
    }
  }
  return timing;
}

}  // namespace raio::llm::bench
