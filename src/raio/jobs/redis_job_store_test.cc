// The Redis job store (and the job manager over it) against a real redis-server that each
// test starts on a Unix socket in a temporary directory (no TCP port, no persistence) and
// kills at its end. RAIO_REDIS_SERVER names the executable (ctest sets it).
#include "raio/jobs/redis_job_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include "raio/jobs/job_manager.h"
#include "raio/testkit/time_scale.h"

namespace raio::jobs {
namespace {

namespace fs = std::filesystem;
using raio::testkit::Scaled;

RedisStoreOptions At(std::string address, std::string password = "", std::string ns = "raio") {
  RedisStoreOptions o;
  o.address = std::move(address);
  o.password = std::move(password);
  o.ns = std::move(ns);
  return o;
}

// A redis-server on `dir`/redis.sock, started by Start and killed by Kill (or at the end).
class RedisServer {
 public:
  explicit RedisServer(fs::path dir, std::vector<std::string> extra = {})
      : dir_(std::move(dir)), extra_(std::move(extra)) {}
  ~RedisServer() { Kill(); }

  std::string address() const { return "unix://" + (dir_ / "redis.sock").string(); }

  // Starts it and waits (bounded) until it answers a PING.
  void Start() {
    const char* bin = std::getenv("RAIO_REDIS_SERVER");
    std::vector<std::string> args = {bin && *bin ? bin : "redis-server",
                                     "--port",
                                     "0",
                                     "--unixsocket",
                                     (dir_ / "redis.sock").string(),
                                     "--unixsocketperm",
                                     "700",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--dir",
                                     dir_.string()};
    args.insert(args.end(), extra_.begin(), extra_.end());
    const std::string log = (dir_ / "redis.log").string();
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + Scaled(std::chrono::seconds(20));
    for (;;) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid_, &status, WNOHANG), 0) << "redis-server exited; see " << log;
      // Ready once a client gets a reply (a password-protected server answers NOAUTH).
      // Its own namespace: a test's store may hold the lease of "raio" meanwhile.
      auto probe = RedisJobStore::Create(At(address(), password_, "probe"));
      if (probe.ok() || probe.status().message().find("NOAUTH") != std::string::npos) return;
      ASSERT_LT(std::chrono::steady_clock::now(), deadline)
          << "redis-server did not answer: " << probe.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  std::string password_;  // what Start's readiness probe sends

 private:
  fs::path dir_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
};

class RedisJobStoreTest : public testing::Test {
 protected:
  void SetUp() override {
    // Short: a Unix socket's path has at most 107 bytes.
    static int n = 0;
    dir_ = fs::temp_directory_path() /
           ("raio-redis-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    redis_ = std::make_unique<RedisServer>(dir_);
    redis_->Start();
  }
  void TearDown() override {
    redis_.reset();
    fs::remove_all(dir_);
  }

  RedisStoreOptions Options(std::string ns = "raio") const {
    RedisStoreOptions o;
    o.address = redis_->address();
    o.ns = std::move(ns);
    o.connect_timeout = Scaled(std::chrono::milliseconds(2000));
    o.command_timeout = Scaled(std::chrono::milliseconds(2000));
    return o;
  }

  std::unique_ptr<RedisJobStore> NewStore(RedisStoreOptions o) {
    auto s = RedisJobStore::Create(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  static JobRecord Record(const std::string& id, int64_t submitted, JobStatus status) {
    JobRecord r = NewRecord(
        *ParseSubmitRequest(R"({"entrypoint": "echo hi", "submission_id": ")" + id + R"("})"),
        submitted);
    r.status = status;
    return r;
  }

  fs::path dir_;
  std::unique_ptr<RedisServer> redis_;
};

TEST_F(RedisJobStoreTest, RecordsSurviveTheStoreInSubmissionOrderPerNamespace) {
  {
    auto store = NewStore(Options());
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(store->PutRecord(Record("late", 20, JobStatus::kRunning)).ok());
    EXPECT_TRUE(store->PutRecord(Record("early", 10, JobStatus::kPending)).ok());
    JobRecord done = Record("late", 20, JobStatus::kSucceeded);
    done.driver_exit_code = 0;
    EXPECT_TRUE(store->PutRecord(done).ok());  // replaces
  }
  auto again = NewStore(Options());
  ASSERT_NE(again, nullptr);
  auto records = again->LoadRecords();
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].submission_id, "early");
  EXPECT_EQ((*records)[1].submission_id, "late");
  EXPECT_EQ((*records)[1].status, JobStatus::kSucceeded);
  EXPECT_EQ((*records)[1].driver_exit_code, 0);
  auto other = NewStore(Options("other"));
  ASSERT_NE(other, nullptr);
  EXPECT_TRUE(other->LoadRecords()->empty());
}

TEST_F(RedisJobStoreTest, RetriedAppendsWriteNothingTwice) {
  auto store = NewStore(Options());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->ResetLog("j").ok());
  EXPECT_TRUE(store->AppendLog("j", 0, "hello ").ok());
  EXPECT_TRUE(store->AppendLog("j", 6, "world").ok());
  EXPECT_TRUE(store->AppendLog("j", 6, "world").ok());      // retried whole
  EXPECT_TRUE(store->AppendLog("j", 8, "rld!\nbye").ok());  // overlaps the end
  auto all = store->ReadLog("j", 0, 1000);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->data, "hello world!\nbye");
  EXPECT_EQ(all->offset, 0u);
  EXPECT_EQ(all->size, 16u);
  auto part = store->ReadLog("j", 6, 5);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(part->data, "world");
  auto past = store->ReadLog("j", 16, 10);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->data, "");
  EXPECT_EQ(past->size, 16u);
  // A copy that lost its front (Redis restarted empty) goes on at the offset asked.
  EXPECT_TRUE(store->AppendLog("gap", 100, "late\n").ok());
  auto gap = store->ReadLog("gap", 0, 10);
  ASSERT_TRUE(gap.ok());
  EXPECT_EQ(gap->offset, 100u);
  EXPECT_EQ(gap->data, "late\n");
  EXPECT_EQ(gap->size, 105u);
  auto none = store->ReadLog("never", 0, 10);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->size, 0u);
  ASSERT_TRUE(store->ResetLog("j").ok());
  EXPECT_EQ(store->ReadLog("j", 0, 10)->size, 0u);
}

