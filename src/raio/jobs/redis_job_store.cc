#include "raio/jobs/redis_job_store.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace raio::jobs {

namespace {

timeval ToTimeval(std::chrono::milliseconds d) {
  return timeval{static_cast<time_t>(d.count() / 1000),
                 static_cast<suseconds_t>((d.count() % 1000) * 1000)};
}

// KEYS: the log, the dropped-bytes hash. ARGV: id, offset, bytes, max_log_bytes.
// Appends what of `bytes` lies past the log's end (a retried append writes nothing twice),
// then cuts the log back to its last max_log_bytes once it passes 1.25 times that. An
// offset past the end (a Redis that restarted empty under a running job) starts the copy
// there, the bytes before it counted as dropped, so offsets stay those of the whole log.
constexpr char kAppendScript[] = R"lua(
local dropped = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or 0)
local len = dropped + redis.call('STRLEN', KEYS[1])
local off = tonumber(ARGV[2])
local data = ARGV[3]
if off < len then
  if off + #data <= len then return len end
  data = string.sub(data, len - off + 1)
elseif off > len then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  len = off
end
local n = redis.call('APPEND', KEYS[1], data)
local cap = tonumber(ARGV[4])
if n > cap + math.floor(cap / 4) then
  local kept = redis.call('GETRANGE', KEYS[1], n - cap, -1)
  redis.call('SET', KEYS[1], kept)
  redis.call('HINCRBY', KEYS[2], ARGV[1], n - cap)
end
return len + #data
)lua";

// KEYS: the log, the dropped-bytes hash. ARGV: id, offset, max_bytes.
// Returns {dropped, bytes kept, data from max(offset, dropped)}, read atomically.
constexpr char kReadScript[] = R"lua(
local dropped = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or 0)
local len = redis.call('STRLEN', KEYS[1])
local from = tonumber(ARGV[2]) - dropped
if from < 0 then from = 0 end
local max = tonumber(ARGV[3])
local data = ''
if from < len and max > 0 then data = redis.call('GETRANGE', KEYS[1], from, from + max - 1) end
return {dropped, len, data}
)lua";

// KEYS: the records hash, the log, the dropped-bytes hash. ARGV: id, and "1" to keep the
// record (only the log goes).
constexpr char kDeleteScript[] = R"lua(
if ARGV[2] ~= '1' then redis.call('HDEL', KEYS[1], ARGV[1]) end
redis.call('DEL', KEYS[2])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
)lua";

// KEYS: the namespace's lease. ARGV: this head's holder value, the lease in ms.
// Renews the lease when this head holds it, takes it when nobody does (1 either way);
// otherwise returns the holder's value.
constexpr char kLeaseScript[] = R"lua(
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return v
)lua";

// KEYS: the namespace's lease. ARGV: this head's holder value. Gives the lease back.
constexpr char kReleaseScript[] = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
)lua";

// "HOST pid PID since TIME" of a holder value (its random token left out).
std::string HolderText(std::string_view holder) {
  return std::string(holder.substr(0, holder.find(" token ")));
}

// Blocks SIGPIPE in this thread while it lives, and discards one that a write to a closed
// connection raised meanwhile: hiredis writes with write(2), and a Redis that went away
// must be an error, not the death of the process (which may not ignore SIGPIPE).
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~ScopedSigpipeBlock() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

