// Integration tests of the node's memory monitor on the embedded cluster, with real worker
// processes and a memory reading the test controls: the node reads its memory use from
// the file memory_usage_file_path names (a meminfo-format file), not from the machine,
// which every other test beside this one moves. A task that "uses" memory makes the node
// read a given use for exactly as long as its process lives (UseMemoryWhileAlive), as real
// memory is freed when its process dies; the tests assert the monitor's decisions: which
// worker it ended, the figures in the error, retries and restarts, nothing ended under
// the threshold or with the monitor off. No test allocates more than a few hundred MiB.
#include <gtest/gtest.h>
#include <poll.h>
#include <raio/raio.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "raio/testkit/time_scale.h"
#include "test_functions.h"

using namespace std::chrono_literals;
using raio::testkit::Scaled;
using raio::testkit::ScaledMs;
using raio_test::WaitFor;  // scales its bound itself (time_scale.h)

namespace oom_test {

// The meminfo text of a node with `total` bytes of memory, `used` of them in use.
std::string Meminfo(uint64_t used, uint64_t total) {
  return "MemTotal: " + std::to_string(total >> 10) +
         " kB\nMemAvailable: " + std::to_string((total - used) >> 10) + " kB\n";
}

// Points the symbolic link `link` at `target` in one step (a new link renamed over the
// old), so that the node never finds it missing or half made.
void PointAt(const std::string& link, const std::string& target) {
  const std::string tmp = link + ".new." + std::to_string(::getpid());
  ::unlink(tmp.c_str());
  if (::symlink(target.c_str(), tmp.c_str()) != 0 || ::rename(tmp.c_str(), link.c_str()) != 0) {
    throw std::runtime_error("cannot point " + link + " at " + target + ": " +
                             std::strerror(errno));
  }
}

// Makes the node read `reading` (meminfo text) through `link` for exactly as long as this
// process lives: the reading goes into a memory file that only this process holds open,
// and `link` points at it through /proc/<pid>/fd. The kernel closes the file when the
// process dies (SIGKILL included), before the node can reap the process, and the monitor
// measures again only after reaping its victim: so it never reads the reading of a dead
// process (the link then dangles, and the node, unable to measure, ends nobody until the
// test or the next attempt points the link elsewhere). Returns the file, which the caller
// closes if it returns normally.
int UseMemoryWhileAlive(const std::string& link, const std::string& reading) {
  int fd = ::memfd_create("raio-test-memory-reading", 0);
  if (fd < 0 ||
      ::write(fd, reading.data(), reading.size()) != static_cast<ssize_t>(reading.size())) {
    throw std::runtime_error(std::string("cannot make the memory reading: ") +
                             std::strerror(errno));
  }
  PointAt(link, "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd));
  return fd;
}

// Appends this process's pid to `attempts_file` (one line per attempt); allocates and
// touches `alloc_mib` MiB (a resident set larger than an idle worker's); when `usage_link`
// is not empty, makes the node read `reading` while it lives (UseMemoryWhileAlive); then
// waits until the file `release_file` exists or `hold_ms` passes, and returns
// `alloc_mib`. A task the monitor should end holds for long enough that returning means
// the monitor failed.
int Hog(std::string attempts_file, std::string usage_link, std::string reading, int alloc_mib,
        std::string release_file, int hold_ms) {
  std::ofstream(attempts_file, std::ios::app) << ::getpid() << "\n";
  const std::size_t bytes = static_cast<std::size_t>(alloc_mib) << 20;
  std::unique_ptr<char[]> held(bytes > 0 ? new char[bytes] : nullptr);
  if (bytes > 0) std::memset(held.get(), 1, bytes);  // resident, not just reserved
  int fd = usage_link.empty() ? -1 : UseMemoryWhileAlive(usage_link, reading);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(hold_ms);
  while (std::chrono::steady_clock::now() < deadline &&
         (release_file.empty() || !std::filesystem::exists(release_file))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (fd >= 0) ::close(fd);  // the "memory" is freed as the task ends
  return alloc_mib;
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
  // Appends the actor's pid to `attempts_file`, makes the node read `reading` while the
  // call runs in the actor's process, and returns after `hold_ms` (the monitor should end
  // the actor first).
  int Hold(std::string attempts_file, std::string usage_link, std::string reading, int hold_ms) {
    std::ofstream(attempts_file, std::ios::app) << ::getpid() << "\n";
    int fd = UseMemoryWhileAlive(usage_link, reading);
    std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
    ::close(fd);
    return hold_ms;
  }

 private:
  std::vector<std::unique_ptr<char[]>> chunks_;
};
RAIO_REMOTE(Hoarder::Create, &Hoarder::Grow, &Hoarder::Hold);

}  // namespace oom_test

namespace {

using oom_test::Hoarder;
using oom_test::Hog;
using oom_test::Meminfo;
using oom_test::PointAt;

// The node the tests make up: 16 GiB, the monitor's threshold at 12 GiB.
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kTotal = 16 * kGiB;
constexpr uint64_t kThreshold = 12 * kGiB;
constexpr uint64_t kCalmUsed = 4 * kGiB;                // well under the threshold
constexpr uint64_t kFullUsed = kTotal - kTotal / 32;    // 15.5 GiB: 97% full, over it
constexpr uint64_t kBelowUsed = kThreshold - kGiB / 4;  // just under it
// How long a task the monitor should end holds on: returning means the monitor failed.
constexpr auto kHold = 20s;
// memory_monitor_interval_ms's default.
constexpr auto kDefaultMonitorInterval = 250ms;

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}
int CountLines(const std::string& path) { return static_cast<int>(Lines(path).size()); }

// Counts the node's reads of one file (each measurement opens, reads and closes it):
// inotify's IN_CLOSE_NOWRITE on the file, whichever link it was opened through.
class ReadWatch {
 public:
  explicit ReadWatch(const std::string& path) : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {
    EXPECT_GE(fd_, 0) << std::strerror(errno);
    EXPECT_GE(::inotify_add_watch(fd_, path.c_str(), IN_CLOSE_NOWRITE), 0) << std::strerror(errno);
  }
  ~ReadWatch() { ::close(fd_); }
  ReadWatch(const ReadWatch&) = delete;
  ReadWatch& operator=(const ReadWatch&) = delete;

  // The reads since the last call (waiting at most `timeout` for the first one).
  int Take(std::chrono::milliseconds timeout = 0ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return 0;
    int n = 0;
    alignas(inotify_event) char buf[4096];
    for (ssize_t len; (len = ::read(fd_, buf, sizeof(buf))) > 0;) {
      for (char* at = buf; at < buf + len;) {
        auto* event = reinterpret_cast<inotify_event*>(at);
        if (event->mask & IN_CLOSE_NOWRITE) ++n;
        at += sizeof(inotify_event) + event->len;
      }
    }
    return n;
  }
  // Waits until the file has been read `n` more times; false when `timeout` passes first.
  bool WaitForReads(int n, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (n > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) return false;
      n -= Take(left);
    }
    return true;
  }

 private:
  int fd_;
};

class MemoryMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "raio-oom-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    attempts_ = dir_ + "/attempts";
    usage_ = dir_ + "/usage";
    calm_ = WriteReading("calm", kCalmUsed);
    PointAt(usage_, calm_);
  }
  void TearDown() override {
    raio::Shutdown();
    std::filesystem::remove_all(dir_);
  }
  // A file in the test's directory holding the reading of `used` bytes of kTotal.
  std::string WriteReading(const std::string& name, uint64_t used) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << Meminfo(used, kTotal);
    return path;
  }
  // The embedded cluster, its node measuring what usage_ points at.
  void StartCluster(uint64_t threshold_bytes) {
    raio::InitOptions options;
    options.num_cpus = 2;
    options.memory_usage_threshold_bytes = threshold_bytes;
    options.system_config["memory_usage_file_path"] = usage_;
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
  // "(pid P, ": how the monitor's message names the process it ended.
  static std::string PidPart(const std::string& pid) { return "(pid " + pid + ", "; }

  std::string dir_;
  std::string attempts_;
  std::string usage_;  // the link the node reads
  std::string calm_;
};

