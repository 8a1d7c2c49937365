#include "raio/common/config.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace raio::config {
namespace {

using namespace std::chrono_literals;

// Every test starts from the defaults (a fake empty environment) and leaves them behind.
class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(Reset({}).ok()); }
  void TearDown() override { ASSERT_TRUE(Reset({}).ok()); }

  static absl::Status Reset(const std::vector<std::string>& vars) {
    std::vector<const char*> envp;
    for (const auto& v : vars) envp.push_back(v.c_str());
    envp.push_back(nullptr);
    return internal::ResetToEnvironment(envp.data());
  }
  static void ExpectRejected(const std::map<std::string, std::string>& overrides,
                             const std::vector<std::string>& needles) {
    absl::Status s = ApplyOverrides(overrides, "system_config");
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(s.message().substr(0, 15), "system_config: ") << s;
    for (const auto& needle : needles) {
      EXPECT_NE(s.message().find(needle), std::string_view::npos) << needle << " in " << s;
    }
  }
};

TEST_F(ConfigTest, AccessorsStartAtTheTableDefaults) {
  EXPECT_EQ(lease_idle_timeout_ms(), 20ms);
  EXPECT_EQ(loop_spin_us(), 50us);
  EXPECT_EQ(max_request_bytes(), kMaxRequestBytesLimit);
  EXPECT_EQ(max_inline_object_bytes(), 100u * 1024);
  EXPECT_DOUBLE_EQ(memory_usage_threshold(), 0.95);
  EXPECT_TRUE(prestart_worker());
  EXPECT_EQ(log_level(), LogLevel::kAuto);
  EXPECT_EQ(kDefaults.lease_idle_timeout_ms, 20ms);
  EXPECT_TRUE(NonDefaultValues().empty());
}

TEST_F(ConfigTest, EveryEntryIsDescribedWithItsUnitAndEnvironmentVariable) {
  std::set<std::string> names;
  for (const EntryInfo& e : Describe()) {
    EXPECT_TRUE(names.insert(std::string(e.name)).second) << "duplicate " << e.name;
    EXPECT_EQ(e.env_var, EnvVarName(e.name));
    EXPECT_EQ(e.value, e.default_value) << e.name;
    EXPECT_FALSE(e.doc.empty()) << e.name;
    if (e.type == Type::kMilliseconds) {
      EXPECT_EQ(e.unit, "ms") << e.name;
    } else if (e.type == Type::kMicroseconds) {
      EXPECT_EQ(e.unit, "us") << e.name;
    } else if (e.type == Type::kBytes) {
      EXPECT_EQ(e.unit, "bytes") << e.name;
    }
  }
  EXPECT_EQ(names.size(), CurrentValues().size());
  EXPECT_EQ(EnvVarName("lease_idle_timeout_ms"), "RAIO_LEASE_IDLE_TIMEOUT_MS");
}

TEST_F(ConfigTest, TheDesignPageListsEveryEntryWithItsDefault) {
  std::ifstream in(std::string(RAIO_SOURCE_DIR) + "/docs/design/config.md");
  ASSERT_TRUE(in) << "docs/design/config.md";
  std::stringstream text;
  text << in.rdbuf();
  for (const EntryInfo& e : Describe()) {
    std::string row = "| `" + std::string(e.name) + "` | " + std::string(TypeName(e.type)) + " | " +
                      e.default_value;
    EXPECT_NE(text.str().find(row), std::string::npos) << "docs/design/config.md lacks " << row;
  }
}

