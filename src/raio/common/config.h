// raio's configuration: one table of every tunable (Ray's RAY_CONFIG list), each with a
// snake_case name that carries its unit (`_ms`, `_us`, `_bytes`), a type, a default, a
// unit and a doc line; docs/design/config.md explains it and lists them all.
//
// Where a value comes from, later wins: the default here; the environment variable
// RAIO_<UPPER_NAME> (read when the process starts and again at each raio::Init and
// `raio start`); the overrides the cluster was started with (InitOptions::system_config,
// `raio start --head --system-config JSON`), which the head holds and sends to every node
// at registration (RegisterNodeReply) and to every driver that joins (RegisterJobReply);
// nodes hand their values to the workers they start through the environment. So every
// process of a cluster agrees.
//
// Reading: `config::lease_idle_timeout_ms()` and friends (accessors, hence named like
// variables) are one relaxed atomic load, as cheap as reading a plain variable, and
// safe from any thread. Some components read a value once, when they start (see the doc
// of each entry and docs/design/config.md): a change reaches only what starts later.
//
// Protocol limits that every process must agree on without a handshake stay compile-time
// constants (kMaxFrameBytes) and are listed in the docs, not in the table.
//
// Thread-safety: every function here may be called from any thread. Writers
// (ApplyOverrides, ResetToEnvironment) are serialized; a reader during a write sees each
// value either before or after it, and may see some of a batch before others.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace raio::config {

// Largest frame accepted on any connection; a bigger length closes the connection. Fixed
// at compile time: both ends of every connection must agree before they can talk.
inline constexpr uint32_t kMaxFrameBytes = 512u << 20;
// The most max_request_bytes may be: one frame less room for the envelope.
inline constexpr uint64_t kMaxRequestBytesLimit = kMaxFrameBytes - (1u << 20);

// The types of table entries. kBytes is uint64_t (a count of bytes, optionally written
// with a KiB/MiB/GiB/TiB suffix); durations are whole counts of their unit. kPath is an
// absolute file path or "" (none); its accessor returns a NUL-terminated string that lives
// as long as the process (each value set is kept), so that reading it stays one load.
enum class Type : uint8_t {
  kInt,
  kDouble,
  kBool,
  kBytes,
  kMilliseconds,
  kMicroseconds,
  kLogLevel,
  kPath
};

// log_level's values; the numbers are spdlog's levels. kAuto: each program's own default
// (warn in drivers, workers and the CLI; info in the `raio start` daemon).
enum class LogLevel : int8_t {
  kAuto = -1,
  kTrace = 0,
  kDebug,
  kInfo,
  kWarn,
  kError,
  kCritical,
  kOff
};

// The range a numeric entry accepts: min <= v (min < v when min_exclusive) and v <= max.
struct Bounds {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
};
constexpr Bounds AtLeast(double min) { return {min, std::numeric_limits<double>::infinity()}; }
constexpr Bounds Between(double min, double max) { return {min, max}; }
constexpr Bounds Fraction() { return {0, 1, /*min_exclusive=*/true}; }  // (0, 1]
constexpr Bounds Any() { return {}; }

