// Exceptions thrown by the raio user API. Every one derives from raio::RaioException
// (itself a std::runtime_error), so `catch (const raio::RaioException&)` catches all.
#pragma once

#include <stdexcept>
#include <string>

#include "raio/export.h"

namespace raio {

// Base class of every raio error.
class RAIO_EXPORT RaioException : public std::runtime_error {
 public:
  explicit RaioException(const std::string& message) : std::runtime_error(message) {}
};

// The remote function threw. what() reads
// "<function> raised <exception_type> on node <node>: <message>".
class RAIO_EXPORT TaskError : public RaioException {
 public:
  TaskError(std::string exception_type, std::string message, std::string function_name,
            std::string node_id)
      : RaioException(function_name + " raised " + exception_type + " on node " + node_id + ": " +
                      message),
        exception_type_(std::move(exception_type)),
        message_(std::move(message)),
        function_name_(std::move(function_name)),
        node_id_(std::move(node_id)) {}
  // Demangled C++ type of the exception thrown by user code, e.g. "std::invalid_argument".
  const std::string& exception_type() const { return exception_type_; }
  // The exception's own what().
  const std::string& message() const { return message_; }
  // Registered name of the remote function.
  const std::string& function_name() const { return function_name_; }
  // Hex id of the node the task ran on.
  const std::string& node_id() const { return node_id_; }

 private:
  std::string exception_type_, message_, function_name_, node_id_;
};

// The worker process running the task died (crash, kill, exit) and the task's retries
// (SetMaxRetries, default 3) ran out. what() names the function, the node its worker ran
// on and how it died; also when no worker of the job could start on a node (the node, its
// host and the cause, e.g. the loader's message about a missing shared library).
class RAIO_EXPORT WorkerCrashedError : public RaioException {
  using RaioException::RaioException;
};

// The node's memory monitor ended the worker process running the task, because the
// node's memory use crossed its threshold (memory_usage_threshold, default 0.95 of the
// node's memory, or memory_usage_threshold_bytes) and that worker used the most memory
// of the node's leased workers; and the task's retries (SetMaxRetries, default 3) ran
// out. Each kill by the monitor uses one retry, as a crash does.
// what() reads "<function> ran out of memory on node <node>: the memory monitor of node <node>
// ended worker <id> (pid <pid>, ...) using <rss> resident: the node's memory use <used> of <total>
// total crossed the threshold <threshold> (<how it was set>); <n> attempts were made", every size
// both in binary units (GiB/MiB) and in bytes. Derives from WorkerCrashedError, so code that
// catches worker deaths catches it too. Thrown by Get() (and by Get() of tasks that took the result
// as an argument).
class RAIO_EXPORT OutOfMemoryError : public WorkerCrashedError {
  using WorkerCrashedError::WorkerCrashedError;
};

// Get() with a timeout found the object not ready in time. The task keeps running and
// a later Get() can still return its value.
class RAIO_EXPORT GetTimeoutError : public RaioException {
  using RaioException::RaioException;
};

// No node of the cluster can ever meet the task's resource demand. The message names
// the demand and the resources of every node.
class RAIO_EXPORT UnschedulableError : public RaioException {
  using RaioException::RaioException;
};

// The worker that received the task has no remote function under that name
// (not registered with RAIO_REMOTE in the worker's executable).
class RAIO_EXPORT RemoteFunctionNotFoundError : public RaioException {
  using RaioException::RaioException;
};

// The task was cancelled with raio::Cancel before it produced a result.
class RAIO_EXPORT TaskCancelledError : public RaioException {
  using RaioException::RaioException;
};

// An argument or a result could not be converted to or from the requested C++ type.
class RAIO_EXPORT SerializationError : public RaioException {
  using RaioException::RaioException;
};

// The node's shared-memory object store cannot make room for an object even after
// evicting and spilling, or the object is larger than one object may be (the store's
// capacity less a 64-byte header). The message gives the object's size and the store's
// capacity, and what the object is (a Put, argument i of a function, a function's result).
class RAIO_EXPORT ObjectStoreFullError : public RaioException {
  using RaioException::RaioException;
};

// The actor is dead: killed, its process died with no restarts left (or during a call
// that may not be retried), or its factory threw. The message names the cause.
class RAIO_EXPORT ActorDiedError : public RaioException {
  using RaioException::RaioException;
};

// The object's value is gone: freed, never owned by this process, or its node/cluster died.
class RAIO_EXPORT ObjectLostError : public RaioException {
  using RaioException::RaioException;
};

// The object's owner (the process that created it: the driver or worker that submitted
// the task or called Put) died, so the object is gone (objects fate-share with their
// owner, as in Ray). The message names the owner.
class RAIO_EXPORT OwnerDiedError : public ObjectLostError {
  using ObjectLostError::ObjectLostError;
};

// The API was used in a wrong state (Init twice, a call before Init or after Shutdown)
// or with an invalid argument (negative, NaN or infinite resources, an unregistered
// function, GetActor<T> of an actor that is not a T, actor arguments above the request
// limit). The message names the offending value, name or limit.
class RAIO_EXPORT InvalidUsageError : public RaioException {
  using RaioException::RaioException;
};

// The cluster could not be reached or went away (Init's address refused, node daemon died).
class RAIO_EXPORT ClusterUnavailableError : public RaioException {
  using RaioException::RaioException;
};

// A task ran (or was queued) on a node that died (its daemon crashed, its host was cut off
// from the head past the health-check timeout, or the head declared it dead) and its
// retries ran out. The message names the node and the cause the head gave.
class RAIO_EXPORT NodeDiedError : public RaioException {
  using RaioException::RaioException;
};

}  // namespace raio
