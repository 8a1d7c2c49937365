// Integration tests of the node's memory monitor on the embedded cluster: real worker
// processes allocate memory until the node's use crosses a threshold set just above what
// the machine uses now, and the node ends them. Each test allocates at most ~2 GiB
// (never more than 4 GiB) and stays well under 20 s.
#include <gtest/gtest.h>
#include <raio/raio.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "test_functions.h"

using namespace std::chrono_literals;
using raio_test::WaitFor;

namespace oom_test {

// Appends this process's pid to `attempts_file` (one line per attempt), then allocates
// and touches `step_mib` MiB every `step_ms` ms until it holds `total_mib` MiB, holds
// it for `hold_ms` ms, and returns the MiB it held.
int Hog(std::string attempts_file, int total_mib, int step_mib, int step_ms, int hold_ms) {
  std::ofstream(attempts_file, std::ios::app) << ::getpid() << "\n";
  std::vector<std::unique_ptr<char[]>> chunks;
  const std::size_t step_bytes = static_cast<std::size_t>(step_mib) << 20;
  int held = 0;
  while (held < total_mib) {
    chunks.emplace_back(new char[step_bytes]);
    std::memset(chunks.back().get(), 1, step_bytes);  // resident, not just reserved
    held += step_mib;
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  return held;
}
RAIO_REMOTE(Hog);

// An actor that holds on to memory between calls.
class Hoarder {
 public:
  static Hoarder* Create() { return new Hoarder(); }
  int Grow(int total_mib, int step_mib, int step_ms) {
    const std::size_t step_bytes = static_cast<std::size_t>(step_mib) << 20;
    for (int held = 0; held < total_mib; held += step_mib) {
      chunks_.emplace_back(new char[step_bytes]);
      std::memset(chunks_.back().get(), 1, step_bytes);
      std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    }
    return static_cast<int>(chunks_.size()) * step_mib;
  }

 private:
  std::vector<std::unique_ptr<char[]>> chunks_;
};
RAIO_REMOTE(Hoarder::Create, &Hoarder::Grow);

}  // namespace oom_test

namespace {

using oom_test::Hoarder;
using oom_test::Hog;

// What the node measures (MemTotal - MemAvailable) right now, in bytes. This machine's
// cgroup has no memory.max tighter than MemTotal, so /proc/meminfo is what the node uses.
uint64_t SystemUsedBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t value = 0, total = 0, available = 0;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemTotal:") total = value * 1024;
    if (key == "MemAvailable:") available = value * 1024;
  }
  return total - available;
}

int CountLines(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

class MemoryMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "raio-oom-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    attempts_ = dir_ + "/attempts";
  }
  void TearDown() override {
    raio::Shutdown();
    std::filesystem::remove_all(dir_);
  }
  void StartCluster(uint64_t threshold_bytes) {
    raio::InitOptions options;
    options.num_cpus = 2;
    options.memory_usage_threshold_bytes = threshold_bytes;
    raio::Init(options);
  }
  void ExpectResourcesBackToTotals() {
    EXPECT_TRUE(WaitFor(
        [] {
          auto r = raio::internal::GetNodeResourceStats();
          return r.available == r.total;
        },
        5s))
        << "CPU available " << raio::internal::GetNodeResourceStats().available["CPU"];
  }
  std::string dir_;
  std::string attempts_;
};

TEST_F(MemoryMonitorTest, EndsTheHungryTaskRetriesItThenThrowsOutOfMemoryWithTheFigures) {
  const uint64_t threshold = SystemUsedBytes() + (1ull << 30);
  StartCluster(threshold);
  // 64 MiB every 20 ms up to 4 GiB: crosses the threshold after about 1 GiB.
  auto ref = raio::Task(Hog).SetMaxRetries(1).Remote(attempts_, 4096, 64, 20, 10000);
  std::string message;
  try {
    ref.Get();
    FAIL() << "Hog returned although it should have been ended";
  } catch (const raio::OutOfMemoryError& e) {
    message = e.what();
  }
  for (const std::string& part :
       {std::string("Hog ran out of memory"), std::string("memory monitor of node"),
        std::string("pid "), std::string("resident"), std::string("GiB"),
        std::string("crossed the threshold"), "(" + std::to_string(threshold) + " bytes)",
        std::string("2 attempts were made")}) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
  EXPECT_EQ(CountLines(attempts_), 2);
  // The node survived and runs tasks; the ended leases gave their resources back.
  EXPECT_EQ(raio::Task(raio_test::Add).Remote(2, 3).Get(), 5);
  ExpectResourcesBackToTotals();
}

