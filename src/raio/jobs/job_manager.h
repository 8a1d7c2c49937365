// The jobs server's job table over a raio cluster: a JobBackend whose jobs run as
// supervisor actors (job_supervisor.h). The manager is a raio driver of the cluster; it
// joins at the first submission (so that a cluster whose jobs API goes unused carries no
// extra job). Each job's record, and a copy of its log that a monitor thread pulls from
// its supervisor as it grows, live in `state_dir` (jobs.json, logs/<id>.log) and so
// outlive the supervisor; records are read back when a manager starts on the same
// directory. Uploaded working directories live in state_dir/packages/. docs/design/jobs.md.
// Thread-safety: thread-safe; Start and Stop from one thread.
#pragma once

#include <raio/raio.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "raio/jobs/job_router.h"
#include "raio/jobs/job_supervisor.h"

namespace raio::jobs {

struct JobManagerOptions {
  std::string head_address;  // host:port of the cluster's head
  std::string state_dir;     // created if missing
  uint64_t max_package_bytes = 100ull << 20;
  // Between SIGTERM and SIGKILL when a job is stopped (Ray's RAY_JOB_STOP_WAIT_TIME_S: 3 s).
  std::chrono::milliseconds stop_grace{3000};
};

class JobManager : public JobBackend {
 public:
  // Creates the state directory and reads the records there; a record that was not
  // terminal (its server ended while it ran) becomes FAILED. InvalidArgument for an
  // unreadable jobs.json; Internal when the directory cannot be made.
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(JobManagerOptions options);
  ~JobManager() override;  // Stop()

  // Starts the monitor thread.
  void Start();
  // Stops the monitor; running jobs' supervisors end with this driver (raio::Shutdown).
  // Blocks until the thread is joined and raio is shut down.
  void Stop();

  absl::StatusOr<std::string> Submit(SubmitRequest request) override;
  absl::StatusOr<JobRecord> Get(const std::string& id) override;
  std::vector<JobRecord> List() override;
  absl::StatusOr<LogChunk> ReadLogs(const std::string& id, uint64_t offset,
                                    uint64_t max_bytes) override;
  absl::StatusOr<bool> Stop(const std::string& id) override;
  absl::Status Delete(const std::string& id) override;
  bool HasPackage(const std::string& name) override;
  absl::Status PutPackage(const std::string& name, std::string_view bytes) override;
  uint64_t MaxPackageBytes() const override { return options_.max_package_bytes; }

 private:
  // A job whose supervisor is (or may be) alive.
  struct Active {
    ActorHandle<JobSupervisor> supervisor;
    std::optional<ObjectRef<SupervisorPoll>> poll;  // the call in flight
    uint64_t offset = 0;                            // of the log copy
    int known_state = kSupervisorStarting;
    bool stop_requested = false;
  };

  explicit JobManager(JobManagerOptions options);
  absl::Status Load();
  absl::Status EnsureInit();
  void MonitorLoop();
  void OnPoll(const std::string& id, const ObjectRef<SupervisorPoll>& ref);
  void Finish(const std::string& id, JobStatus status, std::string message,
              std::optional<int> exit_code, std::string error_type);
  void Persist();
  std::string LogPath(const std::string& id) const;
  std::string PackagePath(const std::string& name) const;
  std::string LastLogLines(const std::string& id, size_t max_bytes) const;

  JobManagerOptions options_;
  // Each mutex guards the fields below it up to the next.
  std::mutex init_mu_;
  bool initialized_ = false;
  std::map<std::string, ObjectRef<std::vector<uint8_t>>> package_objects_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> order_;  // submission order
  std::map<std::string, JobRecord> records_;
  std::map<std::string, Active> active_;
  uint64_t version_ = 0;
  bool stopping_ = false;

  std::mutex persist_mu_;
  uint64_t persisted_version_ = 0;

  std::thread monitor_;
};

}  // namespace raio::jobs
