// Where the jobs server keeps what must outlive a job's supervisor: every job's record
// and the copy of its log (Ray's StoreClient: one small API, several backends). Two
// implementations: files in the head's session directory (FileJobStore, the default; they
// go with the head) and an external Redis (RedisJobStore, redis_job_store.h; records and
// logs survive a head restart). Uploaded working-directory packages are not here: they
// stay on the head's disk, a cache that `raio job submit` refills. docs/design/jobs.md.
// Thread-safety: implementations are thread-safe; calls may block on I/O (disk, the
// network, bounded by the store's timeouts).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/jobs/job_record.h"

namespace raio::jobs {

// A piece of a job's log copy.
struct StoredLog {
  std::string data;
  uint64_t offset = 0;  // where `data` starts (past bytes the store dropped, if any)
  uint64_t size = 0;    // the log's length: every byte ever appended, dropped ones included
};

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Where the jobs live, for messages ("Redis at unix:///run/redis.sock").
  virtual std::string Describe() const = 0;
  // What a record left non-terminal in this store outlived: "jobs server" for files in the
  // head's session (only raio-jobs can restart on them), "head" for an external store.
  virtual std::string_view RestartedWhat() const = 0;

  // Every record stored, oldest submission first. Unavailable when the store cannot be
  // reached; InvalidArgument when stored data does not parse (the message names it).
  virtual absl::StatusOr<std::vector<JobRecord>> LoadRecords() = 0;
  // Writes `record`, replacing the one of its submission id.
  virtual absl::Status PutRecord(const JobRecord& record) = 0;
  // Forgets job `id`: its record and its log copy.
  virtual absl::Status DeleteJob(const std::string& id) = 0;

  // Empties job `id`'s log copy (a fresh submission).
  virtual absl::Status ResetLog(const std::string& id) = 0;
  // Writes `bytes` at byte `offset` of job `id`'s log copy, `offset` at most its size.
  // Bytes already there are not written again, so an append retried after a lost reply
  // (or a failed one) is harmless. A store may keep only the end of a long log.
  virtual absl::Status AppendLog(const std::string& id, uint64_t offset,
                                 std::string_view bytes) = 0;
  // Up to `max_bytes` of job `id`'s log copy from `offset` (from the oldest byte kept when
  // `offset` lies before it); empty for a job with no log.
  virtual absl::StatusOr<StoredLog> ReadLog(const std::string& id, uint64_t offset,
                                            uint64_t max_bytes) = 0;

  // OK when the store answers; Unavailable (naming it) when it does not.
  virtual absl::Status Check() = 0;
  // How many connections to its server the store has opened. A change means the server may
  // be a new one that lost what it held (a Redis restarted without persistence): the
  // manager then writes every record again.
  virtual uint64_t Connections() const { return 0; }
};

// Records in `dir`/jobs.json (rewritten through a temporary file and a rename at each
// change), logs in `dir`/logs/<id>.log, kept whole. Create makes the directories.
// Internal when they cannot be made.
class FileJobStore : public JobStore {
 public:
  static absl::StatusOr<std::unique_ptr<FileJobStore>> Create(std::string dir);

  std::string Describe() const override { return dir_ + "/jobs.json"; }
  std::string_view RestartedWhat() const override { return "jobs server"; }
  absl::StatusOr<std::vector<JobRecord>> LoadRecords() override;
  absl::Status PutRecord(const JobRecord& record) override;
  absl::Status DeleteJob(const std::string& id) override;
  absl::Status ResetLog(const std::string& id) override;
  absl::Status AppendLog(const std::string& id, uint64_t offset, std::string_view bytes) override;
  absl::StatusOr<StoredLog> ReadLog(const std::string& id, uint64_t offset,
                                    uint64_t max_bytes) override;
  absl::Status Check() override { return absl::OkStatus(); }

 private:
  explicit FileJobStore(std::string dir) : dir_(std::move(dir)) {}
  std::string LogPath(const std::string& id) const;
  absl::Status WriteTable();  // mu_ held

  const std::string dir_;
  std::mutex mu_;  // serialises the table's rewrites
  std::vector<std::string> order_;
  std::unordered_map<std::string, JobRecord> records_;
};

// Writes `data` to `path` through a temporary file renamed into place.
absl::Status WriteFileAtomically(const std::string& path, std::string_view data);

}  // namespace raio::jobs