TEST_F(MemoryMonitorTest, EndsTheHungryTaskRetriesItThenThrowsOutOfMemoryWithTheFigures) {
  StartCluster(kThreshold);
  // Each attempt makes the node 97% full while it runs; the monitor must end both.
  auto ref = raio::Task(Hog).SetMaxRetries(1).Remote(attempts_, usage_, Meminfo(kFullUsed, kTotal),
                                                     64, std::string(), ScaledMs(kHold));
  std::string message;
  try {
    ref.Get();
    FAIL() << "Hog returned although it should have been ended";
  } catch (const raio::OutOfMemoryError& e) {
    message = e.what();
  }
  const std::vector<std::string> attempts = Lines(attempts_);
  ASSERT_EQ(attempts.size(), 2u);
  for (const std::string& part :
       {std::string("Hog ran out of memory"), std::string("memory monitor of node"),
        PidPart(attempts[1]), std::string("resident"), std::string("GiB"),
        // The figures the node read from the file, and the threshold it was given.
        "(" + std::to_string(kFullUsed) + " bytes) of ", "(" + std::to_string(kTotal) + " bytes)",
        std::string("crossed the threshold"), "(" + std::to_string(kThreshold) + " bytes)",
        "measured from " + usage_, std::string("2 attempts were made")}) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
  // The node survived and runs tasks once its memory is back; the ended leases gave their
  // resources back.
  PointAt(usage_, calm_);
  EXPECT_EQ(raio::Task(raio_test::Add).Remote(2, 3).Get(), 5);
  ExpectResourcesBackToTotals();
}

