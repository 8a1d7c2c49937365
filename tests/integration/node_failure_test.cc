// Node failure on node daemons started with the CLI (cli_cluster.h: head + 2 nodes): a
// daemon SIGKILLed mid-run (its tasks retried elsewhere, or NodeDiedError naming it once
// retries ran out; it shows dead in `raio list nodes` and `raio status`), and a daemon
// paused with SIGSTOP past the health-check timeout (declared dead, its tasks' owners told,
// then on SIGCONT its old workers ended and the node back under a new id).
#include <raio/raio.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli_cluster.h"
#include "raio/testkit/time_scale.h"
#include "scenario_main.h"
#include "test_functions.h"

using namespace raio_test;
using namespace std::chrono_literals;
using raio::testkit::Scaled;
using raio::testkit::ScaledMs;

namespace {

pid_t EnvPid(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? 0 : static_cast<pid_t>(std::atoi(v));
}

// Creates file `path` (it has started), then sleeps `ms`.
int MarkThenSleep(std::string path, int ms) {
  std::ofstream(path) << "started\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
RAIO_REMOTE(MarkThenSleep);

// Stateless calls, so that a restart does not change their results.
class Scaler {
 public:
  static Scaler* Create(int factor) { return new Scaler(factor); }
  int Scale(int x) { return x * factor_; }

 private:
  explicit Scaler(int factor) : factor_(factor) {}
  int factor_;
};
RAIO_REMOTE(Scaler::Create, &Scaler::Scale);

// A named actor with one restart, preferring node b; b's daemon is SIGKILLed under it. The
// actor comes back elsewhere (constructor re-run: its count starts over), under its name.
int ScenarioActorRestart() {
  raio::Init();
  auto actor = raio::Actor(Tally::Create)
                   .SetName("survivor")
                   .SetMaxRestarts(1)
                   .SetMaxTaskRetries(1)
                   .SetSchedulingStrategy(
                       raio::SchedulingStrategy::NodeAffinity(std::getenv("B_NODE"), true))
                   .Remote(100);
  std::cout << "first on " << actor.Task(&Tally::Node).Remote().Get(Scaled(60s)) << std::endl;
  std::cout << "count " << actor.Task(&Tally::Add).Remote(1).Get(Scaled(60s)) << std::endl;
  const std::vector<pid_t> workers = ChildPids(EnvPid("B_PID"));
  ::kill(EnvPid("B_PID"), SIGKILL);
  // Its process ends with its node (then a call cannot reach the old instance).
  for (pid_t w : workers) WaitFor([&] { return !ProcessRuns(w); }, 10s);
  // Retried on the restarted instance (max_task_retries 1): its count starts at 100 again.
  std::cout << "count after " << actor.Task(&Tally::Add).Remote(5).Get(Scaled(60s)) << std::endl;
  auto again = raio::GetActor<Tally>("survivor");
  if (!again) {
    std::cout << "name lost: WRONG" << std::endl;
    return 1;
  }
  std::cout << "now on " << again->Task(&Tally::Node).Remote().Get(Scaled(60s)) << std::endl;
  raio::Shutdown();
  return 0;
}

// A counting actor on node b (one restart); once GO exists (the test paused b's daemon
// and saw it declared dead), it is called again: the calls must reach a new instance on
// another node, not the old process that still runs on the paused node.
int ScenarioActorOnPausedNode() {
  raio::Init();
  auto actor = raio::Actor(Tally::Create)
                   .SetMaxRestarts(1)
                   .SetMaxTaskRetries(1)
                   .SetSchedulingStrategy(
                       raio::SchedulingStrategy::NodeAffinity(std::getenv("B_NODE"), true))
                   .Remote(100);
  std::cout << "first on " << actor.Task(&Tally::Node).Remote().Get(Scaled(60s)) << std::endl;
  std::cout << "count " << actor.Task(&Tally::Add).Remote(1).Get(Scaled(60s)) << std::endl;
  const std::string go = std::getenv("GO");
  if (!WaitFor([&] { return std::filesystem::exists(go); }, 60s)) return 1;
  std::cout << "count after " << actor.Task(&Tally::Add).Remote(5).Get(Scaled(60s)) << std::endl;
  std::cout << "now on " << actor.Task(&Tally::Node).Remote().Get(Scaled(60s)) << std::endl;
  raio::Shutdown();
  return 0;
}

// Twelve 1-CPU tasks spread over the three nodes (two CPUs each), each held at a gate
// (directory GATE_DIR) until it opens. Once a worker of node b has reached the gate (b runs
// a task), b's daemon is SIGKILLed; the gate opens only when b's workers are gone, so no
// task of b's can return first. Every task must still return, from a, or c.
int ScenarioKillMidRun() {
  raio::Init();
  const std::string gate = std::getenv("GATE_DIR");
  std::vector<raio::ObjectRef<std::string>> refs;
  for (int i = 0; i < 12; ++i) {
    refs.push_back(raio::Task(NodeIdOnceGo)
                       .SetSchedulingStrategy(raio::SchedulingStrategy::Spread())
                       .Remote(gate, static_cast<int>(ScaledMs(120s))));
  }
  const pid_t b = EnvPid("B_PID");
  // A gate entry is named after its worker's pid: "<pid>-<n>".
  auto b_runs_a_task = [&] {
    std::set<std::string> workers;
    for (pid_t w : ChildPids(b)) workers.insert(std::to_string(w));
    for (const auto& e : std::filesystem::directory_iterator(gate)) {
      const std::string name = e.path().filename().string();
      if (workers.count(name.substr(0, name.find('-'))) != 0) return true;
    }
    return false;
  };
  if (b <= 0 || !WaitFor(b_runs_a_task, 60s)) {
    std::cout << "node b never ran a task" << std::endl;
    return 1;
  }
  const std::vector<pid_t> workers = ChildPids(b);
  ::kill(b, SIGKILL);
  std::cout << "killed b" << std::endl;
  for (pid_t w : workers) {
    if (!WaitFor([&] { return !ProcessRuns(w); }, 30s)) {
      std::cout << "worker " << w << " outlived node b" << std::endl;
      return 1;
    }
  }
  std::ofstream(std::filesystem::path(gate) / "go").put('x');
  for (auto& r : refs) {
    std::string node = r.Get(Scaled(120s));  // (a log line may come meanwhile)
    std::cout << "node " << node << std::endl;
  }
  raio::Shutdown();
  return 0;
}

// A task pinned to node b without retries: its node dies under it (SIGKILL here, or the
// test pauses it with SIGSTOP when NO_KILL is set). Prints the error it gets.
int ScenarioNoRetries() {
  raio::Init();
  const std::string mark = std::getenv("MARK");
  auto ref =
      raio::Task(MarkThenSleep)
          .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity(std::getenv("B_NODE")))
          .SetMaxRetries(0)
          .Remote(mark, static_cast<int>(ScaledMs(60s)));
  const pid_t b = EnvPid("B_PID");
  if (b <= 0 || !WaitFor([&] { return std::filesystem::exists(mark); }, 60s)) {
    std::cout << "the task never started on node b" << std::endl;
    return 1;
  }
  std::cout << "running on b:";
  for (pid_t w : ChildPids(b)) std::cout << " " << w;
  std::cout << std::endl;
  if (std::getenv("NO_KILL") == nullptr) ::kill(b, SIGKILL);
  try {
    ref.Get(Scaled(120s));
    std::cout << "returned: WRONG" << std::endl;
  } catch (const raio::NodeDiedError& e) {
    std::cout << "NodeDiedError: " << e.what() << std::endl;
  } catch (const std::exception& e) {
    std::cout << "other error: " << e.what() << std::endl;
  }
  raio::Shutdown();
  return 0;
}

// One task on node TARGET: prints the node it ran on.
int ScenarioOnNode() {
  raio::Init();
  auto ref =
      raio::Task(NodeIdAfterMs)
          .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity(std::getenv("TARGET")))
          .Remote(0);
  std::cout << "ran on " << ref.Get(Scaled(60s)) << std::endl;
  raio::Shutdown();
  return 0;
}

