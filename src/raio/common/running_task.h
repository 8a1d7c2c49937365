// The task a worker process is running, kept in a small file of the session directory
// that the worker maps and its node reads after the worker died: tasks are pipelined to
// workers and tiny tasks' replies are coalesced, so the owner alone cannot tell which of
// the tasks it sent was running; only that one is charged a retry.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace raio {

// `<session_dir>/w-<worker hex>.task`.
std::string RunningTaskPath(const std::string& session_dir, const std::string& worker_hex);

// The worker's side: a shared mapping of the file. Set/Clear are two stores, no syscall.
class RunningTaskMarker {
 public:
  // Creates (truncates) the file. Errors: the file cannot be created or mapped.
  static absl::StatusOr<std::unique_ptr<RunningTaskMarker>> Create(const std::string& path);
  ~RunningTaskMarker();
  RunningTaskMarker(const RunningTaskMarker&) = delete;
  RunningTaskMarker& operator=(const RunningTaskMarker&) = delete;
  // `task_id`: the 16-byte TaskId (longer ids are cut).
  void Set(std::string_view task_id);
  void Clear();

 private:
  explicit RunningTaskMarker(char* page) : page_(page) {}
  char* page_;
};

// The node's side: the task id the worker was running, "" when it was between tasks, or
// nullopt when unknown (no file, e.g. an older worker, or an unreadable one).
std::optional<std::string> ReadRunningTask(const std::string& path);

}  // namespace raio
