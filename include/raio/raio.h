// The raio user API. Include this one header.
//
//   int Add(int a, int b) { return a + b; }
//   RAIO_REMOTE(Add);
//   int main(int argc, char** argv) {
//     raio::Init(argc, argv);          // embedded cluster, or joins RAIO_ADDRESS
//     int three = raio::Task(Add).Remote(1, 2).Get();
//     raio::Shutdown();
//   }
//
// Worker mode: the cluster runs tasks by starting the driver's own executable with
// RAIO_WORKER_MODE set. Init (any form) then turns the process into a worker and never
// returns, so call it at the top of main, before work with side effects.
// Thread-safety: every function here may be called from any thread after Init.
#pragma once

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "raio/actor.h"
#include "raio/buffer.h"
#include "raio/errors.h"
#include "raio/export.h"
#include "raio/object_ref.h"
#include "raio/placement_group.h"
#include "raio/remote.h"
#include "raio/serialization.h"
#include "raio/task_caller.h"

namespace raio {

// Options of Init. Unset fields take the defaults in brackets.
struct InitOptions {
  // "host:port" of a standalone cluster's head, or "auto": the cluster `raio start`
  // recorded on this machine ($TMPDIR/raio/current_cluster) [RAIO_ADDRESS, else an
  // embedded cluster].
  std::string address;
  // Namespace of named actors created by this job [a private one, "job-<id>"].
  std::string ns;
  // Embedded cluster only: CPUs offered [detected core count].
  std::optional<double> num_cpus;
  // Embedded cluster only: GPUs offered [0; ids 0..n-1].
  std::optional<double> num_gpus;
  // Embedded cluster only: custom resources, e.g. {{"TPU", 4}} [none].
  std::map<std::string, double> resources;
  // Embedded cluster only: the "memory" resource in bytes [70% of RAM].
  std::optional<double> memory_bytes;
  // Embedded cluster only: size of the node's shared-memory object store in bytes
  // [30% of RAM].
  std::optional<uint64_t> object_store_memory_bytes;
  // Embedded cluster only: the node's memory monitor ends the leased worker using the
  // most memory when the node's memory use crosses this share of its memory, a fraction
  // in (0, 1] [RAIO_MEMORY_USAGE_THRESHOLD, else 0.95]. The task is retried per its
  // max_retries; then Get throws OutOfMemoryError.
  std::optional<double> memory_usage_threshold;
  // Embedded cluster only: the same as an absolute use in bytes; with both set, the
  // smaller threshold applies [RAIO_MEMORY_USAGE_THRESHOLD_BYTES, else none].
  // The system_config entry memory_monitor_interval_ms sets how often the node checks
  // [250; 0 = off].
  std::optional<uint64_t> memory_usage_threshold_bytes;
  // Embedded cluster only: overrides of raio's configuration table, name -> value as text,
  // e.g. {{"lease_idle_timeout_ms", "50"}} (as Ray's _system_config). They win over the
  // RAIO_<NAME> environment variables and reach every process of the cluster: this
  // driver, the node and its workers. Names, types and defaults: `raio config` and
  // docs/design/config.md. An unknown name or a malformed or out-of-range value makes
  // Init throw InvalidUsageError naming it. A standalone cluster takes them at `raio start
  // --head --system-config JSON` [none].
  std::map<std::string, std::string> system_config;
  // Standalone cluster only: the node this driver attaches to, as a hex id (`raio list
  // nodes`); it must run on this host [RAIO_NODE_ID, else a node on this host].
  std::string node_id;
  // Standalone cluster only: files this job's workers on other nodes need, as paths
  // relative to the working directory (no ".."). They are uploaded with the executable to
  // the head once per content (SHA-256) and placed at the same relative paths in the
  // working directory of the job's workers on every node but the driver's, where workers
  // run in the driver's own working directory. A missing, non-regular or absolute path
  // makes Init throw InvalidUsageError naming it [RAIO_JOB_FILES, ':'-separated, else none].
  std::vector<std::string> job_files;
};

// Starts raio in this process. With no address (and no RAIO_ADDRESS) it starts an
// embedded single-node cluster on background threads; with one it joins that cluster.
// In a worker process it runs the worker loop and never returns.
// Blocks until the cluster is ready (embedded) or joined.
// Throws InvalidUsageError if already initialized or an option is invalid (a negative,
// NaN or infinite resource amount, fractional num_gpus, a store under 1 MiB, a bad
// system_config entry or RAIO_<NAME> variable, system_config with an address, an address
// that is not host:port; the message names the value); ClusterUnavailableError if the address
// cannot be reached within a few seconds, or is "auto" and no cluster recorded on this machine is
// running.
RAIO_EXPORT void Init(const InitOptions& options, int argc = 0, char** argv = nullptr);
RAIO_EXPORT void Init(int argc, char** argv);
RAIO_EXPORT void Init();

// Stops raio in this process: ends the job's workers, stops an embedded cluster and
// releases every object. ObjectRefs still alive become unusable: Get, like every other
// call until the next Init, throws InvalidUsageError saying raio is shut down.
// Idempotent. Blocks until done. Throws InvalidUsageError inside a remote function or
// actor method (a worker is ended by its node).
RAIO_EXPORT void Shutdown();

// Whether Init has run and Shutdown has not.
RAIO_EXPORT bool IsInitialized();

// The hex id of the node this process runs on (a driver's node, or the node of the worker
// running the current task), as `raio list nodes` shows it. Throws InvalidUsageError
// before Init.
RAIO_EXPORT std::string GetNodeId();

// The configuration this process runs with: every entry of raio's table (`raio config`,
// docs/design/config.md), name -> current value as text (integers and durations in
// decimal in the unit their name ends with, bools as true/false). After Init these are
// the cluster's values; in a task or actor method, those its node gave the worker; before
// Init, the defaults and this process's RAIO_<NAME> variables. Never throws or blocks.
RAIO_EXPORT std::map<std::string, std::string> SystemConfig();

// Stores `value` as an object owned by this process and returns a reference to it.
// Values of 100 KiB or more go to the node's shared-memory store, written once (an
// arithmetic std::vector or a Buffer is copied straight from its memory; other types are
// serialized, then copied); smaller ones stay in this process.
// Throws InvalidUsageError before Init or after Shutdown; ObjectStoreFullError when the
// value is larger than one object may be (the store's capacity less 64 bytes) or the
// store cannot make room even after spilling (the message gives the sizes and limit).
template <typename T>
ObjectRef<std::decay_t<T>> Put(const T& value) {
  using D = std::decay_t<T>;
  ObjectId id;
  if constexpr (std::is_same_v<D, Buffer>) {
    id = internal::PutObject(internal::ValueFormat::kRaw, internal::DType::kNone, value.data(),
                             value.size());
  } else if constexpr (internal::ArrayTraits<D>::value) {
    using E = typename internal::ArrayTraits<D>::Element;
    id = internal::PutObject(internal::ValueFormat::kArray, internal::DTypeOf<E>(), value.data(),
                             value.size() * sizeof(E));
  } else {
    internal::ContainedRefs contained;  // ObjectRefs nested in the value stay alive with it
    std::string bytes = internal::Pack(value);
    id = internal::PutObject(internal::ValueFormat::kMsgpack, internal::DType::kNone, bytes.data(),
                             bytes.size(), contained.Take());
  }
  return ObjectRef<D>(id, typename ObjectRef<D>::Adopt{});
}

// Cancels the task that produces `ref`: a task still queued (or waiting for its
// arguments) is dropped; a running one is ended with its worker process when `force`
// (its other pipelined tasks are retried), otherwise left to finish with its result
// discarded. Either way Get then throws TaskCancelledError. Cancelling a finished task,
// a Put object or an actor call does nothing. Never blocks.
template <typename T>
void Cancel(const ObjectRef<T>& ref, bool force = false) {
  internal::CancelTask(ref.ID(), force);
}

// Returns the value of `ref`; blocks until it is ready. Same as ref.Get() (see
// ObjectRef::Get for the errors), as Ray's ray::Get(object_ref).
template <typename T>
T Get(const ObjectRef<T>& ref) {
  return ref.Get();
}

// As Get(ref), but throws GetTimeoutError when the object is not ready within `timeout`.
template <typename T, typename Rep, typename Period>
T Get(const ObjectRef<T>& ref, std::chrono::duration<Rep, Period> timeout) {
  return ref.Get(timeout);
}

// Returns the values of all `refs`, in order; blocks until all are ready. Throws the
// first error met (in order), as ObjectRef::Get.
template <typename T>
std::vector<T> Get(const std::vector<ObjectRef<T>>& refs) {
  std::vector<T> out;
  out.reserve(refs.size());
  for (const auto& ref : refs) out.push_back(ref.Get());
  return out;
}

// As Get(refs), with `timeout` for all of them together: GetTimeoutError when they are
// not all ready within it.
template <typename T, typename Rep, typename Period>
std::vector<T> Get(const std::vector<ObjectRef<T>>& refs,
                   std::chrono::duration<Rep, Period> timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<T> out;
  out.reserve(refs.size());
  for (std::size_t i = 0; i < refs.size(); ++i) {
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(
        deadline - std::chrono::steady_clock::now());
    try {
      out.push_back(refs[i].Get(std::max(left, std::chrono::microseconds(0))));
    } catch (const GetTimeoutError& e) {
      throw GetTimeoutError(
          "raio::Get: " + std::to_string(refs.size() - i) + " of " + std::to_string(refs.size()) +
          " objects were not ready within " +
          std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(timeout).count()) +
          " us; the first: " + e.what());
    }
  }
  return out;
}

