// Chaos suite (ctest label `chaos`): a standalone cluster started with the raio CLI runs a
// mixed workload of 10,000 tasks and actor calls while a killer thread SIGKILLs random
// worker processes (found through `raio status --json`) at intervals. Every result must be
// right, and afterwards no object, lease, worker or resource may be left behind.
//
// Knobs (environment): RAIO_CHAOS_KILL_INTERVAL_MS (default 150, times the test time scale),
// RAIO_CHAOS_KILLS_PER_WAVE (default 4, of 10 waves), RAIO_CHAOS_SEED.
#include <gtest/gtest.h>
#include <raio/raio.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <thread>

#include "harness.h"
#include "raio/testkit/time_scale.h"
#include "test_functions.h"

using namespace std::chrono_literals;
using nlohmann::json;
using raio_test::RunCommand;
using raio_test::WaitFor;

namespace {

// --- Remote functions and the actor of the workload -------------------------------------

int64_t ChaosSquare(int64_t x) { return x * x; }

// Sum of a store-backed array argument plus `i`.
double ChaosSumPlus(std::vector<double> values, int64_t i) {
  return std::accumulate(values.begin(), values.end(), 0.0) + static_cast<double>(i);
}

// A result large enough (160 KB) to live in the shared-memory store.
std::vector<double> ChaosBigResult(int64_t i) {
  return std::vector<double>(20000, static_cast<double>(i));
}

// Sum of the first element of each object a list of refs (nested in the argument) points to.
int64_t ChaosSumRefs(std::vector<raio::ObjectRef<std::vector<int64_t>>> refs) {
  int64_t sum = 0;
  for (auto& r : refs) sum += r.Get().at(0);
  return sum;
}

// Submits `n` child tasks from inside a task (this worker owns their results) and sums
// their squares: 1^2 + ... + n^2.
int64_t ChaosNestedSum(int64_t n) {
  std::vector<raio::ObjectRef<int64_t>> refs;
  for (int64_t k = 1; k <= n; ++k) {
    refs.push_back(raio::Task(ChaosSquare).SetMaxRetries(-1).Remote(k));
  }
  int64_t sum = 0;
  for (auto v : raio::Get(refs)) sum += v;
  return sum;
}

using SmallRef = raio::ObjectRef<std::vector<int64_t>>;

// Returns the reference it was given: the result holds a reference to an object of the
// caller's caller, registered with that owner on the caller's behalf.
SmallRef ChaosEcho(SmallRef ref) { return ref; }

// Echoes each ref through a child task, then sums the first elements they point to.
int64_t ChaosNestedEchoSum(std::vector<SmallRef> refs) {
  std::vector<raio::ObjectRef<SmallRef>> echoed;
  for (auto& r : refs) echoed.push_back(raio::Task(ChaosEcho).SetMaxRetries(-1).Remote(r));
  int64_t sum = 0;
  for (auto& back : raio::Get(echoed)) sum += back.Get().at(0);
  return sum;
}

class Scaler {
 public:
  explicit Scaler(int64_t factor) : factor_(factor) {}
  static Scaler* Create(int64_t factor) { return new Scaler(factor); }
  // Stateless in its result so that restarts do not change the answer.
  int64_t Scale(int64_t x) {
    ++calls_;
    return x * factor_;
  }

 private:
  int64_t factor_;
  int64_t calls_ = 0;
};

RAIO_REMOTE(ChaosSquare, ChaosSumPlus, ChaosBigResult, ChaosSumRefs, ChaosNestedSum, ChaosEcho,
            ChaosNestedEchoSum, Scaler::Create, &Scaler::Scale);

// --- Harness ------------------------------------------------------------------------------

std::filesystem::path g_base_tmp;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoi(v);
}

class ChaosTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = g_base_tmp / ("raio-chaos-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    ::setenv("TMPDIR", dir_.c_str(), 1);
    ::unsetenv("RAIO_ADDRESS");
    auto r = RunCommand(std::string(RAIO_CLI_PATH) + " start --head --port 0 --num-cpus 4", false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto pos = r.output.find("started at ");
    ASSERT_NE(pos, std::string::npos) << r.output;
    address_ = r.output.substr(pos + 11, r.output.find('\n', pos) - pos - 11);
  }
  void TearDown() override {
    if (raio::IsInitialized()) raio::Shutdown();
    auto r = RunCommand(std::string(RAIO_CLI_PATH) + " stop", false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::filesystem::remove_all(dir_);
  }
  json Status() {
    auto r = RunCommand(std::string(RAIO_CLI_PATH) + " status --json --address " + address_,
                        /*merge_stderr=*/false);
    if (r.exit_code != 0) return json();
    return json::parse(r.output, nullptr, false);
  }

  std::filesystem::path dir_;
  std::string address_;
};

// SIGKILLs a random worker of the cluster every `interval` until stopped, as long as it has
// kills left: the test grants some per wave (Allow), so that a slow build (the sanitizers
// start a worker in about a second) still makes progress between kills instead of spending
// the run restarting workers. Only processes whose executable is this test binary are
// killed (guards against a reused pid).
class Killer {
 public:
  Killer(std::function<json()> status, std::chrono::milliseconds interval, unsigned seed)
      : status_(std::move(status)), interval_(interval), rng_(seed) {
    self_ = std::filesystem::read_symlink("/proc/self/exe");
    thread_ = std::thread([this] { Run(); });
  }
  ~Killer() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int kills() const { return kills_; }
  int actor_kills() const { return actor_kills_; }
  // Lets the killer strike `n` more times.
  void Allow(int n) { allowed_ += n; }

 private:
  void Run() {
    while (!stop_) {
      std::this_thread::sleep_for(interval_);
      if (kills_ >= allowed_) continue;
      json s = status_();
      if (!s.is_object() || s["nodes"].empty()) continue;
      std::vector<std::pair<int, bool>> victims;  // pid, hosts an actor
      for (const auto& w : s["nodes"][0]["workers"]) {
        std::string state = w.value("state", "");
        if (state == "starting") continue;
        victims.emplace_back(w.value("pid", 0), state == "actor");
      }
      if (victims.empty()) continue;
      auto [pid, actor] = victims[rng_() % victims.size()];
      std::error_code ec;
      auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
      if (pid <= 0 || ec || exe != self_) continue;
      if (::kill(pid, SIGKILL) == 0) {
        ++kills_;
        if (actor) ++actor_kills_;
      }
    }
  }

  std::function<json()> status_;
  std::chrono::milliseconds interval_;
  std::mt19937 rng_;
  std::filesystem::path self_;
  std::atomic<bool> stop_{false};
  std::atomic<int> kills_{0};
  std::atomic<int> actor_kills_{0};
  std::atomic<int> allowed_{0};
  std::thread thread_;
};

TEST_F(ChaosTest, TenThousandTasksAndActorCallsSurviveKilledWorkers) {
  raio::InitOptions options;
  options.address = address_;
  raio::Init(options);

  // Driver-owned inputs: a store-backed array and small objects referenced from inside
  // task arguments.
  std::vector<double> big(20000);
  std::iota(big.begin(), big.end(), 0.0);
  const double big_sum = std::accumulate(big.begin(), big.end(), 0.0);
  auto big_ref = raio::Put(big);
  std::vector<raio::ObjectRef<std::vector<int64_t>>> small_refs;
  for (int64_t i = 0; i < 8; ++i) small_refs.push_back(raio::Put(std::vector<int64_t>{i, -i}));
  const int64_t small_sum = 0 + 1 + 2 + 3 + 4 + 5 + 6 + 7;

  std::vector<raio::ActorHandle<Scaler>> actors;
  for (int64_t f = 2; f <= 3; ++f) {
    actors.push_back(raio::Actor(Scaler::Create)
                         .SetMaxRestarts(-1)
                         .SetMaxTaskRetries(-1)
                         .SetResources({{"CPU", 0.5}})
                         .Remote(f));
  }
  // Both actors are up before the killer starts, so that their first start is measured.
  for (auto& a : actors) ASSERT_GT(a.Task(&Scaler::Scale).Remote(1).Get(), 0);

  unsigned seed = static_cast<unsigned>(EnvInt("RAIO_CHAOS_SEED", 1234));
  // The pace of the kills (not a deadline) follows the pace of the build.
  const auto interval = std::chrono::milliseconds(
      EnvInt("RAIO_CHAOS_KILL_INTERVAL_MS", static_cast<int>(raio::testkit::ScaledMs(150ms))));
  Killer killer([this] { return Status(); }, interval, seed);

  constexpr int kWaves = 10;
  constexpr int kPerWave = 1000;  // 10 x 1,000 = 10,000 tasks and actor calls
  // Kills a wave may see at most (an optimised build reaches about 4 a wave at the default
  // interval; a sanitizer build would otherwise kill faster than workers start).
  const int kills_per_wave = EnvInt("RAIO_CHAOS_KILLS_PER_WAVE", 4);
  int checked = 0;
  auto started = std::chrono::steady_clock::now();
  for (int wave = 0; wave < kWaves; ++wave) {
    const int kills_before = killer.kills();
    killer.Allow(kills_per_wave);
    std::vector<raio::ObjectRef<int64_t>> squares, scaled, ref_sums, nested, echo_sums;
    std::vector<raio::ObjectRef<double>> sums;
    std::vector<raio::ObjectRef<std::vector<double>>> bigs;
    std::vector<int64_t> square_in, scaled_in, sums_in, bigs_in, nested_in;
    for (int k = 0; k < kPerWave; ++k) {
      int64_t i = static_cast<int64_t>(wave) * kPerWave + k;
      switch (k % 10) {
        case 0:
        case 1:
        case 2:
          squares.push_back(raio::Task(ChaosSquare).SetMaxRetries(-1).Remote(i));
          square_in.push_back(i);
          break;
        case 3:
          nested.push_back(raio::Task(ChaosNestedSum).SetMaxRetries(-1).Remote(i % 5 + 1));
          nested_in.push_back(i % 5 + 1);
          break;
        case 4:
          sums.push_back(raio::Task(ChaosSumPlus).SetMaxRetries(-1).Remote(big_ref, i));
          sums_in.push_back(i);
          break;
        case 5:
          bigs.push_back(raio::Task(ChaosBigResult).SetMaxRetries(-1).Remote(i));
          bigs_in.push_back(i);
          break;
        case 6:
          if (k % 20 == 6) {
            ref_sums.push_back(raio::Task(ChaosSumRefs).SetMaxRetries(-1).Remote(small_refs));
          } else {
            echo_sums.push_back(
                raio::Task(ChaosNestedEchoSum).SetMaxRetries(-1).Remote(small_refs));
          }
          break;
        default:
          scaled.push_back(actors[i % 2].Task(&Scaler::Scale).Remote(i));
          scaled_in.push_back(i);
      }
    }
    // The killer strikes while this wave's work is out, whatever the pace of the build
    // (workers, and the actors' at least, are there to kill).
    if (kills_per_wave > 0) {
      EXPECT_TRUE(WaitFor([&] { return killer.kills() > kills_before; }, 30s))
          << "no worker killed in wave " << wave;
    }
    auto sq = raio::Get(squares);
    for (size_t j = 0; j < sq.size(); ++j) ASSERT_EQ(sq[j], square_in[j] * square_in[j]);
    auto su = raio::Get(sums);
    for (size_t j = 0; j < su.size(); ++j) ASSERT_EQ(su[j], big_sum + sums_in[j]);
    for (size_t j = 0; j < bigs.size(); ++j) {
      auto v = bigs[j].Get();
      ASSERT_EQ(v.size(), 20000u);
      ASSERT_EQ(v.front(), static_cast<double>(bigs_in[j]));
      ASSERT_EQ(v.back(), static_cast<double>(bigs_in[j]));
    }
    auto ne = raio::Get(nested);
    for (size_t j = 0; j < ne.size(); ++j) {
      int64_t n = nested_in[j];
      ASSERT_EQ(ne[j], n * (n + 1) * (2 * n + 1) / 6);
    }
    auto rs = raio::Get(ref_sums);
    for (auto v : rs) ASSERT_EQ(v, small_sum);
    auto es = raio::Get(echo_sums);
    for (auto v : es) ASSERT_EQ(v, small_sum);
    auto sc = raio::Get(scaled);
    for (size_t j = 0; j < sc.size(); ++j) {
      ASSERT_EQ(sc[j], scaled_in[j] * (2 + scaled_in[j] % 2)) << "actor call " << scaled_in[j];
    }
    checked += static_cast<int>(sq.size() + ne.size() + su.size() + bigs.size() + rs.size() +
                                es.size() + sc.size());
  }
  killer.Stop();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::cout << "chaos: " << checked << " results checked in " << secs << " s; " << killer.kills()
            << " workers killed (" << killer.actor_kills() << " hosting actors)" << std::endl;
  EXPECT_EQ(checked, kWaves * kPerWave);
  // The killer must actually have struck, or this test tests nothing.
  EXPECT_GE(killer.kills(), 5);

  // Nothing leaks: once the driver drops its references, it owns no objects and the store
  // is empty; after the actors are killed and the driver shuts down, no worker, lease or
  // resource remains held.
  small_refs.clear();
  big_ref = raio::ObjectRef<std::vector<double>>();
  for (auto& a : actors) a.Kill();
  actors.clear();
  bool objects_freed = WaitFor(
      [] {
        auto s = raio::internal::GetObjectStats();
        return s.owned_objects == 0 && s.store_objects == 0 && s.store_used_bytes == 0;
      },
      15s);
  auto stats = raio::internal::GetObjectStats();
  EXPECT_TRUE(objects_freed) << "owned " << stats.owned_objects << ", in store "
                             << stats.store_objects << " (" << stats.store_used_bytes << " bytes)";
  raio::Shutdown();
  bool clean = WaitFor(
      [&] {
        json s = Status();
        if (!s.is_object() || s["nodes"].empty()) return false;
        const auto& n = s["nodes"][0];
        return n["workers"].empty() && n["pending_leases"].empty() &&
               n["available"]["amounts"] == n["total"]["amounts"] &&
               // uint64 fields are strings in protobuf's JSON
               n["object_store"]["num_objects"] == "0";
      },
      15s);
  EXPECT_TRUE(clean) << Status().dump(2);
  // And no worker process outlives its job: none runs this binary but the test itself.
  auto self = std::filesystem::read_symlink("/proc/self/exe");
  auto stray_workers = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::string name = e.path().filename().string();  // pids; skip "self", "thread-self"
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      if (name == std::to_string(getpid())) continue;
      std::error_code ec;
      auto exe = std::filesystem::read_symlink(e.path() / "exe", ec);
      if (!ec && exe == self) ++n;
    }
    return n;
  };
  EXPECT_TRUE(WaitFor([&] { return stray_workers() == 0; }, 10s)) << stray_workers();
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);  // never returns
  g_base_tmp = std::filesystem::temp_directory_path();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