class NodeFailureTest : public CliClusterTest {};

TEST_F(NodeFailureTest, AKilledNodesTasksAreRetriedElsewhereAndItShowsDead) {
  const std::filesystem::path gate = dir_ / "gate";
  std::filesystem::create_directories(gate);
  auto r = RunCommand(Driver("kill_mid_run", "a", "GATE_DIR=" + gate.string()),
                      /*merge_stderr=*/false);  // lines to parse
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(Has(r.output, "killed b")) << r.output;
  std::istringstream lines(r.output);
  int results = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("node ", 0) != 0) continue;
    ++results;
    std::string id = line.substr(5);
    EXPECT_TRUE(id == zones_["a"] || id == zones_["c"]) << line << "\n" << r.output;
  }
  EXPECT_EQ(results, 12) << r.output;
  nlohmann::json b = NodeEntry(zones_["b"]);
  ASSERT_TRUE(b.is_object());
  EXPECT_EQ(b.value("state", ""), "dead");
  EXPECT_TRUE(Has(b.value("death_cause", ""), "connection to the head closed")) << b.dump();
  auto list = RunCommand(Cli("list nodes --address " + address_), false);
  EXPECT_TRUE(Has(list.output, "2 nodes, 1 dead")) << list.output;
  // The survivors hold no lease once the driver is gone.
  CommandResult status;
  EXPECT_TRUE(WaitFor(
      [&] {
        status = RunCommand(Cli("status --address " + address_));
        return Has(status.output, "CPU: 0 / 4");
      },
      20s))
      << status.output;
  EXPECT_TRUE(Has(status.output, "Dead nodes: 1")) << status.output;
  EXPECT_TRUE(Has(status.output, zones_["b"])) << status.output;
}

