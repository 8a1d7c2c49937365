// A cluster of node daemons on this machine started with the raio CLI, as on several
// hosts: `raio start --head` (zone a) and two `raio start --address HEAD` nodes (zones b
// and c; 2 CPUs each, plus HeadFlags() and NodeFlags(zone)), each with its own session directory
// and ports, in a private TMPDIR per test. Drivers are the test binary in a scenario mode
// (RAIO_TEST_SCENARIO), attached to the node of a zone. Needs RAIO_CLI_PATH (the raio CLI) defined
// by the build.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace raio_test {

inline std::string Cli(const std::string& args) { return std::string(RAIO_CLI_PATH) + " " + args; }

inline std::string ReadWholeFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The pids of the children of `pid` (its workers, for a node daemon), from /proc.
inline std::vector<pid_t> ChildPids(pid_t pid) {
  std::vector<pid_t> children;
  std::error_code ec;
  std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    std::istringstream in(ReadWholeFile(task.path() / "children"));
    for (pid_t child; in >> child;) children.push_back(child);
  }
  return children;
}

// Whether process `pid` still runs (a zombie, exited but not reaped, does not).
inline bool ProcessRuns(pid_t pid) {
  std::string stat = ReadWholeFile("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

class CliClusterTest : public ::testing::Test {
 public:
  // The binary drivers run (set by main: this test binary).
  static std::string& Self() {
    static std::string self;
    return self;
  }
  static std::filesystem::path& BaseTmp() {
    static std::filesystem::path base;
    return base;
  }

 protected:
  // Extra `raio start --head` flags (e.g. --system-config).
  virtual std::string HeadFlags() const { return ""; }
  // Extra `raio start --address` flags of the node of zone `zone` ("b" or "c").
  virtual std::string NodeFlags(const std::string& /*zone*/) const { return ""; }

  void SetUp() override {
    dir_ = BaseTmp() / ("raio-cli-" + std::to_string(getpid()) + "-" +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    ::setenv("TMPDIR", dir_.c_str(), 1);
    ::unsetenv("RAIO_ADDRESS");
    auto r = RunCommand(
        Cli("start --head --port 0 --num-cpus 2 --labels '{\"zone\": \"a\"}' " + HeadFlags()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto pos = r.output.find("started at ");
    ASSERT_NE(pos, std::string::npos) << r.output;
    address_ = r.output.substr(pos + 11, r.output.find('\n', pos) - pos - 11);
    for (const std::string zone : {"b", "c"}) {
      AddNode("--num-cpus 2 --labels '{\"zone\": \"" + zone + "\"}' " + NodeFlags(zone));
    }
    zones_ = Nodes();
    ASSERT_EQ(zones_.size(), 3u);
    for (const auto& zone : {"a", "b", "c"}) ASSERT_EQ(zones_[zone].size(), 16u) << zone;
  }
  void TearDown() override {
    auto r = RunCommand(Cli("stop"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::filesystem::remove_all(dir_);
  }
  void AddNode(const std::string& flags) {
    auto r = RunCommand(Cli("start --address " + address_ + " --node-ip 127.0.0.1 " + flags));
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  // `raio list nodes --json`: every entry, the dead ones included.
  nlohmann::json AllNodes() {
    auto r = RunCommand(Cli("list nodes --json --address " + address_), false);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    nlohmann::json j = nlohmann::json::parse(r.output, nullptr, false);
    return j.is_object() ? j.value("nodes", nlohmann::json::array()) : nlohmann::json::array();
  }
  // The live nodes: zone label -> node id.
  std::map<std::string, std::string> Nodes() {
    std::map<std::string, std::string> zones;
    for (const auto& n : AllNodes()) {
      if (n.value("state", "") == "dead") continue;
      zones[n["labels"].value("zone", "?")] = n["node_id"].get<std::string>();
    }
    return zones;
  }
  // The entry of node `id` in `raio list nodes --json` (null when absent).
  nlohmann::json NodeEntry(const std::string& id) {
    for (const auto& n : AllNodes()) {
      if (n.value("node_id", "") == id) return n;
    }
    return nullptr;
  }
  // The pid of the daemon of node `id`, from its record in $TMPDIR/raio/nodes (0: none).
  pid_t DaemonPid(const std::string& id) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "raio" / "nodes", ec)) {
      nlohmann::json j = nlohmann::json::parse(ReadWholeFile(e.path()), nullptr, false);
      if (j.is_object() && j.value("node_id", "") == id) return j.value("pid", 0);
    }
    return 0;
  }
  // A driver attached to the node of `zone`, running `scenario`, with the zones' node ids
  // in A_NODE, B_NODE and C_NODE and their daemons' pids in B_PID and C_PID.
  std::string Driver(const std::string& scenario, const std::string& zone,
                     const std::string& env = "") {
    return "A_NODE=" + zones_["a"] + " B_NODE=" + zones_["b"] + " C_NODE=" + zones_["c"] +
           " B_PID=" + std::to_string(DaemonPid(zones_["b"])) +
           " C_PID=" + std::to_string(DaemonPid(zones_["c"])) + " " + env +
           " RAIO_NODE_ID=" + zones_[zone] + " RAIO_ADDRESS=" + address_ +
           " RAIO_TEST_SCENARIO=" + scenario + " " + Self();
  }
  // Driver(scenario, zone, env) in the background, its output going to file `out`; it dies
  // with the test (SpawnCommand).
  void SpawnDriver(const std::string& scenario, const std::string& zone, const std::string& env,
                   const std::filesystem::path& out) {
    std::string cmd = Driver(scenario, zone, env) + " > " + out.string() + " 2>&1";
    ASSERT_GT(SpawnCommand(cmd), 0) << cmd;
  }
  // Waits up to `timeout` for one of `whats` to appear in file `path`; `*output` is then
  // its contents.
  static bool WaitForOutput(const std::filesystem::path& path,
                            const std::vector<std::string>& whats,
                            std::chrono::milliseconds timeout, std::string* output) {
    return WaitFor(
        [&] {
          *output = ReadWholeFile(path);
          for (const auto& what : whats) {
            if (Has(*output, what)) return true;
          }
          return false;
        },
        timeout);
  }
  static bool Has(const std::string& output, const std::string& what) {
    return output.find(what) != std::string::npos;
  }

  std::filesystem::path dir_;
  std::string address_;
  std::map<std::string, std::string> zones_;
};

}  // namespace raio_test
