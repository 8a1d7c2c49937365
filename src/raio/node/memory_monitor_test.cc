#include "raio/node/memory_monitor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>

#include "raio/common/config.h"
#include "raio/testkit/temp_dir.h"

namespace raio::node {
namespace {

constexpr std::string_view kMeminfo =
    "MemTotal:       24684084 kB\n"
    "MemFree:        19878072 kB\n"
    "MemAvailable:   22250412 kB\n"
    "Buffers:          123456 kB\n";

TEST(MemoryMonitorTest, ParsesMeminfoAsTotalMinusAvailable) {
  auto usage = ParseMeminfo(kMeminfo);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->total_bytes, 24684084ull * 1024);
  EXPECT_EQ(usage->used_bytes, (24684084ull - 22250412ull) * 1024);
  EXPECT_EQ(usage->source, "/proc/meminfo");
}

TEST(MemoryMonitorTest, RejectsMeminfoWithoutMemAvailable) {
  EXPECT_FALSE(ParseMeminfo("MemTotal: 100 kB\nMemFree: 50 kB\n").ok());
  EXPECT_FALSE(ParseMeminfo("MemTotal: lots kB\nMemAvailable: 5 kB\n").ok());
  EXPECT_FALSE(ParseMeminfo("").ok());
}

TEST(MemoryMonitorTest, DoesNotConfuseKeysWithACommonPrefix) {
  auto usage = ParseMeminfo("MemTotalX: 1 kB\nMemTotal: 100 kB\nMemAvailable: 40 kB\n");
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->total_bytes, 100u * 1024);
  EXPECT_EQ(usage->used_bytes, 60u * 1024);
}

TEST(MemoryMonitorTest, ParsesCgroupBytesAndMax) {
  auto max = ParseCgroupBytes("max\n");
  ASSERT_TRUE(max.ok());
  EXPECT_FALSE(max->has_value());
  auto bytes = ParseCgroupBytes("4294967296\n");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(**bytes, 4294967296ull);
  EXPECT_FALSE(ParseCgroupBytes("12 kB").ok());
}

TEST(MemoryMonitorTest, FindsTheCgroupV2Path) {
  EXPECT_EQ(ParseCgroupV2Path("4:memory:/x\n0::/user.slice/a.scope\n"), "/user.slice/a.scope");
  EXPECT_EQ(ParseCgroupV2Path("4:memory:/x\n1:cpu:/\n"), std::nullopt);
}

