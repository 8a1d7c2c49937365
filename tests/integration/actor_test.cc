// Integration tests of actors on the embedded cluster: real actor processes, ordering,
// concurrency, handles as values, names and namespaces, kill, restarts and errors.
#include <gtest/gtest.h>
#include <raio/raio.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "raio/testkit/time_scale.h"
#include "test_functions.h"

using namespace raio_test;
using namespace std::chrono_literals;
using raio::testkit::Scaled;
using raio::testkit::ScaledMs;

namespace {

class Counter {
 public:
  static Counter* Create(int start) { return new Counter(start); }
  static std::unique_ptr<Counter> CreateUnique(int start) {
    return std::unique_ptr<Counter>(new Counter(start));
  }
  static Counter* CreateFailing(int) { throw std::runtime_error("factory refuses"); }
  int Incr(int by) { return value_ += by; }
  int Get() const { return value_; }
  std::vector<int> History() { return history_; }
  int Record(int x) {
    history_.push_back(x);
    return x;
  }
  int Pid() { return static_cast<int>(getpid()); }
  int Throw(int x) { throw std::invalid_argument("bad " + std::to_string(x)); }
  int SlowIncr(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return ++value_;
  }
  // Increments once the file `path` exists; throws when `timeout_ms` passes first.
  int IncrWhen(std::string path, int timeout_ms) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!std::filesystem::exists(path)) {
      if (std::chrono::steady_clock::now() >= deadline)
        throw std::runtime_error(path + " never came");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return ++value_;
  }
  // MeetIn inside the actor: how many calls were in `dir` when this one left.
  int Meet(std::string dir, int parties, int timeout_ms) {
    return MeetIn(std::move(dir), parties, timeout_ms);
  }
  int Die(int) {
    ::kill(::getpid(), SIGKILL);
    return 0;
  }
  // Concurrency probe: how many calls run at once.
  int Overlap(int ms) {
    int now = ++running_;
    int seen = now;
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    seen = std::max(seen, max_seen_.load());
    max_seen_ = std::max(max_seen_.load(), now);
    --running_;
    return max_seen_;
  }

 private:
  explicit Counter(int start) : value_(start) {}
  int value_;
  std::vector<int> history_;
  std::atomic<int> running_{0};
  std::atomic<int> max_seen_{0};
};

RAIO_REMOTE(Counter::Create, Counter::CreateUnique, Counter::CreateFailing, &Counter::Incr,
            &Counter::Get, &Counter::History, &Counter::Record, &Counter::Pid, &Counter::Throw,
            &Counter::SlowIncr, &Counter::Die, &Counter::Overlap, &Counter::IncrWhen,
            &Counter::Meet);

// A task that uses an actor handle it was given.
int IncrThrough(raio::ActorHandle<Counter> counter, int by) {
  return counter.Task(&Counter::Incr).Remote(by).Get();
}
// A task that creates an actor and returns its handle.
raio::ActorHandle<Counter> MakeCounter(int start) {
  return raio::Actor(Counter::Create).Remote(start);
}
RAIO_REMOTE(IncrThrough, MakeCounter);

class ActorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    raio::InitOptions options;
    options.num_cpus = 2;
    options.resources = {{"slot", 1}};
    raio::Init(options);
  }
  void TearDown() override { raio::Shutdown(); }
};

TEST_F(ActorTest, KeepsStateAcrossCallsInItsOwnProcess) {
  auto counter = raio::Actor(Counter::Create).Remote(10);
  EXPECT_EQ(counter.Task(&Counter::Incr).Remote(5).Get(), 15);
  EXPECT_EQ(counter.Task(&Counter::Incr).Remote(1).Get(), 16);
  EXPECT_EQ(counter.Task(&Counter::Get).Remote().Get(), 16);
  EXPECT_NE(counter.Task(&Counter::Pid).Remote().Get(), getpid());
  auto unique = raio::Actor(Counter::CreateUnique).Remote(1);
  EXPECT_EQ(unique.Task(&Counter::Incr).Remote(1).Get(), 2);
}

