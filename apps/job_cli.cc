#include "job_cli.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <cctype>
#include <chrono>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "raio/jobs/archive.h"

namespace raio::cli {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using nlohmann::json;

// The archive a working directory may become before the server is even asked; the
// server's own limit (raio-jobs --max-package-bytes) applies on upload.
constexpr uint64_t kClientPackageLimitBytes = 2ull << 30;

struct Endpoint {
  std::string host;
  std::string port;
};

struct Reply {
  int status = 0;
  std::string body;
  std::string reason;  // the status line's text
};

// "http://host:port[/]" or "host:port".
std::optional<Endpoint> ParseAddress(std::string a) {
  if (a.starts_with("http://")) a = a.substr(7);
  while (!a.empty() && a.back() == '/') a.pop_back();
  auto colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == a.size()) return std::nullopt;
  std::string host = a.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return Endpoint{host, a.substr(colon + 1)};
}

absl::StatusOr<Reply> Call(const Endpoint& ep, http::verb method, const std::string& target,
                           const std::string& body = "",
                           const std::string& content_type = "application/json") {
  try {
    asio::io_context ioc;
    tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    stream.connect(resolver.resolve(ep.host, ep.port));
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, ep.host);
    req.set(http::field::user_agent, "raio-cli");
    if (!body.empty() || method == http::verb::post || method == http::verb::put) {
      req.set(http::field::content_type, content_type);
      req.body() = body;
    }
    req.prepare_payload();
    // Write and read at once: a server that refuses the body (413 past the package limit)
    // answers before it has read it and stops reading, so a client that wrote everything
    // first would block forever. The answer ends the write.
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(1ull << 32);
    beast::error_code write_ec, read_ec;
    bool answered = false;
    http::async_write(stream, req, [&](beast::error_code e, size_t) { write_ec = e; });
    http::async_read(stream, buffer, parser, [&](beast::error_code e, size_t) {
      read_ec = e;
      answered = !e;
      stream.cancel();  // the write, if it is still going
    });
    ioc.run();
    if (!answered) {
      const beast::error_code& cause =
          write_ec && write_ec != asio::error::operation_aborted ? write_ec : read_ec;
      throw beast::system_error(cause);
    }
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    return Reply{static_cast<int>(parser.get().result_int()), parser.get().body(),
                 std::string(parser.get().reason())};
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot reach the jobs API at http://", ep.host, ":",
                                               ep.port, ": ", e.what()));
  }
}

// The server's error text from a non-200 reply.
std::string ErrorText(const Reply& r) {
  json j = json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_string()) {
    return absl::StrCat(j["error"].get<std::string>(), " (HTTP ", r.status, ")");
  }
  // Not a raio-jobs answer (another HTTP server at that address): its status line, what
  // it said (shortened), and where the jobs API usually is.
  std::string said = r.body.substr(0, 200);
  while (!said.empty() && std::isspace(static_cast<unsigned char>(said.back()))) said.pop_back();
  return absl::StrCat("HTTP ", r.status, " ", r.reason, said.empty() ? "" : ": ", said,
                      " (is this the raio jobs API? `raio start --head` prints its address, "
                      "and the cluster record holds it as dashboard_address)");
}

// Prints the job's log as it is written (logs/tail WebSocket) until the job ends. False
// when the stream could not be opened or broke.
bool FollowLogs(const Endpoint& ep, const std::string& id) {
  try {
    asio::io_context ioc;
    tcp::resolver resolver(ioc);
    websocket::stream<tcp::socket> ws(ioc);
    asio::connect(ws.next_layer(), resolver.resolve(ep.host, ep.port));
    ws.handshake(ep.host + ":" + ep.port, "/api/jobs/" + id + "/logs/tail");
    for (;;) {
      beast::flat_buffer buffer;
      beast::error_code ec;
      ws.read(buffer, ec);
      if (ec == websocket::error::closed) {
        // The server closes normally once the job is terminal and its log all sent.
        if (ws.reason().code == websocket::close_code::normal) return true;
        std::cerr << "raio job: the log stream of '" << id << "' ended before the job did"
                  << (ws.reason().reason.empty() ? std::string()
                                                 : ": " + std::string(ws.reason().reason.data(),
                                                                      ws.reason().reason.size()))
                  << "\n";
        return false;
      }
      if (ec) {
        std::cerr << "raio job: the log stream broke: " << ec.message() << "\n";
        return false;
      }
      std::cout << beast::buffers_to_string(buffer.data()) << std::flush;
    }
  } catch (const std::exception& e) {
    std::cerr << "raio job: cannot follow the logs of '" << id << "': " << e.what() << "\n";
    return false;
  }
}

