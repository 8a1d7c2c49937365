// Memory monitor: the pure parts of the node daemon's out-of-memory protection (Ray's
// MemoryMonitor and worker-killing policy). Reads how much memory the node uses (from
// /proc/meminfo, or from the process's cgroup v2 when its memory.max is the tighter
// limit, or from the file memory_usage_file_path names, which a test controls), the
// resident set size of worker processes (/proc/<pid>/statm), and picks the
// worker to end when use crosses the threshold. NodeManager runs the timer and does the
// killing (see docs/design/node.md, "Memory monitor").
// Threading: free functions without shared state; safe from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/common/config.h"
#include "raio/common/ids.h"

namespace raio::node {

// How the node watches its memory. Checked by Validate().
struct MemoryMonitorOptions {
  // Time between two measurements; zero turns the monitor off.
  std::chrono::milliseconds interval{config::kDefaults.memory_monitor_interval_ms};
  // Share of the node's memory (0 < x <= 1) above which a worker is ended.
  double usage_threshold = config::kDefaults.memory_usage_threshold;
  // Absolute threshold in bytes; when set, the effective threshold is the smaller one.
  std::optional<uint64_t> usage_threshold_bytes;
  // Where the node's memory use is read from: "" measures the machine (ReadMemoryUsage);
  // an absolute path reads that meminfo-format file instead, so that a test decides what
  // the node sees without allocating memory beside the other tests of the machine.
  std::string usage_file_path;

  // The settings in this process's config: memory_monitor_interval_ms,
  // memory_usage_threshold, memory_usage_threshold_bytes (0: none) and
  // memory_usage_file_path.
  static MemoryMonitorOptions FromConfig();
  // InvalidArgument naming the bad value: a fraction outside (0, 1], a zero byte
  // threshold, a negative interval, or a usage file path that is not absolute.
  [[nodiscard]] absl::Status Validate() const;
};

// The node's memory use at one instant, in bytes.
struct MemoryUsage {
  uint64_t used_bytes = 0;
  uint64_t total_bytes = 0;
  // Where the figures come from: "/proc/meminfo", the cgroup's directory, or the usage
  // file's path.
  std::string source;
};

// Parses /proc/meminfo: used = MemTotal - MemAvailable (kB in the file, bytes out), with
// `source` as the figures' source. InvalidArgument (naming `source`) when either line is
// missing or malformed.
[[nodiscard]] absl::StatusOr<MemoryUsage> ParseMeminfo(std::string_view text,
                                                       std::string_view source = "/proc/meminfo");

// Parses a cgroup v2 memory file (memory.max or memory.current): a byte count, or
// "max" (no limit), which gives nullopt. InvalidArgument for anything else.
[[nodiscard]] absl::StatusOr<std::optional<uint64_t>> ParseCgroupBytes(std::string_view text);

// The cgroup v2 directory of this process from /proc/self/cgroup text (the "0::<path>"
// line), or nullopt when the process is not in a v2 hierarchy.
std::optional<std::string> ParseCgroupV2Path(std::string_view proc_self_cgroup);

// Chooses the figures to act on: the cgroup's current/max when its limit is lower than
// the machine's MemTotal, else the machine's.
MemoryUsage EffectiveUsage(const MemoryUsage& machine, std::optional<uint64_t> cgroup_max_bytes,
                           std::optional<uint64_t> cgroup_current_bytes,
                           const std::string& cgroup_dir);

// Reads the node's memory use now (/proc/meminfo and the cgroup files).
// Error when /proc/meminfo cannot be read or parsed; cgroup files that are absent or
// unreadable are ignored.
[[nodiscard]] absl::StatusOr<MemoryUsage> ReadMemoryUsage();

// The node's memory use as the monitor measures it: ReadMemoryUsage() when `usage_file_path`
// is empty (the production path, unchanged); else that file alone, parsed as meminfo
// (ParseMeminfo, source = the path). Unavailable when the file cannot be read,
// InvalidArgument when it does not parse; the monitor then acts on nothing.
[[nodiscard]] absl::StatusOr<MemoryUsage> ReadMemoryUsage(const std::string& usage_file_path);

// Parses /proc/<pid>/statm (sizes in pages): resident pages * page_size, in bytes.
[[nodiscard]] absl::StatusOr<uint64_t> ParseStatmRssBytes(std::string_view text,
                                                          uint64_t page_size);

// The resident set size of process `pid` in bytes. NotFound when the process is gone.
[[nodiscard]] absl::StatusOr<uint64_t> ReadRssBytes(pid_t pid);

// The threshold in bytes: usage_threshold * total, or usage_threshold_bytes when set and
// smaller.
uint64_t ThresholdBytes(const MemoryMonitorOptions& options, uint64_t total_bytes);

// A worker the monitor may end: a leased one (running tasks, or hosting an actor).
// Idle and starting workers are never candidates.
struct VictimCandidate {
  WorkerId worker;
  pid_t pid = -1;
  uint64_t rss_bytes = 0;
  bool is_actor = false;
  // What it runs, for the log: the lease's function name or "actor".
  std::string description;
};

// The policy: the candidate with the largest resident set; on a tie, a task's worker
// before an actor's (a task is retried, an actor loses its state). Returns the index
// in `candidates`, or nullopt when there is none.
std::optional<std::size_t> ChooseVictim(const std::vector<VictimCandidate>& candidates);

// "1.50 GiB (1610612736 bytes)": binary units (KiB, MiB, GiB) with two decimals, then
// the exact count.
std::string FormatBytes(uint64_t bytes);

// The sentence the node logs and sends to the victim's owner, with every figure:
// "the memory monitor of node N ended worker W (pid P, <what>) using U resident: the
// node's memory use X of Y total crossed the threshold Z (<how the threshold was set>)".
std::string DescribeKill(const std::string& node_id_hex, const VictimCandidate& victim,
                         const MemoryUsage& usage, uint64_t threshold_bytes,
                         const MemoryMonitorOptions& options);

}  // namespace raio::node
