// Regression tests for defects found by running Ray's C++ API test cases and users' bug
// reports against raio: scheduling, actors' results across process deaths, API gaps, and
// errors that must say what happened. Each test is named after what broke.
#include <gtest/gtest.h>
#include <raio/raio.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "harness.h"
#include "raio/testkit/time_scale.h"
#include "test_functions.h"

using namespace raio_test;
using namespace std::chrono_literals;
using raio::testkit::Scaled;
using raio::testkit::ScaledMs;

namespace {

// Workers of this binary exit during static initialization, before raio::Init, when the
// driver set this variable (they inherit its environment).
constexpr const char* kExitAtStartVar = "REGRESSION_WORKER_EXIT_AT_START";
const bool g_exit_at_start = [] {
  if (std::getenv("RAIO_WORKER_MODE") != nullptr && std::getenv(kExitAtStartVar) != nullptr) {
    std::fprintf(stderr, "static initializer: simulated start-up failure\n");
    std::fflush(stderr);
    ::_exit(7);
  }
  return true;
}();

// Creates `dir`/`index` and waits (up to Scaled(20 s)) until `n` such files exist: true when
// all `n` calls ran at the same time.
bool Rendezvous(std::string dir, int index, int n) {
  std::ofstream(dir + "/" + std::to_string(index)) << "here\n";
  auto deadline = std::chrono::steady_clock::now() + Scaled(20s);
  while (std::chrono::steady_clock::now() < deadline) {
    int present = 0;
    for (int i = 0; i < n; ++i) present += std::filesystem::exists(dir + "/" + std::to_string(i));
    if (present == n) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

// Overloads whose parameter lists start alike (RAIO_FUNC must tell them apart).
int Make(int a) { return a; }
int Make(int a, int b) { return a * 100 + b; }

// Reference parameters: the callee gets a deserialized value.
int SumConstRef(const std::vector<int>& values) {
  int sum = 0;
  for (int v : values) sum += v;
  return sum;
}
std::size_t GrowRef(std::vector<int>& values) {
  values.push_back(1);
  return values.size();
}
std::string JoinRefs(const std::string& a, std::string& b) { return a + "+" + b; }

// Puts `n` small objects (owned by this worker) and returns their refs.
std::vector<raio::ObjectRef<int>> PutSmall(int n) {
  std::vector<raio::ObjectRef<int>> refs;
  for (int i = 0; i < n; ++i) refs.push_back(raio::Put(i * 11));
  return refs;
}

RAIO_REMOTE(Rendezvous, RAIO_FUNC(Make, int), RAIO_FUNC(Make, int, int), SumConstRef, GrowRef,
            JoinRefs, PutSmall);

// An actor with overloaded factories, reference parameters and ways to end its process.
class Probe {
 public:
  static Probe* Create() { return new Probe(0); }
  static Probe* Create(int start) { return new Probe(start); }
  int Echo(int x) { return x + start_; }
  int Length(const std::string& s) { return static_cast<int>(s.size()); }
  // Appends `line` to `path` (one line per execution).
  int Note(std::string path, int line) {
    std::ofstream(path, std::ios::app) << line << "\n";
    return line;
  }
  int End(std::string how) {
    if (how == "exit") std::exit(3);
    if (how == "_Exit") std::_Exit(4);
    if (how == "abort") std::abort();
    ::kill(::getpid(), SIGKILL);
    return 0;
  }
  // Puts a store-sized object (owned by this actor) and returns its ref.
  std::vector<raio::ObjectRef<std::vector<int>>> PutLarge(int n) {
    return {raio::Put(std::vector<int>(n, 7))};
  }

 private:
  explicit Probe(int start) : start_(start) {}
  int start_;
};
RAIO_REMOTE(RAIO_FUNC(Probe::Create), RAIO_FUNC(Probe::Create, int), &Probe::Echo, &Probe::Length,
            &Probe::Note, &Probe::End, &Probe::PutLarge);

int64_t SumInts(std::vector<int> values) {
  int64_t sum = 0;
  for (int v : values) sum += v;
  return sum;
}
RAIO_REMOTE(SumInts);

// Reads every byte of its arguments: their total size and the sum of their first bytes.
int64_t TotalBytes2(std::vector<uint8_t> a, std::vector<uint8_t> b) {
  return static_cast<int64_t>(a.size() + b.size()) * 1000 + a.front() + b.front();
}
int64_t TotalBytes3(std::vector<uint8_t> a, std::vector<uint8_t> b, std::vector<uint8_t> c) {
  return static_cast<int64_t>(a.size() + b.size() + c.size());
}
// Holds its argument pinned: meets the other `parties` - 1 calls in `meet` (MeetIn, so that
// they pin their arguments at the same time), then holds on for `ms`; returns its size.
int64_t HoldBytes(std::vector<uint8_t> a, std::string meet, int parties, int ms) {
  MeetIn(std::move(meet), parties, static_cast<int>(ScaledMs(30s)));
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return static_cast<int64_t>(a.size()) + a.back();
}
RAIO_REMOTE(TotalBytes2, TotalBytes3, HoldBytes);

// Several return values (groundwork issue, point 3): one object per tuple element.
std::tuple<int, std::string, std::vector<double>> Split3(int n) {
  return {n, std::string(static_cast<std::size_t>(n % 100), 'x'),
          std::vector<double>(static_cast<std::size_t>(n), 0.5)};
}
std::tuple<int> OneTuple(int x) { return {x + 1}; }
std::tuple<int, int> ThrowsTwo(int x) {
  throw std::runtime_error("no pair for " + std::to_string(x));
}
std::tuple<raio::ObjectRef<int>, int> PutAndEcho(int v) { return {raio::Put(v * 2), v}; }
RAIO_REMOTE(Split3, OneTuple, ThrowsTwo, PutAndEcho);

class Pairer {
 public:
  static Pairer* Create() { return new Pairer(); }
  std::tuple<int, std::string> Next(std::string tag) {
    ++count_;
    return {count_, tag + std::to_string(count_)};
  }

 private:
  int count_ = 0;
};
RAIO_REMOTE(Pairer::Create, &Pairer::Next);

class RegressionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    raio::InitOptions options;
    options.num_cpus = 4;
    raio::Init(options);
    dir_ = std::filesystem::temp_directory_path() /
           ("raio-regression-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    raio::Shutdown();
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

// 1. After a job had run tasks (so the owner knew they were quick), later tasks were
// pipelined onto the same worker and ran one after another while CPUs were free: tasks
// that wait for each other deadlocked.
TEST_F(RegressionTest, TasksNeverQueueBehindABusyWorkerWhileCpusAreFree) {
  // History: quick calls of the same function and of another one.
  const std::string warm = dir_ / "warm";
  std::filesystem::create_directories(warm);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(raio::Task(Rendezvous).Remote(warm, 0, 1).Get());
  for (int i = 0; i < 20; ++i) ASSERT_EQ(raio::Task(Add).Remote(i, 1).Get(), i + 1);
  // Four calls that can only finish together, on a 4-CPU node.
  const std::string meet = dir_ / "meet";
  std::filesystem::create_directories(meet);
  std::vector<raio::ObjectRef<bool>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(raio::Task(Rendezvous).Remote(meet, i, 4));
  for (auto& r : refs) EXPECT_TRUE(r.Get(Scaled(60s)));
}

// The same after bursts of thousands of quick tasks, with rounds of 2, 3 and 4 tasks that
// wait for each other (the node looked full while the burst's idle workers were kept).
TEST_F(RegressionTest, RendezvousRoundsAfterBurstsOfQuickTasksAllMeet) {
  for (int burst = 0; burst < 3; ++burst) {
    std::vector<raio::ObjectRef<int>> quick;
    for (int i = 0; i < 5000; ++i) quick.push_back(raio::Task(Add).Remote(i, 1));
    for (int i = 0; i < 5000; ++i) ASSERT_EQ(quick[i].Get(Scaled(60s)), i + 1);
    for (int n = 2; n <= 4; ++n) {
      const std::string meet = dir_ / ("meet-" + std::to_string(burst) + "-" + std::to_string(n));
      std::filesystem::create_directories(meet);
      std::vector<raio::ObjectRef<bool>> refs;
      for (int i = 0; i < n; ++i) refs.push_back(raio::Task(Rendezvous).Remote(meet, i, n));
      for (auto& r : refs)
        EXPECT_TRUE(r.Get(Scaled(60s))) << "burst " << burst << ", " << n << " tasks";
    }
  }
}

// 2. Tasks whose arguments fit the store failed with ObjectStoreFullError because another
// task's pinned arguments filled it.
TEST_F(RegressionTest, TaskWaitsForStoreRoomWhenOthersPinnedArgumentsFillIt) {
  raio::Shutdown();
  raio::InitOptions options;
  options.num_cpus = 2;
  options.object_store_memory_bytes = 256ull << 20;
  raio::Init(options);
  constexpr std::size_t kMiB100 = 100u << 20;
  for (int round = 0; round < 2; ++round) {
    std::vector<raio::ObjectRef<int64_t>> refs;
    for (int t = 0; t < 2; ++t) {
      refs.push_back(raio::Task(TotalBytes2)
                         .Remote(std::vector<uint8_t>(kMiB100, static_cast<uint8_t>(1 + t)),
                                 std::vector<uint8_t>(kMiB100, static_cast<uint8_t>(3 + t))));
    }
    for (int t = 0; t < 2; ++t) {
      EXPECT_EQ(refs[t].Get(Scaled(120s)), static_cast<int64_t>(2 * kMiB100) * 1000 + 4 + 2 * t)
          << "round " << round << " task " << t;
    }
  }
  // Three such arguments can never be in a 256 MiB store together: a clear error at once.
  try {
    raio::Task(TotalBytes3)
        .Remote(std::vector<uint8_t>(kMiB100, 1), std::vector<uint8_t>(kMiB100, 2),
                std::vector<uint8_t>(kMiB100, 3))
        .Get(Scaled(120s));
    ADD_FAILURE() << "expected ObjectStoreFullError";
  } catch (const raio::ObjectStoreFullError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("can never fit together"), std::string::npos) << what;
    EXPECT_NE(what.find("104857664, 104857664, 104857664 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("capacity of 268435456 bytes"), std::string::npos) << what;
  }
}

// 2, as users met it: a third task's by-value argument could not be put while two running
// tasks pinned theirs, and Remote() threw ObjectStoreFullError at once.
TEST_F(RegressionTest, PutWaitsForRoomWhileRunningTasksPinTheStore) {
  raio::Shutdown();
  raio::InitOptions options;
  options.num_cpus = 2;
  options.object_store_memory_bytes = 256ull << 20;
  raio::Init(options);
  constexpr std::size_t kMiB120 = 120u << 20;
  // a and b run together, each pinning its 120 MiB, and hold on for 1.5 s (scaled) after
  // both have started: c's argument is put while they pin 240 MiB.
  const std::string meet = dir_ / "meet";
  std::filesystem::create_directories(meet);
  const int hold_ms = static_cast<int>(ScaledMs(1500ms));
  auto a = raio::Task(HoldBytes).Remote(std::vector<uint8_t>(kMiB120, 1), meet, 2, hold_ms);
  auto b = raio::Task(HoldBytes).Remote(std::vector<uint8_t>(kMiB120, 2), meet, 2, hold_ms);
  ASSERT_TRUE(WaitFor([&] { return CountEntries(meet) == 2; }, 30s)) << "a and b did not start";
  auto c = raio::Task(HoldBytes).Remote(std::vector<uint8_t>(kMiB120, 3), meet, 1, 0);
  EXPECT_EQ(a.Get(Scaled(120s)), static_cast<int64_t>(kMiB120) + 1);
  EXPECT_EQ(b.Get(Scaled(120s)), static_cast<int64_t>(kMiB120) + 2);
  EXPECT_EQ(c.Get(Scaled(120s)), static_cast<int64_t>(kMiB120) + 3);
}

// 3. Workers that exited during start-up left tasks waiting forever.
TEST_F(RegressionTest, WorkersThatDieWhileStartingFailPendingTasksWithTheirStderr) {
  raio::Shutdown();
  ::setenv(kExitAtStartVar, "1", 1);
  raio::InitOptions options;
  options.num_cpus = 2;
  raio::Init(options);
  try {
    raio::Task(Add).Remote(1, 2).Get(Scaled(60s));
    ADD_FAILURE() << "expected WorkerCrashedError";
  } catch (const raio::WorkerCrashedError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("died while starting"), std::string::npos) << what;
    EXPECT_NE(what.find("exited with code 7"), std::string::npos) << what;
    EXPECT_NE(what.find("simulated start-up failure"), std::string::npos) << what;
  }
  auto actor = raio::Actor(RAIO_FUNC(Probe::Create)).Remote();
  try {
    actor.Task(&Probe::Echo).Remote(1).Get(Scaled(60s));
    ADD_FAILURE() << "expected ActorDiedError";
  } catch (const raio::ActorDiedError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("exited with code 7"), std::string::npos) << what;
    EXPECT_NE(what.find("simulated start-up failure"), std::string::npos) << what;
  }
  ::unsetenv(kExitAtStartVar);
  raio::Shutdown();
  raio::InitOptions fresh;
  fresh.num_cpus = 4;
  raio::Init(fresh);
  EXPECT_EQ(raio::Task(Add).Remote(1, 2).Get(Scaled(60s)), 3);
}

// 4. A task's idle worker, which owned objects, was reused to host an actor, and killing
// the actor lost those objects.
TEST_F(RegressionTest, ObjectsOwnedByATaskWorkerSurviveKillingALaterActor) {
  auto refs = raio::Task(PutSmall).Remote(5).Get();
  ASSERT_EQ(refs.size(), 5u);
  for (int round = 0; round < 3; ++round) {
    auto actor = raio::Actor(RAIO_FUNC(Probe::Create, int)).Remote(1);
    ASSERT_EQ(actor.Task(&Probe::Echo).Remote(1).Get(), 2);
    actor.Kill();
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(refs[i].Get(Scaled(30s)), i * 11);
}

// 5. Calls that had finished lost their results when a later call ended the process.
TEST_F(RegressionTest, FinishedActorCallsKeepTheirResultsWhenALaterCallEndsTheProcess) {
  for (std::string how : {"exit", "_Exit", "abort", "sigkill"}) {
    auto actor = raio::Actor(RAIO_FUNC(Probe::Create)).Remote();
    std::vector<raio::ObjectRef<int>> done;
    for (int i = 0; i < 5; ++i) done.push_back(actor.Task(&Probe::Echo).Remote(i));
    auto end = actor.Task(&Probe::End).Remote(how);
    EXPECT_THROW(end.Get(Scaled(30s)), raio::ActorDiedError) << how;
    for (int i = 0; i < 5; ++i) EXPECT_EQ(done[i].Get(Scaled(30s)), i) << how << " call " << i;
  }
}

// 6. With restarts, calls that had finished were run again after the restart.
TEST_F(RegressionTest, CompletedActorCallsAreNotRunAgainAfterARestart) {
  const std::string log = dir_ / "calls.log";
  auto actor =
      raio::Actor(RAIO_FUNC(Probe::Create)).SetMaxRestarts(1).SetMaxTaskRetries(1).Remote();
  std::vector<raio::ObjectRef<int>> done;
  for (int i = 0; i < 5; ++i) done.push_back(actor.Task(&Probe::Note).Remote(log, i));
  auto end = actor.Task(&Probe::End).Remote(std::string("_Exit"));
  EXPECT_THROW(end.Get(Scaled(60s)), raio::ActorDiedError);  // retried once, dies again
  for (int i = 0; i < 5; ++i) EXPECT_EQ(done[i].Get(Scaled(30s)), i);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "0\n1\n2\n3\n4\n");
}

// 7. RAIO_FUNC could not pick F(int) beside F(int, int), nor Create() beside Create(int).
TEST_F(RegressionTest, RaioFuncPicksOverloadsWhoseParametersStartAlike) {
  EXPECT_EQ(raio::Task(RAIO_FUNC(Make, int)).Remote(7).Get(), 7);
  EXPECT_EQ(raio::Task(RAIO_FUNC(Make, int, int)).Remote(7, 8).Get(), 708);
  auto a = raio::Actor(RAIO_FUNC(Probe::Create)).Remote();
  auto b = raio::Actor(RAIO_FUNC(Probe::Create, int)).Remote(10);
  EXPECT_EQ(a.Task(&Probe::Echo).Remote(1).Get(), 1);
  EXPECT_EQ(b.Task(&Probe::Echo).Remote(1).Get(), 11);
}

// 8. Functions taking const T& or T& did not compile.
TEST_F(RegressionTest, FunctionsTakingReferencesCompileAndGetTheValue) {
  EXPECT_EQ(raio::Task(SumConstRef).Remote(std::vector<int>{1, 2, 3}).Get(), 6);
  EXPECT_EQ(raio::Task(GrowRef).Remote(std::vector<int>{1, 2}).Get(), 3u);
  std::string b = "b";
  EXPECT_EQ(raio::Task(JoinRefs).Remote(std::string("a"), b).Get(), "a+b");
  auto ref = raio::Put(std::vector<int>{4, 5});
  EXPECT_EQ(raio::Task(SumConstRef).Remote(ref).Get(), 9);
  auto actor = raio::Actor(RAIO_FUNC(Probe::Create)).Remote();
  EXPECT_EQ(actor.Task(&Probe::Length).Remote(std::string("four")).Get(), 4);
}

// 9. raio::Get(ref) for a single ref was missing.
TEST_F(RegressionTest, GetOfOneRefReturnsItsValue) {
  auto ref = raio::Task(Add).Remote(2, 3);
  EXPECT_EQ(raio::Get(ref), 5);
  EXPECT_EQ(raio::Get(raio::Put(std::string("x")), Scaled(10s)), "x");
  std::vector<raio::ObjectRef<int>> refs{raio::Task(Add).Remote(1, 1),
                                         raio::Task(Add).Remote(2, 2)};
  EXPECT_EQ(raio::Get(refs, Scaled(30s)), (std::vector<int>{2, 4}));
}

// 10. A task reading an object whose owner had died failed with "no object <id>".
TEST_F(RegressionTest, TaskReadingAnObjectWhoseOwnerDiedGetsOwnerDiedError) {
  auto owner = raio::Actor(RAIO_FUNC(Probe::Create)).Remote();
  auto refs = owner.Task(&Probe::PutLarge).Remote(100000).Get();  // 400 KB: in the store
  ASSERT_EQ(refs.size(), 1u);
  ASSERT_EQ(refs[0].Get().size(), 100000u);  // read once while the owner lives
  owner.Kill();
  // The node deletes the dead owner's objects once it has seen the process go.
  bool failed = WaitFor(
      [&] {
        try {
          raio::Task(SumInts).SetMaxRetries(0).Remote(refs[0]).Get(Scaled(30s));
          return false;
        } catch (const raio::OwnerDiedError& e) {
          EXPECT_NE(std::string(e.what()).find("owner"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("died"), std::string::npos) << e.what();
          return true;
        } catch (const raio::RaioException& e) {
          ADD_FAILURE() << "expected OwnerDiedError, got: " << e.what();
          return true;
        }
      },
      30s);
  EXPECT_TRUE(failed);
}

// 11. An actor whose method exited the process died "because its process died" only.
TEST_F(RegressionTest, ActorDeathCauseGivesTheExitCodeOrSignal) {
  auto exits = raio::Actor(RAIO_FUNC(Probe::Create)).Remote();
  try {
    exits.Task(&Probe::End).Remote(std::string("exit")).Get(Scaled(30s));
    ADD_FAILURE() << "expected ActorDiedError";
  } catch (const raio::ActorDiedError& e) {
    EXPECT_NE(std::string(e.what()).find("exited with code 3"), std::string::npos) << e.what();
  }
  // Later calls fail with the death cause too.
  try {
    exits.Task(&Probe::Echo).Remote(1).Get(Scaled(30s));
    ADD_FAILURE() << "expected ActorDiedError";
  } catch (const raio::ActorDiedError& e) {
    EXPECT_NE(std::string(e.what()).find("exited with code 3"), std::string::npos) << e.what();
  }
  auto killed = raio::Actor(RAIO_FUNC(Probe::Create)).Remote();
  try {
    killed.Task(&Probe::End).Remote(std::string("sigkill")).Get(Scaled(30s));
    ADD_FAILURE() << "expected ActorDiedError";
  } catch (const raio::ActorDiedError& e) {
    EXPECT_NE(std::string(e.what()).find("killed by signal 9"), std::string::npos) << e.what();
  }
}

// 12. A Get timeout of a task waiting for resources said "the task keeps running".
TEST_F(RegressionTest, GetTimeoutOfATaskWaitingForResourcesSaysSo) {
  raio::Shutdown();
  raio::InitOptions options;
  options.num_cpus = 2;
  options.resources = {{"slot", 1}};
  raio::Init(options);
  auto holder = raio::Actor(RAIO_FUNC(Probe::Create)).SetResources({{"slot", 1}}).Remote();
  ASSERT_EQ(holder.Task(&Probe::Echo).Remote(1).Get(), 1);
  auto waiting = raio::Task(Add).SetResources({{"CPU", 1}, {"slot", 1}}).Remote(1, 2);
  try {
    waiting.Get(300ms);
    ADD_FAILURE() << "expected GetTimeoutError";
  } catch (const raio::GetTimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("waiting for resources"), std::string::npos) << what;
    EXPECT_NE(what.find("{CPU: 1, slot: 1}"), std::string::npos) << what;
    EXPECT_EQ(what.find("keeps running"), std::string::npos) << what;
  }
  holder.Kill();
  EXPECT_EQ(waiting.Get(Scaled(30s)), 3);
}

// Groundwork issue, point 4: cancelling a task that waited for an argument freed its entry
// while the argument kept a pointer to it; a later task allocated at the same address was
// then counted as resolved when that argument became ready, and sent before its own
// argument was (an empty value, or a use-after-free under ASan).
TEST_F(RegressionTest, CancellingATaskWaitingForAnArgumentLeavesLaterTasksTheirArguments) {
  for (int round = 0; round < 3; ++round) {
    // `soon` and `later` are held until the test releases them, in that order: the tasks
    // are cancelled while they wait for `soon`, and `later` is still pending when `soon`
    // becomes ready.
    const std::string started = dir_ / ("started-" + std::to_string(round));
    const std::string release_soon = dir_ / ("soon-" + std::to_string(round));
    const std::string release_later = dir_ / ("later-" + std::to_string(round));
    std::filesystem::create_directories(started);
    auto soon = raio::Task(HoldUntilReleased).Remote(started, release_soon, 200, ScaledMs(60s));
    std::vector<raio::ObjectRef<int>> cancelled;
    for (int i = 0; i < 20; ++i) cancelled.push_back(raio::Task(Add).Remote(soon, i));
    for (auto& ref : cancelled) raio::Cancel(ref);
    // Allocated after the cancelled ones were freed, waiting for a later object.
    auto later = raio::Task(HoldUntilReleased).Remote(started, release_later, 1000, ScaledMs(60s));
    std::vector<raio::ObjectRef<int>> results;
    for (int i = 0; i < 50; ++i) results.push_back(raio::Task(Add).Remote(later, i));
    Touch(release_soon);
    EXPECT_EQ(soon.Get(Scaled(30s)), 200);
    Touch(release_later);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(results[i].Get(Scaled(30s)), 1000 + i) << "task " << i;
    for (auto& ref : cancelled) EXPECT_THROW(ref.Get(Scaled(10s)), raio::TaskCancelledError);
  }
}

// Groundwork issue, point 4: an actor call with an ObjectRef argument blocked the calling
// thread until the argument was ready. It returns at once now, and still runs before the
// calls submitted after it.
TEST_F(RegressionTest, ActorCallsWithPendingRefArgumentsReturnAtOnceAndKeepTheirOrder) {
  auto probe = raio::Actor(RAIO_FUNC(Probe::Create)).Remote();
  ASSERT_EQ(probe.Task(&Probe::Echo).Remote(1).Get(Scaled(30s)), 1);
  const std::string path = (dir_ / "order.txt").string();
  // `slow` runs until the test releases it, after the calls below were made.
  const std::string release = (dir_ / "release").string();
  auto slow = raio::Task(HoldUntilReleased).Remote(dir_.string(), release, 800, ScaledMs(60s));
  auto first = probe.Task(&Probe::Note).Remote(path, slow);
  // Remote returned while `slow` still runs.
  EXPECT_EQ(raio::Wait(std::vector{slow}, 0, 0ms).pending.size(), 1u);
  auto second = probe.Task(&Probe::Note).Remote(path, 2);
  auto third = probe.Task(&Probe::Echo).Remote(slow);
  Touch(release);
  EXPECT_EQ(second.Get(Scaled(30s)), 2);
  EXPECT_EQ(first.Get(Scaled(30s)), 800);
  EXPECT_EQ(third.Get(Scaled(30s)), 800);
  std::ifstream in(path);
  std::string a, b;
  in >> a >> b;
  EXPECT_EQ(a, "800");
  EXPECT_EQ(b, "2");
  // A failed argument fails only its call; the calls behind it go on.
  auto bad = raio::Task(ThrowsRuntimeError).Remote(1);
  auto failed = probe.Task(&Probe::Echo).Remote(bad);
  auto after = probe.Task(&Probe::Echo).Remote(5);
  EXPECT_THROW(failed.Get(Scaled(30s)), raio::TaskError);
  EXPECT_EQ(after.Get(Scaled(30s)), 5);
  probe.Kill();
}

TEST_F(RegressionTest, TupleResultsAreOneObjectPerElement) {
  // 20000 doubles (160 KB) go to the store; the others are inline.
  auto [n, text, values] = raio::Task(Split3).Remote(20000);
  static_assert(std::is_same_v<decltype(n), raio::ObjectRef<int>>);
  EXPECT_EQ(raio::Task(Add).Remote(n, 1).Get(Scaled(30s)), 20001);
  EXPECT_EQ(text.Get(Scaled(30s)), std::string(0, 'x'));
  std::vector<double> v = values.Get(Scaled(30s));
  ASSERT_EQ(v.size(), 20000u);
  EXPECT_EQ(v.back(), 0.5);
  EXPECT_NE(n.ID(), values.ID());
  // A tuple of one (from a break-test: its result was refused as "several values").
  auto [only] = raio::Task(OneTuple).Remote(4);
  EXPECT_EQ(only.Get(Scaled(30s)), 5);
  // An error fails every return.
  auto [a, b] = raio::Task(ThrowsTwo).Remote(7);
  EXPECT_THROW(a.Get(Scaled(30s)), raio::TaskError);
  EXPECT_THROW(b.Get(Scaled(30s)), raio::TaskError);
  // An ObjectRef inside one return lives with that return.
  auto [inner, echo] = raio::Task(PutAndEcho).Remote(21);
  EXPECT_EQ(echo.Get(Scaled(30s)), 21);
  raio::ObjectRef<int> got = inner.Get(Scaled(30s));
  EXPECT_EQ(got.Get(Scaled(30s)), 42);
  // Actor methods too, in order.
  auto pairer = raio::Actor(Pairer::Create).Remote();
  auto [c1, t1] = pairer.Task(&Pairer::Next).Remote(std::string("a"));
  auto [c2, t2] = pairer.Task(&Pairer::Next).Remote(std::string("b"));
  EXPECT_EQ(t2.Get(Scaled(30s)), "b2");
  EXPECT_EQ(c1.Get(Scaled(30s)), 1);
  EXPECT_EQ(t1.Get(Scaled(30s)), "a1");
  EXPECT_EQ(c2.Get(Scaled(30s)), 2);
  pairer.Kill();
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);  // never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