std::string FormatTime(const json& ms) {
  if (!ms.is_number()) return "-";
  std::time_t t = static_cast<std::time_t>(ms.get<int64_t>() / 1000);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

int TerminalWidth() {
  winsize w{};
  if (::isatty(STDOUT_FILENO) && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 40) {
    return w.ws_col;
  }
  return 120;
}

bool IsTerminalStatus(const std::string& s) {
  return s == "STOPPED" || s == "SUCCEEDED" || s == "FAILED";
}

absl::StatusOr<json> GetJob(const Endpoint& ep, const std::string& id) {
  auto r = Call(ep, http::verb::get, "/api/jobs/" + id);
  if (!r.ok()) return r.status();
  if (r->status != 200) return absl::NotFoundError(ErrorText(*r));
  json j = json::parse(r->body, nullptr, false);
  if (!j.is_object()) return absl::InternalError("the server's answer is not a JSON object");
  return j;
}

}  // namespace

JobCommands::JobCommands(std::function<std::string()> recorded_address)
    : recorded_address_(std::move(recorded_address)) {}

void JobCommands::Register(CLI::App& app) {
  job_ = app.add_subcommand("job", "submit, watch, stop and list jobs (the cluster's jobs API)");
  job_->require_subcommand(1);
  auto address = [this](CLI::App* sub) {
    sub->add_option("--address", address_,
                    "the jobs API, http://HOST:PORT (default: RAIO_API_SERVER_ADDRESS, else "
                    "the cluster `raio start` recorded)");
  };
  submit_ = job_->add_subcommand("submit", "submit a job: raio job submit [options] -- COMMAND...");
  address(submit_);
  submit_->add_option("--submission-id", submission_id_, "the job's id (default: generated)");
  submit_->add_option("--working-dir", working_dir_,
                      "a local directory uploaded for the job; the command runs in it");
  submit_->add_option("--runtime-env-json", runtime_env_json_,
                      "runtime_env as JSON: working_dir, env_vars, excludes");
  submit_->add_option("--metadata-json", metadata_json_, "metadata as a JSON object of strings");
  submit_->add_option("--entrypoint-num-cpus", num_cpus_, "CPUs reserved for the entrypoint")
      ->check(CLI::NonNegativeNumber);
  submit_->add_option("--entrypoint-num-gpus", num_gpus_, "GPUs reserved for the entrypoint")
      ->check(CLI::NonNegativeNumber);
  submit_->add_option("--entrypoint-memory", memory_, "memory (bytes) reserved for the entrypoint")
      ->check(CLI::NonNegativeNumber);
  submit_->add_option("--entrypoint-resources", resources_json_,
                      "custom resources reserved for the entrypoint, as a JSON object");
  submit_->add_flag("--no-wait", no_wait_, "return once submitted instead of following the logs");
  submit_->add_option("entrypoint", entrypoint_, "the command, after --")->required();
  status_ = job_->add_subcommand("status", "a job's status");
  logs_ = job_->add_subcommand("logs", "a job's logs");
  stop_ = job_->add_subcommand("stop", "stop a job (SIGTERM, then SIGKILL after a grace period)");
  delete_ = job_->add_subcommand("delete", "forget a terminal job and its logs");
  for (CLI::App* sub : {status_, logs_, stop_, delete_}) {
    address(sub);
    sub->add_option("job_id", id_, "the job's submission id")->required();
  }
  status_->add_flag("--json", json_, "print the job's record as JSON");
  logs_->add_flag("-f,--follow", follow_, "follow the log until the job ends");
  stop_->add_flag("--no-wait", no_wait_, "return at once instead of waiting for the job to end");
  list_ = job_->add_subcommand("list", "every job of the cluster");
  address(list_);
  list_->add_flag("--json", json_, "print JSON");
}

bool JobCommands::Parsed() const { return job_ != nullptr && job_->parsed(); }

int JobCommands::Run() {
  if (submit_->parsed()) return Submit();
  if (status_->parsed()) return Status();
  if (logs_->parsed()) return Logs();
  if (stop_->parsed()) return Stop();
  if (list_->parsed()) return List();
  if (delete_->parsed()) return Delete();
  return 2;
}

namespace {

// Resolves the jobs API address; prints why not and returns nullopt.
std::optional<Endpoint> Resolve(const std::string& flag,
                                const std::function<std::string()>& recorded) {
  std::string a = flag;
  if (a.empty()) {
    if (const char* env = std::getenv("RAIO_API_SERVER_ADDRESS"); env && *env) a = env;
  }
  if (a.empty()) a = recorded();
  if (a.empty()) {
    std::cerr << "raio job: no jobs API found: give --address http://HOST:PORT, set "
                 "RAIO_API_SERVER_ADDRESS, or start a cluster here (raio start --head)\n";
    return std::nullopt;
  }
  auto ep = ParseAddress(a);
  if (!ep) std::cerr << "raio job: bad address '" << a << "': expected http://HOST:PORT\n";
  return ep;
}

// Parses `text` as a JSON object for `flag`; prints why not.
std::optional<json> JsonObject(const std::string& text, const char* flag) {
  if (text.empty()) return json::object();
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) {
    std::cerr << "raio job submit: " << flag << " must be a JSON object\n";
    return std::nullopt;
  }
  return j;
}

}  // namespace

