// Integration tests against a standalone cluster started with the raio CLI: drivers are
// separate processes (this binary in a scenario mode) joining via RAIO_ADDRESS.
#include <gtest/gtest.h>
#include <raio/raio.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "raio/testkit/time_scale.h"
#include "scenario_main.h"
#include "test_functions.h"

using namespace raio_test;
using namespace std::chrono_literals;
using nlohmann::json;
using raio::testkit::Scaled;
using raio::testkit::ScaledMs;

namespace {

std::string g_self;
std::filesystem::path g_base_tmp;  // $TMPDIR at start; tests point TMPDIR elsewhere

class StandaloneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = g_base_tmp / ("raio-standalone-" + std::to_string(getpid()) + "-" +
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    ::setenv("TMPDIR", dir_.c_str(), 1);  // the CLI keeps its cluster file under $TMPDIR/raio
    ::unsetenv("RAIO_ADDRESS");
    auto r = RunCommand(std::string(RAIO_CLI_PATH) +
                        " start --head --port 0 --num-cpus 2 --resources '{\"slot\": 1}'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto pos = r.output.find("started at ");
    ASSERT_NE(pos, std::string::npos) << r.output;
    address_ = r.output.substr(pos + 11, r.output.find('\n', pos) - pos - 11);
  }
  void TearDown() override {
    auto r = RunCommand(std::string(RAIO_CLI_PATH) + " stop");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::filesystem::remove_all(dir_);
  }
  json Status() {
    auto r = RunCommand(std::string(RAIO_CLI_PATH) + " status --json --address " + address_);
    if (r.exit_code != 0) return json();
    return json::parse(r.output, nullptr, false);
  }
  std::string Driver(const std::string& scenario) {
    return "RAIO_ADDRESS=" + address_ + " RAIO_TEST_SCENARIO=" + scenario + " " + g_self;
  }
  std::filesystem::path dir_;
  std::string address_;
};

// From a break-test: `raio start` used a state directory others could write and wrote
// its record through a link planted at its name; `raio stop` then signalled whatever pid
// a planted record named.
TEST(StandaloneStateDirTest, StartRefusesASharedStateDirAndNeverWritesThroughALink) {
  auto dir = g_base_tmp / ("raio-statedir-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "raio");
  ::setenv("TMPDIR", dir.c_str(), 1);
  ::chmod((dir / "raio").c_str(), 0777);
  auto r = RunCommand(std::string(RAIO_CLI_PATH) + " start --head --port 0 --num-cpus 1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("may be written by others"), std::string::npos) << r.output;
  ::chmod((dir / "raio").c_str(), 0700);
  std::ofstream(dir / "victim") << "keep me\n";
  std::filesystem::create_symlink(dir / "victim", dir / "raio" / "current_cluster");
  r = RunCommand(std::string(RAIO_CLI_PATH) + " start --head --port 0 --num-cpus 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string kept;
  std::getline(std::ifstream(dir / "victim"), kept);
  EXPECT_EQ(kept, "keep me");
  auto record = std::filesystem::symlink_status(dir / "raio" / "current_cluster");
  EXPECT_EQ(record.type(), std::filesystem::file_type::regular);
  EXPECT_EQ(record.permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  r = RunCommand(std::string(RAIO_CLI_PATH) + " stop");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::filesystem::remove_all(dir);
}

TEST_F(StandaloneTest, DriverRunsTasksOnStandaloneCluster) {
  auto r = RunCommand(Driver("basic"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("scenario basic ok"), std::string::npos) << r.output;
  // The node releases the job's leases when it sees the driver's connection close.
  CommandResult text;
  EXPECT_TRUE(WaitFor(
      [&] {
        text = RunCommand(std::string(RAIO_CLI_PATH) + " status");
        return text.output.find("CPU: 0 / 2") != std::string::npos &&
               text.output.find("job 1  finished") != std::string::npos;
      },
      10s))
      << text.output;
}

TEST_F(StandaloneTest, SeveralDriversShareTheCluster) {
  std::thread other([&] {
    auto r = RunCommand(Driver("basic"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
  });
  auto r = RunCommand(Driver("basic"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  other.join();
  json s = Status();
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["jobs"].size(), 2u);
  // Each job's workers end with the job.
  EXPECT_TRUE(WaitFor([&] { return Status()["nodes"][0]["workers"].empty(); }, 5s))
      << Status().dump();
}

TEST_F(StandaloneTest, WaitingDemandShowsInStatusAndKilledDriverIsCleanedUp) {
  std::string out = (dir_ / "hold.log").string();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the driver (sh execs it) dies with the test
    std::string cmd = Driver("hold_slot") + " > " + out + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", ("exec env " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // The second slot task cannot run while the first holds the only slot: it is pending.
  bool pending = WaitFor(
      [&] {
        json s = Status();
        if (!s.is_object() || s["nodes"].empty()) return false;
        for (const auto& p : s["nodes"][0]["pending_leases"]) {
          if (p["demand"]["amounts"].contains("slot")) return true;
        }
        return false;
      },
      20s);
  EXPECT_TRUE(pending) << Status().dump();
  // Three tasks wait: one line for their scheduling class, counted once each, not the sum
  // of every lease request's backlog (PendingCountIsNotOverCounted: it printed 9).
  CommandResult text;
  EXPECT_TRUE(WaitFor(
      [&] {
        text = RunCommand(std::string(RAIO_CLI_PATH) + " status");
        return text.output.find("Pending tasks: 3\n") != std::string::npos;
      },
      10s))
      << text.output << Status().dump();
  EXPECT_NE(text.output.find("demand {CPU: 0.5, slot: 1} (3 waiting)"), std::string::npos)
      << text.output;
  std::size_t lines = 0;
  for (auto at = text.output.find("waiting for resources"); at != std::string::npos;
       at = text.output.find("waiting for resources", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << text.output;
  // The text lists each worker with its state, pid and job.
  json s = Status();
  ASSERT_TRUE(s.is_object());
  ASSERT_FALSE(s["nodes"][0]["workers"].empty()) << s.dump();
  for (const auto& w : s["nodes"][0]["workers"]) {
    EXPECT_NE(text.output.find("pid " + std::to_string(w["pid"].get<int>()) + " "),
              std::string::npos)
        << text.output;
  }
  // `auto` (flag or RAIO_ADDRESS) means the cluster `raio start` recorded, as for drivers.
  for (const char* command :
       {" status --address auto", " list actors --address auto", " list objects --address auto"}) {
    auto r = RunCommand(std::string(RAIO_CLI_PATH) + command);
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.output;
  }
  auto by_env = RunCommand("RAIO_ADDRESS=auto " + std::string(RAIO_CLI_PATH) + " status");
  EXPECT_EQ(by_env.exit_code, 0) << by_env.output;
  EXPECT_NE(by_env.output.find("raio cluster " + address_), std::string::npos) << by_env.output;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  // Its workers and leases are reclaimed; resources return to their totals.
  bool clean = WaitFor(
      [&] {
        json s = Status();
        if (!s.is_object() || s["nodes"].empty()) return false;
        const auto& n = s["nodes"][0];
        return n["workers"].empty() && n["pending_leases"].empty() &&
               n["available"]["amounts"] == n["total"]["amounts"];
      },
      10s);
  EXPECT_TRUE(clean) << Status().dump();
  // And the cluster keeps serving other jobs.
  auto r = RunCommand(Driver("basic"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(StandaloneTest, ObjectsAreListedAndFreedWhenTheirOwnerDies) {
  std::string out = (dir_ / "objects.log").string();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the driver (sh execs it) dies with the test
    std::string cmd = Driver("hold_object") + " > " + out + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", ("exec env " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  auto list_json = [&] {
    auto r = RunCommand(std::string(RAIO_CLI_PATH) + " list objects --json --address " + address_);
    return r.exit_code == 0 ? json::parse(r.output, nullptr, false) : json();
  };
  EXPECT_TRUE(WaitFor(
      [&] {
        json l = list_json();
        return l.is_object() && l["objects"].size() == 2;
      },
      20s))
      << list_json().dump();
  json l = list_json();
  for (const auto& o : l["objects"]) {
    EXPECT_GE(std::stoull(o["size_bytes"].get<std::string>()), 5u << 20);  // JSON uint64 = string
    EXPECT_EQ(o["state"], "sealed");
  }
  auto text = RunCommand(std::string(RAIO_CLI_PATH) + " status");
  EXPECT_NE(text.output.find("Object store: 2 objects"), std::string::npos) << text.output;
  auto listing = RunCommand(std::string(RAIO_CLI_PATH) + " list objects");
  EXPECT_NE(listing.output.find("2 objects (2 copies) in shared-memory stores"), std::string::npos)
      << listing.output;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_TRUE(WaitFor([&] { return list_json()["objects"].empty(); }, 10s)) << list_json().dump();
}

TEST_F(StandaloneTest, ActorWaitingForResourcesIsShownWithItsDemand) {
  auto r = RunCommand(Driver("pending_actor"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The timed-out Get says what the call waits for, not that a task keeps running.
  EXPECT_NE(r.output.find("waiting for resources (it demands {slot: 1})"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("keeps running"), std::string::npos) << r.output;
  // raio status lists the pending actor with its demand.
  EXPECT_NE(r.output.find("Pending actors: 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("actor raio_test::Accumulator"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(PENDING) demand {slot: 1}"), std::string::npos) << r.output;
}

TEST_F(StandaloneTest, DetachedActorsOutliveTheirJobAndShowInListings) {
  auto r = RunCommand(Driver("detached_create"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto actors = [&] {
    auto l = RunCommand(std::string(RAIO_CLI_PATH) + " list actors --json --address " + address_);
    return l.exit_code == 0 ? json::parse(l.output, nullptr, false) : json();
  };
  // The job ended: its plain actor died with it, the detached one lives on.
  bool settled = WaitFor(
      [&] {
        json a = actors();
        if (!a.is_object() || a["actors"].size() != 2) return false;
        for (const auto& x : a["actors"]) {
          if (x["name"] == "temp" && x["state"] != "ACTOR_DEAD") return false;
          if (x["name"] == "keeper" && x["state"] != "ACTOR_ALIVE") return false;
        }
        return true;
      },
      10s);
  EXPECT_TRUE(settled) << actors().dump();
  json listed = actors();  // keep the temporary alive while iterating into it
  for (const auto& x : listed["actors"]) {
    if (x["name"] == "temp") {
      EXPECT_EQ(x["death_cause"], "its job ended");
    }
    EXPECT_EQ(x["namespace"], "shared");
  }
  auto status = RunCommand(std::string(RAIO_CLI_PATH) + " status");
  EXPECT_NE(status.output.find("Actors: 2"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("shared/keeper"), std::string::npos) << status.output;
  // Another job finds it by name and uses its state, then kills it.
  r = RunCommand(Driver("detached_use"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("keeper total 7"), std::string::npos) << r.output;
  EXPECT_TRUE(WaitFor(
      [&] {
        json a = actors();
        for (const auto& x : a["actors"]) {
          if (x["name"] == "keeper") {
            return x["state"] == "ACTOR_DEAD" &&
                   x["death_cause"].get<std::string>().find("killed") != std::string::npos;
          }
        }
        return false;
      },
      10s))
      << actors().dump();
  // Its worker is gone too.
  EXPECT_TRUE(WaitFor([&] { return Status()["nodes"][0]["workers"].empty(); }, 10s))
      << Status().dump();
}

TEST_F(StandaloneTest, StopEndsDaemonAndWorkers) {
  auto r = RunCommand(Driver("basic"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json s = Status();
  ASSERT_TRUE(s.is_object());
  auto stop = RunCommand(std::string(RAIO_CLI_PATH) + " stop");
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  auto status = RunCommand(std::string(RAIO_CLI_PATH) + " status --address " + address_);
  EXPECT_NE(status.exit_code, 0) << status.output;
  // A driver now gets a clear error, not a hang.
  auto late = RunCommand(Driver("basic"));
  EXPECT_NE(late.exit_code, 0);
  EXPECT_NE(late.output.find("cannot reach a raio cluster"), std::string::npos) << late.output;
}

TEST_F(StandaloneTest, StartRejectsBadNumbers) {
  for (const char* flags :
       {"--num-cpus -1", "--num-cpus nan", "--num-gpus -2", "--memory -5", "--port 70000",
        "--port -1", "--resources '{\"slot\": -1}'", "--resources '{\"CPU\": 2}'",
        "--object-store-memory 10", "--memory-usage-threshold 1.5", "--memory-usage-threshold 0",
        "--memory-usage-threshold-bytes 0", "--bogus", "--num-cpus", "--host 999.1.1.1",
        "--host localhost"}) {
    // A private TMPDIR, so the refusal is about the flags, not the running cluster.
    std::filesystem::create_directories(dir_ / "other");
    auto r = RunCommand("TMPDIR=" + (dir_ / "other").string() + " " + RAIO_CLI_PATH +
                        " start --head " + flags);
    // Every usage error exits 2, including those CLI11 reports (its own codes are 100+).
    EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.output;
    EXPECT_EQ(r.output.find("already running"), std::string::npos) << r.output;
  }
  for (const char* command : {" start --help", " --help", " status --help"}) {
    auto r = RunCommand(std::string(RAIO_CLI_PATH) + command);
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.output;
  }
  auto none = RunCommand(RAIO_CLI_PATH);  // no subcommand
  EXPECT_EQ(none.exit_code, 2) << none.output;
  // A word that is no subcommand is named, with the ones there are.
  auto bogus = RunCommand(std::string(RAIO_CLI_PATH) + " bogus --x");
  EXPECT_EQ(bogus.exit_code, 2) << bogus.output;
  EXPECT_NE(bogus.output.find("unknown command 'bogus'; expected one of: start, stop"),
            std::string::npos)
      << bogus.output;
  auto kind = RunCommand(std::string(RAIO_CLI_PATH) + " list foo");
  EXPECT_EQ(kind.exit_code, 2) << kind.output;
  EXPECT_NE(
      kind.output.find("raio list: unknown command 'foo'; expected one of: objects, nodes, actors"),
      std::string::npos)
      << kind.output;
  // The running cluster is untouched.
  EXPECT_TRUE(Status().is_object());
}

// A standalone cluster started with its own TMPDIR (not the fixture's): for tests that
// kill its daemon.
struct StartedCluster {
  std::string tmpdir;
  std::string address;
  pid_t pid = 0;
  std::string session_dir;
};

std::optional<StartedCluster> StartCluster(const std::filesystem::path& tmpdir) {
  std::filesystem::create_directories(tmpdir);
  auto r = RunCommand("TMPDIR=" + tmpdir.string() + " " + RAIO_CLI_PATH +
                      " start --head --port 0 --num-cpus 2 --object-store-memory 67108864");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(tmpdir / "raio" / "current_cluster");
  json j = json::parse(in, nullptr, false);
  if (r.exit_code != 0 || !j.is_object()) return std::nullopt;
  return StartedCluster{tmpdir.string(), j["address"].get<std::string>(), j["pid"].get<pid_t>(),
                        j["session_dir"].get<std::string>()};
}

// The regression: a SIGKILLed daemon's pre-faulted store file stayed in /dev/shm for
// good unless a cluster was started again with the same TMPDIR. The store is now a
// memory file with no name, passed to drivers and workers over the node socket: a
// killed daemon leaves nothing in /dev/shm, and its memory goes with its last holder.
TEST(KilledDaemonTest, ASigkilledDaemonLeavesNothingInDevShm) {
  const auto base = g_base_tmp / ("raio-kd-" + std::to_string(getpid()));
  const std::set<std::string> before = DevShmEntries();
  std::optional<StartedCluster> old = StartCluster(base);
  ASSERT_TRUE(old.has_value());
  EXPECT_TRUE(HoldsObjectStore(old->pid)) << "daemon " << old->pid << " has no store";
  // Drivers and workers map the store through the descriptor the node passed them.
  auto r = RunCommand("TMPDIR=" + old->tmpdir + " RAIO_ADDRESS=" + old->address +
                      " RAIO_TEST_SCENARIO=basic " + g_self);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(NewRaioShmEntries(before, old->pid), std::vector<std::string>{});
  ASSERT_EQ(::kill(old->pid, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return ProcessGone(old->pid); }, 10s));
  EXPECT_EQ(NewRaioShmEntries(before, old->pid), std::vector<std::string>{});
  // What it does leave, its session directory (spill files, sockets), `raio stop` removes.
  auto stop = RunCommand("TMPDIR=" + old->tmpdir + " " + RAIO_CLI_PATH + " stop");
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  EXPECT_NE(stop.output.find("no running cluster found; removed the files of dead raio "
                             "processes: "),
            std::string::npos)
      << stop.output;
  EXPECT_FALSE(std::filesystem::exists(old->session_dir)) << old->session_dir;
  std::filesystem::remove_all(base);
}

TEST(KilledDaemonTest, StopAfterAKilledDaemonRemovesItsSession) {
  const auto base = g_base_tmp / ("raio-ks-" + std::to_string(getpid()));
  std::optional<StartedCluster> old = StartCluster(base);
  ASSERT_TRUE(old.has_value());
  ASSERT_EQ(::kill(old->pid, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return ProcessGone(old->pid); }, 10s));
  auto stop = RunCommand("TMPDIR=" + old->tmpdir + " " + RAIO_CLI_PATH + " stop");
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  // At least its own session (a concurrent test may have left another dead one).
  EXPECT_NE(stop.output.find("no running cluster found; removed the files of dead raio "
                             "processes: "),
            std::string::npos)
      << stop.output;
  EXPECT_NE(stop.output.find("1 session directory: "), std::string::npos) << stop.output;
  EXPECT_FALSE(std::filesystem::exists(old->session_dir)) << old->session_dir;
  // Its leftovers are gone: the second time finds no session directory to remove.
  stop = RunCommand("TMPDIR=" + old->tmpdir + " " + RAIO_CLI_PATH + " stop");
  EXPECT_NE(stop.output.find("no running cluster found"), std::string::npos) << stop.output;
  EXPECT_EQ(stop.output.find("session directory"), std::string::npos) << stop.output;
  std::filesystem::remove_all(base);
}

// The cluster's configuration is set where it starts: a joining driver takes the head's
// values over its own environment, the node's workers get them, and `raio status` and
// `raio config --address` show them.
TEST(StandaloneConfigTest, SystemConfigGivenAtStartReachesJoiningDriversAndWorkers) {
  const auto base = g_base_tmp / ("raio-cfg-" + std::to_string(getpid()));
  std::filesystem::create_directories(base);
  const std::string env = "TMPDIR=" + base.string() + " ";
  auto r = RunCommand(env + RAIO_CLI_PATH +
                      " start --head --port 0 --num-cpus 1 --object-store-memory 67108864 "
                      "--system-config '{\"max_pipeline_depth\": 7, \"prestart_worker\": false, "
                      "\"lease_idle_timeout_ms\": \"30\"}'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(base / "raio" / "current_cluster");
  json record = json::parse(in, nullptr, false);
  ASSERT_TRUE(record.is_object()) << r.output;
  const std::string address = record["address"].get<std::string>();
  auto driver = RunCommand(env + "RAIO_ADDRESS=" + address +
                           " RAIO_MAX_PIPELINE_DEPTH=9 RAIO_TEST_SCENARIO=config " + g_self);
  EXPECT_EQ(driver.exit_code, 0) << driver.output;
  EXPECT_NE(driver.output.find("driver 7 worker 7 30 false"), std::string::npos) << driver.output;
  auto status = RunCommand(env + RAIO_CLI_PATH + " status");
  EXPECT_NE(status.output.find("max_pipeline_depth = 7"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("prestart_worker = false"), std::string::npos) << status.output;
  auto shown = RunCommand(env + RAIO_CLI_PATH + " config --address auto --json", false);
  EXPECT_EQ(shown.exit_code, 0) << shown.output;
  json table = json::parse(shown.output, nullptr, false);
  ASSERT_TRUE(table.is_array()) << shown.output;
  std::map<std::string, std::string> values;
  for (const auto& e : table) values[e["name"].get<std::string>()] = e["value"].get<std::string>();
  EXPECT_EQ(values["max_pipeline_depth"], "7");
  EXPECT_EQ(values["lease_idle_timeout_ms"], "30");
  EXPECT_EQ(values["loop_spin_us"], "50");
  auto stop = RunCommand(env + RAIO_CLI_PATH + " stop");
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  std::filesystem::remove_all(base);
}

TEST(StandaloneConfigTest, BadSystemConfigIsAUsageErrorAndStartsNothing) {
  const auto base = g_base_tmp / ("raio-badcfg-" + std::to_string(getpid()));
  std::filesystem::create_directories(base);
  const std::string env = "TMPDIR=" + base.string() + " ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"lease_idle_timeout": 5})", "did you mean 'lease_idle_timeout_ms'"},
      {R"({"max_pipeline_depth": "many"})", "max_pipeline_depth='many' is not a whole number"},
      {R"({"memory_usage_threshold": 3})", "in (0, 1]"},
      {R"({"max_pipeline_depth": {}})", "is not a number, string or bool"},
      {R"([1, 2])", "expected a JSON object"},
      {R"({not json)", "bad --system-config"}};
  for (const auto& [flag, needle] : cases) {
    auto r = RunCommand(env + RAIO_CLI_PATH + " start --head --port 0 --num-cpus 1 " +
                        "--system-config '" + flag + "'");
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << flag << ": " << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(base / "raio" / "current_cluster"));
  auto bad_env = RunCommand(env + "RAIO_WORKER_START_TIMEOUT_MS=soon " + RAIO_CLI_PATH +
                            " start --head --port 0 --num-cpus 1");
  EXPECT_EQ(bad_env.exit_code, 2) << bad_env.output;
  EXPECT_NE(bad_env.output.find("RAIO_WORKER_START_TIMEOUT_MS='soon'"), std::string::npos)
      << bad_env.output;
  EXPECT_FALSE(std::filesystem::exists(base / "raio" / "current_cluster"));
  std::filesystem::remove_all(base);
}

// Prints the config values a joining driver and its workers see.
int ScenarioConfig() {
  raio::Init();
  std::cout << "driver " << raio::SystemConfig()["max_pipeline_depth"] << " worker "
            << raio::Task(ConfigValue).Remote("max_pipeline_depth").Get() << " "
            << raio::Task(ConfigValue).Remote("lease_idle_timeout_ms").Get() << " "
            << raio::Task(ConfigValue).Remote("prestart_worker").Get() << std::endl;
  raio::Shutdown();
  return 0;
}

int ScenarioBasic() {
  raio::Init();
  if (raio::Task(Add).Remote(20, 22).Get() != 42) return 1;
  if (raio::Task(NestedSum).Remote(10).Get() != 385) return 2;
  std::vector<raio::ObjectRef<int>> refs;
  for (int i = 0; i < 500; ++i) refs.push_back(raio::Task(Square).Remote(i));
  auto v = raio::Get(refs);
  for (int i = 0; i < 500; ++i) {
    if (v[i] != i * i) return 3;
  }
  try {
    raio::Task(ThrowsRuntimeError).Remote(1).Get();
    return 4;
  } catch (const raio::TaskError&) {
  }
  raio::Shutdown();
  std::cout << "scenario basic ok" << std::endl;
  return 0;
}

int ScenarioHoldObject() {
  raio::Init();
  auto put = raio::Put(MakeBytes(5 << 20, 1));
  auto made = raio::Task(MakeBytes).Remote(6 << 20, 2);
  made.Get();
  std::cout << "holding" << std::endl;
  // Holds them until the test SIGKILLs it (this bound only ends an orphan).
  std::this_thread::sleep_for(Scaled(300s));
  return 0;
}

int ScenarioDetachedCreate() {
  raio::InitOptions options;
  options.ns = "shared";
  raio::Init(options);
  auto keeper = raio::Actor(Accumulator::Create).SetName("keeper").SetDetached().Remote(5);
  auto temp = raio::Actor(Accumulator::Create).SetName("temp").Remote(0);
  if (keeper.Task(&Accumulator::Add).Remote(1).Get() != 6) return 1;
  if (temp.Task(&Accumulator::Add).Remote(1).Get() != 1) return 2;
  raio::Shutdown();
  return 0;
}

int ScenarioDetachedUse() {
  raio::InitOptions options;
  options.ns = "shared";
  raio::Init(options);
  auto keeper = raio::GetActor<Accumulator>("keeper");
  if (!keeper) return 1;
  if (raio::GetActor<Accumulator>("temp")) return 2;
  std::cout << "keeper total " << keeper->Task(&Accumulator::Add).Remote(1).Get() << std::endl;
  keeper->Kill();
  raio::Shutdown();
  return 0;
}

// Four tasks that each need the cluster's only slot: one runs (until the test SIGKILLs this
// driver; the bound only ends an orphan), three wait.
int ScenarioHoldSlot() {
  raio::Init();
  std::vector<raio::ObjectRef<int>> refs;
  for (int i = 0; i < 4; ++i) {
    refs.push_back(raio::Task(SleepMs)
                       .SetResources({{"CPU", 0.5}, {"slot", 1}})
                       .Remote(static_cast<int>(ScaledMs(300s))));
  }
  std::cout << "submitted" << std::endl;
  for (auto& r : refs) r.Get();
  return 0;
}

// Two actors that each need the cluster's only slot: the second waits for it, and both
// `raio status` and a timed-out Get of its call say so, with the demand.
int ScenarioPendingActor() {
  raio::Init();
  auto holder = raio::Actor(Accumulator::Create).SetResources({{"slot", 1}}).Remote(0);
  if (holder.Task(&Accumulator::Add).Remote(1).Get() != 1) return 1;
  auto waiting = raio::Actor(Accumulator::Create).SetResources({{"slot", 1}}).Remote(0);
  auto call = waiting.Task(&Accumulator::Add).Remote(1);
  try {
    call.Get(Scaled(300ms));  // it cannot run: the holder keeps the only slot
    return 2;
  } catch (const raio::GetTimeoutError& e) {
    std::cout << "get: " << e.what() << std::endl;
  }
  // Once the head has the second actor pending (its creation reached it), status shows it.
  std::string status;
  WaitFor(
      [&] {
        status = RunCommand(std::string(RAIO_CLI_PATH) + " status").output;
        return status.find("Pending actors: 1") != std::string::npos;
      },
      20s);
  std::cout << "status: " << status << std::endl;
  raio::Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto setup = [] {
    g_self = std::filesystem::read_symlink("/proc/self/exe").string();
    g_base_tmp = std::filesystem::temp_directory_path();
  };
  return raio_test::ScenarioOrTestsMain(argc, argv, setup,
                                        {
                                            {"basic", ScenarioBasic},
                                            {"config", ScenarioConfig},
                                            {"hold_slot", ScenarioHoldSlot},
                                            {"hold_object", ScenarioHoldObject},
                                            {"detached_create", ScenarioDetachedCreate},
                                            {"detached_use", ScenarioDetachedUse},
                                            {"pending_actor", ScenarioPendingActor},
                                        });
}
