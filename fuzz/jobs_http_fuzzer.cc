// The jobs API's request path as the head's jobs server runs it (src/raio/jobs/http_server.cc):
// Boost.Beast's HTTP parser with the server's header and body limits, then the router
// (job_router.h) over a backend that keeps jobs in memory. The input is one or more raw
// HTTP requests; each one parsed is routed, its JSON body parsed and validated. Any
// crash, sanitizer report or exception escaping Route is a failure.
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "raio/jobs/job_router.h"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using raio::jobs::JobRecord;
using raio::jobs::LogChunk;

class MemoryBackend : public raio::jobs::JobBackend {
 public:
  absl::StatusOr<std::string> Submit(raio::jobs::SubmitRequest r) override {
    if (r.submission_id.empty()) r.submission_id = "gen" + std::to_string(jobs_.size());
    if (jobs_.contains(r.submission_id)) return absl::AlreadyExistsError("duplicate");
    if (jobs_.size() > 64) return absl::UnavailableError("full");
    jobs_[r.submission_id] = raio::jobs::NewRecord(r, 1);
    return r.submission_id;
  }
  absl::StatusOr<JobRecord> Get(const std::string& id) override {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError(id);
    return it->second;
  }
  absl::StatusOr<std::vector<JobRecord>> List() override {
    std::vector<JobRecord> out;
    for (auto& [k, v] : jobs_) out.push_back(v);
    return out;
  }
  absl::StatusOr<LogChunk> ReadLogs(const std::string& id, uint64_t offset,
                                    uint64_t max_bytes) override {
    if (!jobs_.contains(id)) return absl::NotFoundError(id);
    LogChunk c;
    const std::string log = "log\n";
    if (offset < log.size()) c.data = log.substr(offset, max_bytes);
    c.next_offset = offset + c.data.size();
    c.complete = true;
    return c;
  }
  absl::StatusOr<bool> Stop(const std::string& id) override {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError(id);
    bool was = !raio::jobs::IsTerminal(it->second.status);
    it->second.status = raio::jobs::JobStatus::kStopped;
    return was;
  }
  absl::Status Delete(const std::string& id) override {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError(id);
    if (!raio::jobs::IsTerminal(it->second.status)) return absl::FailedPreconditionError(id);
    jobs_.erase(it);
    return absl::OkStatus();
  }
  bool HasPackage(const std::string& name) override { return packages_.contains(name); }
  absl::Status PutPackage(const std::string& name, std::string_view bytes) override {
    if (bytes.size() > MaxPackageBytes()) return absl::ResourceExhaustedError("large");
    packages_[name] = bytes.size();
    return absl::OkStatus();
  }
  uint64_t MaxPackageBytes() const override { return 1 << 16; }

 private:
  std::map<std::string, JobRecord> jobs_;
  std::map<std::string, size_t> packages_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  MemoryBackend backend;
  beast::string_view rest(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i < 8 && !rest.empty(); ++i) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(64 << 10);
    parser.body_limit(1 << 20);
    parser.eager(true);
    beast::error_code ec;
    size_t used = parser.put(boost::asio::buffer(rest.data(), rest.size()), ec);
    if (!ec && !parser.is_done()) parser.put_eof(ec);
    if (ec || !parser.is_done()) break;
    const auto& req = parser.get();
    raio::jobs::HttpRequest r{std::string(req.method_string()), std::string(req.target()),
                              req.body()};
    raio::jobs::HttpResponse res = raio::jobs::Route(r, backend);
    if (res.status < 200 || res.status > 599) __builtin_trap();
    (void)raio::jobs::TailTarget(r.target);
    (void)raio::jobs::ParseSubmitRequest(r.body);
    if (used == 0) break;
    rest = rest.substr(used);
  }
  return 0;
}