bool IsValidNamespace(std::string_view ns) {
  return !ns.empty() && ns.size() <= 128 && std::all_of(ns.begin(), ns.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

}  // namespace

void RedisJobStore::ReplyDeleter::operator()(redisReply* r) const { freeReplyObject(r); }

RedisJobStore::RedisJobStore(RedisStoreOptions options) : options_(std::move(options)) {}

RedisJobStore::~RedisJobStore() {
  if (keeper_.joinable()) {
    {
      std::lock_guard<std::mutex> l(lease_mu_);
      stopping_ = true;
    }
    lease_cv_.notify_all();
    keeper_.join();
    if (!lost_.load()) {
      (void)Send({"EVAL", kReleaseScript, "1", options_.ns + ":head", holder_});
    }
  }
  if (context_ != nullptr) redisFree(context_);
}

absl::StatusOr<std::unique_ptr<RedisJobStore>> RedisJobStore::Create(RedisStoreOptions options) {
  if (!IsValidNamespace(options.ns)) {
    return absl::InvalidArgumentError(absl::StrCat("bad external storage namespace '", options.ns,
                                                   "': use 1-128 characters of A-Z a-z 0-9 _ - ."));
  }
  std::unique_ptr<RedisJobStore> store(new RedisJobStore(options));
  const std::string& a = options.address;
  if (a.starts_with("unix://")) {
    store->unix_path_ = a.substr(7);
    if (store->unix_path_.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad Redis address '", a, "': expected unix:///path/to/redis.sock"));
    }
  } else {
    const size_t colon = a.rfind(':');
    int port = 0;
    std::string host = colon == std::string::npos ? "" : a.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    if (host.empty() || !absl::SimpleAtoi(a.substr(colon + 1), &port) || port <= 0 ||
        port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad Redis address '", a, "': expected HOST:PORT or unix:///path/to/redis.sock"));
    }
    store->host_ = host;
    store->port_ = port;
  }
  if (absl::Status s = store->Check(); !s.ok()) return s;
  if (absl::Status s = store->Acquire(); !s.ok()) return s;
  store->keeper_ = std::thread([s = store.get()] { s->KeepLease(); });
  return store;
}

absl::StatusOr<RedisJobStore::Reply> RedisJobStore::TryLease() {
  return Send({"EVAL", kLeaseScript, "1", options_.ns + ":head", holder_,
               std::to_string(std::max<int64_t>(options_.lease.count(), 1))});
}

absl::Status RedisJobStore::Acquire() {
  char host[256] = {};
  (void)::gethostname(host, sizeof(host) - 1);
  std::random_device random;
  holder_ = absl::StrCat(host, " pid ", ::getpid(), " since ",
                         absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()),
                         " token ", absl::Hex(random()), absl::Hex(random()));
  const auto deadline =
      std::chrono::steady_clock::now() + options_.lease + std::chrono::milliseconds(500);
  while (true) {
    auto r = TryLease();
    if (!r.ok()) return r.status();
    if ((*r)->type == REDIS_REPLY_INTEGER) return absl::OkStatus();
    const std::string other((*r)->str, (*r)->len);
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::FailedPreconditionError(
          absl::StrCat("the namespace '", options_.ns, "' of the Redis at ", options_.address,
                       " is in use by another head (", HolderText(other),
                       "; its lease is renewed every ", options_.lease.count() / 5,
                       " ms): one head per namespace. Stop that head, or give "
                       "this one another --external-storage-namespace"));
    }
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(200), options_.lease / 10 + std::chrono::milliseconds(1)));
  }
}

void RedisJobStore::Renew() {
  // Fenced for good once another head took the namespace: what this head holds in memory
  // is stale (the other head may have deleted, replaced or added jobs).
  if (lost_.load()) return;
  auto r = TryLease();
  if (!r.ok()) return;  // an outage: the calls answer Unavailable meanwhile
  std::lock_guard<std::mutex> l(lease_mu_);
  if ((*r)->type != REDIS_REPLY_INTEGER) {
    lost_to_ = HolderText(std::string_view((*r)->str, (*r)->len));
    lost_.store(true);
  }
}

void RedisJobStore::KeepLease() {
  const auto every = std::max(options_.lease / 5, std::chrono::milliseconds(1));
  std::unique_lock<std::mutex> l(lease_mu_);
  while (!lease_cv_.wait_for(l, every, [this] { return stopping_; })) {
    l.unlock();
    Renew();
    l.lock();
  }
}

std::string RedisJobStore::Describe() const {
  return absl::StrCat("Redis at ", options_.address, " (namespace ", options_.ns, ")");
}

absl::Status RedisJobStore::Unavailable(std::string_view why) const {
  return absl::UnavailableError(absl::StrCat("the jobs storage, Redis at ", options_.address,
                                             ", cannot be reached: ", std::string(why)));
}

std::string RedisJobStore::LogKey(const std::string& id) const {
  return absl::StrCat(options_.ns, ":job_log:", id);
}