TEST_F(ActorTest, CallsFromOneCallerRunInOrder) {
  auto counter = raio::Actor(Counter::Create).Remote(0);
  std::vector<raio::ObjectRef<int>> refs;
  for (int i = 0; i < 2000; ++i) refs.push_back(counter.Task(&Counter::Record).Remote(i));
  raio::Get(refs);
  std::vector<int> history = counter.Task(&Counter::History).Remote().Get();
  ASSERT_EQ(history.size(), 2000u);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(history[i], i);
}

TEST_F(ActorTest, MaxConcurrencyRunsCallsAtOnce) {
  auto serial = raio::Actor(Counter::Create).Remote(0);
  auto parallel = raio::Actor(Counter::Create).SetMaxConcurrency(4).Remote(0);
  // The parallel actor's four calls each wait (up to 30 s) until all four have started: one
  // at a time, the first would give up and see fewer.
  const std::string meet = FreshTestDir("actor-meet");
  std::vector<raio::ObjectRef<int>> s, p;
  for (int i = 0; i < 4; ++i) {
    s.push_back(serial.Task(&Counter::Overlap).Remote(200));
    p.push_back(parallel.Task(&Counter::Meet).Remote(meet, 4, ScaledMs(30s)));
  }
  int max_serial = 0, max_parallel = 0;
  for (int v : raio::Get(s)) max_serial = std::max(max_serial, v);
  for (int v : raio::Get(p)) {
    EXPECT_EQ(v, 4) << "the four calls did not run at once";
    max_parallel = std::max(max_parallel, v);
  }
  EXPECT_EQ(max_serial, 1);
  EXPECT_GE(max_parallel, 2);
  std::filesystem::remove_all(meet);
}

TEST_F(ActorTest, HandlesAreValuesThatReachTheSameInstance) {
  auto counter = raio::Actor(Counter::Create).Remote(0);
  std::vector<raio::ObjectRef<int>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(raio::Task(IncrThrough).Remote(counter, 1));
  raio::Get(refs);
  EXPECT_EQ(counter.Task(&Counter::Get).Remote().Get(), 4);
  // Returned from a task; stored inside an object.
  raio::ActorHandle<Counter> made = raio::Task(MakeCounter).Remote(100).Get();
  EXPECT_EQ(made.Task(&Counter::Incr).Remote(1).Get(), 101);
  auto boxed = raio::Put(std::vector<raio::ActorHandle<Counter>>{counter, made});
  auto unboxed = boxed.Get();
  EXPECT_EQ(unboxed[0].Task(&Counter::Get).Remote().Get(), 4);
  EXPECT_EQ(unboxed[1].Task(&Counter::Get).Remote().Get(), 101);
}

TEST_F(ActorTest, NamesAndNamespaces) {
  auto counter = raio::Actor(Counter::Create).SetName("hits").Remote(7);
  auto found = raio::GetActor<Counter>("hits");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->Task(&Counter::Get).Remote().Get(), 7);
  EXPECT_FALSE(raio::GetActor<Counter>("misses").has_value());
  EXPECT_FALSE(raio::GetActor<Counter>("hits", "other-namespace").has_value());
  try {
    raio::Actor(Counter::Create).SetName("hits").Remote(0);
    FAIL() << "expected InvalidUsageError";
  } catch (const raio::InvalidUsageError& e) {
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
  }
  // The same name in another namespace is fine.
  auto other = raio::Actor(Counter::Create).SetName("hits").SetNamespace("team-b").Remote(1);
  EXPECT_EQ(raio::GetActor<Counter>("hits", "team-b")->Task(&Counter::Get).Remote().Get(), 1);
  EXPECT_EQ(other.Task(&Counter::Get).Remote().Get(), 1);
  // A name is free again once its actor is dead.
  counter.Kill();
  EXPECT_FALSE(raio::GetActor<Counter>("hits").has_value());
  auto again = raio::Actor(Counter::Create).SetName("hits").Remote(3);
  EXPECT_EQ(again.Task(&Counter::Get).Remote().Get(), 3);
}

