// The configuration table across processes on the embedded cluster: values set at the
// head (InitOptions::system_config) reach the driver, the node's workers (tasks, nested
// tasks, actors), and bad overrides or RAIO_* variables are refused at Init with a clear
// error. (The standalone cluster's --system-config is in standalone_test.cc; the node
// taking the head's values at registration in src/raio/node/node_manager_test.cc.)
#include <gtest/gtest.h>
#include <raio/raio.h>
#include <stdlib.h>

#include <map>
#include <string>

#include "test_functions.h"

using namespace raio_test;

namespace {

// The message of the InvalidUsageError that Init(options) throws ("" if it does not).
std::string InitError(const raio::InitOptions& options) {
  try {
    raio::Init(options);
  } catch (const raio::InvalidUsageError& e) {
    EXPECT_FALSE(raio::IsInitialized());
    return e.what();
  }
  raio::Shutdown();
  ADD_FAILURE() << "Init accepted the options";
  return "";
}

raio::InitOptions OneCpu() {
  raio::InitOptions options;
  options.num_cpus = 1;
  return options;
}

bool Mentions(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(SystemConfigTest, ValuesSetAtTheHeadReachTheDriverAndEveryWorker) {
  raio::InitOptions options;
  options.num_cpus = 2;
  options.system_config = {
      {"max_pipeline_depth", "7"}, {"lease_idle_timeout_ms", "33"}, {"max_request_bytes", "8MiB"}};
  raio::Init(options);
  EXPECT_EQ(raio::SystemConfig()["max_pipeline_depth"], "7");
  EXPECT_EQ(raio::SystemConfig()["max_request_bytes"], "8388608");
  // A worker started by the node, one started for a task's nested task, an actor's.
  EXPECT_EQ(raio::Task(ConfigValue).Remote("max_pipeline_depth").Get(), "7");
  EXPECT_EQ(raio::Task(ConfigValue).Remote("lease_idle_timeout_ms").Get(), "33");
  EXPECT_EQ(raio::Task(NestedConfigValue).Remote("max_request_bytes").Get(), "8388608");
  auto probe = raio::Actor(ConfigProbe::Create).Remote();
  EXPECT_EQ(probe.Task(&ConfigProbe::Value).Remote("lease_idle_timeout_ms").Get(), "33");
  // Entries left alone keep their defaults everywhere.
  EXPECT_EQ(raio::Task(ConfigValue).Remote("loop_spin_us").Get(), "50");
  raio::Shutdown();
}

TEST(SystemConfigTest, TheNextInitStartsFromTheDefaultsAgain) {
  raio::InitOptions options;
  options.num_cpus = 1;
  options.system_config = {{"max_pipeline_depth", "5"}};
  raio::Init(options);
  raio::Shutdown();
  raio::Init(OneCpu());
  EXPECT_EQ(raio::SystemConfig()["max_pipeline_depth"], "64");
  EXPECT_EQ(raio::Task(ConfigValue).Remote("max_pipeline_depth").Get(), "64");
  raio::Shutdown();
}

TEST(SystemConfigTest, OverridesWinOverTheEnvironmentWhichReachesWorkersToo) {
  ::setenv("RAIO_MAX_PIPELINE_DEPTH", "9", 1);
  ::setenv("RAIO_LEASE_IDLE_TIMEOUT_MS", "44", 1);
  raio::InitOptions options;
  options.num_cpus = 1;
  options.system_config = {{"max_pipeline_depth", "3"}};
  raio::Init(options);
  ::unsetenv("RAIO_MAX_PIPELINE_DEPTH");
  ::unsetenv("RAIO_LEASE_IDLE_TIMEOUT_MS");
  EXPECT_EQ(raio::Task(ConfigValue).Remote("max_pipeline_depth").Get(), "3");
  EXPECT_EQ(raio::Task(ConfigValue).Remote("lease_idle_timeout_ms").Get(), "44");
  raio::Shutdown();
}

TEST(SystemConfigTest, UnknownNameIsRefusedAtInitWithASuggestion) {
  raio::InitOptions options;
  options.num_cpus = 1;
  options.system_config = {{"lease_idle_timeout", "5"}};
  std::string message = InitError(options);
  EXPECT_TRUE(Mentions(message, "system_config: unknown name 'lease_idle_timeout'")) << message;
  EXPECT_TRUE(Mentions(message, "did you mean 'lease_idle_timeout_ms'")) << message;
  // Nothing was left behind: a plain Init works and has the defaults.
  raio::Init(OneCpu());
  EXPECT_EQ(raio::SystemConfig()["lease_idle_timeout_ms"], "20");
  raio::Shutdown();
}

TEST(SystemConfigTest, MalformedOrOutOfRangeValuesAreRefusedAtInit) {
  raio::InitOptions options;
  options.num_cpus = 1;
  options.system_config = {{"max_pipeline_depth", "many"}, {"memory_usage_threshold", "2"}};
  std::string message = InitError(options);
  EXPECT_TRUE(Mentions(message, "max_pipeline_depth='many' is not a whole number")) << message;
  EXPECT_TRUE(Mentions(message, "memory_usage_threshold='2'")) << message;
  EXPECT_TRUE(Mentions(message, "in (0, 1]")) << message;
}

TEST(SystemConfigTest, MalformedEnvironmentVariableIsRefusedAtInit) {
  ::setenv("RAIO_LOOP_SPIN_US", "lots", 1);
  std::string message = InitError(OneCpu());
  ::unsetenv("RAIO_LOOP_SPIN_US");
  EXPECT_TRUE(Mentions(message, "RAIO_LOOP_SPIN_US='lots'")) << message;
  EXPECT_TRUE(Mentions(message, "microseconds")) << message;
}

TEST(SystemConfigTest, SystemConfigWithAnAddressIsRefused) {
  raio::InitOptions options;
  options.address = "127.0.0.1:1";
  options.system_config = {{"max_pipeline_depth", "3"}};
  std::string message = InitError(options);
  EXPECT_TRUE(Mentions(message, "system_config applies to an embedded cluster only")) << message;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);  // never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