TEST_F(NodeFailureTest, ATaskWithoutRetriesOnAKilledNodeFailsWithNodeDiedErrorNamingIt) {
  auto r = RunCommand(Driver("no_retries", "a", "MARK=" + (dir_ / "started").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, "NodeDiedError: ")) << r.output;
  EXPECT_TRUE(Has(r.output, "node " + zones_["b"] + " died while running")) << r.output;
  // Node a's driver and c are unaffected: a new task runs on c.
  auto again = RunCommand(Driver("on_node", "a", "TARGET=" + zones_["c"]));
  EXPECT_TRUE(Has(again.output, "ran on " + zones_["c"])) << again.output;
}

TEST_F(NodeFailureTest, AnActorOnAKilledNodeRestartsElsewhereUnderItsName) {
  auto r = RunCommand(Driver("actor_restart", "a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, "first on " + zones_["b"])) << r.output;
  EXPECT_TRUE(Has(r.output, "count 101")) << r.output;
  EXPECT_TRUE(Has(r.output, "count after 105")) << r.output;
  auto pos = r.output.find("now on ");
  ASSERT_NE(pos, std::string::npos) << r.output;
  std::string now = r.output.substr(pos + 7, 16);
  EXPECT_TRUE(now == zones_["a"] || now == zones_["c"]) << r.output;
}

// Kills a random node daemon other than the head's every `interval` (SIGKILL) and starts a
// new node of the same zone in its place, until stopped.
class NodeKiller {
 public:
  NodeKiller(std::function<std::map<std::string, std::string>()> nodes,
             std::function<pid_t(const std::string&)> pid_of,
             std::function<void(const std::string&)> add_node, std::chrono::milliseconds interval)
      : nodes_(std::move(nodes)),
        pid_of_(std::move(pid_of)),
        add_node_(std::move(add_node)),
        interval_(interval) {
    thread_ = std::thread([this] { Run(); });
  }
  ~NodeKiller() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int kills() const { return kills_; }

 private:
  void Run() {
    std::mt19937 rng(static_cast<unsigned>(::getpid()));
    while (!stop_) {
      std::this_thread::sleep_for(interval_);
      if (stop_) break;
      std::vector<std::pair<std::string, std::string>> victims;  // zone, node id
      for (const auto& [zone, id] : nodes_()) {
        if (zone != "a") victims.emplace_back(zone, id);
      }
      if (victims.empty()) continue;
      auto [zone, id] = victims[rng() % victims.size()];
      pid_t pid = pid_of_(id);
      if (pid <= 0 || ::kill(pid, SIGKILL) != 0) continue;
      ++kills_;
      add_node_("--num-cpus 2 --labels '{\"zone\": \"" + zone + "\"}'");
    }
  }

  std::function<std::map<std::string, std::string>()> nodes_;
  std::function<pid_t(const std::string&)> pid_of_;
  std::function<void(const std::string&)> add_node_;
  std::chrono::milliseconds interval_;
  std::atomic<bool> stop_{false};
  std::atomic<int> kills_{0};
  std::thread thread_;
};

// 10,000 tasks and actor calls (this process is the driver, on the head's node, which
// lives) while nodes b and c are killed and replaced: every result is right or its error
// names the node that died; nothing hangs; afterwards the survivors hold no lease, worker
// or object of the job.
TEST_F(NodeFailureTest, TenThousandTasksAndActorCallsSurviveNodesKilledAndReplaced) {
  raio::InitOptions options;
  options.address = address_;
  options.node_id = zones_["a"];
  raio::Init(options);
  auto scaler =
      raio::Actor(Scaler::Create)
          .SetMaxRestarts(-1)
          .SetMaxTaskRetries(-1)
          .SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity(zones_["b"], true))
          .Remote(3);
  int right = 0, wrong = 0, node_errors = 0, rounds = 0;
  std::string other_errors;
  {
    NodeKiller killer([this] { return Nodes(); },
                      [this](const std::string& id) { return DaemonPid(id); },
                      [this](const std::string& flags) { AddNode(flags); }, Scaled(1000ms));
    // At least 10 rounds of 1,000, and on until the killer struck 4 times (rounds can be
    // fast, so this is bounded by time, not by a count of rounds).
    const auto give_up = std::chrono::steady_clock::now() + Scaled(90s);
    for (; rounds < 10 || (killer.kills() < 4 && std::chrono::steady_clock::now() < give_up);
         ++rounds) {
      const int round = rounds;
      std::vector<raio::ObjectRef<int>> tasks, calls;
      for (int i = 0; i < 900; ++i) {
        tasks.push_back(raio::Task(Square)
                            .SetSchedulingStrategy(raio::SchedulingStrategy::Spread())
                            .Remote((round % 40) * 1000 + i));
      }
      for (int i = 0; i < 100; ++i) calls.push_back(scaler.Task(&Scaler::Scale).Remote(i));
      auto check = [&](raio::ObjectRef<int>& ref, int want) {
        try {
          if (ref.Get(Scaled(120s)) == want) {
            ++right;
          } else {
            ++wrong;
          }
        } catch (const raio::NodeDiedError&) {
          ++node_errors;
        } catch (const raio::WorkerCrashedError& e) {
          // Its worker ended with its node before the owner heard of the death.
          if (Has(e.what(), "on node ")) {
            ++node_errors;
          } else {
            other_errors += std::string(e.what()) + "\n";
          }
        } catch (const std::exception& e) {
          other_errors += std::string(e.what()) + "\n";
        }
      };
      for (int i = 0; i < 900; ++i) {
        int x = (round % 40) * 1000 + i;  // x * x fits an int
        check(tasks[i], x * x);
      }
      for (int i = 0; i < 100; ++i) check(calls[i], 3 * i);
    }
    killer.Stop();
    std::cout << "kills " << killer.kills() << ", right " << right << ", node errors "
              << node_errors << std::endl;
    EXPECT_GE(killer.kills(), 4);
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(other_errors, "");
  EXPECT_EQ(right + node_errors, 1000 * rounds);
  EXPECT_GE(right, 900 * rounds);
  raio::Shutdown();
  // The survivors hold nothing of the job: no lease, no worker, no object.
  // (A worker is listed as "      <state>  pid <pid>  job <job>" under its node.)
  auto no_workers = [](const std::string& out) {
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("      ", 0) == 0 && Has(line, " pid ")) return false;
    }
    return true;
  };
  CommandResult status;
  EXPECT_TRUE(WaitFor(
      [&] {
        status = RunCommand(Cli("status --address " + address_));
        return Has(status.output, "CPU: 0 / 6") && Has(status.output, "Object store: 0 objects") &&
               no_workers(status.output);
      },
      30s))
      << status.output;
}