TEST_F(ConfigTest, OverridesParseEachType) {
  ASSERT_TRUE(ApplyOverrides({{"max_pipeline_depth", "16"},
                              {"memory_usage_threshold", "0.5"},
                              {"prestart_worker", "false"},
                              {"max_request_bytes", "4MiB"},
                              {"object_store_prefault_bytes", "12345"},
                              {"lease_idle_timeout_ms", " 50 "},
                              {"pipeline_target_us", "250"},
                              {"log_level", "DEBUG"}})
                  .ok());
  EXPECT_EQ(max_pipeline_depth(), 16);
  EXPECT_DOUBLE_EQ(memory_usage_threshold(), 0.5);
  EXPECT_FALSE(prestart_worker());
  EXPECT_EQ(max_request_bytes(), 4u << 20);
  EXPECT_EQ(object_store_prefault_bytes(), 12345u);
  EXPECT_EQ(lease_idle_timeout_ms(), 50ms);
  EXPECT_EQ(pipeline_target_us(), 250us);
  EXPECT_EQ(log_level(), LogLevel::kDebug);
  // Listed in their text form, which reads back to the same values.
  std::map<std::string, std::string> changed = NonDefaultValues();
  EXPECT_EQ(changed.size(), 8u);
  EXPECT_EQ(changed["max_request_bytes"], "4194304");
  EXPECT_EQ(changed["memory_usage_threshold"], "0.5");
  EXPECT_EQ(changed["prestart_worker"], "false");
  EXPECT_EQ(changed["log_level"], "debug");
  EXPECT_EQ(changed["lease_idle_timeout_ms"], "50");
  ASSERT_TRUE(Reset({}).ok());
  ASSERT_TRUE(ApplyOverrides(changed).ok());
  EXPECT_EQ(NonDefaultValues(), changed);
}

TEST_F(ConfigTest, PathsAreAbsoluteOrEmptyAndTravelAsText) {
  EXPECT_STREQ(memory_usage_file_path(), "");
  ASSERT_TRUE(ApplyOverrides({{"memory_usage_file_path", " /tmp/a b/meminfo "}}).ok());
  const char* first = memory_usage_file_path();
  EXPECT_STREQ(first, "/tmp/a b/meminfo");
  EXPECT_EQ(NonDefaultValues()["memory_usage_file_path"], "/tmp/a b/meminfo");
  // A pointer a reader loaded stays valid after a later write.
  ASSERT_TRUE(ApplyOverrides({{"memory_usage_file_path", "/elsewhere"}}).ok());
  EXPECT_STREQ(first, "/tmp/a b/meminfo");
  EXPECT_STREQ(memory_usage_file_path(), "/elsewhere");
  ExpectRejected({{"memory_usage_file_path", "relative/meminfo"}},
                 {"memory_usage_file_path='relative/meminfo'", "an absolute path"});
  EXPECT_STREQ(memory_usage_file_path(), "/elsewhere");
  ASSERT_TRUE(Reset({"RAIO_MEMORY_USAGE_FILE_PATH=/from/env"}).ok());
  EXPECT_STREQ(memory_usage_file_path(), "/from/env");
  EXPECT_EQ(EnvironmentForWorkers(),
            (std::vector<std::string>{"RAIO_MEMORY_USAGE_FILE_PATH=/from/env"}));
  ASSERT_TRUE(Reset({}).ok());
  EXPECT_STREQ(memory_usage_file_path(), "");
}

TEST_F(ConfigTest, DoublesTravelExactly) {
  ASSERT_TRUE(ApplyOverrides({{"memory_resource_fraction", "0.1234567890123"}}).ok());
  const double v = memory_resource_fraction();
  std::map<std::string, std::string> sent = CurrentValues();
  ASSERT_TRUE(Reset({}).ok());
  ASSERT_TRUE(ApplyOverrides(sent).ok());
  EXPECT_EQ(memory_resource_fraction(), v);
}

TEST_F(ConfigTest, UnknownNameIsRefusedWithASuggestion) {
  ExpectRejected({{"lease_idle_timeout", "50"}},
                 {"unknown name 'lease_idle_timeout'", "did you mean 'lease_idle_timeout_ms'"});
  ExpectRejected({{"RAIO_LOOP_SPIN_US", "0"}}, {"did you mean 'loop_spin_us'"});
  ExpectRejected({{"no_such_thing_at_all", "1"}}, {"unknown name 'no_such_thing_at_all'"});
}