TEST_F(ActorTest, ExceptionsInMethodsAndFactories) {
  auto counter = raio::Actor(Counter::Create).Remote(0);
  try {
    counter.Task(&Counter::Throw).Remote(3).Get();
    FAIL() << "expected TaskError";
  } catch (const raio::TaskError& e) {
    EXPECT_EQ(e.exception_type(), "std::invalid_argument");
    EXPECT_EQ(e.message(), "bad 3");
  }
  EXPECT_EQ(counter.Task(&Counter::Incr).Remote(1).Get(), 1);  // still alive
  auto broken = raio::Actor(Counter::CreateFailing).Remote(0);
  try {
    broken.Task(&Counter::Get).Remote().Get(Scaled(10s));
    FAIL() << "expected ActorDiedError";
  } catch (const raio::ActorDiedError& e) {
    EXPECT_NE(std::string(e.what()).find("factory refuses"), std::string::npos) << e.what();
  }
}

TEST_F(ActorTest, KillMakesEveryCallFailNamingTheCause) {
  auto counter = raio::Actor(Counter::Create).Remote(0);
  EXPECT_EQ(counter.Task(&Counter::Incr).Remote(1).Get(), 1);
  counter.Kill();
  try {
    counter.Task(&Counter::Incr).Remote(1).Get(Scaled(10s));
    FAIL() << "expected ActorDiedError";
  } catch (const raio::ActorDiedError& e) {
    EXPECT_NE(std::string(e.what()).find("killed"), std::string::npos) << e.what();
  }
}

TEST_F(ActorTest, RestartsAfterItsProcessDies) {
  auto counter = raio::Actor(Counter::Create).SetMaxRestarts(2).Remote(5);
  EXPECT_EQ(counter.Task(&Counter::Incr).Remote(1).Get(), 6);
  int pid = counter.Task(&Counter::Pid).Remote().Get();
  // The call that kills the process fails (no task retries) ...
  EXPECT_THROW(counter.Task(&Counter::Die).Remote(0).Get(Scaled(10s)), raio::ActorDiedError);
  // ... and the restarted actor runs its factory again with the original arguments.
  EXPECT_EQ(counter.Task(&Counter::Incr).Remote(1).Get(Scaled(10s)), 6);
  EXPECT_NE(counter.Task(&Counter::Pid).Remote().Get(), pid);
  EXPECT_THROW(counter.Task(&Counter::Die).Remote(0).Get(Scaled(10s)), raio::ActorDiedError);
  EXPECT_EQ(counter.Task(&Counter::Incr).Remote(2).Get(Scaled(10s)), 7);
  // Restarts are used up: the next death is final.
  EXPECT_THROW(counter.Task(&Counter::Die).Remote(0).Get(Scaled(10s)), raio::ActorDiedError);
  try {
    counter.Task(&Counter::Incr).Remote(1).Get(Scaled(10s));
    FAIL() << "expected ActorDiedError";
  } catch (const raio::ActorDiedError& e) {
    EXPECT_NE(std::string(e.what()).find("process died"), std::string::npos) << e.what();
  }
}