TEST_F(NodeFailureTest, ADeadIdIsNeverTakenAgain) {
  const std::string b = zones_["b"];
  ASSERT_EQ(::kill(DaemonPid(b), SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return NodeEntry(b).value("state", "") == "dead"; }, 20s));
  auto r = RunCommand(
      Cli("start --address " + address_ + " --node-ip 127.0.0.1 --num-cpus 1 " + "--node-id " + b));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r.output, "was declared dead")) << r.output;
}

// Health checks every 200 ms, dead after 5 missed ones (about 1 s); the period and timeout
// scaled (a slower build answers slower), the count not (the death cause names it).
class PausedNodeTest : public CliClusterTest {
 protected:
  std::string HeadFlags() const override {
    const std::string every = std::to_string(ScaledMs(200ms));
    return "--system-config '{\"health_check_period_ms\": " + every +
           ", \"health_check_timeout_ms\": " + every +
           ", \"health_check_failure_threshold\": 5, \"node_rejoin_backoff_ms\": 200}'";
  }
};

TEST_F(PausedNodeTest, APausedNodeIsDeclaredDeadThenRejoinsUnderANewIdWithoutItsOldWorkers) {
  const std::string old_b = zones_["b"];
  const pid_t daemon = DaemonPid(old_b);
  ASSERT_GT(daemon, 0);
  const std::filesystem::path out = dir_ / "paused.out";
  SpawnDriver("no_retries", "a", "NO_KILL=1 MARK=" + (dir_ / "started").string(), out);
  std::string output;
  ASSERT_TRUE(WaitForOutput(out, {"running on b:"}, 60s, &output)) << output;
  std::vector<pid_t> old_workers = ChildPids(daemon);
  ASSERT_FALSE(old_workers.empty());
  ASSERT_EQ(::kill(daemon, SIGSTOP), 0);
  // Declared dead by the head's health checks, and the task's owner told so.
  EXPECT_TRUE(WaitFor([&] { return NodeEntry(old_b).value("state", "") == "dead"; }, 20s));
  EXPECT_TRUE(Has(NodeEntry(old_b).value("death_cause", ""), "missed 5 health checks"))
      << NodeEntry(old_b).dump();
  EXPECT_TRUE(WaitForOutput(out, {"NodeDiedError", "other error"}, 30s, &output)) << output;
  EXPECT_TRUE(Has(output, "NodeDiedError: node " + old_b + " died while running")) << output;
  EXPECT_TRUE(Has(output, "missed 5 health checks")) << output;
  // Resumed: it learns it was declared dead, ends its old workers and rejoins as a new node.
  ASSERT_EQ(::kill(daemon, SIGCONT), 0);
  std::string new_b;
  EXPECT_TRUE(WaitFor(
      [&] {
        new_b = Nodes()["b"];
        // The daemon rewrites its record after the head took it back: wait for both.
        return !new_b.empty() && new_b != old_b && DaemonPid(new_b) == daemon;
      },
      30s))
      << "b: " << new_b << ", its record's pid " << DaemonPid(new_b) << ", daemon " << daemon;
  for (pid_t w : old_workers) {
    EXPECT_TRUE(WaitFor([&] { return !ProcessRuns(w); }, 10s)) << "old worker " << w;
  }
  EXPECT_EQ(NodeEntry(old_b).value("state", ""), "dead");
  auto r = RunCommand(Driver("on_node", "a", "TARGET=" + new_b));
  EXPECT_TRUE(Has(r.output, "ran on " + new_b)) << r.output;
}