absl::Status RedisJobStore::ConnectLocked() {
  if (context_ != nullptr) return absl::OkStatus();
  const timeval connect = ToTimeval(options_.connect_timeout);
  redisContext* c = unix_path_.empty() ? redisConnectWithTimeout(host_.c_str(), port_, connect)
                                       : redisConnectUnixWithTimeout(unix_path_.c_str(), connect);
  if (c == nullptr) return Unavailable("out of memory");
  if (c->err != 0) {
    std::string why = c->errstr;
    redisFree(c);
    return Unavailable(why);
  }
  redisSetTimeout(c, ToTimeval(options_.command_timeout));
  if (unix_path_.empty()) redisEnableKeepAlive(c);
  if (!options_.password.empty()) {
    const char* argv[] = {"AUTH", options_.password.data()};
    const size_t lens[] = {4, options_.password.size()};
    Reply r(static_cast<redisReply*>(redisCommandArgv(c, 2, argv, lens)));
    if (r == nullptr || r->type == REDIS_REPLY_ERROR) {
      std::string why = r == nullptr ? std::string(c->errstr)
                                     : absl::StrCat("AUTH refused: ", std::string(r->str, r->len));
      redisFree(c);
      return Unavailable(why);
    }
  }
  context_ = c;
  ++connections_;
  return absl::OkStatus();
}

absl::StatusOr<RedisJobStore::Reply> RedisJobStore::Command(
    const std::vector<std::string_view>& args) {
  if (lost_.load()) {
    std::lock_guard<std::mutex> l(lease_mu_);
    return absl::UnavailableError(absl::StrCat(
        "another head (", lost_to_, ") took the namespace '", options_.ns, "' of the Redis at ",
        options_.address,
        " while this one could not reach it; this head writes nothing more there (what it "
        "holds may be stale): restart it (raio stop, raio start) once the other is gone"));
  }
  return Send(args);
}