TEST_F(MemoryMonitorTest, EndsTheWorkerWithTheLargestResidentSet) {
  StartCluster(kThreshold);
  // A bystander holds a lease with little memory until released...
  const std::string bystander_attempts = dir_ + "/bystander";
  const std::string release = dir_ + "/release";
  auto bystander = raio::Task(Hog).SetMaxRetries(0).Remote(
      bystander_attempts, std::string(), std::string(), 0, release, ScaledMs(kHold));
  ASSERT_TRUE(WaitFor([&] { return CountLines(bystander_attempts) == 1; }, 30s));
  // ...while a hog with 256 MiB resident makes the node 97% full: the hog is ended.
  auto hog = raio::Task(Hog).SetMaxRetries(0).Remote(attempts_, usage_, Meminfo(kFullUsed, kTotal),
                                                     256, std::string(), ScaledMs(kHold));
  std::string message;
  try {
    hog.Get();
    FAIL() << "Hog returned although it should have been ended";
  } catch (const raio::OutOfMemoryError& e) {
    message = e.what();
  }
  ASSERT_EQ(CountLines(attempts_), 1);
  EXPECT_NE(message.find(PidPart(Lines(attempts_)[0])), std::string::npos) << message;
  EXPECT_EQ(message.find(PidPart(Lines(bystander_attempts)[0])), std::string::npos) << message;
  // The bystander was left alone: released, it returns from its only attempt.
  PointAt(usage_, calm_);
  std::ofstream(release) << "go\n";
  EXPECT_EQ(bystander.Get(), 0);
  EXPECT_EQ(CountLines(bystander_attempts), 1);
  ExpectResourcesBackToTotals();
}

TEST_F(MemoryMonitorTest, OutOfMemoryIsAWorkerCrash) {
  StartCluster(kThreshold);
  auto ref = raio::Task(Hog).SetMaxRetries(0).Remote(attempts_, usage_, Meminfo(kFullUsed, kTotal),
                                                     64, std::string(), ScaledMs(kHold));
  EXPECT_THROW(ref.Get(), raio::WorkerCrashedError);
  EXPECT_EQ(CountLines(attempts_), 1);
}

TEST_F(MemoryMonitorTest, ACrashIsStillAPlainWorkerCrash) {
  StartCluster(kThreshold);
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
  // The node reads a use just under the threshold the whole time.
  const std::string below = WriteReading("below", kBelowUsed);
  PointAt(usage_, below);
  ReadWatch reads(below);
  StartCluster(kThreshold);
  const std::string release = dir_ + "/release";
  auto ref = raio::Task(Hog).SetMaxRetries(0).Remote(attempts_, std::string(), std::string(), 16,
                                                     release, ScaledMs(kHold));
  ASSERT_TRUE(WaitFor([&] { return CountLines(attempts_) == 1; }, 30s));
  // The task is running (leased): once the node has measured twice more, it has seen the
  // reading while it could end the task, and did not.
  reads.Take();
  EXPECT_TRUE(reads.WaitForReads(2, Scaled(10s))) << "the node stopped measuring";
  std::ofstream(release) << "go\n";
  EXPECT_EQ(ref.Get(), 16);
  EXPECT_EQ(CountLines(attempts_), 1);
  ExpectResourcesBackToTotals();
}