TEST_F(RedisJobStoreTest, KeepsTheLastMaxLogBytesWithOffsetsOfTheWholeLog) {
  RedisStoreOptions o = Options();
  o.max_log_bytes = 100;
  auto store = NewStore(o);
  ASSERT_NE(store, nullptr);
  std::string whole;
  for (int i = 0; i < 40; ++i) {
    std::string line = "line " + std::to_string(100 + i) + "\n";  // 9 bytes
    ASSERT_TRUE(store->AppendLog("j", whole.size(), line).ok());
    whole += line;
  }
  auto log = store->ReadLog("j", 0, 1 << 20);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->size, whole.size());
  EXPECT_GT(log->offset, 0u);
  EXPECT_GE(log->data.size(), 100u);
  EXPECT_LE(log->data.size(), 125u);
  EXPECT_EQ(log->offset + log->data.size(), whole.size());
  EXPECT_EQ(log->data, whole.substr(log->offset));
  // Offsets inside the kept part read as before the cut.
  auto tail = store->ReadLog("j", whole.size() - 9, 9);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->data, "line 139\n");
}

TEST_F(RedisJobStoreTest, DeleteJobForgetsRecordAndLog) {
  auto store = NewStore(Options());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutRecord(Record("a", 1, JobStatus::kSucceeded)).ok());
  ASSERT_TRUE(store->AppendLog("a", 0, "x").ok());
  ASSERT_TRUE(store->DeleteJob("a").ok());
  EXPECT_TRUE(store->LoadRecords()->empty());
  EXPECT_EQ(store->ReadLog("a", 0, 10)->size, 0u);
}

TEST_F(RedisJobStoreTest, BadAddressesAndNamespacesAreInvalidArguments) {
  for (std::string bad : {"nohost", "host:0", "host:x", ":6379", "unix://", "host:70000"}) {
    auto s = RedisJobStore::Create(At(bad));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto s = RedisJobStore::Create(At(redis_->address(), "", "a b"));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RedisJobStoreTest, UnreachableRedisAtCreateNamesTheAddress) {
  const std::string address = "unix://" + (dir_ / "nobody.sock").string();
  auto s = RedisJobStore::Create(At(address));
  ASSERT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find(address), std::string::npos) << s.status();
}

