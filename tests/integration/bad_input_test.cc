// Bad input, in one place: each case gives a clear, typed error (naming the offending value,
// name or limit) within seconds, and loses nothing: no hang, no daemon or worker crash, no
// silent wrong answer, and the cluster keeps working afterwards (a normal task succeeds;
// where the node was involved, its resources are back to their totals).
//
// Limits exercised with small values: the object store is 32 MiB (an object holds at most
// its capacity less a 64-byte header) and RAIO_MAX_REQUEST_BYTES is 4 MiB (set in main;
// each raio::Init reads the environment, and the node passes the value to the workers).
// BAD_INPUT_VERBOSE=1 prints every error message checked.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <raio/raio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>

#include "harness.h"
#include "raio/testkit/time_scale.h"
#include "test_functions.h"

using namespace raio_test;
using namespace std::chrono_literals;
using raio::testkit::Scaled;
using raio::testkit::ScaledMs;

namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr uint64_t kStoreBytes = 32 * kMiB;
constexpr uint64_t kMaxObjectBytes = kStoreBytes - 64;  // the store's capacity less a header
constexpr uint64_t kMaxRequestBytes = 4 * kMiB;

// Registered in the driver only (in main): workers, which run this executable without
// that line, do not have it.
int DriverOnly(int x) { return x; }

// An actor whose factory and methods take and return blobs.
class Sink {
 public:
  static Sink* Create() { return new Sink(); }
  static Sink* CreateWith(std::vector<uint8_t> blob) { return new Sink(blob.size()); }
  int64_t Size(std::vector<uint8_t> blob) { return static_cast<int64_t>(blob.size()) + base_; }
  std::vector<uint8_t> Make(int64_t n) { return std::vector<uint8_t>(n, 7); }
  int Pid() { return static_cast<int>(::getpid()); }

 private:
  explicit Sink(int64_t base = 0) : base_(base) {}
  int64_t base_;
};
RAIO_REMOTE(Sink::Create, Sink::CreateWith, &Sink::Size, &Sink::Make, &Sink::Pid);