absl::StatusOr<RedisJobStore::Reply> RedisJobStore::Send(
    const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  // While Redis is failing, a call that would queue behind one already trying it fails at
  // once with that call's last error, so that N callers do not wait N timeouts in turn.
  std::unique_lock<std::mutex> l(mu_, std::defer_lock);
  if (failing_.load() && !l.try_lock()) {
    std::lock_guard<std::mutex> e(error_mu_);
    return Unavailable(absl::StrCat(last_error_, " (another call is trying it again now)"));
  }
  if (!l.owns_lock()) l.lock();
  ScopedSigpipeBlock no_sigpipe;
  absl::StatusOr<Reply> result = [&]() -> absl::StatusOr<Reply> {
    if (absl::Status s = ConnectLocked(); !s.ok()) return s;
    Reply r(static_cast<redisReply*>(
        redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (r == nullptr) {
      // The connection is broken (closed, timed out): drop it; the next call reconnects.
      std::string why = context_->errstr;
      if (context_->err == REDIS_ERR_IO &&
          (why.find("temporarily unavailable") != std::string::npos ||
           why.find("timed out") != std::string::npos)) {
        why = absl::StrCat("no answer within ", options_.command_timeout.count(), " ms");
      }
      redisFree(context_);
      context_ = nullptr;
      return Unavailable(why);
    }
    if (r->type == REDIS_REPLY_ERROR) {
      std::string msg(r->str, r->len);
      // Errors of a Redis that is not (yet) usable, rather than of the command.
      for (std::string_view transient :
           {"NOAUTH", "WRONGPASS", "LOADING", "MASTERDOWN", "BUSY", "READONLY", "MISCONF", "OOM"}) {
        if (msg.starts_with(transient)) return Unavailable(msg);
      }
      return absl::InternalError(absl::StrCat("Redis at ", options_.address, " answered: ", msg));
    }
    return r;
  }();
  if (result.ok()) {
    failing_.store(false);
  } else if (absl::IsUnavailable(result.status())) {
    std::lock_guard<std::mutex> e(error_mu_);
    last_error_ = std::string(result.status().message());
    failing_.store(true);
  }
  return result;
}

absl::Status RedisJobStore::Check() {
  auto r = Command({"PING"});
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::StatusOr<std::vector<JobRecord>> RedisJobStore::LoadRecords() {
  const std::string key = options_.ns + ":jobs";
  auto r = Command({"HGETALL", key});
  if (!r.ok()) return r.status();
  const redisReply& reply = **r;
  std::vector<JobRecord> out;
  if (reply.type != REDIS_REPLY_ARRAY) {
    return absl::InvalidArgumentError(absl::StrCat(key, " in ", Describe(), " is not a hash"));
  }
  for (size_t i = 0; i + 1 < reply.elements; i += 2) {
    const redisReply* field = reply.element[i];
    const redisReply* value = reply.element[i + 1];
    const std::string id(field->str, field->len);
    nlohmann::json j =
        nlohmann::json::parse(std::string_view(value->str, value->len), nullptr, false);
    absl::StatusOr<JobRecord> rec = absl::InvalidArgumentError("not JSON");
    if (!j.is_discarded()) rec = JobRecord::FromJson(j);
    if (rec.ok() && (rec->submission_id != id || !IsValidSubmissionId(id))) {
      rec = absl::InvalidArgumentError(absl::StrCat("its submission_id is '", rec->submission_id,
                                                    "' (a valid id equal to the field's name)"));
    }
    if (!rec.ok()) {
      // Skipped, and left in Redis as it is: one bad record does not keep the head down.
      spdlog::error(
          "jobs: the record of job '{}' in {} ({}) is skipped: it does not parse: {}; fix or "
          "delete it (redis-cli HDEL {} '{}')",
          id, key, Describe(), std::string(rec.status().message()), key, id);
      continue;
    }
    out.push_back(std::move(*rec));
  }
  std::sort(out.begin(), out.end(), [](const JobRecord& a, const JobRecord& b) {
    return a.submit_time_ms != b.submit_time_ms ? a.submit_time_ms < b.submit_time_ms
                                                : a.submission_id < b.submission_id;
  });
  return out;
}

absl::Status RedisJobStore::PutRecord(const JobRecord& record) {
  const std::string json =
      record.ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  auto r = Command({"HSET", options_.ns + ":jobs", record.submission_id, json});
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::Status RedisJobStore::DeleteJob(const std::string& id) {
  auto r = Command({"EVAL", kDeleteScript, "3", options_.ns + ":jobs", LogKey(id),
                    options_.ns + ":job_log_dropped", id, "0"});
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::Status RedisJobStore::ResetLog(const std::string& id) {
  auto r = Command({"EVAL", kDeleteScript, "3", options_.ns + ":jobs", LogKey(id),
                    options_.ns + ":job_log_dropped", id, "1"});
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::Status RedisJobStore::AppendLog(const std::string& id, uint64_t offset,
                                      std::string_view bytes) {
  if (bytes.empty()) return absl::OkStatus();
  const std::string off = std::to_string(offset);
  const std::string cap = std::to_string(std::max<uint64_t>(options_.max_log_bytes, 1));
  auto r = Command({"EVAL", kAppendScript, "2", LogKey(id), options_.ns + ":job_log_dropped", id,
                    off, bytes, cap});
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::StatusOr<StoredLog> RedisJobStore::ReadLog(const std::string& id, uint64_t offset,
                                                 uint64_t max_bytes) {
  const std::string off = std::to_string(offset);
  const std::string max = std::to_string(max_bytes);
  auto r = Command(
      {"EVAL", kReadScript, "2", LogKey(id), options_.ns + ":job_log_dropped", id, off, max});
  if (!r.ok()) return r.status();
  const redisReply& reply = **r;
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 3 ||
      reply.element[0]->type != REDIS_REPLY_INTEGER ||
      reply.element[1]->type != REDIS_REPLY_INTEGER ||
      reply.element[2]->type != REDIS_REPLY_STRING) {
    return absl::InternalError(
        absl::StrCat("unexpected reply from ", Describe(), " reading the log of job '", id, "'"));
  }
  const auto dropped = static_cast<uint64_t>(reply.element[0]->integer);
  StoredLog log;
  log.size = dropped + static_cast<uint64_t>(reply.element[1]->integer);
  log.offset = std::max(offset, dropped);
  log.data.assign(reply.element[2]->str, reply.element[2]->len);
  return log;
}

}  // namespace raio::jobs