int JobCommands::Submit() {
  auto ep = Resolve(address_, recorded_address_);
  if (!ep) return 1;
  auto runtime_env = JsonObject(runtime_env_json_, "--runtime-env-json");
  auto metadata = JsonObject(metadata_json_, "--metadata-json");
  auto resources = JsonObject(resources_json_, "--entrypoint-resources");
  if (!runtime_env || !metadata || !resources) return 2;
  if (!working_dir_.empty()) (*runtime_env)["working_dir"] = working_dir_;
  // A local working directory is packed, named by its content and uploaded once.
  if (runtime_env->contains("working_dir") && (*runtime_env)["working_dir"].is_string() &&
      !(*runtime_env)["working_dir"].get<std::string>().starts_with("gcs://")) {
    const std::string dir = (*runtime_env)["working_dir"];
    std::vector<std::string> excludes;
    if (auto it = runtime_env->find("excludes"); it != runtime_env->end() && it->is_array()) {
      for (const auto& e : *it) {
        if (e.is_string()) excludes.push_back(e);
      }
    }
    auto zip = raio::jobs::PackDirectory(dir, excludes, kClientPackageLimitBytes);
    if (!zip.ok()) {
      std::cerr << "raio job submit: " << zip.status().message() << "\n";
      return 1;
    }
    const std::string name = "_raio_pkg_" + raio::jobs::Sha256Hex(*zip) + ".zip";
    auto have = Call(*ep, http::verb::get, "/api/packages/gcs/" + name);
    if (!have.ok()) {
      std::cerr << "raio job submit: " << have.status().message() << "\n";
      return 1;
    }
    if (have->status != 200) {
      auto put =
          Call(*ep, http::verb::put, "/api/packages/gcs/" + name, *zip, "application/octet-stream");
      if (!put.ok() || put->status != 200) {
        std::cerr << "raio job submit: cannot upload the working directory '" << dir
                  << "': " << (put.ok() ? ErrorText(*put) : std::string(put.status().message()))
                  << "\n";
        return 1;
      }
    }
    (*runtime_env)["working_dir"] = "gcs://" + name;
  }
  json body{{"entrypoint", absl::StrJoin(entrypoint_, " ")}};
  if (!submission_id_.empty()) body["submission_id"] = submission_id_;
  if (!runtime_env->empty()) body["runtime_env"] = *runtime_env;
  if (!metadata->empty()) body["metadata"] = *metadata;
  if (!resources->empty()) body["entrypoint_resources"] = *resources;
  if (num_cpus_ >= 0) body["entrypoint_num_cpus"] = num_cpus_;
  if (num_gpus_ >= 0) body["entrypoint_num_gpus"] = num_gpus_;
  if (memory_ >= 0) body["entrypoint_memory"] = memory_;
  auto r = Call(*ep, http::verb::post, "/api/jobs/", body.dump());
  if (!r.ok()) {
    std::cerr << "raio job submit: " << r.status().message() << "\n";
    return 1;
  }
  if (r->status != 200) {
    std::cerr << "raio job submit: " << ErrorText(*r) << "\n";
    return 1;
  }
  json reply = json::parse(r->body, nullptr, false);
  const std::string id = reply.is_object() ? reply.value("submission_id", "") : "";
  std::cerr << "Job '" << id << "' submitted successfully\n";
  if (no_wait_) {
    std::cerr << "  status: raio job status " << id << "\n"
              << "  logs:   raio job logs --follow " << id << "\n"
              << "  stop:   raio job stop " << id << "\n";
    std::cout << id << "\n";
    return 0;
  }
  FollowLogs(*ep, id);
  // The stream ends when the job is terminal; the record says how.
  auto job = GetJob(*ep, id);
  if (!job.ok()) {
    std::cerr << "raio job submit: " << job.status().message() << "\n";
    return 1;
  }
  const std::string status = job->value("status", "");
  std::cerr << "Job '" << id << "' " << status << ": " << job->value("message", "") << "\n";
  return status == "SUCCEEDED" ? 0 : 1;
}

int JobCommands::Status() {
  auto ep = Resolve(address_, recorded_address_);
  if (!ep) return 1;
  auto job = GetJob(*ep, id_);
  if (!job.ok()) {
    std::cerr << "raio job status: " << job.status().message() << "\n";
    return 1;
  }
  if (json_) {
    std::cout << job->dump(2) << "\n";
    return 0;
  }
  std::cout << "Status for job '" << id_ << "': " << job->value("status", "") << "\n"
            << "Status message: " << job->value("message", "") << "\n";
  if ((*job)["driver_exit_code"].is_number()) {
    std::cout << "Exit code: " << (*job)["driver_exit_code"].get<int>() << "\n";
  }
  return 0;
}

