// Integration tests of the C++ API on the embedded cluster: real worker processes
// (this binary re-executed in worker mode), real sockets.
#include <gtest/gtest.h>
#include <raio/raio.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "raio/testkit/time_scale.h"
#include "test_functions.h"

using namespace raio_test;
using namespace std::chrono_literals;
using raio::testkit::Scaled;
using raio::testkit::ScaledMs;

namespace {

// Registered in the driver only: workers do not have it.
int DriverOnly(int x) { return x; }

// Not registered at all.
int NotRegistered(int x) { return x; }

int ExitWith(int code) { ::_exit(code); }
int Aborts(int) { std::abort(); }
// Appends a line to `path` (one per run), then aborts.
int NoteThenAbort(std::string path) {
  std::ofstream(path, std::ios::app) << "run\n";
  std::abort();
}
RAIO_REMOTE(ExitWith, Aborts, NoteThenAbort);

int CallsInit(int) {
  raio::Init();
  return 0;
}
int CallsShutdown(int) {
  raio::Shutdown();
  return 0;
}
RAIO_REMOTE(CallsInit, CallsShutdown);

class EmbeddedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    raio::InitOptions options;
    options.num_cpus = 2;
    options.num_gpus = 2;
    options.resources = {{"slot", 1}};
    raio::Init(options);
  }
  void TearDown() override { raio::Shutdown(); }
};

TEST_F(EmbeddedTest, RunsTaskAndReturnsValue) {
  EXPECT_EQ(raio::Task(Add).Remote(2, 3).Get(), 5);
  EXPECT_EQ(raio::Task(Square).Remote(12).Get(), 144);
}

TEST_F(EmbeddedTest, ManyAsyncTasksAllCorrect) {
  std::vector<raio::ObjectRef<int>> refs;
  for (int i = 0; i < 2000; ++i) refs.push_back(raio::Task(Square).Remote(i));
  std::vector<int> values = raio::Get(refs);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(values[i], i * i) << i;
}

TEST_F(EmbeddedTest, TasksRunInParallelInSeparateProcesses) {
  // Each task waits (up to 30 s) until both have started: run one after the other, the
  // first would give up and see only itself.
  const std::string meet = FreshTestDir("parallel");
  auto a = raio::Task(MeetIn).Remote(meet, 2, ScaledMs(30s));
  auto b = raio::Task(MeetIn).Remote(meet, 2, ScaledMs(30s));
  EXPECT_EQ(a.Get(), 2) << "the tasks did not run at the same time";
  EXPECT_EQ(b.Get(), 2) << "the tasks did not run at the same time";
  // In two processes, neither of them this one.
  std::vector<int> pids = EntryPids(meet);
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_NE(pids[0], pids[1]);
  for (int pid : pids) EXPECT_NE(pid, getpid());
  EXPECT_NE(raio::Task(Pid).Remote().Get(), getpid());
  std::filesystem::remove_all(meet);
}

TEST_F(EmbeddedTest, ObjectRefArgumentsAreResolved) {
  auto x = raio::Task(Square).Remote(3);
  auto y = raio::Task(Add).Remote(x, 1);  // 10
  auto z = raio::Task(Add).Remote(x, y);  // 19
  EXPECT_EQ(z.Get(), 19);
  std::vector<raio::ObjectRef<int>> parts;
  for (int i = 1; i <= 10; ++i) parts.push_back(raio::Task(Square).Remote(i));
  EXPECT_EQ(raio::Task(SumVector).Remote(parts).Get(), 385);
  auto put = raio::Put(std::vector<int>{5, 6, 7});
  EXPECT_EQ(raio::Task(SumVector).Remote(put).Get(), 18);
}

TEST_F(EmbeddedTest, PutGetStructsAndVoid) {
  auto p = raio::Put(Point{1.5, -2, "p"});
  Point scaled = raio::Task(Scale).Remote(p, 2.0).Get();
  EXPECT_DOUBLE_EQ(scaled.x, 3.0);
  EXPECT_DOUBLE_EQ(scaled.y, -4.0);
  EXPECT_EQ(scaled.label, "p*");
  raio::ObjectRef<void> v = raio::Task(NoOp).Remote();
  v.Get();
  EXPECT_EQ(raio::Put(std::string("hello")).Get(), "hello");
}