// Whether `text` contains every one of `parts`; prints the message otherwise.
::testing::AssertionResult Mentions(const std::string& text,
                                    std::initializer_list<std::string> parts) {
  for (const auto& p : parts) {
    if (text.find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "'" << p << "' missing from: " << text;
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs `fn`, expects it to throw E, and returns the message ("" and a failure otherwise).
template <typename E, typename Fn>
std::string ErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    if (std::getenv("BAD_INPUT_VERBOSE")) std::fprintf(stderr, "MSG %s\n", e.what());
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another type: " << typeid(e).name() << ": " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// A TCP port on 127.0.0.1 that was bound and closed: nothing listens there.
int ClosedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Polls until the local node has all its resources free again (leases go back after an
// idle moment), or Scaled(10 s) pass.
bool ResourcesBackToTotals() {
  raio::internal::NodeResourceStats stats;
  if (WaitFor(
          [&] {
            stats = raio::internal::GetNodeResourceStats();
            return stats.available == stats.total;
          },
          10s)) {
    return true;
  }
  for (const auto& [name, total] : stats.total) {
    ADD_FAILURE() << name << ": " << stats.available[name] << " of " << total << " free";
  }
  return false;
}

// The embedded cluster used by most cases: 2 CPUs, 2 GPUs, one "slot", a 32 MiB store.
class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    raio::InitOptions options;
    options.num_cpus = 2;
    options.num_gpus = 2;
    options.resources = {{"slot", 1}};
    options.object_store_memory_bytes = kStoreBytes;
    raio::Init(options);
  }
  void TearDown() override { raio::Shutdown(); }

  // The cluster still works: a normal task succeeds and the node is idle again.
  void ExpectClusterWorks() {
    EXPECT_EQ(raio::Task(Add).Remote(20, 22).Get(Scaled(10s)), 42);
    EXPECT_TRUE(ResourcesBackToTotals());
  }
};

// --- Reaching a cluster -------------------------------------------------------------

TEST(BadInputClusterTest, AddressWithNothingListeningFailsWithinSeconds) {
  raio::InitOptions options;
  options.address = "127.0.0.1:" + std::to_string(ClosedPort());
  auto start = std::chrono::steady_clock::now();
  std::string msg = ErrorOf<raio::ClusterUnavailableError>([&] { raio::Init(options); });
  // A deadline, not a speed claim: Init must not wait for a cluster to appear.
  EXPECT_LT(std::chrono::steady_clock::now() - start, Scaled(10s));
  EXPECT_TRUE(Mentions(msg, {options.address, "raio start --head"}));
  EXPECT_FALSE(raio::IsInitialized());
  // Nothing is left half-initialized: an embedded cluster starts and runs a task.
  raio::InitOptions embedded;
  embedded.num_cpus = 1;
  raio::Init(embedded);
  EXPECT_EQ(raio::Task(Add).Remote(1, 2).Get(Scaled(10s)), 3);
  raio::Shutdown();
}

TEST(BadInputClusterTest, AutoAddressWithNoClusterRunningFailsWithinSeconds) {
  // A private TMPDIR: the cluster record `raio start` writes lives in $TMPDIR/raio.
  const char* old_tmp = std::getenv("TMPDIR");
  std::string saved = old_tmp ? old_tmp : "";
  std::string tmp =
      (std::filesystem::temp_directory_path() / ("raio-bad-input-" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(tmp + "/raio");
  ::setenv("TMPDIR", tmp.c_str(), 1);
  const std::string record = tmp + "/raio/current_cluster";
  raio::InitOptions options;
  options.address = "auto";
  auto expect_fast_failure = [&](std::initializer_list<std::string> parts) {
    auto start = std::chrono::steady_clock::now();
    std::string msg = ErrorOf<raio::ClusterUnavailableError>([&] { raio::Init(options); });
    EXPECT_LT(std::chrono::steady_clock::now() - start, Scaled(10s));  // a deadline, as above
    EXPECT_TRUE(Mentions(msg, parts));
    EXPECT_FALSE(raio::IsInitialized());
  };

  // 1. No cluster was ever started here.
  expect_fast_failure({"auto", record, "raio start --head"});
  // The same through RAIO_ADDRESS.
  ::setenv("RAIO_ADDRESS", "auto", 1);
  {
    std::string msg = ErrorOf<raio::ClusterUnavailableError>([] { raio::Init(); });
    EXPECT_TRUE(Mentions(msg, {record}));
  }
  ::unsetenv("RAIO_ADDRESS");

  // 2. A stale record: its daemon (a process that has exited) is gone.
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  std::string address = "127.0.0.1:" + std::to_string(ClosedPort());
  std::ofstream(record) << "{\"address\":\"" << address << "\",\"pid\":" << dead << "}\n";
  expect_fast_failure({address, "not running", std::to_string(dead)});

  // 3. A live process in the record, but nothing listens at the address.
  std::ofstream(record) << "{\"address\":\"" << address << "\",\"pid\":" << ::getpid() << "}\n";
  expect_fast_failure({address, "cannot reach"});

  // 4. A record that is not one.
  std::ofstream(record) << "not json\n";
  expect_fast_failure({record, "not a raio cluster record"});

  if (saved.empty()) {
    ::unsetenv("TMPDIR");
  } else {
    ::setenv("TMPDIR", saved.c_str(), 1);
  }
  std::filesystem::remove_all(tmp);
  raio::InitOptions embedded;
  embedded.num_cpus = 1;
  raio::Init(embedded);
  EXPECT_EQ(raio::Task(Add).Remote(1, 2).Get(Scaled(10s)), 3);
  raio::Shutdown();
}

// --- Lifecycle ----------------------------------------------------------------------

TEST(BadInputLifecycleTest, CallsBeforeInitAreRefused) {
  std::string msg = ErrorOf<raio::InvalidUsageError>([] { raio::Task(Add).Remote(1, 2); });
  // "not initialized", or "shut down" when an earlier test of this program ran Init.
  EXPECT_TRUE(Mentions(msg, {"Remote", "raio::Init()"}));
  msg = ErrorOf<raio::InvalidUsageError>([] { raio::Put(1); });
  EXPECT_TRUE(Mentions(msg, {"raio::Put", "raio::Init()"}));
}

TEST(BadInputLifecycleTest, InitTwiceIsRefusedAndTheFirstClusterKeepsWorking) {
  raio::InitOptions options;
  options.num_cpus = 1;
  raio::Init(options);
  std::string msg = ErrorOf<raio::InvalidUsageError>([&] { raio::Init(options); });
  EXPECT_TRUE(Mentions(msg, {"raio::Init called twice", "raio::Shutdown()"}));
  msg = ErrorOf<raio::InvalidUsageError>([] { raio::Init(); });
  EXPECT_TRUE(Mentions(msg, {"twice"}));
  EXPECT_TRUE(raio::IsInitialized());
  EXPECT_EQ(raio::Task(Add).Remote(2, 3).Get(Scaled(10s)), 5);
  raio::Shutdown();
}

TEST(BadInputLifecycleTest, GetPutAndRemoteAfterShutdownAreRefusedClearly) {
  raio::InitOptions options;
  options.num_cpus = 1;
  raio::Init(options);
  auto done = raio::Task(Add).Remote(1, 1);
  EXPECT_EQ(done.Get(), 2);
  // Still running at Shutdown, and far longer than the deadline below.
  auto pending = raio::Task(SleepMs).Remote(static_cast<int>(ScaledMs(60s)));
  auto put = raio::Put(std::string("kept?"));
  raio::Shutdown();
  auto start = std::chrono::steady_clock::now();
  for (const auto* ref : {&done, &pending}) {
    std::string msg = ErrorOf<raio::InvalidUsageError>([&] { ref->Get(); });
    EXPECT_TRUE(Mentions(msg, {"ObjectRef::Get", "shut down", "raio::Init()"}));
  }
  std::string msg = ErrorOf<raio::InvalidUsageError>([&] { put.Get(); });
  EXPECT_TRUE(Mentions(msg, {"shut down"}));
  // A deadline, not a speed claim: no waiting for the task.
  EXPECT_LT(std::chrono::steady_clock::now() - start, Scaled(5s));
  msg = ErrorOf<raio::InvalidUsageError>([] { raio::Put(3); });
  EXPECT_TRUE(Mentions(msg, {"raio::Put", "shut down"}));
  msg = ErrorOf<raio::InvalidUsageError>([] { raio::Task(Add).Remote(1, 1); });
  EXPECT_TRUE(Mentions(msg, {"Remote", "shut down"}));
  msg = ErrorOf<raio::InvalidUsageError>([] { raio::Actor(Sink::Create).Remote(); });
  EXPECT_TRUE(Mentions(msg, {"shut down"}));
  raio::Shutdown();  // idempotent
  // A new Init works; the old refs stay unusable rather than reading the new cluster.
  raio::Init(options);
  EXPECT_EQ(raio::Task(Add).Remote(2, 1).Get(Scaled(10s)), 3);
  EXPECT_THROW(done.Get(), raio::ObjectLostError);
  raio::Shutdown();
}

// --- Resources ----------------------------------------------------------------------

TEST(BadInputLifecycleTest, InvalidInitResourcesAreRejected) {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  auto expect_rejected = [](const raio::InitOptions& options,
                            std::initializer_list<std::string> parts) {
    std::string msg = ErrorOf<raio::InvalidUsageError>([&] { raio::Init(options); });
    EXPECT_TRUE(Mentions(msg, parts));
    EXPECT_FALSE(raio::IsInitialized());
  };
  raio::InitOptions o;
  o.num_cpus = -1;
  expect_rejected(o, {"raio::Init", "'CPU'", "-1"});
  o.num_cpus = nan;
  expect_rejected(o, {"'CPU'", "nan"});
  o.num_cpus = inf;
  expect_rejected(o, {"'CPU'", "inf"});
  o = {};
  o.num_gpus = -2;
  expect_rejected(o, {"'GPU'", "-2"});
  o.num_gpus = nan;
  expect_rejected(o, {"num_gpus", "nan"});
  o.num_gpus = 1.5;
  expect_rejected(o, {"num_gpus", "whole number", "1.5"});
  o = {};
  o.memory_bytes = -1;
  expect_rejected(o, {"'memory'", "-1"});
  o = {};
  o.resources = {{"slot", -3}};
  expect_rejected(o, {"'slot'", "-3"});
  o.resources = {{"slot", nan}};
  expect_rejected(o, {"'slot'", "nan"});
  o.resources = {{"CPU", 4}};
  expect_rejected(o, {"'CPU' is not a custom resource"});
  o = {};
  o.object_store_memory_bytes = 1000;
  expect_rejected(o, {"object store", "1 MiB"});

  // Zero CPUs is a valid node (as in Ray), but no default task fits it: a clear error at
  // Get, not a hang; zero-CPU tasks still run.
  o = {};
  o.num_cpus = 0;
  raio::Init(o);
  std::string msg =
      ErrorOf<raio::UnschedulableError>([] { raio::Task(Add).Remote(1, 2).Get(Scaled(10s)); });
  EXPECT_TRUE(Mentions(msg, {"CPU: 1"}));
  EXPECT_EQ(raio::Task(Add).SetResource("CPU", 0).Remote(1, 2).Get(Scaled(10s)), 3);
  raio::Shutdown();
}

TEST_F(BadInputTest, InvalidTaskResourceValuesAreRefusedAtRemote) {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  std::string msg =
      ErrorOf<raio::InvalidUsageError>([] { raio::Task(Add).SetResource("CPU", -1).Remote(1, 2); });
  EXPECT_TRUE(Mentions(msg, {"Add", "'CPU'", "-1"}));
  msg = ErrorOf<raio::InvalidUsageError>(
      [&] { raio::Task(Add).SetResource("CPU", nan).Remote(1, 2); });
  EXPECT_TRUE(Mentions(msg, {"'CPU'", "nan"}));
  msg = ErrorOf<raio::InvalidUsageError>(
      [&] { raio::Task(Add).SetResource("GPU", inf).Remote(1, 2); });
  EXPECT_TRUE(Mentions(msg, {"'GPU'", "inf"}));
  msg = ErrorOf<raio::InvalidUsageError>([] {
    raio::Task(Add).SetResources({{"CPU", 1}, {"slot", -0.5}}).Remote(1, 2);
  });
  EXPECT_TRUE(Mentions(msg, {"'slot'", "-0.5"}));
  msg = ErrorOf<raio::InvalidUsageError>([] { raio::Task(Add).SetResource("", 1).Remote(1, 2); });
  EXPECT_TRUE(Mentions(msg, {"name must not be empty"}));
  msg = ErrorOf<raio::InvalidUsageError>(
      [] { raio::Actor(Sink::Create).SetResource("CPU", -1).Remote(); });
  EXPECT_TRUE(Mentions(msg, {"actor", "'CPU'", "-1"}));
  ExpectClusterWorks();
}

TEST_F(BadInputTest, DemandsNoNodeCanMeetFailAtGetNamingDemandAndCluster) {
  auto start = std::chrono::steady_clock::now();
  std::string msg = ErrorOf<raio::UnschedulableError>(
      [] { raio::Task(Add).SetResource("TPU", 1).Remote(1, 2).Get(Scaled(10s)); });
  EXPECT_TRUE(Mentions(msg, {"run Add", "TPU: 1", "CPU: 2", "GPU: 2", "slot: 1"}));
  msg = ErrorOf<raio::UnschedulableError>(
      [] { raio::Task(Add).SetResource("GPU", 3).Remote(1, 2).Get(Scaled(10s)); });
  EXPECT_TRUE(Mentions(msg, {"GPU: 3", "GPU: 2"}));
  msg = ErrorOf<raio::UnschedulableError>(
      [] { raio::Task(Add).SetResource("CPU", 100).Remote(1, 2).Get(Scaled(10s)); });
  EXPECT_TRUE(Mentions(msg, {"CPU: 100", "CPU: 2"}));
  msg = ErrorOf<raio::UnschedulableError>(
      [] { raio::Task(Add).SetResource("slot", 2).Remote(1, 2).Get(Scaled(10s)); });
  EXPECT_TRUE(Mentions(msg, {"slot: 2", "slot: 1"}));
  // A deadline, not a speed claim: the four fail without waiting out their Get timeouts.
  EXPECT_LT(std::chrono::steady_clock::now() - start, Scaled(10s));
  // An actor no node can host fails at creation.
  msg = ErrorOf<raio::UnschedulableError>(
      [] { raio::Actor(Sink::Create).SetResource("GPU", 8).Remote(); });
  EXPECT_TRUE(Mentions(msg, {"actor", "Sink", "GPU: 8"}));
  ExpectClusterWorks();
}

// --- Size limits --------------------------------------------------------------------

TEST_F(BadInputTest, PutAboveTheObjectLimitIsRefusedNamingSizeAndLimit) {
  const std::size_t n = kMaxObjectBytes + 1;
  std::string msg =
      ErrorOf<raio::ObjectStoreFullError>([&] { raio::Put(std::vector<uint8_t>(n)); });
  EXPECT_TRUE(Mentions(msg, {std::to_string(n), std::to_string(kMaxObjectBytes), "capacity",
                             "object_store_memory_bytes"}));
  // A serialized (msgpack) value too: a string of 40 MiB.
  msg = ErrorOf<raio::ObjectStoreFullError>([] { raio::Put(std::string(40 * kMiB, 'x')); });
  EXPECT_TRUE(Mentions(msg, {std::to_string(kMaxObjectBytes)}));
  // Exactly at the limit fits (the store is empty).
  auto fits = raio::Put(std::vector<uint8_t>(kMaxObjectBytes, 1));
  EXPECT_EQ(fits.Get().size(), kMaxObjectBytes);
  ExpectClusterWorks();
}

TEST_F(BadInputTest, TaskArgumentAboveTheObjectLimitIsRefusedAtRemote) {
  std::vector<uint8_t> big = MakeBytes(40 * kMiB, 3);
  std::string msg = ErrorOf<raio::ObjectStoreFullError>([&] { raio::Task(Checksum).Remote(big); });
  EXPECT_TRUE(Mentions(msg, {"argument 1 of", "Checksum", std::to_string(big.size()),
                             std::to_string(kMaxObjectBytes)}));
  // Nothing was left in the store, and a large argument under the limit still works.
  EXPECT_EQ(raio::internal::GetObjectStats().store_objects, 0u);
  std::vector<uint8_t> ok = MakeBytes(8 * kMiB, 4);
  EXPECT_EQ(raio::Task(Checksum).Remote(ok).Get(Scaled(10s)), ChecksumBytes(ok.data(), ok.size()));
  ExpectClusterWorks();
}

TEST_F(BadInputTest, ResultAboveTheObjectLimitFailsAtGetAndTheWorkerLivesOn) {
  const int64_t n = 40 * kMiB;
  std::string msg = ErrorOf<raio::ObjectStoreFullError>(
      [&] { raio::Task(MakeBytes).SetMaxRetries(0).Remote(n, 1).Get(Scaled(20s)); });
  EXPECT_TRUE(Mentions(
      msg, {"result of", "MakeBytes", std::to_string(n), std::to_string(kMaxObjectBytes)}));
  // The same from an actor method: the actor's process survives and answers again.
  auto sink = raio::Actor(Sink::Create).Remote();
  int pid = sink.Task(&Sink::Pid).Remote().Get(Scaled(10s));
  msg = ErrorOf<raio::ObjectStoreFullError>(
      [&] { sink.Task(&Sink::Make).Remote(n).Get(Scaled(20s)); });
  EXPECT_TRUE(Mentions(msg, {"Make", std::to_string(n), std::to_string(kMaxObjectBytes)}));
  EXPECT_EQ(sink.Task(&Sink::Pid).Remote().Get(Scaled(10s)), pid);
  EXPECT_EQ(sink.Task(&Sink::Make).Remote(int64_t{2 * kMiB}).Get(Scaled(10s)).size(),
            size_t(2 * kMiB));
  sink.Kill();
  ExpectClusterWorks();
}

TEST_F(BadInputTest, InlineArgumentsAboveTheRequestLimitAreRefusedAtRemote) {
  // Actor calls and factories carry by-value arguments inline, in one request.
  std::vector<uint8_t> big(kMaxRequestBytes + kMiB, 5);
  auto sink = raio::Actor(Sink::Create).Remote();
  std::string msg = ErrorOf<raio::InvalidUsageError>([&] { sink.Task(&Sink::Size).Remote(big); });
  EXPECT_TRUE(Mentions(msg, {"Size", std::to_string(kMaxRequestBytes), "ObjectRef"}));
  msg = ErrorOf<raio::InvalidUsageError>([&] { raio::Actor(Sink::CreateWith).Remote(big); });
  EXPECT_TRUE(Mentions(msg, {"CreateWith", std::to_string(kMaxRequestBytes)}));
  // The way around: Put it and pass the ref (read from the store, not inline).
  auto ref = raio::Put(big);
  EXPECT_EQ(sink.Task(&Sink::Size).Remote(ref).Get(Scaled(10s)), static_cast<int64_t>(big.size()));
  // A task's large by-value argument goes to the store, so the request limit is no bound.
  EXPECT_EQ(raio::Task(Checksum).Remote(big).Get(Scaled(10s)),
            ChecksumBytes(big.data(), big.size()));
  // A list of small objects (each under 100 KiB, so not in the store) is copied into the
  // task's request when its refs resolve: 50 x 96 KB is above 4 MiB.
  std::vector<raio::ObjectRef<std::vector<double>>> small;
  for (int i = 0; i < 50; ++i) small.push_back(raio::Put(std::vector<double>(12000, i)));
  msg = ErrorOf<raio::InvalidUsageError>(
      [&] { raio::Task(CountElements).Remote(small).Get(Scaled(10s)); });
  EXPECT_TRUE(Mentions(msg, {"CountElements", std::to_string(kMaxRequestBytes)}));
  small.resize(20);
  EXPECT_EQ(raio::Task(CountElements).Remote(small).Get(Scaled(10s)), 20 * 12000);
  sink.Kill();
  ExpectClusterWorks();
}

// --- Names and types ----------------------------------------------------------------

TEST_F(BadInputTest, FunctionTheWorkerLacksFailsAtGetNamingIt) {
  std::string msg = ErrorOf<raio::RemoteFunctionNotFoundError>(
      [] { raio::Task(DriverOnly).Remote(1).Get(Scaled(10s)); });
  EXPECT_TRUE(Mentions(msg, {"DriverOnly"}));
  ExpectClusterWorks();
}

TEST_F(BadInputTest, GetActorWithTheWrongTypeIsRefusedNamingBothTypes) {
  auto sink = raio::Actor(Sink::Create).SetName("the-sink").Remote();
  std::string msg =
      ErrorOf<raio::InvalidUsageError>([] { raio::GetActor<Accumulator>("the-sink"); });
  EXPECT_TRUE(Mentions(msg, {"the-sink", "Sink", "Accumulator"}));
  auto same = raio::GetActor<Sink>("the-sink");
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(same->Task(&Sink::Size).Remote(std::vector<uint8_t>(3)).Get(Scaled(10s)), 3);
  sink.Kill();
  ExpectClusterWorks();
}

TEST_F(BadInputTest, NegativeGetTimeoutIsRefused) {
  auto ref = raio::Task(Add).Remote(1, 2);
  std::string msg = ErrorOf<raio::InvalidUsageError>([&] { ref.Get(std::chrono::seconds(-1)); });
  EXPECT_TRUE(Mentions(msg, {"timeout must be >= 0", "-1000000"})) << msg;
  EXPECT_EQ(ref.Get(), 3);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);  // never returns
  ::setenv("RAIO_MAX_REQUEST_BYTES", std::to_string(kMaxRequestBytes).c_str(), 1);
  raio::internal::RegisterOne("DriverOnly", "driver-only", &DriverOnly);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
