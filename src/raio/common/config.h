// raio's tunables in one place, with units in the names. Change them here (or via the
// environment variable named beside each, read once at start-up).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace raio::config {

// Largest frame accepted on any connection; a bigger length closes the connection.
inline constexpr uint32_t kMaxFrameBytes = 512u << 20;
// Largest request a caller sends for one task or actor call: its spec with the
// arguments that travel inline, in one frame less room for the envelope. By-value task
// arguments of kMaxInlineObjectBytes or more go to the object store instead, so this
// bounds actor calls' by-value arguments (they travel inline), actor factories'
// arguments, and lists of small ObjectRefs resolved to inline values. Above it the call
// is refused with InvalidUsageError naming the size and the limit.
inline constexpr uint64_t kMaxRequestBytes = kMaxFrameBytes - (1u << 20);
// kMaxRequestBytes, or less where RAIO_MAX_REQUEST_BYTES says so (read once; tests set
// a few MiB to exercise the limit without allocating half a GiB).
inline uint64_t MaxRequestBytes() {
  static const uint64_t value = [] {
    const char* env = std::getenv("RAIO_MAX_REQUEST_BYTES");
    uint64_t v = env != nullptr ? std::strtoull(env, nullptr, 10) : 0;
    return v > 0 && v < kMaxRequestBytes ? v : kMaxRequestBytes;
  }();
  return value;
}
// Control RPCs (register, lease return, status) fail after this long without a reply.
inline constexpr std::chrono::milliseconds kControlRpcTimeout{10000};
// How long Init waits to reach a cluster's head before ClusterUnavailableError.
inline constexpr std::chrono::milliseconds kConnectTimeout{5000};
// An owner keeps an idle leased worker this long before returning it to the node, so a
// loop of synchronous tasks does not pay for a new lease each time.
inline constexpr std::chrono::milliseconds kLeaseIdleTimeout{20};
// Concurrent lease requests an owner keeps open per resource shape.
inline constexpr int kMaxPendingLeaseRequestsPerClass = 8;
// Owners size the pipeline to a worker so that about this much work is queued there:
// depth = clamp(kPipelineTarget / mean task time, 1, kMaxPipelineDepth).
inline constexpr std::chrono::microseconds kPipelineTarget{1000};
inline constexpr int kMaxPipelineDepth = 64;
// Busy-poll windows (see EventLoop): an owner's reply loop and a worker's task loop keep
// polling this long after each event; a Get keeps checking this long before it sleeps.
inline constexpr std::chrono::microseconds kLoopSpin{50};
inline constexpr std::chrono::microseconds kGetSpin{100};
// A worker coalesces the replies of tasks shorter than this with the rest of the batch
// of pushes it is running; longer tasks' replies are written at once.
inline constexpr std::chrono::microseconds kReplyCoalesceLimit{50};
// Most threads a concurrent actor may run calls on (SetMaxConcurrency).
inline constexpr int kMaxActorConcurrency = 1000;
// How often the node reaps exited worker processes.
inline constexpr std::chrono::milliseconds kWorkerReapInterval{100};
// After this many worker processes of one job in a row die while starting (before they
// register), the node fails the job's waiting tasks and actor creations with the last
// one's exit status and stderr, instead of starting more [RAIO_MAX_WORKER_START_FAILURES].
inline constexpr int kDefaultMaxWorkerStartFailures = 3;
inline int MaxWorkerStartFailures() {
  static const int value = [] {
    const char* env = std::getenv("RAIO_MAX_WORKER_START_FAILURES");
    int v = env != nullptr ? std::atoi(env) : 0;
    return v > 0 ? v : kDefaultMaxWorkerStartFailures;
  }();
  return value;
}
// A Put (raio::Put, a by-value task argument, a task result) that finds the object store
// full of pinned objects waits this long for room before ObjectStoreFullError
// [RAIO_OBJECT_STORE_FULL_WAIT_MS; 0 fails at once].
inline constexpr std::chrono::milliseconds kDefaultObjectStoreFullWait{30000};
inline std::chrono::milliseconds ObjectStoreFullWait() {
  static const std::chrono::milliseconds value = [] {
    const char* env = std::getenv("RAIO_OBJECT_STORE_FULL_WAIT_MS");
    if (env == nullptr || *env == '\0') return kDefaultObjectStoreFullWait;
    return std::chrono::milliseconds(std::strtoll(env, nullptr, 10));
  }();
  return value;
}
// A worker that has not registered this long after its start is killed.
inline constexpr std::chrono::milliseconds kWorkerStartTimeout{30000};
// Values of at least this many bytes go to the node's shared-memory object store;
// smaller ones travel inline and live in their owner's process (as in Ray).
inline constexpr uint64_t kMaxInlineObjectBytes = 100 * 1024;
// Share of physical RAM given to a node's object store by default (Ray's default).
inline constexpr double kDefaultObjectStoreFraction = 0.3;
// The node pre-faults this much of its store in the background at start-up; allocation
// reuses the lowest (warm) offsets first. The rest is faulted in on first use.
inline constexpr uint64_t kObjectStorePrefaultBytes = 256ull << 20;
// Share of physical RAM offered as the "memory" resource by default.
inline constexpr double kDefaultMemoryFraction = 0.7;

// Memory monitor (src/raio/node/memory_monitor.h): the node measures its memory use this
// often [RAIO_MEMORY_MONITOR_INTERVAL_MS; 0 turns it off] and, above the threshold, ends
// the leased worker with the largest resident set.
inline constexpr std::chrono::milliseconds kDefaultMemoryMonitorInterval{250};
// Share of the node's memory above which the monitor ends a worker, as Ray's
// RAY_memory_usage_threshold [RAIO_MEMORY_USAGE_THRESHOLD,
// InitOptions::memory_usage_threshold, --memory-usage-threshold]. An absolute threshold
// (RAIO_MEMORY_USAGE_THRESHOLD_BYTES, ...) has no default.
inline constexpr double kDefaultMemoryUsageThreshold = 0.95;
// The node remembers why it ended this many recent workers, for owners that ask
// (GET_WORKER_FAILURE_CAUSE) after seeing their connection to the worker break.
inline constexpr std::size_t kMaxRememberedWorkerFailures = 1024;
// An owner whose worker connection broke waits this long for the node to say why before
// treating the death as a plain crash.
inline constexpr std::chrono::milliseconds kWorkerFailureCauseTimeout{1000};
// A node asked why a worker died before its exit was reaped looks again this often, this
// many times (the worker's sockets close just before its exit status is available).
inline constexpr std::chrono::milliseconds kWorkerExitPollInterval{5};
inline constexpr int kWorkerExitPolls = 40;

}  // namespace raio::config