TEST_F(PausedNodeTest, CallsToAnActorOnAPausedNodeGoToItsRestartElsewhere) {
  const std::string old_b = zones_["b"];
  const pid_t daemon = DaemonPid(old_b);
  ASSERT_GT(daemon, 0);
  const std::filesystem::path go = dir_ / "go";
  const std::filesystem::path out = dir_ / "actor.out";
  SpawnDriver("actor_on_paused", "a", "GO=" + go.string(), out);
  std::string output;
  ASSERT_TRUE(WaitForOutput(out, {"count 101"}, 60s, &output)) << output;
  EXPECT_TRUE(Has(output, "first on " + old_b)) << output;
  ASSERT_EQ(::kill(daemon, SIGSTOP), 0);
  EXPECT_TRUE(WaitFor([&] { return NodeEntry(old_b).value("state", "") == "dead"; }, 20s));
  std::ofstream(go) << "go\n";
  EXPECT_TRUE(WaitForOutput(out, {"now on "}, 60s, &output)) << output;
  ASSERT_EQ(::kill(daemon, SIGCONT), 0);
  EXPECT_TRUE(Has(output, "count after 105")) << output;  // a new instance: 100 + 5
  auto pos = output.find("now on ");
  ASSERT_NE(pos, std::string::npos) << output;
  std::string now = output.substr(pos + 7, 16);
  EXPECT_TRUE(now == zones_["a"] || now == zones_["c"]) << output;
}

