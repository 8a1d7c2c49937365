// A submitted job as the jobs API keeps and shows it (Ray's JobDetails), the parsed form
// of a submission (Ray's JobSubmitRequest), and their JSON. Pure data and validation: no
// I/O, no raio runtime, so that the HTTP router built on it can be fuzzed alone.
// Thread-safety: plain values and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace raio::jobs {

// Ray's JobStatus values, in the order a job goes through them.
enum class JobStatus { kPending, kRunning, kStopped, kSucceeded, kFailed };
// "PENDING", "RUNNING", ...
std::string JobStatusName(JobStatus status);
// The status of `name`, nullopt when it names none.
std::optional<JobStatus> ParseJobStatus(std::string_view name);
// STOPPED, SUCCEEDED and FAILED: the job will not change again.
bool IsTerminal(JobStatus status);

// The runtime environment of a job: Ray's runtime_env keys that raio supports.
struct RuntimeEnv {
  // "gcs://<package>" of a working directory uploaded with PUT /api/packages; "" for none.
  std::string working_dir;
  // Set for the entrypoint and for the job's workers on every node.
  std::map<std::string, std::string> env_vars;
  // Globs the client left out of working_dir (kept as given; the server does not read it).
  nlohmann::json excludes;
  nlohmann::json ToJson() const;
};

// A submission (POST /api/jobs/), validated.
struct SubmitRequest {
  std::string entrypoint;
  std::string submission_id;  // "" for one chosen by the server
  RuntimeEnv runtime_env;
  std::map<std::string, std::string> metadata;
  double entrypoint_num_cpus = 0;
  double entrypoint_num_gpus = 0;
  double entrypoint_memory = 0;  // bytes
  std::map<std::string, double> entrypoint_resources;
  // The resources the supervisor of the entrypoint holds: CPU, GPU, memory and the custom
  // ones, those of zero amount left out.
  std::map<std::string, double> Resources() const;
};

// The longest entrypoint accepted, in bytes: the kernel refuses an exec whose single
// argument passes 128 KiB (MAX_ARG_STRLEN), so longer ones could never start.
inline constexpr size_t kMaxEntrypointBytes = 64 << 10;

// Parses the body of POST /api/jobs/. InvalidArgument (the message says which field and
// why) for malformed JSON, a missing or empty entrypoint, an entrypoint over
// kMaxEntrypointBytes, a field of the wrong type, a negative or non-finite amount, a bad
// submission id (IsValidSubmissionId), unknown top-level fields or unknown runtime_env
// keys (each named), env_vars whose names start with RAIO_ (raio's own wiring; named).
absl::StatusOr<SubmitRequest> ParseSubmitRequest(std::string_view body);

// Submission ids name files on the head: 1-128 characters of [A-Za-z0-9_.-], not
// starting with '.'.
bool IsValidSubmissionId(std::string_view id);
// Package names (the last part of /api/packages/{protocol}/{name}): the same alphabet.
bool IsValidPackageName(std::string_view name);

// A job as the API returns it and the server persists it.
struct JobRecord {
  std::string submission_id;
  std::string entrypoint;
  JobStatus status = JobStatus::kPending;
  std::string message;
  std::string error_type;      // "" for none
  int64_t submit_time_ms = 0;  // Unix time in ms
  int64_t start_time_ms = 0;   // 0 until the entrypoint runs
  int64_t end_time_ms = 0;     // 0 until the job is terminal
  std::optional<int> driver_exit_code;
  std::string driver_node_id;  // hex node id of the supervisor's node, once known
  std::map<std::string, std::string> metadata;
  RuntimeEnv runtime_env;
  double entrypoint_num_cpus = 0;
  double entrypoint_num_gpus = 0;
  double entrypoint_memory = 0;
  std::map<std::string, double> entrypoint_resources;

  // Ray's JobDetails fields (type SUBMISSION; job_id is the submission id).
  nlohmann::json ToJson() const;
  // The inverse of ToJson, for records read back from disk. InvalidArgument when a field
  // is missing or of the wrong type.
  static absl::StatusOr<JobRecord> FromJson(const nlohmann::json& j);
};

// The record a fresh submission starts as (PENDING, submitted at `now_ms`).
JobRecord NewRecord(const SubmitRequest& request, int64_t now_ms);

}  // namespace raio::jobs
