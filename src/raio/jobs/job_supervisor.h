// The supervisor of one job's entrypoint: a raio actor that the jobs server creates with
// the entrypoint's resources, so that raio's scheduler places it on a node that has them
// and holds them for it. On its node it unpacks the job's working directory, runs
// `/bin/sh -c ENTRYPOINT` there in a process group of its own with RAIO_ADDRESS set (so
// that the program's raio::Init joins the cluster as a job of its own), writes the
// program's stdout and stderr to a log file on the node, and answers the server's calls:
// Poll (state, exit, new log bytes) and Stop (SIGTERM to the group, SIGKILL after a grace
// period). docs/design/jobs.md.
// Thread-safety: the actor runs with several concurrent calls (SetMaxConcurrency); all
// public methods are thread-safe. One internal thread starts and reaps the process.
#pragma once

#include <raio/raio.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace raio::jobs {

// What a supervisor runs (the jobs server's view of a submission).
struct SupervisorSpec {
  std::string submission_id;
  std::string entrypoint;
  std::string head_address;  // host:port, for the entrypoint's RAIO_ADDRESS
  std::map<std::string, std::string> env_vars;
  bool has_working_dir = false;
  RAIO_SERIALIZE(submission_id, entrypoint, head_address, env_vars, has_working_dir);
};

// Entrypoint states as Poll reports them.
inline constexpr int kSupervisorStarting = 0;
inline constexpr int kSupervisorRunning = 1;
inline constexpr int kSupervisorExited = 2;

// One answer of Poll.
struct SupervisorPoll {
  int state = kSupervisorStarting;
  // Set once exited: the shell's exit code, or minus the signal that ended it.
  bool has_exit_code = false;
  int exit_code = 0;
  // Set when the entrypoint could not be started (e.g. the working directory could not be
  // unpacked): why. The job fails with it.
  std::string start_error;
  std::string logs;          // log bytes from the offset asked for
  uint64_t next_offset = 0;  // offset after `logs`
  bool more_logs = false;    // the log holds more than this answer carried
  std::string node_id;       // hex id of the supervisor's node
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;
  RAIO_SERIALIZE(state, has_exit_code, exit_code, start_error, logs, next_offset, more_logs,
                 node_id, start_time_ms, end_time_ms);
};

class JobSupervisor {
 public:
  // The actor's factory: lays out the job's directory on this node (unpacking
  // `working_dir_archive` into it when the spec has one) and starts the entrypoint. Never
  // throws: a failure to start is reported by Poll (start_error).
  static JobSupervisor* Create(SupervisorSpec spec, std::vector<uint8_t> working_dir_archive);
  ~JobSupervisor();  // kills the process group if it still runs

  // Answers as soon as the state differs from `known_state`, the log holds bytes past
  // `offset`, or `wait_ms` passed; carries up to 1 MiB of log from `offset`. Blocks at
  // most wait_ms (plus the read).
  SupervisorPoll Poll(uint64_t offset, int known_state, int64_t wait_ms);
  // Sends SIGTERM to the entrypoint's process group and SIGKILL `grace_ms` later if it
  // still runs. False when it was not running. Does not block.
  bool Stop(int64_t grace_ms);

 private:
  JobSupervisor(SupervisorSpec spec, std::vector<uint8_t> archive);
  void Run();  // the reaper thread: prepares, forks, waits, escalates
  absl::Status Prepare();

  const SupervisorSpec spec_;
  std::vector<uint8_t> archive_;
  std::string node_id_;
  std::string job_dir_;
  std::string log_path_;
  int log_fd_ = -1;             // read side, for Poll; set before the thread starts
  int log_write_fd_ = -1;       // the program's stdout and stderr; the thread closes it
  int wake_fds_[2] = {-1, -1};  // Stop and the destructor wake the reaper thread
  // Guards the fields below it (std::mutex, not absl's: TSan sees it; libraries above the
  // core use the public API and the standard library only).
  std::mutex mu_;
  std::condition_variable cv_;
  int state_ = kSupervisorStarting;
  pid_t pid_ = 0;
  bool has_exit_code_ = false;
  int exit_code_ = 0;
  std::string start_error_;
  int64_t start_time_ms_ = 0;
  int64_t end_time_ms_ = 0;
  int64_t kill_at_ms_ = 0;  // steady ms; 0: none
  bool closing_ = false;
  bool stop_before_start_ = false;
  std::thread thread_;
};

}  // namespace raio::jobs
