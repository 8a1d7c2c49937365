// A JobStore in an external Redis (hiredis), so that job records and logs survive a head
// restart, as Ray's GCS fault tolerance keeps its tables in Redis. Keys, all under the
// namespace (Ray's external_storage_namespace), one head per namespace:
//   <ns>:jobs              hash: submission id -> the record's JSON (JobRecord::ToJson)
//   <ns>:job_log:<id>      string: the end of the job's log
//   <ns>:job_log_dropped   hash: submission id -> bytes dropped from the log's front
// A log copy keeps its last `max_log_bytes`: when an append takes it past 1.25 times that,
// a Lua script (atomic in Redis) cuts it back to the last `max_log_bytes` and counts the
// dropped bytes, so log offsets stay those of the whole log. docs/design/jobs.md.
//
// One connection, behind a mutex: every call is one command or script, bounded by the
// connect and command timeouts. A call that fails on the connection (Redis gone, a
// timeout) drops it and answers Unavailable naming the address; the next call connects
// again, so the store recovers by itself when Redis returns.
// SIGPIPE from a connection Redis closed is blocked and discarded around each call.
// Thread-safety: thread-safe; calls block for at most about connect_timeout +
// command_timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "raio/jobs/job_store.h"

struct redisContext;
struct redisReply;

namespace raio::jobs {

struct RedisStoreOptions {
  // host:port, [ipv6]:port, or unix:///path/to/redis.sock (Ray's RAY_REDIS_ADDRESS).
  std::string address;
  std::string password;     // sent with AUTH after each connect; "" for none
  std::string ns = "raio";  // the key prefix (Ray's external_storage_namespace)
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds command_timeout{2000};
  uint64_t max_log_bytes = 8ull << 20;  // of each log kept (the last ones)
};

class RedisJobStore : public JobStore {
 public:
  // Parses the address, connects, authenticates and PINGs. InvalidArgument for a
  // malformed address or namespace; Unavailable (naming the address and why) when Redis
  // cannot be reached or refuses the password.
  static absl::StatusOr<std::unique_ptr<RedisJobStore>> Create(RedisStoreOptions options);
  ~RedisJobStore() override;

  std::string Describe() const override;
  std::string_view RestartedWhat() const override { return "head"; }
  absl::StatusOr<std::vector<JobRecord>> LoadRecords() override;
  absl::Status PutRecord(const JobRecord& record) override;
  absl::Status DeleteJob(const std::string& id) override;
  absl::Status ResetLog(const std::string& id) override;
  absl::Status AppendLog(const std::string& id, uint64_t offset, std::string_view bytes) override;
  absl::StatusOr<StoredLog> ReadLog(const std::string& id, uint64_t offset,
                                    uint64_t max_bytes) override;
  absl::Status Check() override;
  uint64_t Connections() const override { return connections_.load(); }

 private:
  struct ReplyDeleter {
    void operator()(redisReply* r) const;
  };
  using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

  explicit RedisJobStore(RedisStoreOptions options);
  // Runs one command (binary-safe arguments), connecting first when needed. Unavailable
  // when the connection fails (it is then dropped); Internal for an error reply.
  absl::StatusOr<Reply> Command(const std::vector<std::string_view>& args);
  absl::Status ConnectLocked();  // mu_ held
  absl::Status Unavailable(std::string_view why) const;
  std::string LogKey(const std::string& id) const;

  const RedisStoreOptions options_;
  std::string host_;  // for TCP
  int port_ = 0;
  std::string unix_path_;  // for a Unix socket
  std::mutex mu_;          // the connection: one command at a time
  redisContext* context_ = nullptr;
  std::atomic<uint64_t> connections_{0};
};

}  // namespace raio::jobs