TEST_F(RedisJobStoreTest, LostRedisIsUnavailableThenTheStoreReconnects) {
  auto store = NewStore(Options());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutRecord(Record("a", 1, JobStatus::kRunning)).ok());
  redis_->Kill();
  absl::Status down = store->PutRecord(Record("a", 1, JobStatus::kSucceeded));
  EXPECT_EQ(down.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(down.message().find(redis_->address()), std::string::npos) << down;
  EXPECT_EQ(store->Check().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store->ReadLog("a", 0, 10).status().code(), absl::StatusCode::kUnavailable);
  redis_->Start();  // a new, empty server on the same socket
  EXPECT_TRUE(store->Check().ok());
  EXPECT_TRUE(store->PutRecord(Record("a", 1, JobStatus::kSucceeded)).ok());
  EXPECT_EQ(store->LoadRecords()->size(), 1u);
}

TEST_F(RedisJobStoreTest, SendsThePasswordAndNamesARefusal) {
  RedisServer locked(dir_ / "locked", {"--requirepass", "s3cret"});
  fs::create_directories(dir_ / "locked");
  locked.password_ = "s3cret";
  locked.Start();
  auto none = RedisJobStore::Create(At(locked.address()));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find("NOAUTH"), std::string::npos) << none.status();
  auto wrong = RedisJobStore::Create(At(locked.address(), "nope"));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(wrong.status().message().find("AUTH refused"), std::string::npos) << wrong.status();
  auto right = RedisJobStore::Create(At(locked.address(), "s3cret"));
  ASSERT_TRUE(right.ok()) << right.status();
  EXPECT_TRUE((*right)->PutRecord(Record("a", 1, JobStatus::kPending)).ok());
}

// A new head on the same Redis: the manager reads the records back; a job that was not
// terminal failed with the head; logs are served from Redis. No cluster is needed (the
// manager joins one only at its first submission).
TEST_F(RedisJobStoreTest, ManagerOnANewHeadReadsJobsBackAndAnswers503WhileRedisIsDown) {
  {
    auto store = NewStore(Options());
    ASSERT_NE(store, nullptr);
    JobRecord done = Record("done", 1, JobStatus::kSucceeded);
    done.driver_exit_code = 0;
    ASSERT_TRUE(store->PutRecord(done).ok());
    ASSERT_TRUE(store->PutRecord(Record("running", 2, JobStatus::kRunning)).ok());
    ASSERT_TRUE(store->AppendLog("done", 0, "hello from before\n").ok());
  }
  const fs::path state = dir_ / "head-session" / "jobs";
  auto m = JobManager::Create({.head_address = "127.0.0.1:1", .state_dir = state.string()},
                              NewStore(Options()));
  ASSERT_TRUE(m.ok()) << m.status();
  auto jobs = (*m)->List();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].submission_id, "done");
  EXPECT_EQ((*jobs)[0].status, JobStatus::kSucceeded);
  EXPECT_EQ((*jobs)[1].status, JobStatus::kFailed);
  EXPECT_NE((*jobs)[1].message.find("the head restarted while the job was RUNNING"),
            std::string::npos)
      << (*jobs)[1].message;
  auto logs = (*m)->ReadLogs("done", 0, 100);
  ASSERT_TRUE(logs.ok()) << logs.status();
  EXPECT_EQ(logs->data, "hello from before\n");
  EXPECT_TRUE(logs->complete);
  EXPECT_FALSE(fs::exists(state / "jobs.json"));  // nothing on the head's disk

  redis_->Kill();
  auto down = (*m)->List();
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(down.status().message().find(redis_->address()), std::string::npos);
  EXPECT_EQ((*m)->Get("done").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*m)->ReadLogs("done", 0, 10).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*m)->Delete("done").code(), absl::StatusCode::kUnavailable);
  redis_->Start();
  EXPECT_TRUE((*m)->List().ok());
  EXPECT_TRUE((*m)->Delete("done").ok());
  EXPECT_EQ((*m)->Get("done").status().code(), absl::StatusCode::kNotFound);
  // The FAILED record was written back, to the new (empty) Redis too.
  m->reset();  // gives the namespace back
  auto store = NewStore(Options());
  ASSERT_NE(store, nullptr);
  auto left = store->LoadRecords();
  ASSERT_TRUE(left.ok()) << left.status();
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ(left->at(0).submission_id, "running");
  EXPECT_EQ(left->at(0).status, JobStatus::kFailed);
}