// Failure detection all but off: the largest threshold and timeout the table takes. Checks
// (and each node's watchdog, which compares its silence with the limit) every 100 ms.
class NoDetectionTest : public CliClusterTest {
 protected:
  std::string HeadFlags() const override {
    return "--system-config '{\"health_check_failure_threshold\": 2147483647, "
           "\"health_check_timeout_ms\": 31536000000, \"health_check_period_ms\": 100}'";
  }
};

TEST_F(NoDetectionTest, HugeHealthCheckLimitsDoNotOverflowIntoNodesLeaving) {
  // (The node's silence limit, threshold x timeout, once overflowed: the first watchdog
  // round, one period after a node joined, made it drop out, and it rejoined under a new
  // id.) No node leaves or changes its id over at least 30 watchdog rounds of each node;
  // the rounds are timer ticks that nothing outside the node counts, so the window is
  // time, polled throughout rather than slept through.
  std::string changed;
  EXPECT_FALSE(WaitFor(
      [&] {
        for (const auto& n : AllNodes()) {
          if (n.value("state", "") == "dead") changed = n.dump();
        }
        if (Nodes() != zones_) changed += " nodes changed";
        return !changed.empty();
      },
      3s))
      << changed;
  EXPECT_EQ(Nodes(), zones_);
  for (const auto& n : AllNodes()) EXPECT_NE(n.value("state", ""), "dead") << n.dump();
}

}  // namespace

int main(int argc, char** argv) {
  auto setup = [] {
    CliClusterTest::Self() = std::filesystem::read_symlink("/proc/self/exe").string();
    CliClusterTest::BaseTmp() = std::filesystem::temp_directory_path();
  };
  return raio_test::ScenarioOrTestsMain(argc, argv, setup,
                                        {
                                            {"kill_mid_run", ScenarioKillMidRun},
                                            {"no_retries", ScenarioNoRetries},
                                            {"on_node", ScenarioOnNode},
                                            {"actor_restart", ScenarioActorRestart},
                                            {"actor_on_paused", ScenarioActorOnPausedNode},
                                        });
}