TEST_F(EmbeddedTest, OverloadsAreSelectable) {
  EXPECT_EQ(raio::Task(RAIO_FUNC(Overloaded, int)).Remote(1).Get(), 2);
  EXPECT_EQ(raio::Task(RAIO_FUNC(Overloaded, std::string)).Remote("hi").Get(), "hi!");
}

TEST_F(EmbeddedTest, WaitSplitsReadyAndPending) {
  // The second task is held until the test releases it: it cannot be ready before.
  const std::string dir = FreshTestDir("wait");
  const std::string release = dir + "/release";
  std::vector<raio::ObjectRef<int>> refs{
      raio::Task(SleepMs).Remote(0),
      raio::Task(HoldUntilReleased).Remote(dir, release, 3000, ScaledMs(60s))};
  auto [ready, pending] = raio::Wait(refs, 1, Scaled(10s));
  ASSERT_EQ(ready.size(), 1u);
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(ready[0].Get(), 0);
  auto r2 = raio::Wait(refs, 2, 10ms);  // expected to time out
  EXPECT_EQ(r2.pending.size(), 1u);
  EXPECT_THROW(raio::Wait(refs, 3), raio::InvalidUsageError);
  Touch(release);
  EXPECT_EQ(refs[1].Get(Scaled(30s)), 3000);
  std::filesystem::remove_all(dir);
}

TEST_F(EmbeddedTest, GetTimeoutLeavesTaskRunning) {
  auto ref = raio::Task(SleepMs).Remote(600);
  EXPECT_THROW(ref.Get(50ms), raio::GetTimeoutError);
  EXPECT_EQ(ref.Get(Scaled(10s)), 600);
}

TEST_F(EmbeddedTest, ExceptionBecomesTaskError) {
  try {
    raio::Task(ThrowsRuntimeError).Remote(4).Get();
    FAIL() << "expected TaskError";
  } catch (const raio::TaskError& e) {
    EXPECT_EQ(e.exception_type(), "std::runtime_error");
    EXPECT_EQ(e.message(), "bad input 4");
    EXPECT_EQ(e.function_name(), "ThrowsRuntimeError");
    EXPECT_EQ(e.node_id().size(), 16u);
    EXPECT_NE(std::string(e.what()).find("bad input 4"), std::string::npos);
  }
  try {
    raio::Task(ThrowsCustom).Remote(1).Get();
    FAIL() << "expected TaskError";
  } catch (const raio::TaskError& e) {
    EXPECT_EQ(e.exception_type(), "raio_test::CustomError");
  }
  // The error propagates through a dependent task.
  auto failed = raio::Task(ThrowsRuntimeError).Remote(5);
  EXPECT_THROW(raio::Task(Add).Remote(failed, 1).Get(), raio::TaskError);
  // The worker keeps serving after a user exception.
  EXPECT_EQ(raio::Task(Add).Remote(1, 1).Get(), 2);
}