TEST_F(ActorTest, KilledInTheMiddleOfAStreamOfCallsWithRetries) {
  auto counter = raio::Actor(Counter::Create).SetMaxRestarts(1).SetMaxTaskRetries(3).Remote(0);
  int pid = counter.Task(&Counter::Pid).Remote().Get();
  std::vector<raio::ObjectRef<int>> refs;
  for (int i = 0; i < 200; ++i) {
    refs.push_back(counter.Task(&Counter::SlowIncr).Remote(2));
    if (i == 50) ::kill(pid, SIGKILL);  // from outside, mid-stream
  }
  // Every call completes (retried on the restarted actor); none is lost or doubled after
  // the restart: the last value counts the calls the new instance ran.
  int last = 0;
  for (auto& r : refs) last = r.Get(Scaled(30s));
  EXPECT_GT(last, 0);
  EXPECT_LE(last, 200);
  EXPECT_NE(counter.Task(&Counter::Pid).Remote().Get(), pid);
}

TEST_F(ActorTest, ResultsOfQueuedLongCallsArriveOneByOne) {
  // Regression: replies of calls pushed together were held until the whole batch ran.
  // The first call may run at once (its file exists); the later two wait until the test
  // releases them, after the first result arrived: held with the batch, it never would.
  auto counter = raio::Actor(Counter::Create).Remote(0);
  counter.Task(&Counter::Get).Remote().Get();
  const std::string dir = FreshTestDir("one-by-one");
  const std::string go = dir + "/go", release = dir + "/release";
  Touch(go);
  std::vector<raio::ObjectRef<int>> refs;
  refs.push_back(counter.Task(&Counter::IncrWhen).Remote(go, ScaledMs(60s)));
  for (int i = 0; i < 2; ++i) {
    refs.push_back(counter.Task(&Counter::IncrWhen).Remote(release, ScaledMs(60s)));
  }
  EXPECT_EQ(refs[0].Get(Scaled(10s)), 1);
  auto [ready, pending] = raio::Wait(refs, 3, 0ms);
  EXPECT_GE(pending.size(), 1u) << "the first result waited for the later calls";
  Touch(release);
  EXPECT_EQ(refs[2].Get(Scaled(10s)), 3);
  std::filesystem::remove_all(dir);
}

TEST_F(ActorTest, CallsAfterKillWithRestartReachTheNewInstance) {
  auto counter = raio::Actor(Counter::Create).SetMaxRestarts(1).Remote(10);
  EXPECT_EQ(counter.Task(&Counter::Get).Remote().Get(), 10);
  counter.Kill(/*no_restart=*/false);
  EXPECT_EQ(counter.Task(&Counter::Get).Remote().Get(Scaled(10s)), 10);
  counter.Kill(/*no_restart=*/false);  // no restarts left: dead for good
  try {
    counter.Task(&Counter::Get).Remote().Get(Scaled(10s));
    FAIL() << "expected ActorDiedError";
  } catch (const raio::ActorDiedError& e) {
    EXPECT_NE(std::string(e.what()).find("no restarts left"), std::string::npos) << e.what();
  }
  EXPECT_THROW(raio::ActorHandle<Counter>().Task(&Counter::Get).Remote(), raio::InvalidUsageError);
  EXPECT_THROW(raio::Actor(Counter::Create).SetMaxConcurrency(1000000).Remote(0),
               raio::InvalidUsageError);
}

TEST_F(ActorTest, ResourcesAreHeldForTheActorsLifetime) {
  auto holder = raio::Actor(Counter::Create).SetResource("slot", 1).Remote(0);
  EXPECT_EQ(holder.Task(&Counter::Incr).Remote(1).Get(), 1);
  // A task needing the slot waits while the actor holds it.
  EXPECT_EQ(raio::internal::GetNodeResourceStats().available["slot"], 0);
  auto waiting = raio::Task(Add).SetResources({{"CPU", 0}, {"slot", 1}}).Remote(1, 1);
  EXPECT_THROW(waiting.Get(Scaled(300ms)), raio::GetTimeoutError);
  holder.Kill();
  EXPECT_EQ(waiting.Get(Scaled(10s)), 2);
  EXPECT_THROW(raio::Actor(Counter::Create).SetResource("slot", 5).Remote(0),
               raio::UnschedulableError);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);  // never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