int JobCommands::Logs() {
  auto ep = Resolve(address_, recorded_address_);
  if (!ep) return 1;
  if (follow_) {
    if (auto job = GetJob(*ep, id_); !job.ok()) {
      std::cerr << "raio job logs: " << job.status().message() << "\n";
      return 1;
    }
    return FollowLogs(*ep, id_) ? 0 : 1;
  }
  auto r = Call(*ep, http::verb::get, "/api/jobs/" + id_ + "/logs");
  if (!r.ok() || r->status != 200) {
    std::cerr << "raio job logs: " << (r.ok() ? ErrorText(*r) : std::string(r.status().message()))
              << "\n";
    return 1;
  }
  json j = json::parse(r->body, nullptr, false);
  std::cout << (j.is_object() ? j.value("logs", "") : "") << std::flush;
  return 0;
}

int JobCommands::Stop() {
  auto ep = Resolve(address_, recorded_address_);
  if (!ep) return 1;
  auto r = Call(*ep, http::verb::post, "/api/jobs/" + id_ + "/stop");
  if (!r.ok() || r->status != 200) {
    std::cerr << "raio job stop: " << (r.ok() ? ErrorText(*r) : std::string(r.status().message()))
              << "\n";
    return 1;
  }
  json j = json::parse(r->body, nullptr, false);
  if (!j.is_object() || !j.value("stopped", false)) {
    std::cerr << "Job '" << id_ << "' had already ended\n";
    return 0;
  }
  std::cerr << "Job '" << id_ << "' is being stopped\n";
  if (no_wait_) return 0;
  // SIGTERM, then SIGKILL after the server's grace period: a job ends within it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    auto job = GetJob(*ep, id_);
    if (job.ok() && IsTerminalStatus(job->value("status", ""))) {
      std::cerr << "Job '" << id_ << "' " << job->value("status", "") << "\n";
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::cerr << "raio job stop: job '" << id_ << "' did not end within 60 s\n";
  return 1;
}

int JobCommands::List() {
  auto ep = Resolve(address_, recorded_address_);
  if (!ep) return 1;
  auto r = Call(*ep, http::verb::get, "/api/jobs/");
  if (!r.ok() || r->status != 200) {
    std::cerr << "raio job list: " << (r.ok() ? ErrorText(*r) : std::string(r.status().message()))
              << "\n";
    return 1;
  }
  json jobs = json::parse(r->body, nullptr, false);
  if (!jobs.is_array()) {
    std::cerr << "raio job list: the server's answer is not a JSON array\n";
    return 1;
  }
  if (json_) {
    std::cout << jobs.dump(2) << "\n";
    return 0;
  }
  if (jobs.empty()) {
    std::cout << "no jobs\n";
    return 0;
  }
  const int width = TerminalWidth();
  char line[512];
  std::snprintf(line, sizeof(line), "%-28s %-9s %-19s %-19s %s", "SUBMISSION_ID", "STATUS", "START",
                "END", "ENTRYPOINT");
  std::cout << line << "\n";
  for (const auto& j : jobs) {
    std::snprintf(line, sizeof(line), "%-28s %-9s %-19s %-19s ",
                  j.value("submission_id", "").c_str(), j.value("status", "").c_str(),
                  FormatTime(j["start_time"]).c_str(), FormatTime(j["end_time"]).c_str());
    std::string row = line;
    // One line per job, and no terminal escape reaches the screen: control characters
    // (newlines, ESC) of the entrypoint are shown as \xNN.
    std::string entry;
    for (unsigned char c : j.value("entrypoint", "")) {
      if (c < 0x20 || c == 0x7f) {
        absl::StrAppend(&entry, "\\x", absl::Hex(c, absl::kZeroPad2));
      } else {
        entry.push_back(static_cast<char>(c));
      }
    }
    const int room = std::max(10, width - static_cast<int>(row.size()));
    if (static_cast<int>(entry.size()) > room) entry = entry.substr(0, room - 3) + "...";
    std::cout << row << entry << "\n";
  }
  return 0;
}

int JobCommands::Delete() {
  auto ep = Resolve(address_, recorded_address_);
  if (!ep) return 1;
  auto r = Call(*ep, http::verb::delete_, "/api/jobs/" + id_);
  if (!r.ok() || r->status != 200) {
    std::cerr << "raio job delete: " << (r.ok() ? ErrorText(*r) : std::string(r.status().message()))
              << "\n";
    return 1;
  }
  std::cerr << "Job '" << id_ << "' deleted\n";
  return 0;
}

}  // namespace raio::cli
