#include "raio/node/memory_monitor.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace raio::node {

namespace {

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Debian's abseil has its own string_view type; parsing uses it throughout.
absl::string_view AsAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// The value of a "Key:   1234 kB" line of /proc/meminfo, in bytes.
std::optional<uint64_t> MeminfoField(absl::string_view text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, key) || line.size() <= key.size() || line[key.size()] != ':') {
      continue;
    }
    std::vector<absl::string_view> parts =
        absl::StrSplit(line.substr(key.size() + 1), ' ', absl::SkipEmpty());
    uint64_t value = 0;
    if (parts.empty() || !absl::SimpleAtoi(parts[0], &value)) return std::nullopt;
    uint64_t unit = 1;
    if (parts.size() > 1 && parts[1] == "kB") unit = 1024;
    return value * unit;
  }
  return std::nullopt;
}

}  // namespace

MemoryMonitorOptions MemoryMonitorOptions::FromConfig() {
  MemoryMonitorOptions m;
  m.interval = config::memory_monitor_interval_ms();
  m.usage_threshold = config::memory_usage_threshold();
  if (uint64_t bytes = config::memory_usage_threshold_bytes(); bytes > 0) {
    m.usage_threshold_bytes = bytes;
  }
  m.usage_file_path = config::memory_usage_file_path();
  return m;
}

absl::Status MemoryMonitorOptions::Validate() const {
  if (!(usage_threshold > 0 && usage_threshold <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory_usage_threshold must be a fraction in (0, 1], got ", usage_threshold));
  }
  if (usage_threshold_bytes && *usage_threshold_bytes == 0) {
    return absl::InvalidArgumentError("memory_usage_threshold_bytes must be positive, got 0");
  }
  if (interval.count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the memory monitor interval must be >= 0 ms (0 = off), got ", interval.count()));
  }
  if (!usage_file_path.empty() && usage_file_path.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_usage_file_path must be an absolute path, got '", usage_file_path, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<MemoryUsage> ParseMeminfo(std::string_view text, std::string_view source) {
  std::optional<uint64_t> total = MeminfoField(AsAbsl(text), "MemTotal");
  std::optional<uint64_t> available = MeminfoField(AsAbsl(text), "MemAvailable");
  if (!total || !available) {
    return absl::InvalidArgumentError(
        absl::StrCat(AsAbsl(source), " lacks MemTotal or MemAvailable"));
  }
  MemoryUsage usage;
  usage.total_bytes = *total;
  usage.used_bytes = *available >= *total ? 0 : *total - *available;
  usage.source = std::string(source);
  return usage;
}

absl::StatusOr<std::optional<uint64_t>> ParseCgroupBytes(std::string_view text) {
  absl::string_view v = absl::StripAsciiWhitespace(AsAbsl(text));
  if (v == "max") return std::optional<uint64_t>();
  uint64_t bytes = 0;
  if (!absl::SimpleAtoi(v, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("not a cgroup byte count: '", v, "'"));
  }
  return std::optional<uint64_t>(bytes);
}

std::optional<std::string> ParseCgroupV2Path(std::string_view proc_self_cgroup) {
  for (absl::string_view line : absl::StrSplit(AsAbsl(proc_self_cgroup), '\n')) {
    if (absl::StartsWith(line, "0::")) {
      return std::string(absl::StripAsciiWhitespace(line.substr(3)));
    }
  }
  return std::nullopt;
}

MemoryUsage EffectiveUsage(const MemoryUsage& machine, std::optional<uint64_t> cgroup_max_bytes,
                           std::optional<uint64_t> cgroup_current_bytes,
                           const std::string& cgroup_dir) {
  if (!cgroup_max_bytes || !cgroup_current_bytes || *cgroup_max_bytes == 0 ||
      *cgroup_max_bytes >= machine.total_bytes) {
    return machine;
  }
  MemoryUsage usage;
  usage.total_bytes = *cgroup_max_bytes;
  usage.used_bytes = *cgroup_current_bytes;
  usage.source = cgroup_dir;
  return usage;
}

absl::StatusOr<MemoryUsage> ReadMemoryUsage() {
  std::optional<std::string> meminfo = ReadFile("/proc/meminfo");
  if (!meminfo) return absl::UnavailableError("cannot read /proc/meminfo");
  absl::StatusOr<MemoryUsage> machine = ParseMeminfo(*meminfo);
  if (!machine.ok()) return machine.status();
  std::optional<std::string> self = ReadFile("/proc/self/cgroup");
  std::optional<std::string> path = self ? ParseCgroupV2Path(*self) : std::nullopt;
  if (!path) return machine;
  // The v2 hierarchy is mounted at /sys/fs/cgroup, or at /sys/fs/cgroup/unified on
  // hosts that still mount v1 controllers (hybrid mode).
  for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    std::string dir = absl::StrCat(root, *path == "/" ? "" : *path);
    std::optional<std::string> max_text = ReadFile(dir + "/memory.max");
    std::optional<std::string> current_text = ReadFile(dir + "/memory.current");
    if (!max_text || !current_text) continue;
    auto max = ParseCgroupBytes(*max_text);
    auto current = ParseCgroupBytes(*current_text);
    if (!max.ok() || !current.ok()) continue;
    return EffectiveUsage(*machine, *max, *current, dir);
  }
  return machine;
}

absl::StatusOr<MemoryUsage> ReadMemoryUsage(const std::string& usage_file_path) {
  if (usage_file_path.empty()) return ReadMemoryUsage();
  std::optional<std::string> text = ReadFile(usage_file_path);
  if (!text) return absl::UnavailableError(absl::StrCat("cannot read ", usage_file_path));
  return ParseMeminfo(*text, usage_file_path);
}

absl::StatusOr<uint64_t> ParseStatmRssBytes(std::string_view text, uint64_t page_size) {
  std::vector<absl::string_view> fields = absl::StrSplit(AsAbsl(text), ' ', absl::SkipWhitespace());
  uint64_t pages = 0;
  if (fields.size() < 2 || !absl::SimpleAtoi(absl::StripAsciiWhitespace(fields[1]), &pages)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed statm: '", AsAbsl(text), "'"));
  }
  return pages * page_size;
}

absl::StatusOr<uint64_t> ReadRssBytes(pid_t pid) {
  std::optional<std::string> text = ReadFile(absl::StrCat("/proc/", pid, "/statm"));
  if (!text) return absl::NotFoundError(absl::StrCat("no process ", pid));
  long page_size = ::sysconf(_SC_PAGESIZE);
  return ParseStatmRssBytes(*text, page_size > 0 ? static_cast<uint64_t>(page_size) : 4096);
}

uint64_t ThresholdBytes(const MemoryMonitorOptions& options, uint64_t total_bytes) {
  auto by_fraction =
      static_cast<uint64_t>(std::floor(options.usage_threshold * static_cast<double>(total_bytes)));
  if (options.usage_threshold_bytes) return std::min(by_fraction, *options.usage_threshold_bytes);
  return by_fraction;
}

std::optional<std::size_t> ChooseVictim(const std::vector<VictimCandidate>& candidates) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const VictimCandidate& c = candidates[i];
    if (!best) {
      best = i;
      continue;
    }
    const VictimCandidate& b = candidates[*best];
    if (c.rss_bytes > b.rss_bytes || (c.rss_bytes == b.rss_bytes && b.is_actor && !c.is_actor)) {
      best = i;
    }
  }
  return best;
}