TEST_F(MemoryMonitorTest, IntervalZeroTurnsTheMonitorOff) {
  const std::string full = WriteReading("full", kFullUsed);
  PointAt(usage_, full);
  ReadWatch reads(full);
  ::setenv("RAIO_MEMORY_MONITOR_INTERVAL_MS", "0", 1);
  StartCluster(kThreshold);
  ::unsetenv("RAIO_MEMORY_MONITOR_INTERVAL_MS");
  // The node reads 97% full while the task holds its lease for four of the default
  // intervals (at least); a monitor that ran would have measured and ended it. The monitor
  // being off, there is no event to wait for: the window is the task's hold.
  const auto hold = Scaled(4 * kDefaultMonitorInterval);
  EXPECT_EQ(raio::Task(Hog)
                .SetMaxRetries(0)
                .Remote(attempts_, std::string(), std::string(), 16, std::string(),
                        static_cast<int>(hold.count()))
                .Get(),
            16);
  EXPECT_EQ(CountLines(attempts_), 1);
  EXPECT_EQ(reads.Take(), 0) << "the node measured its memory although the monitor is off";
}

// Makes the actor hold the node 97% full until it is ended; returns the ActorDiedError's
// message ("" if Hold returned, which fails the test).
std::string HoldUntilEnded(raio::ActorHandle<Hoarder>& hoarder, const std::string& attempts,
                           const std::string& usage) {
  try {
    hoarder.Task(&Hoarder::Hold)
        .Remote(attempts, usage, Meminfo(kFullUsed, kTotal), ScaledMs(kHold))
        .Get();
    ADD_FAILURE() << "Hold returned although the actor should have been ended";
  } catch (const raio::ActorDiedError& e) {
    return e.what();
  }
  return "";
}

TEST_F(MemoryMonitorTest, ActorEndedByTheMonitorDiesWithTheFiguresAsCause) {
  StartCluster(kThreshold);
  auto hoarder = raio::Actor(Hoarder::Create).SetMaxRestarts(0).Remote();
  std::string message = HoldUntilEnded(hoarder, attempts_, usage_);
  EXPECT_NE(message.find("memory monitor of node"), std::string::npos) << message;
  EXPECT_NE(message.find("resident"), std::string::npos) << message;
  ASSERT_EQ(CountLines(attempts_), 1);
  EXPECT_NE(message.find(PidPart(Lines(attempts_)[0])), std::string::npos) << message;
  PointAt(usage_, calm_);
  EXPECT_EQ(raio::Task(raio_test::Add).Remote(1, 1).Get(), 2);
  ExpectResourcesBackToTotals();
}

TEST_F(MemoryMonitorTest, RestartedActorsLostCallNamesTheMonitor) {
  StartCluster(kThreshold);
  auto hoarder = raio::Actor(Hoarder::Create).SetMaxRestarts(1).Remote();
  std::string message = HoldUntilEnded(hoarder, attempts_, usage_);
  EXPECT_NE(message.find("was restarted"), std::string::npos) << message;
  EXPECT_NE(message.find("memory monitor of node"), std::string::npos) << message;
  // The restarted actor answers.
  PointAt(usage_, calm_);
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

TEST(MemoryMonitorOptionsTest, RejectsAUsageFilePathThatIsNotAbsolute) {
  raio::InitOptions options;
  options.system_config["memory_usage_file_path"] = "relative/meminfo";
  try {
    raio::Init(options);
    raio::Shutdown();
    ADD_FAILURE() << "Init accepted a relative memory_usage_file_path";
  } catch (const raio::InvalidUsageError& e) {
    EXPECT_NE(std::string(e.what()).find("memory_usage_file_path"), std::string::npos) << e.what();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);  // never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
