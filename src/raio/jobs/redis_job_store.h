// A JobStore in an external Redis (hiredis), so that job records and logs survive a head
// restart, as Ray's GCS fault tolerance keeps its tables in Redis. Keys, all under the
// namespace (Ray's external_storage_namespace), one head per namespace:
//   <ns>:jobs              hash: submission id -> the record's JSON (JobRecord::ToJson)
//   <ns>:job_log:<id>      string: the end of the job's log
//   <ns>:job_log_dropped   hash: submission id -> bytes dropped from the log's front
//   <ns>:head              string: which head holds the namespace (its lease, below)
// A log copy keeps its last `max_log_bytes`: when an append takes it past 1.25 times that,
// a Lua script (atomic in Redis) cuts it back to the last `max_log_bytes` and counts the
// dropped bytes, so log offsets stay those of the whole log. docs/design/jobs.md.
//
// One head per namespace: Create takes a lease on <ns>:head (SET NX with an expiry of
// `lease`, holding "HOST pid PID since TIME" and a random token), a thread renews it every
// lease / 5, and the destructor gives it back. While another head's lease is live, Create
// waits up to `lease` (the lease of a head that was killed without giving it back runs
// out) and then fails FailedPrecondition naming that head. A head whose lease another head
// took (Redis down for longer than the lease while a second head started) answers every
// call Unavailable, naming the new holder, and writes nothing more, for good: what it
// holds in memory may be stale, so only a restart (a new store) serves the namespace again.
//
// One connection, behind a mutex: every call is one command or script, bounded by the
// connect and command timeouts. A call that fails on the connection (Redis gone, a
// timeout) drops it and answers Unavailable naming the address; the next call connects
// again, so the store recovers by itself when Redis returns. While Redis is failing, a
// call that finds another one trying it answers Unavailable at once instead of waiting.
// A full Redis (OOM under maxmemory) is Unavailable too.
// SIGPIPE from a connection Redis closed is blocked and discarded around each call.
// Thread-safety: thread-safe; calls block for at most about connect_timeout +
// command_timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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
  // How long the hold of the namespace lasts unless renewed (every lease / 5).
  std::chrono::milliseconds lease{5000};
};

class RedisJobStore : public JobStore {
 public:
  // Parses the address, connects, authenticates, PINGs and takes the namespace's lease
  // (blocking up to options.lease while another head holds it). InvalidArgument for a
  // malformed address or namespace; Unavailable (naming the address and why) when Redis
  // cannot be reached or refuses the password; FailedPrecondition (naming the holder)
  // when another head holds the namespace.
  static absl::StatusOr<std::unique_ptr<RedisJobStore>> Create(RedisStoreOptions options);
  ~RedisJobStore() override;

  std::string Describe() const override;
  std::string_view RestartedWhat() const override { return "head"; }
  // A record that does not parse, or whose id is not valid or not its field's name, is
  // skipped with an error in the log naming it, and left in Redis as it is.
  absl::StatusOr<std::vector<JobRecord>> LoadRecords() override;
  absl::Status PutRecord(const JobRecord& record) override;
  absl::Status DeleteJob(const std::string& id) override;
  absl::Status ResetLog(const std::string& id) override;
  absl::Status AppendLog(const std::string& id, uint64_t offset, std::string_view bytes) override;
  absl::StatusOr<StoredLog> ReadLog(const std::string& id, uint64_t offset,
                                    uint64_t max_bytes) override;
  // PING; Unavailable while Redis cannot be reached or another head took the namespace.
  absl::Status Check() override;
  uint64_t Connections() const override { return connections_.load(); }

 private:
  struct ReplyDeleter {
    void operator()(redisReply* r) const;
  };
  using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

  explicit RedisJobStore(RedisStoreOptions options);
  // Runs one command (binary-safe arguments), connecting first when needed. Unavailable
  // when the connection fails (it is then dropped), or when another head took the
  // namespace (nothing is sent); Internal for an error reply.
  absl::StatusOr<Reply> Command(const std::vector<std::string_view>& args);
  // The same without the lease check (the lease's own commands).
  absl::StatusOr<Reply> Send(const std::vector<std::string_view>& args);
  // Runs kLeaseScript once: an integer reply when this head holds the lease now, else the
  // holder's value.
  absl::StatusOr<Reply> TryLease();
  // Takes the lease, waiting up to options_.lease for another holder's to run out.
  absl::Status Acquire();
  // Renews the lease (or takes it when Redis lost the key); records a loss in lost_to_.
  void Renew();
  void KeepLease();              // the renewing thread
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
  std::atomic<bool> failing_{false};  // the last call could not reach Redis
  std::mutex error_mu_;
  std::string last_error_;  // error_mu_: that call's error

  std::string holder_;  // this head's lease value: "HOST pid PID since TIME token HEX"
  std::mutex lease_mu_;
  std::condition_variable lease_cv_;
  bool stopping_ = false;  // lease_mu_
  std::string lost_to_;    // lease_mu_: the other holder's value, "" while the lease is ours
  std::atomic<bool> lost_{false};
  std::thread keeper_;
};

}  // namespace raio::jobs