// X(type, name, default, unit, bounds, doc). Add an entry here and it has an accessor, an
// environment variable, a line in `raio config` and a place on the wire; document it in
// docs/design/config.md.
#define RAIO_CONFIG_TABLE(X)                                                                      \
  /* RPC */                                                                                       \
  X(kMilliseconds, control_rpc_timeout_ms, 10000, "ms", AtLeast(1),                               \
    "control RPCs (registration, lease return, status) fail after this long without a reply")     \
  X(kMilliseconds, connect_timeout_ms, 5000, "ms", AtLeast(1),                                    \
    "how long a driver waits to reach the head, and a process its node, before giving up")        \
  X(kBytes, max_request_bytes, kMaxRequestBytesLimit, "bytes", Between(1, kMaxRequestBytesLimit), \
    "largest request for one task or actor call (spec and inline arguments); above it the "       \
    "call fails with InvalidUsageError naming the size (at most one frame less 1 MiB)")           \
  /* cluster: resource view, spillback */                                                         \
  X(kMilliseconds, resource_report_interval_ms, 10, "ms", AtLeast(1),                             \
    "a node reports its available resources to the head at most this often (when they "           \
    "changed), and the head relays the changes to every node as often")                           \
  X(kDouble, scheduler_spread_threshold, 0.5, "fraction", Between(0, 1),                          \
    "the hybrid policy packs work onto nodes used below this share, then spreads it")             \
  X(kDouble, scheduler_top_k_fraction, 0.2, "fraction", Fraction(),                               \
    "the hybrid policy picks at random among this share of the nodes (at least one) that "        \
    "score best")                                                                                 \
  X(kInt, max_spillback_hops, 4, "hops", AtLeast(0),                                              \
    "a lease request is redirected to another node at most this many times; then it queues "      \
    "where it is")                                                                                \
  /* cluster: node failure */                                                                     \
  X(kMilliseconds, health_check_period_ms, 1000, "ms", AtLeast(10),                               \
    "the head checks every node this often (HEALTH_CHECK); a node that hears no check for "       \
    "health_check_failure_threshold periods takes itself for cut off from the head")              \
  X(kMilliseconds, health_check_timeout_ms, 1000, "ms", AtLeast(1),                               \
    "a health check unanswered this long counts as failed")                                       \
  X(kInt, health_check_failure_threshold, 10, "checks", AtLeast(1),                               \
    "the head declares a node dead after this many health checks in a row failed (default: "      \
    "about 10 s without an answer)")                                                              \
  X(kMilliseconds, node_rejoin_backoff_ms, 1000, "ms", AtLeast(10),                               \
    "a node that lost the head (declared dead, cut off, head restarted) ends its work and "       \
    "registers anew under a new id, retrying this often until the head answers")                  \
  X(kBytes, max_lineage_bytes, 1ull << 30, "bytes", AtLeast(0),                                   \
    "an owner keeps the specs of its finished tasks whose results are in the object store "       \
    "(their lineage) up to this many bytes, to rebuild results lost with a node; the oldest "     \
    "go first, and their objects can then not be rebuilt (ObjectLostError says so)")              \
  /* owners: leases, pipelining, busy-polling */                                                  \
  X(kMilliseconds, lease_idle_timeout_ms, 20, "ms", AtLeast(0),                                   \
    "an owner keeps an idle leased worker this long before returning it to its node")             \
  X(kInt, max_pending_lease_requests_per_class, 8, "requests", AtLeast(1),                        \
    "lease requests an owner keeps open per scheduling class (resource shape and function)")      \
  X(kMicroseconds, pipeline_target_us, 1000, "us", AtLeast(1),                                    \
    "owners queue about this much work at a leased worker: pipeline depth = "                     \
    "clamp(pipeline_target_us / mean task time, 1, max_pipeline_depth)")                          \
  X(kInt, max_pipeline_depth, 64, "tasks", AtLeast(1),                                            \
    "most tasks an owner queues at one leased worker")                                            \
  X(kMicroseconds, loop_spin_us, 50, "us", AtLeast(0),                                            \
    "owners' reply loops and workers' task loops busy-poll this long after each event "           \
    "before they sleep in epoll (0: never); read when a loop is made")                            \
  X(kMicroseconds, get_spin_us, 100, "us", AtLeast(0),                                            \
    "a Get keeps checking for its objects this long before it sleeps")                            \
  X(kMicroseconds, reply_coalesce_limit_us, 50, "us", AtLeast(0),                                 \
    "a worker sends the replies of tasks shorter than this with the rest of its batch of "        \
    "pushed tasks; longer tasks' replies are written at once")                                    \
  X(kInt, max_actor_concurrency, 1000, "threads", AtLeast(1),                                     \
    "most threads a concurrent actor may run calls on (SetMaxConcurrency)")                       \
  X(kMilliseconds, worker_failure_cause_timeout_ms, 1000, "ms", AtLeast(0),                       \
    "an owner whose worker connection broke waits this long for the node to say why before "      \
    "treating the death as a plain crash")                                                        \
  /* objects */                                                                                   \
  X(kBytes, max_inline_object_bytes, 100 * 1024, "bytes", Between(0, kMaxRequestBytesLimit),      \
    "values of at least this many bytes go to the node's shared-memory object store; "            \
    "smaller ones travel inline and live in their owner's process")                               \
  X(kMilliseconds, object_store_full_wait_ms, 30000, "ms", AtLeast(0),                            \
    "a Put (raio::Put, a by-value argument, a task result) that finds the store full of "         \
    "pinned objects waits this long for room before ObjectStoreFullError (0: fail at once)")      \
  X(kDouble, object_store_memory_fraction, 0.3, "fraction", Fraction(),                           \
    "share of physical RAM given to a node's object store unless its size is set; read "          \
    "where the node is made")                                                                     \
  X(kBytes, object_store_prefault_bytes, 256ull << 20, "bytes", AtLeast(0),                       \
    "the node pre-faults this much of its store in the background at start; allocation "          \
    "reuses the lowest (warm) offsets first; read where the node is made")                        \
  X(kBytes, object_transfer_chunk_bytes, 8ull << 20, "bytes", Between(1, 64ull << 20),            \
    "a node pulling an object from another node reads it in chunks of this size "                 \
    "(READ_OBJECT_CHUNK; at most 64 MiB, the most a node serves in one reply)")                   \
  X(kInt, object_transfer_chunks_in_flight, 4, "chunks", AtLeast(1),                              \
    "chunk reads a pulling node keeps outstanding per object, so that the link stays busy "       \
    "while it copies a chunk into its store")                                                     \
  /* node */                                                                                      \
  X(kDouble, memory_resource_fraction, 0.7, "fraction", Fraction(),                               \
    "share of physical RAM offered as the \"memory\" resource unless it is set; read where "      \
    "the node is made")                                                                           \
  X(kMilliseconds, memory_monitor_interval_ms, 250, "ms", AtLeast(0),                             \
    "the node measures its memory use this often and, above the threshold, ends the leased "      \
    "worker with the largest resident set (0: the monitor is off); read when the node starts")    \
  X(kDouble, memory_usage_threshold, 0.95, "fraction", Fraction(),                                \
    "share of the node's memory above which the memory monitor ends a worker (Ray's "             \
    "memory_usage_threshold); read when the node starts")                                         \
  X(kBytes, memory_usage_threshold_bytes, 0, "bytes", AtLeast(0),                                 \
    "the same as an absolute use; when set the smaller threshold applies (0: none)")              \
  X(kPath, memory_usage_file_path, "", "", Any(),                                                 \
    "when set, the memory monitor reads the node's memory use from this file (the meminfo "       \
    "format: MemTotal and MemAvailable lines) instead of /proc/meminfo and the cgroup, so that "  \
    "a test controls what the node sees; empty: measure the machine; read when the node starts")  \
  X(kBool, prestart_worker, true, "", Any(),                                                      \
    "the node starts one worker for a job when its driver registers, so that the first task "     \
    "does not wait for a process to start")                                                       \
  X(kMilliseconds, worker_reap_interval_ms, 100, "ms", AtLeast(1),                                \
    "how often the node reaps exited worker processes")                                           \
  X(kMilliseconds, worker_start_timeout_ms, 30000, "ms", AtLeast(1),                              \
    "a worker that has not registered this long after its start is killed")                       \
  X(kInt, worker_startup_concurrency, 0, "workers", AtLeast(0),                                   \
    "at most this many worker processes of a node start at once, the others wait for a slot, so " \
    "that a burst of actors does not make every start overrun its timeout (0: the host's CPUs)")  \
  X(kInt, max_worker_start_failures, 3, "workers", AtLeast(1),                                    \
    "after this many worker processes of one job in a row die while starting, the node fails "    \
    "the job's waiting tasks and actor creations with the last one's exit status and stderr")     \
  X(kInt, max_remembered_worker_failures, 1024, "workers", AtLeast(1),                            \
    "the node remembers why it ended this many recent workers, for owners that ask")              \
  X(kMilliseconds, worker_exit_poll_interval_ms, 5, "ms", AtLeast(1),                             \
    "a node asked why a worker died before its exit was reaped looks again this often, "          \
    "worker_exit_polls times (a worker's sockets close just before its exit is reapable)")        \
  X(kInt, worker_exit_polls, 40, "polls", AtLeast(0),                                             \
    "how many times the node looks again (see worker_exit_poll_interval_ms)")                     \
  /* logging */                                                                                   \
  X(kLogLevel, log_level, LogLevel::kAuto, "", Any(),                                             \
    "trace, debug, info, warn, error, critical or off; auto: warn in drivers, workers and "       \
    "the CLI, info in the `raio start` daemon; read when a process sets up its logging")

