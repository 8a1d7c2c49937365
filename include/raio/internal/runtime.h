// The non-template boundary between the header-only user API and libraio. User code
// never calls these directly; ObjectRef, TaskCaller and the free functions in
// raio.h do. All functions are thread-safe and throw the exceptions of errors.h.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "raio/export.h"
#include "raio/internal/object_id.h"
#include "raio/scheduling.h"
#include "raio/serialization.h"

namespace raio {
namespace internal {

// One task argument as the owner sees it before resolution.
struct TaskArg {
  enum class Kind { kValue, kObjectRef, kObjectRefList };
  Kind kind = Kind::kValue;
  EncodedValue value;               // kValue: the parameter's value
  std::vector<ObjectId> refs;       // kObjectRef: one id; kObjectRefList: many
  std::vector<ObjectId> contained;  // kValue: ObjectRefs serialized inside the value
};

// Collects the ids of ObjectRefs serialized (packed) on this thread while it is the
// innermost live collector; scopes nest. Used around every serialization of a value that
// outlives the call (Put, task arguments, task results) so the runtime can keep the
// referenced objects alive as long as the containing value.
class RAIO_EXPORT ContainedRefs {
 public:
  ContainedRefs();
  // `on_add` runs for each id as it is serialized, while the ObjectRef still exists.
  explicit ContainedRefs(std::function<void(const ObjectId&)> on_add);
  ~ContainedRefs();
  ContainedRefs(const ContainedRefs&) = delete;
  ContainedRefs& operator=(const ContainedRefs&) = delete;
  std::vector<ObjectId> Take() { return std::move(ids_); }
  void Add(const ObjectId& id) {
    ids_.push_back(id);
    if (on_add_) on_add_(id);
  }

 private:
  ContainedRefs* previous_;
  std::vector<ObjectId> ids_;
  std::function<void(const ObjectId&)> on_add_;
};

// Adds `id` to the innermost live ContainedRefs of this thread, if any.
RAIO_EXPORT void RecordSerializedRef(const ObjectId& id);

// Where an object's owner can be reached (see proto/raio/owner.proto).
struct OwnerInfo {
  std::string owner_worker_id;  // 8 bytes
  std::string owner_address;    // where its owner service is (an encoded raio address; opaque)
};
// Called when an ObjectRef is packed: records the id in the active ContainedRefs and
// returns its owner. Throws InvalidUsageError when raio is not initialized or the object
// is unknown in this process.
RAIO_EXPORT OwnerInfo OnObjectRefSerialized(const ObjectId& id);
// Called when an ObjectRef is unpacked: takes one local reference (adopted by the new
// ObjectRef); the first reference to an object owned elsewhere registers this process as
// a borrower with the owner (a blocking RPC). Throws ObjectLostError when the owner no
// longer has the object or cannot be reached.
RAIO_EXPORT void OnObjectRefDeserialized(const ObjectId& id, const OwnerInfo& owner);

// Options of one task submission (see TaskCaller).
struct TaskOptions {
  std::map<std::string, double> resources{{"CPU", 1.0}};
  std::string name;
  int max_retries = 3;
  // Return objects: 1, or the size of the std::tuple the function returns (the ids are
  // NthReturnId(first, i)).
  int num_returns = 1;
  SchedulingStrategy strategy = SchedulingStrategy::Default();
  std::map<std::string, std::string> label_selector;
  // The placement group (hex id; "": none, or the group of a parent task that captures its
  // children) and bundle (-1: any) it runs in; whether its own children go there too.
  std::string placement_group_id;
  int placement_bundle_index = -1;
  bool placement_group_capture_child_tasks = false;
  // The bundles it may take its demand from (that bundle, or all of the group's), to
  // refuse at submission a demand no bundle could ever meet.
  std::vector<std::map<std::string, double>> placement_bundles;
};

// While a worker encodes return value `index` (0-based) of a call with several returns,
// ObjectRefs serialized on this thread belong to that return (SetEncodingReturn is called
// by the generated invoker; EncodingReturn by the executor).
RAIO_EXPORT void SetEncodingReturn(uint32_t index);
RAIO_EXPORT uint32_t EncodingReturn();

// Submits `function_name` with `args`. Returns the id of its (first) return object; each
// of its options.num_returns return objects holds one local reference that the caller
// adopts (ObjectRef's adopting constructor).
// Throws InvalidUsageError (not initialized, bad resources), never blocks on the task.
RAIO_EXPORT ObjectId SubmitTask(const std::string& function_name, std::vector<TaskArg> args,
                                const TaskOptions& options);

// Stores `size` bytes at `data` (in `format`) as a new object owned by this process,
// copying them once: into the node's shared-memory store when `size` is at least the
// inline threshold (100 KiB), else into this process. Returns its id with one adopted
// local reference. Throws ObjectStoreFullError when the store cannot make room.
RAIO_EXPORT ObjectId PutObject(ValueFormat format, DType dtype, const void* data, std::size_t size,
                               std::vector<ObjectId> contained = {});

// Blocks until the object is ready or `timeout` passes (nullopt: no limit). Returns a
// view of its bytes (mapped from the shared-memory store, pinned while the view's keeper
// lives) or throws the object's error (TaskError, WorkerCrashedError, ...) or
// GetTimeoutError.
RAIO_EXPORT ValueView GetObject(const ObjectId& id,
                                std::optional<std::chrono::microseconds> timeout);

// Waits until `num_objects` of `ids` are ready or `timeout` passes. Returns a flag per id
// (true = ready; failed objects count as ready).
RAIO_EXPORT std::vector<bool> WaitObjects(const std::vector<ObjectId>& ids, int num_objects,
                                          std::optional<std::chrono::microseconds> timeout);

// Cancels the task whose return object is `id` (see raio::Cancel). No-op when it is
// finished or unknown.
RAIO_EXPORT void CancelTask(const ObjectId& id, bool force);

// Counters for tests and tools: objects this process owns, and the local node's store.
struct ObjectStats {
  std::size_t owned_objects = 0;
  uint64_t store_objects = 0;
  uint64_t store_used_bytes = 0;
  uint64_t store_spilled_objects = 0;
  uint64_t store_capacity_bytes = 0;
};
RAIO_EXPORT ObjectStats GetObjectStats();

// The local node's resources by name (tests and tools): what it offers in total and what
// is not held by a lease or an actor now. Blocks for one RPC to the node.
struct NodeResourceStats {
  std::map<std::string, double> total;
  std::map<std::string, double> available;
};
RAIO_EXPORT NodeResourceStats GetNodeResourceStats();

// Reference counting of ObjectRef copies in this process. No-ops when not initialized.
RAIO_EXPORT void AddLocalReference(const ObjectId& id);
RAIO_EXPORT void RemoveLocalReference(const ObjectId& id);

// Returns the name to submit a function under. Throws InvalidUsageError when it is not
// registered, or when another function was registered under the same name first.
RAIO_EXPORT const std::string& ResolveFunctionName(const void* function_key);

}  // namespace internal
}  // namespace raio