TEST(MemoryMonitorTest, UsesTheCgroupOnlyWhenItsLimitIsTighter) {
  MemoryUsage machine{10'000, 100'000, "/proc/meminfo"};
  MemoryUsage tight = EffectiveUsage(machine, 50'000, 30'000, "/sys/fs/cgroup/a");
  EXPECT_EQ(tight.total_bytes, 50'000u);
  EXPECT_EQ(tight.used_bytes, 30'000u);
  EXPECT_EQ(tight.source, "/sys/fs/cgroup/a");
  EXPECT_EQ(EffectiveUsage(machine, 200'000, 30'000, "c").source, "/proc/meminfo");
  EXPECT_EQ(EffectiveUsage(machine, std::nullopt, 30'000, "c").source, "/proc/meminfo");
}

TEST(MemoryMonitorTest, ParsesStatmResidentPages) {
  auto rss = ParseStatmRssBytes("1000 250 30 4 0 100 0\n", 4096);
  ASSERT_TRUE(rss.ok());
  EXPECT_EQ(*rss, 250u * 4096);
  EXPECT_FALSE(ParseStatmRssBytes("1000\n", 4096).ok());
}

TEST(MemoryMonitorTest, ReadsItsOwnRssAndTheMachinesMemory) {
  auto rss = ReadRssBytes(::getpid());
  ASSERT_TRUE(rss.ok()) << rss.status();
  EXPECT_GT(*rss, 0u);
  auto usage = ReadMemoryUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_GT(usage->total_bytes, 0u);
  EXPECT_LE(usage->used_bytes, usage->total_bytes);
}

TEST(MemoryMonitorTest, ReadsTheUsageFileInsteadOfTheMachineWhenOneIsSet) {
  testkit::TempDir dir("memmon");
  const std::string path = dir.Path("meminfo");
  std::ofstream(path) << "MemTotal: 1000 kB\nMemAvailable: 30 kB\n";
  auto usage = ReadMemoryUsage(path);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->total_bytes, 1000u * 1024);
  EXPECT_EQ(usage->used_bytes, 970u * 1024);
  EXPECT_EQ(usage->source, path);
  // Rewritten, it is read again: the monitor sees what the file says now.
  std::ofstream(path) << "MemTotal: 1000 kB\nMemAvailable: 900 kB\n";
  usage = ReadMemoryUsage(path);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->used_bytes, 100u * 1024);
  // No path: the machine, as before.
  auto machine = ReadMemoryUsage(std::string());
  ASSERT_TRUE(machine.ok()) << machine.status();
  EXPECT_NE(machine->source, path);
}

TEST(MemoryMonitorTest, AMissingOrMalformedUsageFileMeasuresNothing) {
  testkit::TempDir dir("memmon");
  auto missing = ReadMemoryUsage(dir.Path("absent"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable) << missing.status();
  EXPECT_NE(missing.status().message().find(dir.Path("absent")), std::string::npos);
  std::ofstream(dir.Path("bad")) << "used 5 of 10\n";
  auto bad = ReadMemoryUsage(dir.Path("bad"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find(dir.Path("bad")), std::string::npos);
}

TEST(MemoryMonitorTest, TakesTheUsageFileFromTheConfig) {
  ASSERT_TRUE(config::ApplyOverrides({{"memory_usage_file_path", "/tmp/x/meminfo"}}).ok());
  EXPECT_EQ(MemoryMonitorOptions::FromConfig().usage_file_path, "/tmp/x/meminfo");
  ASSERT_TRUE(config::ApplyOverrides({{"memory_usage_file_path", ""}}).ok());
  EXPECT_EQ(MemoryMonitorOptions::FromConfig().usage_file_path, "");
  EXPECT_FALSE(config::ApplyOverrides({{"memory_usage_file_path", "relative/meminfo"}}).ok());
}

TEST(MemoryMonitorTest, ThresholdIsTheSmallerOfFractionAndBytes) {
  MemoryMonitorOptions options;
  options.usage_threshold = 0.5;
  EXPECT_EQ(ThresholdBytes(options, 1000), 500u);
  options.usage_threshold_bytes = 300;
  EXPECT_EQ(ThresholdBytes(options, 1000), 300u);
  options.usage_threshold_bytes = 800;
  EXPECT_EQ(ThresholdBytes(options, 1000), 500u);
}

TEST(MemoryMonitorTest, ValidatesOptions) {
  MemoryMonitorOptions options;
  EXPECT_TRUE(options.Validate().ok());
  options.usage_threshold = 1.0;
  EXPECT_TRUE(options.Validate().ok());
  for (double bad : {0.0, -0.1, 1.01, std::nan("")}) {
    options.usage_threshold = bad;
    absl::Status s = options.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("memory_usage_threshold"), std::string::npos);
  }
  options.usage_threshold = 0.9;
  options.usage_threshold_bytes = 0;
  EXPECT_FALSE(options.Validate().ok());
  options.usage_threshold_bytes.reset();
  options.usage_file_path = "/tmp/meminfo";
  EXPECT_TRUE(options.Validate().ok());
  options.usage_file_path = "meminfo";
  absl::Status s = options.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("memory_usage_file_path"), std::string::npos) << s;
}

VictimCandidate Candidate(uint8_t n, uint64_t rss, bool actor) {
  VictimCandidate c;
  c.worker.mutable_data()[0] = n;
  c.pid = 100 + n;
  c.rss_bytes = rss;
  c.is_actor = actor;
  return c;
}

TEST(MemoryMonitorTest, ChoosesTheLargestResidentSet) {
  std::vector<VictimCandidate> c{Candidate(1, 100, false), Candidate(2, 900, true),
                                 Candidate(3, 500, false)};
  EXPECT_EQ(ChooseVictim(c), 1u);
}

TEST(MemoryMonitorTest, PrefersATaskOverAnActorOnATie) {
  std::vector<VictimCandidate> c{Candidate(1, 500, true), Candidate(2, 500, false)};
  EXPECT_EQ(ChooseVictim(c), 1u);
  std::vector<VictimCandidate> d{Candidate(1, 500, false), Candidate(2, 500, true)};
  EXPECT_EQ(ChooseVictim(d), 0u);
}

TEST(MemoryMonitorTest, ChoosesNothingFromNoCandidates) {
  EXPECT_EQ(ChooseVictim({}), std::nullopt);
}

TEST(MemoryMonitorTest, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(FormatBytes(512), "512 bytes");
  EXPECT_EQ(FormatBytes(3ull << 20), "3.00 MiB (3145728 bytes)");
  EXPECT_EQ(FormatBytes(3ull << 29), "1.50 GiB (1610612736 bytes)");
}

TEST(MemoryMonitorTest, DescribesTheKillWithEveryFigure) {
  MemoryMonitorOptions options;
  options.usage_threshold_bytes = 2ull << 30;
  VictimCandidate victim = Candidate(7, 1ull << 30, false);
  victim.description = "task Hog";
  MemoryUsage usage{3ull << 30, 8ull << 30, "/proc/meminfo"};
  std::string s = DescribeKill("abcd", victim, usage, 2ull << 30, options);
  for (const char* part :
       {"node abcd", "pid 107", "task Hog", "1.00 GiB (1073741824 bytes)", "3.00 GiB", "8.00 GiB",
        "threshold 2.00 GiB", "0.95", "memory_usage_threshold_bytes 2147483648", "/proc/meminfo"}) {
    EXPECT_NE(s.find(part), std::string::npos) << part << " in: " << s;
  }
  // The victim holds all of the 1 GiB excess: no remark. A 10 MiB one holds little of it.
  EXPECT_EQ(s.find("used elsewhere"), std::string::npos) << s;
  victim.rss_bytes = 10ull << 20;
  s = DescribeKill("abcd", victim, usage, 2ull << 30, options);
  EXPECT_NE(s.find("used elsewhere on the machine"), std::string::npos) << s;
}

}  // namespace
}  // namespace raio::node