TEST_F(EmbeddedTest, CrashedWorkerIsRetriedThenFails) {
  auto dir = std::filesystem::temp_directory_path() / ("raio-crash-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string marker = (dir / "marker").string();
  EXPECT_EQ(raio::Task(CrashOnce).Remote(marker).Get(), 7);
  std::filesystem::remove_all(dir);
  EXPECT_THROW(raio::Task(Crash).Remote(1).Get(), raio::WorkerCrashedError);
  EXPECT_THROW(raio::Task(Crash).SetMaxRetries(0).Remote(1).Get(), raio::WorkerCrashedError);
  EXPECT_EQ(raio::Task(Add).Remote(2, 2).Get(), 4);
}

TEST_F(EmbeddedTest, ACrashUsesARetryOfTheCrashingTaskOnly) {
  EXPECT_EQ(raio::Task(Add).Remote(1, 1).Get(), 2);  // a warm worker to pipeline onto
  // Tasks pipelined behind a crashing one on its worker never ran: they are re-queued
  // without using a retry, so none of these fails although none may be retried.
  auto crash = raio::Task(ExitWith).SetMaxRetries(0).Remote(3);
  std::vector<raio::ObjectRef<int>> refs;
  for (int i = 0; i < 20; ++i) refs.push_back(raio::Task(Add).SetMaxRetries(0).Remote(i, 1));
  int sum = 0;
  for (int v : raio::Get(refs)) sum += v;
  EXPECT_EQ(sum, 210);
  // The error says how the process ended.
  try {
    crash.Get();
    FAIL() << "expected WorkerCrashedError";
  } catch (const raio::WorkerCrashedError& e) {
    EXPECT_NE(std::string(e.what()).find("exited with code 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ExitWith"), std::string::npos) << e.what();
  }
  try {
    raio::Task(Aborts).SetMaxRetries(1).Remote(0).Get();
    FAIL() << "expected WorkerCrashedError";
  } catch (const raio::WorkerCrashedError& e) {
    EXPECT_NE(std::string(e.what()).find("SIGABRT"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("its 1 retries ran out"), std::string::npos) << e.what();
  }
}

TEST_F(EmbeddedTest, InterleavedCrashesAreChargedToTheCrashingTasksOnly) {
  // Tiny tasks' replies are coalesced: when a crashing task kills its worker, the replies
  // of tasks that finished just before it may be lost. The node tells which task was
  // running, so only that one is charged.
  auto dir =
      std::filesystem::temp_directory_path() / ("raio-interleave-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string runs = (dir / "runs").string();
  EXPECT_EQ(raio::Task(Add).Remote(1, 1).Get(), 2);
  std::vector<raio::ObjectRef<int>> crashes, adds;
  for (int i = 0; i < 10; ++i) {
    crashes.push_back(raio::Task(NoteThenAbort).SetMaxRetries(0).Remote(runs));
    adds.push_back(raio::Task(Add).SetMaxRetries(0).Remote(i, 1));
  }
  int sum = 0;
  for (int v : raio::Get(adds)) sum += v;
  EXPECT_EQ(sum, 55);
  for (auto& c : crashes) EXPECT_THROW(c.Get(), raio::WorkerCrashedError);
  std::ifstream in(runs);
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, 10) << "each crashing task (no retries) runs once";
  std::filesystem::remove_all(dir);
}

TEST_F(EmbeddedTest, ForceCancelDoesNotUseRetriesOfTasksQueuedOnTheSameWorker) {
  // All calls are of one function and shape (one scheduling class). Its history of quick
  // calls makes the owner pipeline the next ones onto busy workers, so that some queue
  // behind the first call, which is held until it is cancelled.
  const std::string dir = FreshTestDir("force-cancel");
  const std::string released = dir + "/released", never = dir + "/never";
  const std::string held_started = dir + "/held", quick_started = dir + "/quick";
  for (const auto& d : {held_started, quick_started}) std::filesystem::create_directories(d);
  Touch(released);
  auto quick = [&](int value) {
    return raio::Task(HoldUntilReleased)
        .SetMaxRetries(0)
        .Remote(quick_started, released, value, ScaledMs(60s));
  };
  for (int i = 0; i < 20; ++i) EXPECT_EQ(quick(i).Get(Scaled(30s)), i);
  std::vector<raio::ObjectRef<int>> refs;
  refs.push_back(raio::Task(HoldUntilReleased)
                     .SetMaxRetries(0)
                     .Remote(held_started, never, -1, ScaledMs(60s)));
  for (int i = 1; i < 20; ++i) refs.push_back(quick(i));
  // Cancel the first call once it runs (not before it started, nor after it ended: it ends
  // only by the cancel).
  ASSERT_TRUE(WaitFor([&] { return CountEntries(held_started) == 1; }, 30s))
      << "the first task did not start";
  raio::Cancel(refs[0], /*force=*/true);
  EXPECT_THROW(refs[0].Get(Scaled(30s)), raio::TaskCancelledError);
  for (int i = 1; i < 20; ++i) EXPECT_EQ(refs[i].Get(Scaled(30s)), i) << "task " << i;
  std::filesystem::remove_all(dir);
}

TEST_F(EmbeddedTest, NestedTasksDoNotDeadlockAFullNode) {
  // Two CPUs: more nested levels than CPUs only finish if blocked workers lend CPUs.
  EXPECT_EQ(raio::Task(Recurse).Remote(6).Get(), 6);
  std::vector<raio::ObjectRef<int>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(raio::Task(NestedSum).Remote(10));
  for (int v : raio::Get(refs)) EXPECT_EQ(v, 385);
}

TEST_F(EmbeddedTest, UnregisteredFunctionsGiveClearErrors) {
  EXPECT_THROW(raio::Task(NotRegistered).Remote(1), raio::InvalidUsageError);
  try {
    raio::Task(DriverOnly).Remote(1).Get();
    FAIL() << "expected RemoteFunctionNotFoundError";
  } catch (const raio::RemoteFunctionNotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find("DriverOnly"), std::string::npos);
  }
}

TEST_F(EmbeddedTest, CancelDropsQueuedTasksAndEndsRunningOnes) {
  // Two tasks hold both CPUs until the test releases them (`a` never is).
  const std::string dir = FreshTestDir("cancel");
  const std::string a_started = dir + "/a", b_started = dir + "/b";
  for (const auto& d : {a_started, b_started}) std::filesystem::create_directories(d);
  auto a = raio::Task(HoldUntilReleased).Remote(a_started, dir + "/release-a", 1, ScaledMs(60s));
  auto b = raio::Task(HoldUntilReleased).Remote(b_started, dir + "/release-b", 2, ScaledMs(60s));
  ASSERT_TRUE(
      WaitFor([&] { return CountEntries(a_started) == 1 && CountEntries(b_started) == 1; }, 30s))
      << "the two tasks did not start";
  // Both CPUs busy: a third task stays queued and is dropped by Cancel.
  auto queued = raio::Task(SleepMs).Remote(1);
  raio::Cancel(queued);
  EXPECT_THROW(queued.Get(Scaled(10s)), raio::TaskCancelledError);
  // force ends a running task's worker (`a` would otherwise run until its 60 s pass); the
  // task is not retried.
  const int a_pid = EntryPids(a_started).at(0);
  raio::Cancel(a, /*force=*/true);
  EXPECT_THROW(a.Get(Scaled(10s)), raio::TaskCancelledError);
  EXPECT_TRUE(WaitFor([&] { return ::kill(a_pid, 0) != 0; }, 10s))
      << "the worker of the force-cancelled task (pid " << a_pid << ") still runs";
  // Without force a running task finishes (released after the cancel), but its result is
  // dropped.
  raio::Cancel(b);
  Touch(dir + "/release-b");
  EXPECT_THROW(b.Get(Scaled(10s)), raio::TaskCancelledError);
  // Cancelling a finished task is a no-op.
  auto done = raio::Task(Add).Remote(1, 2);
  EXPECT_EQ(done.Get(), 3);
  raio::Cancel(done, true);
  EXPECT_EQ(done.Get(), 3);
  EXPECT_EQ(raio::Task(Add).Remote(2, 2).Get(), 4);
  std::filesystem::remove_all(dir);
}

TEST_F(EmbeddedTest, InitOrShutdownInsideATaskIsATaskError) {
  // Shutdown first: it must not break the worker for the Init that may follow on it.
  for (auto fn : {CallsShutdown, CallsInit}) {
    try {
      raio::Task(fn).SetMaxRetries(0).Remote(1).Get();
      FAIL() << "expected TaskError";
    } catch (const raio::TaskError& e) {
      EXPECT_EQ(e.exception_type(), "raio::InvalidUsageError");
    }
  }
  EXPECT_EQ(raio::Task(Add).Remote(1, 1).Get(), 2);
}

TEST_F(EmbeddedTest, InfeasibleDemandFailsAtGetNamingResources) {
  auto ref = raio::Task(Add).SetResource("CPU", 100).Remote(1, 2);
  try {
    ref.Get(Scaled(10s));
    FAIL() << "expected UnschedulableError";
  } catch (const raio::UnschedulableError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("CPU: 100"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CPU: 2"), std::string::npos) << msg;
  }
  EXPECT_THROW(raio::Task(Add).SetResource("TPU", 1).Remote(1, 2).Get(Scaled(10s)),
               raio::UnschedulableError);
  EXPECT_THROW(raio::Task(Add).SetResource("GPU", 1.5).Remote(1, 2).Get(Scaled(10s)),
               raio::UnschedulableError);
}

TEST_F(EmbeddedTest, InvalidResourceValuesAreRejected) {
  EXPECT_THROW(raio::Task(Add).SetResource("CPU", -1).Remote(1, 2), raio::InvalidUsageError);
  EXPECT_THROW(raio::Task(Add).SetResource("CPU", std::nan("")).Remote(1, 2),
               raio::InvalidUsageError);
  EXPECT_THROW(
      raio::Task(Add).SetResource("CPU", std::numeric_limits<double>::infinity()).Remote(1, 2),
      raio::InvalidUsageError);
  EXPECT_THROW(raio::Task(Add).SetMaxRetries(-2).Remote(1, 2), raio::InvalidUsageError);
}

TEST_F(EmbeddedTest, FractionalAndCustomResourcesLimitConcurrency) {
  // slot: 1 on the node, so two slot tasks run one after the other: both are held until the
  // test releases them, and while the first holds the slot the second does not start.
  const std::string slot_dir = FreshTestDir("slot");
  const std::string started = slot_dir + "/started", release = slot_dir + "/release";
  std::filesystem::create_directories(started);
  auto slot_task = [&](int value) {
    return raio::Task(HoldUntilReleased)
        .SetResources({{"CPU", 0.5}, {"slot", 1}})
        .Remote(started, release, value, ScaledMs(60s));
  };
  auto a = slot_task(1);
  auto b = slot_task(2);
  ASSERT_TRUE(WaitFor([&] { return CountEntries(started) >= 1; }, 30s)) << "no slot task started";
  // The second one's chance has passed: a task submitted after it, needing only CPU (free
  // beside the first), got a worker and ran to the end.
  EXPECT_EQ(raio::Task(Add).SetResource("CPU", 0.5).Remote(1, 2).Get(Scaled(30s)), 3);
  EXPECT_EQ(raio::internal::GetNodeResourceStats().available["slot"], 0);
  EXPECT_EQ(CountEntries(started), 1) << "slot tasks overlapped";
  Touch(release);
  EXPECT_EQ(a.Get(Scaled(30s)), 1);
  EXPECT_EQ(b.Get(Scaled(30s)), 2);
  EXPECT_EQ(CountEntries(started), 2);
  std::filesystem::remove_all(slot_dir);
  // And by the tasks' own clocks: the run intervals of two slot tasks never overlap (true
  // of a correct scheduler however slow the machine; a wrong one fails whenever the second
  // worker starts within the first task's 300 ms).
  auto sa = raio::Task(SleepAndStamp).SetResources({{"CPU", 0.5}, {"slot", 1}}).Remote(300);
  auto sb = raio::Task(SleepAndStamp).SetResources({{"CPU", 0.5}, {"slot", 1}}).Remote(300);
  auto pa = sa.Get(Scaled(30s));
  auto pb = sb.Get(Scaled(30s));
  EXPECT_TRUE(pa[1] <= pb[0] || pb[1] <= pa[0]) << "slot tasks overlapped";
  // Fractional CPUs: four 0.5-CPU tasks fit two CPUs at once. Each waits (up to 30 s) until
  // all four have started; with room for fewer at once, the others would start only after
  // those time out and see fewer than four.
  const std::string meet = FreshTestDir("meet");
  std::vector<raio::ObjectRef<int>> refs;
  for (int i = 0; i < 4; ++i)
    refs.push_back(raio::Task(MeetIn).SetResource("CPU", 0.5).Remote(meet, 4, ScaledMs(30s)));
  for (int seen : raio::Get(refs)) EXPECT_EQ(seen, 4) << "four half-CPU tasks did not run together";
  std::filesystem::remove_all(meet);
}

TEST_F(EmbeddedTest, GpuTasksSeeOnlyTheirDevices) {
  EXPECT_EQ(raio::Task(VisibleDevices).SetResources({{"CPU", 0}}).Remote().Get(), "");
  auto a = raio::Task(VisibleDevices).SetResources({{"CPU", 0}, {"GPU", 1}}).Remote();
  auto b = raio::Task(VisibleDevices).SetResources({{"CPU", 0}, {"GPU", 1}}).Remote();
  std::set<std::string> seen{a.Get(), b.Get()};
  for (const auto& s : seen) EXPECT_TRUE(s == "0" || s == "1") << s;
  EXPECT_EQ(raio::Task(VisibleDevices).SetResources({{"CPU", 0}, {"GPU", 2}}).Remote().Get(),
            "0,1");
  std::string half = raio::Task(VisibleDevices).SetResources({{"GPU", 0.5}}).Remote().Get();
  EXPECT_TRUE(half == "0" || half == "1") << half;
}

TEST_F(EmbeddedTest, ActorsSeeExactlyTheirGpus) {
  auto a = raio::Actor(DeviceProbe::Create).SetResource("GPU", 1).Remote();
  auto b = raio::Actor(DeviceProbe::Create).SetResource("GPU", 1).Remote();
  auto cpu_only = raio::Actor(DeviceProbe::Create).Remote();
  // Two actors of one GPU each: disjoint devices, each exactly one.
  std::set<std::string> seen{a.Task(&DeviceProbe::Visible).Remote().Get(),
                             b.Task(&DeviceProbe::Visible).Remote().Get()};
  EXPECT_EQ(seen, (std::set<std::string>{"0", "1"}));
  EXPECT_EQ(cpu_only.Task(&DeviceProbe::Visible).Remote().Get(), "");
  EXPECT_NE(a.Task(&DeviceProbe::Pid).Remote().Get(), b.Task(&DeviceProbe::Pid).Remote().Get());
  a.Kill();
  b.Kill();
  // Their GPUs are free again: an actor holding both sees both.
  auto both = raio::Actor(DeviceProbe::Create).SetResource("GPU", 2).Remote();
  EXPECT_EQ(both.Task(&DeviceProbe::Visible).Remote().Get(), "0,1");
  both.Kill();
  cpu_only.Kill();
}

// Regression: the executor used to setenv CUDA_VISIBLE_DEVICES per task on a reused
// worker process, which CUDA (it reads the variable once) would not see. A worker now gets
// it at spawn and serves only leases holding the same GPUs.
TEST_F(EmbeddedTest, TasksWithDifferentGpusNeverShareAWorkerProcess) {
  std::map<std::string, std::set<std::string>> devices_by_pid;
  auto record = [&](const std::string& pid_and_devices) {
    auto colon = pid_and_devices.find(':');
    std::string devices = pid_and_devices.substr(colon + 1);
    devices_by_pid[pid_and_devices.substr(0, colon)].insert(devices);
    return devices;
  };
  auto task = [](double gpus, int ms) {
    if (gpus == 0) return raio::Task(PidAndDevices).SetResources({{"CPU", 0}}).Remote(ms);
    return raio::Task(PidAndDevices).SetResources({{"CPU", 0}, {"GPU", gpus}}).Remote(ms);
  };
  for (int round = 0; round < 3; ++round) {
    // Concurrently: two one-GPU tasks hold the two devices at once (each waits until both
    // have started).
    const std::string meet = FreshTestDir("gpu-meet");
    auto together = [&] {
      return raio::Task(PidAndDevicesAfterMeeting)
          .SetResources({{"CPU", 0}, {"GPU", 1}})
          .Remote(meet, 2, ScaledMs(30s));
    };
    auto first = together();
    auto second = together();
    std::set<std::string> concurrent{record(first.Get()), record(second.Get())};
    EXPECT_EQ(concurrent, (std::set<std::string>{"0", "1"})) << "round " << round;
    std::filesystem::remove_all(meet);
    // Sequentially: one GPU, both, none.
    std::string one = record(task(1, 0).Get());
    EXPECT_TRUE(one == "0" || one == "1") << one;
    EXPECT_EQ(record(task(2, 0).Get()), "0,1");
    EXPECT_EQ(record(task(0, 0).Get()), "");
  }
  for (const auto& [pid, devices] : devices_by_pid) {
    EXPECT_EQ(devices.size(), 1u) << "worker pid " << pid << " saw " << devices.size()
                                  << " different CUDA_VISIBLE_DEVICES values, e.g. '"
                                  << *devices.begin() << "' and '" << *devices.rbegin() << "'";
  }
}

TEST(LifecycleTest, InitTwiceAndUseAfterShutdownAreErrors) {
  raio::InitOptions options;
  options.num_cpus = 1;
  raio::Init(options);
  EXPECT_TRUE(raio::IsInitialized());
  EXPECT_THROW(raio::Init(options), raio::InvalidUsageError);
  auto ref = raio::Task(Add).Remote(1, 1);
  EXPECT_EQ(ref.Get(), 2);
  raio::Shutdown();
  EXPECT_FALSE(raio::IsInitialized());
  EXPECT_THROW(ref.Get(), raio::InvalidUsageError);
  EXPECT_THROW(raio::Task(Add).Remote(1, 1), raio::InvalidUsageError);
  raio::Shutdown();  // idempotent
  // Init again after Shutdown works.
  raio::Init(options);
  EXPECT_EQ(raio::Task(Add).Remote(2, 1).Get(), 3);
  raio::Shutdown();
}

TEST(LifecycleTest, GpuIdsFollowAnExistingDeviceMask) {
  ::setenv("CUDA_VISIBLE_DEVICES", "5,6", 1);
  raio::InitOptions options;
  options.num_cpus = 2;
  options.num_gpus = 2;
  raio::Init(options);
  auto a = raio::Task(VisibleDevices).SetResources({{"CPU", 0}, {"GPU", 2}}).Remote();
  EXPECT_EQ(a.Get(), "5,6");
  EXPECT_EQ(raio::Task(VisibleDevices).SetResources({{"CPU", 0}}).Remote().Get(), "");
  auto actor = raio::Actor(DeviceProbe::Create).SetResource("GPU", 1).Remote();
  std::string seen = actor.Task(&DeviceProbe::Visible).Remote().Get();
  EXPECT_TRUE(seen == "5" || seen == "6") << seen;
  actor.Kill();
  raio::Shutdown();
  ::unsetenv("CUDA_VISIBLE_DEVICES");
}

// From a break-test: a node offering more GPUs than its CUDA_VISIBLE_DEVICES lists gave
// tasks the ids of devices the mask hides.
TEST(LifecycleTest, MoreGpusThanTheDeviceMaskListsAreRefused) {
  for (const char* mask : {"5", ""}) {
    ::setenv("CUDA_VISIBLE_DEVICES", mask, 1);
    raio::InitOptions options;
    options.num_cpus = 1;
    options.num_gpus = 2;
    try {
      raio::Init(options);
      ADD_FAILURE() << "Init accepted 2 GPUs with CUDA_VISIBLE_DEVICES=\"" << mask << "\"";
      raio::Shutdown();
    } catch (const raio::RaioException& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << what;
      EXPECT_NE(what.find("offers 2 GPUs"), std::string::npos) << what;
    }
  }
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  raio::InitOptions options;
  options.num_cpus = 1;
  raio::Init(options);  // nothing was left behind
  EXPECT_EQ(raio::Task(Add).Remote(1, 2).Get(), 3);
  raio::Shutdown();
}

TEST(LifecycleTest, UnreachableAddressFailsFast) {
  raio::InitOptions options;
  options.address = "127.0.0.1:1";
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(raio::Init(options), raio::ClusterUnavailableError);
  // A deadline, not a speed claim: Init must not wait for a cluster to appear.
  EXPECT_LT(std::chrono::steady_clock::now() - start, Scaled(10s));
  EXPECT_FALSE(raio::IsInitialized());
  // Not an address at all: a usage error, not an unreachable cluster.
  options.address = "not-an-address";
  EXPECT_THROW(raio::Init(options), raio::InvalidUsageError);
  EXPECT_FALSE(raio::IsInitialized());
}

TEST(LifecycleTest, NoWorkerProcessesOutliveShutdown) {
  raio::InitOptions options;
  options.num_cpus = 2;
  raio::Init(options);
  std::set<int> pids;
  for (int i = 0; i < 4; ++i) pids.insert(raio::Task(Pid).Remote().Get());
  raio::Shutdown();
  for (int pid : pids) {
    // Reaped children no longer exist (kill fails with ESRCH).
    EXPECT_NE(::kill(pid, 0), 0) << "worker " << pid << " still alive";
  }
}

// The regression: a SIGKILLed driver's embedded store file stayed in /dev/shm unless a
// later Init swept it. The store is now a memory file with no name: there is nothing
// to leave, and a later Init works without any sweep.
TEST(LifecycleTest, ASigkilledDriverLeavesNothingInDevShm) {
  const auto base =
      std::filesystem::temp_directory_path() / ("raio-ekd-" + std::to_string(::getpid()));
  std::filesystem::create_directories(base);
  const std::set<std::string> before = DevShmEntries();
  pid_t driver = ::fork();
  ASSERT_GE(driver, 0);
  if (driver == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the test
    ::setenv("TMPDIR", base.c_str(), 1);
    ::setenv("RAIO_TEST_HOLD_EMBEDDED", "1", 1);
    std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    ::execl(self.c_str(), self.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // The driver's embedded node has made its store (and mapped it: the driver ran a task
  // once the marker file exists).
  const auto ready = base / "ready";
  bool up = WaitFor([&] { return std::filesystem::exists(ready); }, 30s);
  EXPECT_TRUE(up) << "the driver did not start its embedded cluster";
  EXPECT_TRUE(HoldsObjectStore(driver));
  EXPECT_EQ(NewRaioShmEntries(before, driver), std::vector<std::string>{});
  ::kill(driver, SIGKILL);
  ::waitpid(driver, nullptr, 0);
  EXPECT_EQ(NewRaioShmEntries(before, driver), std::vector<std::string>{});

  raio::InitOptions options;
  options.num_cpus = 1;
  options.object_store_memory_bytes = 32ull << 20;
  raio::Init(options);
  EXPECT_EQ(raio::Task(Add).Remote(1, 2).Get(), 3);
  raio::Shutdown();
  std::filesystem::remove_all(base);  // the killed driver's session, as `raio stop` would
}

// Scenario for ASigkilledDriverLeavesNothingInDevShm: an embedded cluster that puts an
// object in its store, says so with $TMPDIR/ready, and waits to be killed.
int HoldEmbeddedCluster() {
  raio::InitOptions options;
  options.num_cpus = 1;
  options.object_store_memory_bytes = 32ull << 20;
  raio::Init(options);
  auto big = raio::Put(std::vector<double>(1 << 16, 1.0));  // 512 KiB: in the store
  if (big.Get().size() != (1u << 16)) return 2;
  std::ofstream(std::string(std::getenv("TMPDIR")) + "/ready") << "ok\n";
  std::this_thread::sleep_for(Scaled(120s));  // the test kills it long before
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);  // never returns
  if (std::getenv("RAIO_TEST_HOLD_EMBEDDED") != nullptr) return HoldEmbeddedCluster();
  raio::internal::RegisterOne("DriverOnly", "driver-only", &DriverOnly);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