// Result of Wait: refs ready (value or error available) and refs still pending, each in
// the order given.
template <typename T>
struct WaitResult {
  std::vector<ObjectRef<T>> ready;
  std::vector<ObjectRef<T>> pending;
};

// Waits until `num_objects` of `refs` are ready or `timeout` passes (nullopt: no limit),
// then splits them. Throws InvalidUsageError if num_objects is not in [0, refs.size()].
template <typename T>
WaitResult<T> Wait(const std::vector<ObjectRef<T>>& refs, int num_objects,
                   std::optional<std::chrono::microseconds> timeout = std::nullopt) {
  if (num_objects < 0 || static_cast<std::size_t>(num_objects) > refs.size()) {
    throw InvalidUsageError("raio::Wait: num_objects must be between 0 and refs.size()");
  }
  std::vector<ObjectId> ids;
  ids.reserve(refs.size());
  for (const auto& ref : refs) ids.push_back(ref.ID());
  std::vector<bool> ready = internal::WaitObjects(ids, num_objects, timeout);
  WaitResult<T> result;
  for (std::size_t i = 0; i < refs.size(); ++i) {
    (ready[i] ? result.ready : result.pending).push_back(refs[i]);
  }
  return result;
}

// Overload taking any chrono duration (e.g. std::chrono::seconds(1)).
template <typename T, typename Rep, typename Period>
WaitResult<T> Wait(const std::vector<ObjectRef<T>>& refs, int num_objects,
                   std::chrono::duration<Rep, Period> timeout) {
  return Wait(refs, num_objects,
              std::optional<std::chrono::microseconds>(
                  std::chrono::duration_cast<std::chrono::microseconds>(timeout)));
}

}  // namespace raio
