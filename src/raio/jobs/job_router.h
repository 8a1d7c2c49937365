// The jobs REST API's routes (Ray's: /api/version, /api/jobs/..., /api/packages/...) as a
// pure function from a parsed HTTP request to a response, over a JobBackend that holds
// the jobs. The HTTP server (http_server.h) feeds it what Boost.Beast parsed; the fuzz
// target (fuzz/jobs_http_fuzzer.cc) feeds it arbitrary bytes through the same parser and
// a fake backend. Errors are JSON bodies {"error": "..."} with the HTTP status of
// StatusToHttp.
// Thread-safety: Route is reentrant; it is as thread-safe as the backend it calls.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/jobs/job_record.h"

namespace raio::jobs {

// Bytes of a job's log from an offset.
struct LogChunk {
  std::string data;
  uint64_t next_offset = 0;
  // Bytes between the offset asked for and `data`: the store dropped the log's front
  // (a Redis copy keeps the last max_log_bytes) before the reader got there.
  uint64_t skipped = 0;
  // The job is terminal and `data` reaches the end of its log: nothing more will come.
  bool complete = false;
};

// What the routes act on: the job table of a jobs server, or a fake in tests.
// Every method may be called from several HTTP threads at once and may block briefly
// (disk, the raio runtime); none blocks until a job ends.
class JobBackend {
 public:
  virtual ~JobBackend() = default;
  // Starts `request` as a new job and returns its submission id. AlreadyExists for a
  // submission id in use; InvalidArgument for a working_dir package that was not uploaded;
  // Unavailable when the cluster cannot be reached.
  virtual absl::StatusOr<std::string> Submit(SubmitRequest request) = 0;
  // NotFound for an unknown id.
  virtual absl::StatusOr<JobRecord> Get(const std::string& id) = 0;
  // Every job, oldest submission first. Unavailable when the job table's storage cannot
  // be reached (as for every method but the package ones).
  virtual absl::StatusOr<std::vector<JobRecord>> List() = 0;
  // Up to `max_bytes` of the job's log from `offset`. NotFound for an unknown id.
  virtual absl::StatusOr<LogChunk> ReadLogs(const std::string& id, uint64_t offset,
                                            uint64_t max_bytes) = 0;
  // Stops a job: true when it was not terminal yet (it then ends STOPPED), false when it
  // already was. NotFound for an unknown id.
  virtual absl::StatusOr<bool> Stop(const std::string& id) = 0;
  // Forgets a terminal job and its log. NotFound for an unknown id; FailedPrecondition
  // while it is not terminal.
  virtual absl::Status Delete(const std::string& id) = 0;
  // Whether the package store holds `name` (a valid package name).
  virtual bool HasPackage(const std::string& name) = 0;
  // Stores `bytes` as package `name`. ResourceExhausted past MaxPackageBytes;
  // InvalidArgument when a name of the form _raio_pkg_<sha256>.zip does not match the
  // bytes' SHA-256.
  virtual absl::Status PutPackage(const std::string& name, std::string_view bytes) = 0;
  // The largest package PutPackage takes, in bytes.
  virtual uint64_t MaxPackageBytes() const = 0;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, e.g. "/api/jobs/?x=1"
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

// The HTTP status of a backend error: InvalidArgument and FailedPrecondition 400,
// NotFound 404, AlreadyExists 409, ResourceExhausted 413, Unavailable 503, others 500.
int StatusToHttp(const absl::Status& status);
// {"error": message} with StatusToHttp's code.
HttpResponse ErrorResponse(int http_status, std::string_view message);

// The API version GET /api/version reports (Ray's dashboard "version" field).
inline constexpr std::string_view kApiVersion = "2";

// Answers `request`. Never throws; unknown routes are 404, a known path with another
// method 405. GET /api/jobs/{id}/logs/tail without a WebSocket upgrade is 400 (the server
// upgrades before it gets here).
HttpResponse Route(const HttpRequest& request, JobBackend& backend);

// Takes the valid UTF-8 text from the front of `pending` for a WebSocket text frame: bytes
// that are not UTF-8 become U+FFFD (as GET /logs's JSON replaces them, one per maximal
// invalid subpart, Unicode 15 §3.9), and a sequence cut short at the end stays in
// `pending` for the next chunk unless `final` (then it too becomes U+FFFD).
std::string TakeUtf8Text(std::string& pending, bool final);

// The submission id of a /api/jobs/{id}/logs/tail path, or nullopt when `path` is not one.
std::optional<std::string> TailTarget(std::string_view target);

}  // namespace raio::jobs