TEST_F(ConfigTest, MalformedValuesAreRefusedNamingWhatTheyWant) {
  ExpectRejected({{"lease_idle_timeout_ms", "fast"}},
                 {"lease_idle_timeout_ms='fast'", "whole number of milliseconds", ">= 0"});
  ExpectRejected({{"lease_idle_timeout_ms", "2.5"}}, {"lease_idle_timeout_ms='2.5'"});
  ExpectRejected({{"max_pipeline_depth", "0"}}, {"max_pipeline_depth='0'", ">= 1"});
  ExpectRejected({{"max_pipeline_depth", "99999999999"}}, {"a whole number"});
  ExpectRejected({{"memory_usage_threshold", "1.5"}}, {"in (0, 1]"});
  ExpectRejected({{"memory_usage_threshold", "0"}}, {"in (0, 1]"});
  ExpectRejected({{"memory_usage_threshold", "nan"}}, {"a finite number"});
  ExpectRejected({{"prestart_worker", "maybe"}}, {"true or false"});
  ExpectRejected({{"max_request_bytes", "4 parsecs"}}, {"a byte count"});
  ExpectRejected({{"max_request_bytes", "1GiB"}}, {"between 1 and 535822336"});
  ExpectRejected({{"max_request_bytes", "-1"}}, {"max_request_bytes='-1'"});
  ExpectRejected({{"object_store_prefault_bytes", "99999999999TiB"}}, {"a byte count"});
  ExpectRejected({{"control_rpc_timeout_ms", "99999999999999"}}, {"at most a year"});
  ExpectRejected({{"log_level", "loud"}}, {"one of auto, trace, debug"});
}

TEST_F(ConfigTest, NothingIsAppliedWhenOneOverrideIsBad) {
  ExpectRejected({{"lease_idle_timeout_ms", "50"}, {"max_pipeline_depth", "none"}, {"x", "1"}},
                 {"max_pipeline_depth='none'", "unknown name 'x'"});
  EXPECT_EQ(lease_idle_timeout_ms(), 20ms);
  EXPECT_TRUE(NonDefaultValues().empty());
}

TEST_F(ConfigTest, OverridesLeaveOtherEntriesAsTheyAre) {
  ASSERT_TRUE(ApplyOverrides({{"lease_idle_timeout_ms", "50"}}).ok());
  ASSERT_TRUE(ApplyOverrides({{"loop_spin_us", "0"}}).ok());
  EXPECT_EQ(lease_idle_timeout_ms(), 50ms);
  EXPECT_EQ(loop_spin_us(), 0us);
}

TEST_F(ConfigTest, EnvironmentVariablesOverrideDefaults) {
  ASSERT_TRUE(
      Reset({"RAIO_LEASE_IDLE_TIMEOUT_MS=75", "RAIO_ADDRESS=10.0.0.1:6379", "RAIO_LOG_LEVEL=error",
             "PATH=/bin", "RAIO_PRESTART_WORKER=0", "RAIO_NO_SUCH_ENTRY=1"})
          .ok());
  EXPECT_EQ(lease_idle_timeout_ms(), 75ms);
  EXPECT_EQ(log_level(), LogLevel::kError);
  EXPECT_FALSE(prestart_worker());
  EXPECT_EQ(NonDefaultValues().size(), 3u);
  // A later reset forgets them, and an empty value means unset.
  ASSERT_TRUE(Reset({"RAIO_LEASE_IDLE_TIMEOUT_MS="}).ok());
  EXPECT_EQ(lease_idle_timeout_ms(), 20ms);
  EXPECT_TRUE(NonDefaultValues().empty());
}

TEST_F(ConfigTest, MalformedEnvironmentVariableIsNamedAndNothingIsApplied) {
  ASSERT_TRUE(ApplyOverrides({{"max_pipeline_depth", "3"}}).ok());
  absl::Status s = Reset({"RAIO_LEASE_IDLE_TIMEOUT_MS=75", "RAIO_LOOP_SPIN_US=lots"});
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("RAIO_LOOP_SPIN_US='lots'"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("microseconds"), std::string_view::npos) << s;
  EXPECT_EQ(lease_idle_timeout_ms(), 20ms);
  EXPECT_EQ(max_pipeline_depth(), 64);  // reset to the default all the same
}

TEST_F(ConfigTest, WorkersGetTheNonDefaultValuesAsVariables) {
  EXPECT_TRUE(EnvironmentForWorkers().empty());
  ASSERT_TRUE(ApplyOverrides({{"lease_idle_timeout_ms", "50"}, {"prestart_worker", "false"}}).ok());
  std::vector<std::string> env = EnvironmentForWorkers();
  EXPECT_EQ(env, (std::vector<std::string>{"RAIO_LEASE_IDLE_TIMEOUT_MS=50",
                                           "RAIO_PRESTART_WORKER=false"}));
  // What a worker reads back from them.
  std::vector<std::string> vars(env.begin(), env.end());
  ASSERT_TRUE(Reset(vars).ok());
  EXPECT_EQ(lease_idle_timeout_ms(), 50ms);
  EXPECT_FALSE(prestart_worker());
}

}  // namespace
}  // namespace raio::config
