// The jobs server's job table over a raio cluster: a JobBackend whose jobs run as
// supervisor actors (job_supervisor.h). The manager is a raio driver of the cluster; it
// joins at the first submission (so that a cluster whose jobs API goes unused carries no
// extra job). Each job's record, and a copy of its log that a monitor thread pulls from
// its supervisor as it grows, live in a JobStore (job_store.h: files in `state_dir`, or
// Redis) and so outlive the supervisor; records are read back when a manager starts on the
// same store. The records in memory are the manager's working copy; each change is written
// to the store, and one the store refused (Redis gone) is written again by the monitor
// until it takes it. While the store cannot be reached, the API answers Unavailable.
// Uploaded working directories live in state_dir/packages/. docs/design/jobs.md.
// Thread-safety: thread-safe; Start and Stop from one thread.
#pragma once

#include <raio/raio.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "raio/jobs/job_router.h"
#include "raio/jobs/job_store.h"
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
  // Creates the state directory and reads the records in `store` (nullptr: files in the
  // state directory, FileJobStore); a record that was not terminal (its server ended while
  // it ran) becomes FAILED. InvalidArgument for unreadable records; Internal when the
  // directory cannot be made; Unavailable when the store cannot be reached.
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(
      JobManagerOptions options, std::unique_ptr<JobStore> store = nullptr);
  ~JobManager() override;  // Stop()

  // Starts the monitor thread.
  void Start();
  // Stops the monitor; running jobs' supervisors end with this driver (raio::Shutdown).
  // Blocks until the thread is joined and raio is shut down.
  void Stop();

  absl::StatusOr<std::string> Submit(SubmitRequest request) override;
  absl::StatusOr<JobRecord> Get(const std::string& id) override;
  absl::StatusOr<std::vector<JobRecord>> List() override;
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
    // A poll answer whose log bytes the store refused: handled again by the monitor.
    std::optional<SupervisorPoll> unstored;
  };

  JobManager(JobManagerOptions options, std::unique_ptr<JobStore> store);
  absl::Status Load();
  absl::Status EnsureInit();
  void MonitorLoop();
  void OnPoll(const std::string& id, const ObjectRef<SupervisorPoll>& ref);
  // Applies a poll answer: log bytes to the store first, then the record. `retry`: an
  // answer the store refused before (RetryStore).
  void HandlePoll(const std::string& id, SupervisorPoll p, bool retry = false);
  // Writes again what the store refused earlier: dirty records, unstored log bytes.
  void RetryStore();
  // Check()s the store, then writes the dirty records (all of them after the store
  // reconnected: its server may have lost them). Unavailable when the store is down.
  absl::Status CheckStore();
  void WriteDirtyRecords();
  void Finish(const std::string& id, JobStatus status, std::string message,
              std::optional<int> exit_code, std::string error_type);
  // Writes job `id`'s record to the store; when the store refuses, the record stays dirty
  // (RetryStore writes it later) and the error is returned.
  absl::Status Persist(const std::string& id);
  std::string PackagePath(const std::string& name) const;
  std::string LastLogLines(const std::string& id, size_t max_bytes) const;

  JobManagerOptions options_;
  const std::unique_ptr<JobStore> store_;
  // Each mutex guards the fields below it up to the next.
  std::mutex init_mu_;
  bool initialized_ = false;
  std::map<std::string, ObjectRef<std::vector<uint8_t>>> package_objects_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> order_;  // submission order
  std::map<std::string, JobRecord> records_;
  std::map<std::string, Active> active_;
  std::set<std::string> dirty_;     // records the store has not taken yet
  uint64_t store_connections_ = 0;  // store_->Connections() when last looked at
  bool stopping_ = false;

  // Held around a record's snapshot and its write (and a job's deletion), so that the
  // store always ends with the newest snapshot. Taken before mu_, never inside it.
  std::mutex persist_mu_;

  std::thread monitor_;
};

}  // namespace raio::jobs