// One command on a connection of the test's own (not a store's), e.g. to play another head.
std::string RawCommand(const std::string& socket, const std::vector<std::string>& args) {
  redisContext* c = redisConnectUnix(socket.c_str());
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return "connect failed";
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(args.size()), argv.data(), lens.data()));
  std::string out = r == nullptr ? "no reply"
                    : r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
                            r->type == REDIS_REPLY_ERROR
                        ? std::string(r->str, r->len)
                    : r->type == REDIS_REPLY_INTEGER ? std::to_string(r->integer)
                                                     : "";
  if (r != nullptr) freeReplyObject(r);
  redisFree(c);
  return out;
}

// Polls `pred` every 10 ms for up to Scaled(10 s).
bool Eventually(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + Scaled(std::chrono::seconds(10));
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

TEST_F(RedisJobStoreTest, BadRecordsAreSkippedAndLeftAsTheyAre) {
  auto store = NewStore(Options());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutRecord(Record("good", 1, JobStatus::kSucceeded)).ok());
  const std::string socket = (dir_ / "redis.sock").string();
  RawCommand(socket, {"HSET", "raio:jobs", "bad", "{notjson"});
  RawCommand(socket, {"HSET", "raio:jobs", "arr", "[1,2]"});
  RawCommand(socket, {"HSET", "raio:jobs", "evil/../id",
                      Record("good", 1, JobStatus::kSucceeded).ToJson().dump()});
  auto records = store->LoadRecords();
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ(records->at(0).submission_id, "good");
  EXPECT_EQ(RawCommand(socket, {"HLEN", "raio:jobs"}), "4");  // nothing deleted
}

TEST_F(RedisJobStoreTest, OneHeadPerNamespace) {
  RedisStoreOptions o = Options();
  o.lease = Scaled(std::chrono::milliseconds(500));
  auto first = NewStore(o);
  ASSERT_NE(first, nullptr);
  const std::string socket = (dir_ / "redis.sock").string();
  EXPECT_NE(RawCommand(socket, {"GET", "raio:head"}).find(" pid " + std::to_string(::getpid())),
            std::string::npos);
  // A second head on the namespace waits out one lease, then is refused naming the first.
  auto second = RedisJobStore::Create(o);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("the namespace 'raio' of the Redis at " +
                                           redis_->address() + " is in use by another head"),
            std::string::npos)
      << second.status();
  EXPECT_NE(second.status().message().find(" pid " + std::to_string(::getpid()) + " since "),
            std::string::npos)
      << second.status();
  EXPECT_EQ(second.status().message().find(" token "), std::string::npos) << second.status();
  // The first still works (its lease was renewed meanwhile); another namespace is free.
  EXPECT_TRUE(first->PutRecord(Record("a", 1, JobStatus::kPending)).ok());
  EXPECT_NE(NewStore(Options("other")), nullptr);
  // Given back when the first ends: the next head starts at once.
  first.reset();
  EXPECT_EQ(RawCommand(socket, {"EXISTS", "raio:head"}), "0");
  auto next = NewStore(o);
  ASSERT_NE(next, nullptr);
  next.reset();
  // A head killed with its lease: the next one takes over once the lease runs out.
  RawCommand(socket, {"SET", "raio:head", "gone pid 1 since then token 1", "PX", "200"});
  auto after = NewStore(o);
  ASSERT_NE(after, nullptr);
  // Another head took the namespace (say Redis was out of this head's reach past its
  // lease): this head answers Unavailable naming it and writes nothing ...
  RawCommand(socket, {"SET", "raio:head", "intruder pid 7 since noon token 2"});
  ASSERT_TRUE(Eventually([&] { return !after->Check().ok(); }));
  absl::Status lost = after->PutRecord(Record("b", 2, JobStatus::kPending));
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(lost.message().find("another head (intruder pid 7 since noon) took the namespace"),
            std::string::npos)
      << lost;
  EXPECT_EQ(RawCommand(socket, {"HEXISTS", "raio:jobs", "b"}), "0");
  // ... for good: its records may be stale. Only a restart serves the namespace again.
  RawCommand(socket, {"DEL", "raio:head"});
  std::this_thread::sleep_for(o.lease);  // a few renewal rounds
  EXPECT_EQ(after->Check().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(RawCommand(socket, {"EXISTS", "raio:head"}), "0");
  after.reset();
  auto restarted = NewStore(o);
  ASSERT_NE(restarted, nullptr);
  EXPECT_TRUE(restarted->PutRecord(Record("b", 2, JobStatus::kPending)).ok());
}

}  // namespace
}  // namespace raio::jobs
