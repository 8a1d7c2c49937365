#include "raio/jobs/job_router.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace raio::jobs {

namespace {

using nlohmann::json;

HttpResponse Json(int status, const json& j) {
  HttpResponse r;
  r.status = status;
  // Invalid UTF-8 in logs or user strings is replaced, never thrown.
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

HttpResponse FromStatus(const absl::Status& s) {
  return ErrorResponse(StatusToHttp(s), std::string(s.message()));
}

// The path of `target` split at '/', empty parts dropped ("/api/jobs/" -> api, jobs).
std::vector<std::string> PathParts(std::string_view target) {
  std::string_view path = target.substr(0, target.find('?'));
  std::vector<std::string> parts =
      absl::StrSplit(absl::string_view(path.data(), path.size()), '/', absl::SkipEmpty());
  return parts;
}

HttpResponse MethodNotAllowed(const HttpRequest& r) {
  return ErrorResponse(405, absl::StrCat("method ", r.method, " is not allowed on ",
                                         r.target.substr(0, r.target.find('?'))));
}

HttpResponse Jobs(const HttpRequest& r, const std::vector<std::string>& p, JobBackend& b) {
  // p[0] == "api", p[1] == "jobs".
  if (p.size() == 2) {
    if (r.method == "GET") {
      auto jobs = b.List();
      if (!jobs.ok()) return FromStatus(jobs.status());
      json list = json::array();
      for (const JobRecord& job : *jobs) list.push_back(job.ToJson());
      return Json(200, list);
    }
    if (r.method == "POST") {
      auto request = ParseSubmitRequest(r.body);
      if (!request.ok()) return FromStatus(request.status());
      auto id = b.Submit(std::move(*request));
      if (!id.ok()) return FromStatus(id.status());
      return Json(200, json{{"job_id", *id}, {"submission_id", *id}});
    }
    return MethodNotAllowed(r);
  }
  const std::string& id = p[2];
  if (p.size() == 3) {
    if (r.method == "GET") {
      auto job = b.Get(id);
      if (!job.ok()) return FromStatus(job.status());
      return Json(200, job->ToJson());
    }
    if (r.method == "DELETE") {
      absl::Status s = b.Delete(id);
      if (!s.ok()) return FromStatus(s);
      return Json(200, json{{"deleted", true}});
    }
    return MethodNotAllowed(r);
  }
  if (p.size() == 4 && p[3] == "stop") {
    if (r.method != "POST") return MethodNotAllowed(r);
    auto stopped = b.Stop(id);
    if (!stopped.ok()) return FromStatus(stopped.status());
    return Json(200, json{{"stopped", *stopped}});
  }
  if (p.size() == 4 && p[3] == "logs") {
    if (r.method != "GET") return MethodNotAllowed(r);
    std::string logs;
    uint64_t offset = 0;
    for (;;) {
      auto chunk = b.ReadLogs(id, offset, 16u << 20);
      if (!chunk.ok()) return FromStatus(chunk.status());
      logs += chunk->data;
      if (chunk->data.empty() || chunk->next_offset == offset) break;
      offset = chunk->next_offset;
    }
    return Json(200, json{{"logs", std::move(logs)}});
  }
  if (p.size() == 5 && p[3] == "logs" && p[4] == "tail") {
    if (r.method != "GET") return MethodNotAllowed(r);
    if (auto job = b.Get(id); !job.ok()) return FromStatus(job.status());
    return ErrorResponse(400, "logs/tail is a WebSocket: send an Upgrade: websocket request");
  }
  return ErrorResponse(404, absl::StrCat("no route ", r.target.substr(0, r.target.find('?'))));
}

HttpResponse Packages(const HttpRequest& r, const std::vector<std::string>& p, JobBackend& b) {
  // /api/packages/{protocol}/{name}
  if (p.size() != 4) return ErrorResponse(404, "expected /api/packages/{protocol}/{name}");
  if (p[2] != "gcs") {
    return ErrorResponse(400, absl::StrCat("unsupported package protocol '", p[2],
                                           "'; raio stores packages under gcs"));
  }
  const std::string& name = p[3];
  if (!IsValidPackageName(name)) {
    return ErrorResponse(400, absl::StrCat("bad package name '", name,
                                           "': use 1-128 characters of A-Z a-z 0-9 _ - ."));
  }
  if (r.method == "GET") {
    if (!b.HasPackage(name)) return ErrorResponse(404, absl::StrCat("no package ", name));
    return Json(200, json{{"package", absl::StrCat("gcs://", name)}});
  }
  if (r.method == "PUT") {
    if (absl::Status s = b.PutPackage(name, r.body); !s.ok()) return FromStatus(s);
    return Json(200, json{{"package", absl::StrCat("gcs://", name)}});
  }
  return MethodNotAllowed(r);
}

}  // namespace

int StatusToHttp(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 413;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

HttpResponse ErrorResponse(int http_status, std::string_view message) {
  return Json(http_status, json{{"error", std::string(message)}});
}

std::optional<std::string> TailTarget(std::string_view target) {
  std::vector<std::string> p = PathParts(target);
  if (p.size() == 5 && p[0] == "api" && p[1] == "jobs" && p[3] == "logs" && p[4] == "tail") {
    return p[2];
  }
  return std::nullopt;
}

HttpResponse Route(const HttpRequest& request, JobBackend& backend) {
  try {
    std::vector<std::string> p = PathParts(request.target);
    if (p.size() >= 2 && p[0] == "api" && p[1] == "version") {
      if (request.method != "GET") return MethodNotAllowed(request);
      // Ray's clients read "version"; ray_version names the Ray release whose jobs API
      // raio follows.
      return Json(200, json{{"version", std::string(kApiVersion)},
                            {"ray_version", "2.9.0"},
                            {"raio_version", "0.1.0"},
                            {"ray_commit", "raio"},
                            {"session_name", "raio"}});
    }
    if (p.size() >= 2 && p[0] == "api" && p[1] == "jobs") return Jobs(request, p, backend);
    if (p.size() >= 2 && p[0] == "api" && p[1] == "packages") {
      return Packages(request, p, backend);
    }
    return ErrorResponse(
        404, absl::StrCat("no route ", request.target.substr(0, request.target.find('?'))));
  } catch (const std::exception& e) {
    // Backends return statuses; this is the last guard so that no request ends the server.
    return ErrorResponse(500, absl::StrCat("internal error: ", e.what()));
  }
}

std::string TakeUtf8Text(std::string& pending, bool final) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(pending.size());
  const auto* b = reinterpret_cast<const unsigned char*>(pending.data());
  const size_t n = pending.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = b[i];
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    if (len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t k = 1;  // bytes of the sequence seen valid so far
    while (k < len && i + k < n) {
      const unsigned char d = b[i + k];
      if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) break;
      ++k;
    }
    if (k == len) {
      out.append(pending, i, len);
      i += len;
    } else if (i + k == n && !final) {
      break;  // cut short by the chunk's end: the rest comes with the next chunk
    } else {
      out += kReplacement;
      i += k;
    }
  }
  pending.erase(0, i);
  return out;
}

}  // namespace raio::jobs
