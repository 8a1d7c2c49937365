#include "raio/jobs/job_record.h"

#include <cmath>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace raio::jobs {

namespace {

using nlohmann::json;

constexpr std::string_view kStatusNames[] = {"PENDING", "RUNNING", "STOPPED", "SUCCEEDED",
                                             "FAILED"};

bool IdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

bool IsSafeName(std::string_view s) {
  if (s.empty() || s.size() > 128 || s[0] == '.') return false;
  for (char c : s) {
    if (!IdChar(c)) return false;
  }
  return true;
}

absl::Status Bad(std::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

// A non-negative finite number at `key` of `body` (absent: 0).
absl::StatusOr<double> Amount(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return 0.0;
  if (!it->is_number()) return Bad(absl::StrCat("'", key, "' must be a number"));
  double v = it->get<double>();
  if (!std::isfinite(v) || v < 0) {
    return Bad(absl::StrCat("'", key, "' must be a finite number >= 0"));
  }
  return v;
}

absl::StatusOr<std::map<std::string, std::string>> StringMap(const json& v, const char* what) {
  if (v.is_null()) return std::map<std::string, std::string>{};
  if (!v.is_object()) return Bad(absl::StrCat("'", what, "' must be a JSON object of strings"));
  std::map<std::string, std::string> out;
  for (const auto& [k, val] : v.items()) {
    if (!val.is_string()) {
      return Bad(absl::StrCat("'", what, "': the value of '", k, "' must be a string"));
    }
    out[k] = val.get<std::string>();
  }
  return out;
}

absl::StatusOr<RuntimeEnv> ParseRuntimeEnv(const json& v) {
  RuntimeEnv env;
  if (v.is_null()) return env;
  if (!v.is_object()) return Bad("'runtime_env' must be a JSON object");
  static const std::set<std::string> kKnown = {"working_dir", "env_vars", "excludes"};
  std::vector<std::string> unknown;
  for (const auto& [k, val] : v.items()) {
    if (!kKnown.contains(k)) unknown.push_back(k);
  }
  if (!unknown.empty()) {
    return Bad(absl::StrCat("runtime_env has unsupported keys: ", absl::StrJoin(unknown, ", "),
                            " (raio supports working_dir, env_vars, excludes)"));
  }
  if (auto it = v.find("working_dir"); it != v.end() && !it->is_null()) {
    if (!it->is_string()) return Bad("runtime_env.working_dir must be a string");
    env.working_dir = it->get<std::string>();
    constexpr std::string_view kScheme = "gcs://";
    if (!env.working_dir.starts_with(kScheme) ||
        !IsValidPackageName(std::string_view(env.working_dir).substr(kScheme.size()))) {
      return Bad(
          absl::StrCat("runtime_env.working_dir must name an uploaded package, "
                       "gcs://<name> (PUT /api/packages/gcs/<name> first; `raio job "
                       "submit --working-dir DIR` does both), got '",
                       env.working_dir, "'"));
    }
  }
  if (auto it = v.find("env_vars"); it != v.end()) {
    auto vars = StringMap(*it, "runtime_env.env_vars");
    if (!vars.ok()) return vars.status();
    for (const auto& [k, val] : *vars) {
      if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos ||
          val.find('\0') != std::string::npos) {
        return Bad(absl::StrCat("runtime_env.env_vars: bad variable name '", k, "'"));
      }
    }
    std::vector<std::string> reserved;
    for (const auto& [k, val] : *vars) {
      if (k.starts_with("RAIO_")) reserved.push_back(k);
    }
    if (!reserved.empty()) {
      return Bad(
          absl::StrCat("runtime_env.env_vars: names starting with RAIO_ are raio's own "
                       "and may not be set: ",
                       absl::StrJoin(reserved, ", ")));
    }
    env.env_vars = std::move(*vars);
  }
  if (auto it = v.find("excludes"); it != v.end()) env.excludes = *it;
  return env;
}

}  // namespace

std::string JobStatusName(JobStatus status) {
  return std::string(kStatusNames[static_cast<int>(status)]);
}

std::optional<JobStatus> ParseJobStatus(std::string_view name) {
  for (int i = 0; i < 5; ++i) {
    if (kStatusNames[i] == name) return static_cast<JobStatus>(i);
  }
  return std::nullopt;
}