TEST_F(MemoryMonitorTest, OutOfMemoryIsAWorkerCrash) {
  StartCluster(SystemUsedBytes() + (1ull << 30));
  auto ref = raio::Task(Hog).SetMaxRetries(0).Remote(attempts_, 4096, 64, 20, 10000);
  EXPECT_THROW(ref.Get(), raio::WorkerCrashedError);
  EXPECT_EQ(CountLines(attempts_), 1);
}

TEST_F(MemoryMonitorTest, ACrashIsStillAPlainWorkerCrash) {
  StartCluster(SystemUsedBytes() + (1ull << 30));
  try {
    raio::Task(raio_test::Crash).SetMaxRetries(1).Remote(1).Get();
    FAIL() << "Crash returned";
  } catch (const raio::OutOfMemoryError& e) {
    FAIL() << "a crash was reported as out of memory: " << e.what();
  } catch (const raio::WorkerCrashedError& e) {
    EXPECT_NE(std::string(e.what()).find("retries ran out"), std::string::npos) << e.what();
  }
}

TEST_F(MemoryMonitorTest, TaskUnderTheThresholdSucceeds) {
  StartCluster(SystemUsedBytes() + (3ull << 30));
  EXPECT_EQ(raio::Task(Hog).SetMaxRetries(0).Remote(attempts_, 256, 64, 10, 500).Get(), 256);
  EXPECT_EQ(CountLines(attempts_), 1);
  ExpectResourcesBackToTotals();
}

TEST_F(MemoryMonitorTest, IntervalZeroTurnsTheMonitorOff) {
  ::setenv("RAIO_MEMORY_MONITOR_INTERVAL_MS", "0", 1);
  StartCluster(SystemUsedBytes() + (512ull << 20));
  ::unsetenv("RAIO_MEMORY_MONITOR_INTERVAL_MS");
  // 1.5 GiB, well above the threshold, and held long enough for several rounds.
  EXPECT_EQ(raio::Task(Hog).SetMaxRetries(0).Remote(attempts_, 1536, 64, 10, 1000).Get(), 1536);
  EXPECT_EQ(CountLines(attempts_), 1);
}

// Makes the actor grow towards 4 GiB; returns the ActorDiedError's message ("" if Grow
// returned, which fails the test).
std::string GrowUntilEnded(raio::ActorHandle<Hoarder>& hoarder) {
  try {
    hoarder.Task(&Hoarder::Grow).Remote(4096, 64, 20).Get();
    ADD_FAILURE() << "Grow returned although the actor should have been ended";
  } catch (const raio::ActorDiedError& e) {
    return e.what();
  }
  return "";
}

TEST_F(MemoryMonitorTest, ActorEndedByTheMonitorDiesWithTheFiguresAsCause) {
  StartCluster(SystemUsedBytes() + (1ull << 30));
  auto hoarder = raio::Actor(Hoarder::Create).SetMaxRestarts(0).Remote();
  std::string message = GrowUntilEnded(hoarder);
  EXPECT_NE(message.find("memory monitor of node"), std::string::npos) << message;
  EXPECT_NE(message.find("resident"), std::string::npos) << message;
  EXPECT_EQ(raio::Task(raio_test::Add).Remote(1, 1).Get(), 2);
  ExpectResourcesBackToTotals();
}

TEST_F(MemoryMonitorTest, RestartedActorsLostCallNamesTheMonitor) {
  StartCluster(SystemUsedBytes() + (1ull << 30));
  auto hoarder = raio::Actor(Hoarder::Create).SetMaxRestarts(1).Remote();
  std::string message = GrowUntilEnded(hoarder);
  EXPECT_NE(message.find("was restarted"), std::string::npos) << message;
  EXPECT_NE(message.find("memory monitor of node"), std::string::npos) << message;
  // The restarted actor answers.
  EXPECT_EQ(hoarder.Task(&Hoarder::Grow).Remote(64, 64, 0).Get(), 64);
}

TEST(MemoryMonitorOptionsTest, RejectsAThresholdOutsideZeroToOne) {
  for (double bad : {0.0, 1.5, -0.2}) {
    raio::InitOptions options;
    options.memory_usage_threshold = bad;
    try {
      raio::Init(options);
      raio::Shutdown();
      ADD_FAILURE() << "Init accepted memory_usage_threshold " << bad;
    } catch (const raio::InvalidUsageError& e) {
      EXPECT_NE(std::string(e.what()).find("memory_usage_threshold"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);  // never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