namespace internal {

// The C++ type of an entry of each Type.
template <Type>
struct Repr;
template <>
struct Repr<Type::kInt> {
  using T = int;
};
template <>
struct Repr<Type::kDouble> {
  using T = double;
};
template <>
struct Repr<Type::kBool> {
  using T = bool;
};
template <>
struct Repr<Type::kBytes> {
  using T = uint64_t;
};
template <>
struct Repr<Type::kMilliseconds> {
  using T = std::chrono::milliseconds;
};
template <>
struct Repr<Type::kMicroseconds> {
  using T = std::chrono::microseconds;
};
template <>
struct Repr<Type::kLogLevel> {
  using T = LogLevel;
};
template <>
struct Repr<Type::kPath> {
  using T = const char*;
};

// Config keys carry their unit: durations end in _ms / _us, sizes in _bytes, paths in _path.
constexpr bool NameCarriesUnit(Type type, std::string_view name) {
  switch (type) {
    case Type::kPath:
      return name.ends_with("_path");
    case Type::kMilliseconds:
      return name.ends_with("_ms");
    case Type::kMicroseconds:
      return name.ends_with("_us");
    case Type::kBytes:
      return name.ends_with("_bytes");
    default:
      return true;
  }
}

// The current values, defined in config.cc (so that any use links the file that reads
// the environment at start-up).
#define RAIO_CONFIG_DECLARE_VALUE(type, name, def, unit, bounds, doc)       \
  extern std::atomic<Repr<Type::type>::T> name##_value;                     \
  static_assert(NameCarriesUnit(Type::type, #name),                         \
                #name " must end in its unit (_ms, _us, _bytes or _path)"); \
  static_assert(std::atomic<Repr<Type::type>::T>::is_always_lock_free,      \
                #name " must be read without a lock");
RAIO_CONFIG_TABLE(RAIO_CONFIG_DECLARE_VALUE)
#undef RAIO_CONFIG_DECLARE_VALUE

}  // namespace internal

// The current value of each entry, e.g. config::lease_idle_timeout_ms().
#define RAIO_CONFIG_DEFINE_ACCESSOR(type, name, def, unit, bounds, doc) \
  inline internal::Repr<Type::type>::T name() {                         \
    return internal::name##_value.load(std::memory_order_relaxed);      \
  }
RAIO_CONFIG_TABLE(RAIO_CONFIG_DEFINE_ACCESSOR)
#undef RAIO_CONFIG_DEFINE_ACCESSOR

// The defaults, e.g. config::kDefaults.memory_usage_threshold.
struct Defaults {
#define RAIO_CONFIG_DEFINE_DEFAULT(type, name, def, unit, bounds, doc) \
  internal::Repr<Type::type>::T name = internal::Repr<Type::type>::T(def);
  RAIO_CONFIG_TABLE(RAIO_CONFIG_DEFINE_DEFAULT)
#undef RAIO_CONFIG_DEFINE_DEFAULT
};
inline constexpr Defaults kDefaults{};

// "int", "double", "bool", "bytes", "milliseconds", "microseconds", "log level" or "path".
std::string_view TypeName(Type type);

// One entry of the table as `raio config` shows it. Values are in their text form (the
// form ApplyOverrides and the environment take): integers in decimal, doubles in the
// shortest form that reads back exactly, bools as true/false, log levels by name.
struct EntryInfo {
  std::string_view name;
  Type type;
  std::string_view unit;  // "ms", "us", "bytes", a count's noun, "fraction", or ""
  std::string_view doc;
  std::string env_var;        // RAIO_<UPPER_NAME>
  std::string default_value;  // text form
  std::string value;          // current value, text form
};

// Every entry, in table order, with its current value.
std::vector<EntryInfo> Describe();

// name -> current value (text form) of every entry. What the head sends to nodes.
std::map<std::string, std::string> CurrentValues();

// name -> current value (text form) of the entries whose value differs from the default.
std::map<std::string, std::string> NonDefaultValues();

// Sets the entries named in `overrides` (name -> text form) and leaves the others as they
// are. Validates everything first: on any unknown name or malformed or out-of-range value
// nothing is applied and the result is InvalidArgument naming every bad entry, its value
// and what it wants, prefixed by `source` (e.g. "system_config"). Never blocks for long.
[[nodiscard]] absl::Status ApplyOverrides(const std::map<std::string, std::string>& overrides,
                                          std::string_view source = "system_config");

// Sets every entry to its default, then applies the RAIO_<UPPER_NAME> variables of this
// process's environment. A malformed value gives InvalidArgument naming the variable, and
// then no variable is applied (every entry keeps its default). Runs at process start-up
// (errors ignored there), at raio::Init and in `raio start`, which report the error.
[[nodiscard]] absl::Status ResetToEnvironment();

// "RAIO_<UPPER_NAME>=<value>" for every entry that differs from its default: what a node
// adds to the environment of each worker it starts, so that the worker agrees with it.
std::vector<std::string> EnvironmentForWorkers();

// "RAIO_" + the name in upper case.
std::string EnvVarName(std::string_view name);

namespace internal {
// ResetToEnvironment on an environment given as a nullptr-terminated array of
// "NAME=value" strings (as `environ`); for tests.
[[nodiscard]] absl::Status ResetToEnvironment(const char* const* envp);
}  // namespace internal

}  // namespace raio::config