bool IsTerminal(JobStatus status) {
  return status == JobStatus::kStopped || status == JobStatus::kSucceeded ||
         status == JobStatus::kFailed;
}

bool IsValidSubmissionId(std::string_view id) { return IsSafeName(id); }
bool IsValidPackageName(std::string_view name) { return IsSafeName(name); }

nlohmann::json RuntimeEnv::ToJson() const {
  json j = json::object();
  if (!working_dir.empty()) j["working_dir"] = working_dir;
  if (!env_vars.empty()) j["env_vars"] = env_vars;
  if (!excludes.is_null()) j["excludes"] = excludes;
  return j;
}

std::map<std::string, double> SubmitRequest::Resources() const {
  std::map<std::string, double> r;
  for (const auto& [k, v] : entrypoint_resources) {
    if (v > 0) r[k] = v;
  }
  if (entrypoint_num_cpus > 0) r["CPU"] = entrypoint_num_cpus;
  if (entrypoint_num_gpus > 0) r["GPU"] = entrypoint_num_gpus;
  if (entrypoint_memory > 0) r["memory"] = entrypoint_memory;
  return r;
}

absl::StatusOr<SubmitRequest> ParseSubmitRequest(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("the request body is not valid JSON");
  if (!j.is_object()) return Bad("the request body must be a JSON object");
  static const std::set<std::string> kKnown = {
      "entrypoint",          "submission_id",     "job_id",
      "runtime_env",         "metadata",          "entrypoint_num_cpus",
      "entrypoint_num_gpus", "entrypoint_memory", "entrypoint_resources"};
  std::vector<std::string> unknown;
  for (const auto& [k, v] : j.items()) {
    if (!kKnown.contains(k)) unknown.push_back(k);
  }
  if (!unknown.empty()) {
    return Bad(absl::StrCat("unknown fields: ", absl::StrJoin(unknown, ", ")));
  }
  SubmitRequest r;
  auto entry = j.find("entrypoint");
  if (entry == j.end() || !entry->is_string() || entry->get<std::string>().empty()) {
    return Bad("'entrypoint' must be a non-empty string (the shell command to run)");
  }
  r.entrypoint = entry->get<std::string>();
  if (r.entrypoint.find('\0') != std::string::npos) return Bad("'entrypoint' contains a NUL");
  if (r.entrypoint.size() > kMaxEntrypointBytes) {
    return Bad(absl::StrCat("'entrypoint' is ", r.entrypoint.size(), " bytes, over the limit of ",
                            kMaxEntrypointBytes,
                            " bytes; put a long command in a script in the working directory"));
  }
  // Ray's older clients send job_id for submission_id.
  for (const char* key : {"submission_id", "job_id"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string()) return Bad(absl::StrCat("'", key, "' must be a string"));
    r.submission_id = it->get<std::string>();
    if (!IsValidSubmissionId(r.submission_id)) {
      return Bad(absl::StrCat("bad submission_id '", r.submission_id,
                              "': use 1-128 characters of A-Z a-z 0-9 _ - . (not starting "
                              "with '.')"));
    }
    break;
  }
  auto env = ParseRuntimeEnv(j.value("runtime_env", json()));
  if (!env.ok()) return env.status();
  r.runtime_env = std::move(*env);
  auto meta = StringMap(j.value("metadata", json()), "metadata");
  if (!meta.ok()) return meta.status();
  r.metadata = std::move(*meta);
  for (auto [key, field] : {std::pair{"entrypoint_num_cpus", &r.entrypoint_num_cpus},
                            std::pair{"entrypoint_num_gpus", &r.entrypoint_num_gpus},
                            std::pair{"entrypoint_memory", &r.entrypoint_memory}}) {
    auto v = Amount(j, key);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  if (auto it = j.find("entrypoint_resources"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return Bad("'entrypoint_resources' must be a JSON object of numbers");
    for (const auto& [k, v] : it->items()) {
      if (k.empty() || !v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
        return Bad(
            absl::StrCat("'entrypoint_resources': '", k, "' must map to a finite number >= 0"));
      }
      if (k == "CPU" || k == "GPU" || k == "memory") {
        return Bad(absl::StrCat("'entrypoint_resources' may not name '", k,
                                "': use entrypoint_num_cpus, entrypoint_num_gpus or "
                                "entrypoint_memory"));
      }
      r.entrypoint_resources[k] = v.get<double>();
    }
  }
  return r;
}

JobRecord NewRecord(const SubmitRequest& request, int64_t now_ms) {
  JobRecord r;
  r.submission_id = request.submission_id;
  r.entrypoint = request.entrypoint;
  r.status = JobStatus::kPending;
  r.message = "Job has not started yet. It may be waiting for the resources of its entrypoint.";
  r.submit_time_ms = now_ms;
  r.metadata = request.metadata;
  r.runtime_env = request.runtime_env;
  r.entrypoint_num_cpus = request.entrypoint_num_cpus;
  r.entrypoint_num_gpus = request.entrypoint_num_gpus;
  r.entrypoint_memory = request.entrypoint_memory;
  r.entrypoint_resources = request.entrypoint_resources;
  return r;
}

nlohmann::json JobRecord::ToJson() const {
  json j;
  j["type"] = "SUBMISSION";
  j["job_id"] = submission_id;
  j["submission_id"] = submission_id;
  j["driver_info"] = nullptr;
  j["status"] = std::string(JobStatusName(status));
  j["entrypoint"] = entrypoint;
  j["message"] = message;
  j["error_type"] = error_type.empty() ? json() : json(error_type);
  j["submit_time"] = submit_time_ms;
  j["start_time"] = start_time_ms == 0 ? json() : json(start_time_ms);
  j["end_time"] = end_time_ms == 0 ? json() : json(end_time_ms);
  j["metadata"] = metadata;
  j["runtime_env"] = runtime_env.ToJson();
  j["driver_agent_http_address"] = nullptr;
  j["driver_node_id"] = driver_node_id.empty() ? json() : json(driver_node_id);
  j["driver_exit_code"] = driver_exit_code ? json(*driver_exit_code) : json();
  j["entrypoint_num_cpus"] = entrypoint_num_cpus;
  j["entrypoint_num_gpus"] = entrypoint_num_gpus;
  j["entrypoint_memory"] = entrypoint_memory;
  j["entrypoint_resources"] = entrypoint_resources;
  return j;
}

absl::StatusOr<JobRecord> JobRecord::FromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Bad("a job record must be a JSON object");
  try {
    JobRecord r;
    r.submission_id = j.at("submission_id").get<std::string>();
    r.entrypoint = j.at("entrypoint").get<std::string>();
    auto status = ParseJobStatus(j.at("status").get<std::string>());
    if (!status) return Bad("a job record has an unknown status");
    r.status = *status;
    r.message = j.value("message", "");
    if (j.contains("error_type") && j["error_type"].is_string()) r.error_type = j["error_type"];
    auto ms = [&](const char* key) -> int64_t {
      auto it = j.find(key);
      return it == j.end() || it->is_null() ? 0 : it->get<int64_t>();
    };
    r.submit_time_ms = ms("submit_time");
    r.start_time_ms = ms("start_time");
    r.end_time_ms = ms("end_time");
    if (j.contains("driver_exit_code") && j["driver_exit_code"].is_number()) {
      r.driver_exit_code = j["driver_exit_code"].get<int>();
    }
    if (j.contains("driver_node_id") && j["driver_node_id"].is_string()) {
      r.driver_node_id = j["driver_node_id"];
    }
    r.metadata = j.value("metadata", std::map<std::string, std::string>{});
    auto env = ParseRuntimeEnv(j.value("runtime_env", json()));
    if (!env.ok()) return env.status();
    r.runtime_env = std::move(*env);
    r.entrypoint_num_cpus = j.value("entrypoint_num_cpus", 0.0);
    r.entrypoint_num_gpus = j.value("entrypoint_num_gpus", 0.0);
    r.entrypoint_memory = j.value("entrypoint_memory", 0.0);
    r.entrypoint_resources = j.value("entrypoint_resources", std::map<std::string, double>{});
    return r;
  } catch (const std::exception& e) {
    return Bad(absl::StrCat("a malformed job record: ", e.what()));
  }
}

}  // namespace raio::jobs