std::string FormatBytes(uint64_t bytes) {
  constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
  auto scaled = [&](uint64_t unit, const char* name) {
    return absl::StrFormat("%.2f %s (%d bytes)",
                           static_cast<double>(bytes) / static_cast<double>(unit), name, bytes);
  };
  if (bytes >= kGiB) return scaled(kGiB, "GiB");
  if (bytes >= kMiB) return scaled(kMiB, "MiB");
  if (bytes >= kKiB) return scaled(kKiB, "KiB");
  return absl::StrCat(bytes, " bytes");
}

std::string DescribeKill(const std::string& node_id_hex, const VictimCandidate& victim,
                         const MemoryUsage& usage, uint64_t threshold_bytes,
                         const MemoryMonitorOptions& options) {
  std::string how = absl::StrFormat("memory_usage_threshold %.4g", options.usage_threshold);
  if (options.usage_threshold_bytes) {
    absl::StrAppend(&how, ", memory_usage_threshold_bytes ", *options.usage_threshold_bytes);
  }
  absl::StrAppend(&how, ", measured from ", usage.source);
  return absl::StrCat(
      "the memory monitor of node ", node_id_hex, " ended worker ", victim.worker.Hex(), " (pid ",
      victim.pid, ", ", victim.description, ") using ", FormatBytes(victim.rss_bytes),
      " resident: the node's memory use ", FormatBytes(usage.used_bytes), " of ",
      FormatBytes(usage.total_bytes), " total crossed the threshold ", FormatBytes(threshold_bytes),
      " (", how, ")",
      // Use is measured machine-wide: say so when this worker is not the
      // cause, so that a small task is not blamed for others' memory.
      victim.rss_bytes * 4 < usage.used_bytes - std::min(usage.used_bytes, threshold_bytes)
          ? absl::StrCat("; this worker holds a small part of the excess, so most of "
                         "the memory is used elsewhere on the machine (memory use is "
                         "measured from ",
                         usage.source, ", not per worker)")
          : "");
}

}  // namespace raio::node
